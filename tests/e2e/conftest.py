"""Every ``VirtualMachine`` the end-to-end suite builds runs on the backend of ``--vm-backend``
(``tests/conftest.py``): its defaults are filled into the arguments a test leaves out, and the
wrappers it names are added to the ones a test asks for (a test's ``check_memory=True`` stays a
sanitized VM under ``--vm-backend=profiled``)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator
from typing import Any

import pytest

import vm


def _probe() -> vm.Executable:
    """The smallest executable: ``main() = 0``."""
    asm = vm.Assembler()
    f = asm.function("main", [])
    f.ret(f.load_int(0))
    return asm.build()


def _expected_layers(defaults: dict[str, Any]) -> list[type[vm.Backend]]:
    base = type(vm.BACKENDS[defaults["backend"]]())
    wrappers = [
        kind
        for flag, kind in (("profile", vm.ProfilingBackend), ("check_memory", vm.SanitizingBackend))
        if defaults.get(flag)
    ]
    return [*wrappers, base]


@pytest.fixture(scope="session", autouse=True)
def _vm_backend_of_the_run(vm_defaults: dict[str, Any]) -> Iterator[None]:
    """Patch ``VirtualMachine.__init__`` for the session with the option's defaults, and check
    on a probe VM that they took effect (the option must never be silently ignored)."""
    defaults = vm_defaults
    original = vm.VirtualMachine.__init__
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init(*args: Any, **kwargs: Any) -> None:
        bound = signature.bind(*args, **kwargs)
        given = bound.arguments
        given.setdefault("backend", defaults["backend"])
        for flag in ("check_memory", "profile"):
            # The caller's own value when it asks (profile="trace" stays a trace), else the run's.
            given[flag] = given.get(flag) or bool(defaults.get(flag))
        original(*bound.args, **bound.kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vm.VirtualMachine, "__init__", init)
        layers = [type(layer) for layer in vm.VirtualMachine(_probe()).backend.layers()]
        assert layers == _expected_layers(defaults), (layers, defaults)
        yield
