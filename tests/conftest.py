"""Suite-wide options.

``--vm-backend`` chooses the backend of the VMs the end-to-end suite builds
(``tests/e2e/conftest.py`` applies it): a name of ``vm.BACKENDS`` (default ``closures``) and the
wrappers ``sanitized`` (the memory sanitizer) and ``profiled`` (the profiler), joined by ``+``:

    pytest tests/e2e --vm-backend=sanitized+profiled

It is an option of the test run, not of the VM: the VM is told what to do by its arguments.

``pytest -m "not slow"`` is the development loop (README): everything but the modules of
``SLOW_MODULES`` and the tests marked ``@pytest.mark.slow`` in place. ``pytest`` runs all.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

# Bytecode caches for the test run, even where PYTHONDONTWRITEBYTECODE=1 (as on this project's
# machines): without them every run compiles the ~500 modules collection imports, 3.4 s of
# an 8 s ``pytest --collect-only`` (4.6 s with them, issue 28). Only this process writes
# them, into the gitignored __pycache__ folders, and Python uses one only while its source is
# unchanged.
sys.dont_write_bytecode = False

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: The modules the quick loop (``pytest -m "not slow"``) leaves out, with their seconds in a full
#: run on this project's 2 shared cores (``pytest --durations``, issue 28): together about 4/5
#: of the suite's time. One list here rather than a ``pytestmark`` line in each module, so the
#: loop is defined in one place and the modules (edited by others) stay as they are. Every
#: package keeps faster tests in the loop (tests/shape_funcs/test_shape_errors.py, the ONNX
#: op modules but elementwise, tests/serve/test_serve_*.py, ...).
SLOW_MODULES = {
    "tests/onnx/test_elementwise.py": 139,  # 512 cases against onnxruntime
    "tests/shape_funcs/test_shape_properties.py": 137,  # Hypothesis, every op both modes
    "tests/testing/test_check_op.py": 112,  # check_op over every built-in op
    "tests/serve/test_deployment.py": 72,  # Ray Serve: starts Ray
    "tests/serve/test_multinode.py": 25,  # a two-node Ray cluster
    "tests/serve/test_ray_data.py": 19,  # Ray Data
    "tests/serve/test_local.py": 6,  # imports Ray in subprocesses
    "tests/serve/test_cli_serve.py": 5,  # python -m dynshape serve, Ray in a subprocess
    "tests/serve/test_serve_protocol.py": 45,  # Ray Serve: starts Ray, three deployments
    "tests/serve/test_serve_sockets.py": 20,  # python -m dynshape serve, Ray in a subprocess
    "tests/serve/test_serve_faults.py": 70,  # Ray Serve: replicas killed under load
    "tests/serve/test_serve_generate.py": 60,  # Ray Serve: generations streamed, a CLI server
    "tests/testing/test_interpret_corpus.py": 56,  # every stage interpreted, whole corpus
    "tests/ir/test_dim_proofs_budget.py": 50,  # proofs against concrete bindings
    "tests/ir/test_nesting.py": 45,  # programs 10,000 levels deep
    "tests/ir/test_text_roundtrip.py": 34,  # Hypothesis modules, deep nesting
    "tests/vm/test_loader_fuzz.py": 30,  # the executable loader fuzzed in subprocesses
    "tests/test_layering.py": 26,  # imports each package in a subprocess
    "tests/examples/test_examples.py": 24,  # every example script run
    "tests/ir/test_dim_proofs.py": 24,  # proofs against concrete bindings
    "tests/dynshape/test_deep_programs.py": 23,  # programs at the nesting limit compiled
    "tests/e2e/test_type_completion.py": 19,  # full type inference per corpus program
    "tests/benchmarks/test_onnx_families.py": 13,  # eight model families in onnxruntime
    "tests/onnx/test_conformance.py": 31,  # 1,061 backend cases, 15 s of them generating
    "tests/vm/test_kernels_elementwise.py": 29,  # every elementwise kernel, every dtype
    "tests/vm/test_shape_program.py": 14,  # random shape programs against the reference
    "tests/dynshape/test_proof_budget.py": 12,  # size proofs on exported models' dims
}


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
    gone = [path for path in SLOW_MODULES if not (config.rootpath / path).is_file()]
    if gone:
        raise pytest.UsageError(f"tests/conftest.py SLOW_MODULES names missing files: {gone}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.partition("::")[0] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


def pytest_report_header(config: pytest.Config) -> str:
    return f"vm backend (end-to-end suite): {config.getoption('--vm-backend')}"


@pytest.fixture(scope="session")
def vm_defaults(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The ``VirtualMachine`` keyword defaults of this run's ``--vm-backend``."""
    return vm_backend_defaults(request.config.getoption("--vm-backend"))
