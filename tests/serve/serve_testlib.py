"""Ray imported when a test uses it, not when the tests are collected (``import ray.serve``
takes seconds). A module lists what it needs in ``NEEDS``; ``tests/serve/conftest.py`` imports
those before the module's first test runs, and skips its tests with ``pytest.importorskip``'s
"could not import" when one is missing (the words ``.ci/run`` looks for)."""

from __future__ import annotations

import importlib
import urllib.error
import urllib.request
from typing import Any


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
