"""Ray imported when a test uses it, not when the tests are collected (``import ray.serve``
takes seconds). A module lists what it needs in ``NEEDS``; ``tests/serve/conftest.py`` imports
those before the module's first test runs, and skips its tests with ``pytest.importorskip``'s
"could not import" when one is missing (the words ``.ci/run`` looks for)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

# Subprocesses run in a temporary folder: they import this checkout's dynshape.
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


class Lazy:
    """The module ``module`` (or its attribute ``attr``), imported at the first attribute
    access or call: ``ray = Lazy("ray")``, ``deployment = Lazy("dynshape.serve.deployment",
    "deployment")``. Names starting with ``_`` are not looked up (pytest probes every
    module attribute for them while collecting)."""

    def __init__(self, module: str, attr: str | None = None) -> None:
        self._module, self._attr = module, attr

    def _target(self) -> Any:
        target = importlib.import_module(self._module)
        return target if self._attr is None else getattr(target, self._attr)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # pytest's probes while collecting (__test__, fixture marks)
            raise AttributeError(name)
        return getattr(self._target(), name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._target()(*args, **kwargs)


def post(url: str, body: bytes, ctype: str = "application/json") -> tuple[int, bytes]:
    """POST ``body``: the HTTP status and the response body, errors included."""
    return request(url, body, {"Content-Type": ctype})


def request(
    url: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """GET (or POST, with a body) ``url``: the HTTP status and the response body."""
    method = "GET" if body is None else "POST"
    req = urllib.request.Request(url, data=body, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def start_serve(folder: Path, *options: str) -> tuple[subprocess.Popen[str], str]:
    """``python -m dynshape serve OPTIONS`` started in ``folder``, once it prints its
    ``serving FILE at URL ...`` line: the process and that line (the caller stops it)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dynshape", "serve", *options],
        cwd=folder,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = ""
    for _ in range(200):  # Ray's own start-up lines may come first
        line = proc.stdout.readline()
        if line.startswith("serving ") or not line:
            break
    if not line.startswith("serving "):
        proc.kill()
        raise AssertionError(f"serve did not start: {line!r} {proc.communicate()[1][-2000:]}")
    return proc, line


def url_of(line: str) -> str:
    """The URL a ``serving FILE at URL ...`` line names, without its final slash."""
    return line.split(" at ")[1].split()[0].rstrip("/")
