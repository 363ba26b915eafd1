"""Ray imported when a test uses it, not when the tests are collected (``import ray.serve``
takes seconds). A module lists what it needs in ``NEEDS``; ``tests/serve/conftest.py`` imports
those before the module's first test runs, and skips its tests with ``pytest.importorskip``'s
"could not import" when one is missing (the words ``.ci/run`` looks for)."""

from __future__ import annotations

import importlib
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
