"""Suite-wide options.

``--vm-backend`` chooses the backend of the VMs the end-to-end suite builds
(``tests/e2e/conftest.py`` applies it): a name of ``vm.BACKENDS`` (default ``closures``) and the
wrappers ``sanitized`` (the memory sanitizer) and ``profiled`` (the profiler), joined by ``+``:

    pytest tests/e2e --vm-backend=sanitized+profiled

It is an option of the test run, not of the VM: the VM is told what to do by its arguments.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example_module(name: str) -> ModuleType:
    """A fresh module of ``examples/<name>.py`` (a test may change it), with its folder on
    ``sys.path`` as when the script runs and itself in ``sys.modules`` (``main()`` finds it)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def load_example() -> Callable[[str], ModuleType]:
    """``load_example("mlp")``: an example model's module (see ``load_example_module``)."""
    return load_example_module


#: The ``--vm-backend`` words that wrap the backend, and the VirtualMachine flag of each.
VM_BACKEND_WRAPPERS = {"sanitized": "check_memory", "profiled": "profile"}


def vm_backend_defaults(text: str) -> dict[str, Any]:
    """The ``VirtualMachine`` keyword defaults that ``--vm-backend=text`` stands for, e.g.
    ``{"backend": "closures", "check_memory": True}`` for ``sanitized``."""
    import vm

    defaults: dict[str, Any] = {"backend": "closures"}
    names = [word for word in text.split("+") if word not in VM_BACKEND_WRAPPERS]
    if len(names) > 1 or any(name not in vm.BACKENDS for name in names):
        raise pytest.UsageError(
            f"--vm-backend={text}: expected at most one backend of {', '.join(vm.BACKENDS)} "
            f"and the wrappers {', '.join(VM_BACKEND_WRAPPERS)}, joined by '+'"
        )
    if names:
        defaults["backend"] = names[0]
    for word, flag in VM_BACKEND_WRAPPERS.items():
        if word in text.split("+"):
            defaults[flag] = True
    return defaults


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--vm-backend",
        default="closures",
        help="backend of the end-to-end suite's VMs: a vm.BACKENDS name and/or the wrappers "
        "'sanitized' and 'profiled', joined by '+' (default: closures)",
    )


def pytest_configure(config: pytest.Config) -> None:
    vm_backend_defaults(config.getoption("--vm-backend"))  # a bad value fails the run now


def pytest_report_header(config: pytest.Config) -> str:
    return f"vm backend (end-to-end suite): {config.getoption('--vm-backend')}"


@pytest.fixture(scope="session")
def vm_defaults(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The ``VirtualMachine`` keyword defaults of this run's ``--vm-backend``."""
    return vm_backend_defaults(request.config.getoption("--vm-backend"))
