"""VM backends: the seam between the loop and what it runs (vm/backend.py).

Representative end-to-end programs run through every backend configuration (plain closures,
sanitized, profiled, both, wrappers stacked by hand in either order, a custom wrapper) and must
give the plain VM's results bit for bit, with the same allocator counters; a custom backend is
the one decoded and run, once per decoded instance; and every message a caller can reach
through ``backend=`` is tested.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from vm_testlib import elementwise_program

import vm
from vm import (
    Backend,
    BackendWrapper,
    ClosureBackend,
    Executable,
    ProfilingBackend,
    SanitizingBackend,
    VirtualMachine,
    VMError,
)
from vm.decode import DecodeContext, Step
from vm.executable import Function, KernelEntry
from vm.kernels import Kernel
from vm.memory.allocator import PooledAllocator
from vm.sanitizer import Killed

E2E = Path(__file__).resolve().parents[1] / "e2e"


def _harness() -> Any:
    """``tests/e2e/harness.py`` under the name its program files import it by."""
    module = sys.modules.get("harness")
    if module is None:
        spec = importlib.util.spec_from_file_location("harness", E2E / "harness.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["harness"] = module
        spec.loader.exec_module(module)
    assert Path(module.__file__).resolve() == E2E / "harness.py", module.__file__
    return module


harness = _harness()

#: Programs that between them use every instruction and both kernel kinds: fused and plain
#: kernels, scratch, tuples, calls, recursion, tail-call loops, branches, data-dependent shapes,
#: reshapes, float16, results aliasing inputs and each other.
PROGRAMS = (
    "unary_float_chain",
    "float16_arith",
    "mlp_dense_relu_log_softmax",
    "attention_dynamic_batch_and_sequence",
    "cnn_conv_pool_flatten_dense",
    "softmax_log_softmax_axes",
    "if_branches_of_different_shapes",
    "recursion_grows_rows_by_concatenation",
    "fibonacci_non_tail_recursion",
    "loop_with_tuple_state",
    "recursion_with_data_dependent_filter",
    "argwhere_then_take",
    "argwhere_count_drives_topk",
    "dyn_reshape_by_computed_shape",
    "split_projections_into_stack",
    "global_returns_tuple_used_twice",
    "main_takes_nested_tuple",
    "results_alias_inputs_views_and_each_other",
    "long_chain_with_layout_changes_and_late_uses",
)


class CountingBackend(BackendWrapper):
    """A custom wrapper: counts the steps and kernels it decodes and the steps that run."""

    def __init__(self, inner: Backend | None = None) -> None:
        super().__init__(inner)
        self.decoded = 0
        self.bound = 0
        self.ran = 0
        self.contexts: list[DecodeContext] = []

    def bind_kernel(self, index: int, entry: KernelEntry, ctx: DecodeContext) -> Kernel:
        self.bound += 1
        return super().bind_kernel(index, entry, ctx)

    def decode(self, function: Function, ctx: DecodeContext) -> list[Step]:
        if not any(c is ctx for c in self.contexts):
            self.contexts.append(ctx)
        steps = super().decode(function, ctx)
        self.decoded += len(steps)
        return [self._counted(s) for s in steps]

    def _counted(self, inner: Step) -> Step:
        def step(r: list[Any]) -> int:
            self.ran += 1
            return inner(r)

        return step


#: Backend configurations, as the VirtualMachine arguments of each (made fresh for every VM:
#: a backend instance serves one VM).
CONFIGS: dict[str, Callable[[], dict[str, Any]]] = {
    "closures": lambda: {"backend": "closures"},
    "closures-instance": lambda: {"backend": ClosureBackend()},
    "sanitized": lambda: {"check_memory": True},
    "profiled": lambda: {"profile": True},
    "sanitized+profiled": lambda: {"check_memory": True, "profile": True},
    "profiler-inside-sanitizer": lambda: {"backend": SanitizingBackend(ProfilingBackend())},
    "custom-inside-both": lambda: {
        "backend": CountingBackend(),
        "check_memory": True,
        "profile": True,
    },
}


@functools.cache
def _compiled(name: str) -> tuple[Any, Executable]:
    import dynshape

    case = next(c for c in harness.all_cases() if c.name == name)
    return case, dynshape.compile(case.source)


def _run_all(machine: VirtualMachine, case: Any) -> list[Any]:
    """Results of every binding of ``case``, kept alive (so the pool's take-backs are alike)."""
    return [machine.run(*harness.make_inputs(case, b)) for b in case.bindings]


def test_the_programs_are_in_the_corpus() -> None:
    names = {c.name for c in harness.all_cases()}
    assert not [n for n in PROGRAMS if n not in names], "corpus programs renamed or gone"


@pytest.mark.parametrize("config", [c for c in CONFIGS if c != "closures"])
@pytest.mark.parametrize("program", PROGRAMS)
def test_every_backend_gives_the_plain_results_bit_for_bit(program: str, config: str) -> None:
    case, exe = _compiled(program)
    machine = VirtualMachine(exe, **CONFIGS[config]())
    # The sanitizer pools results too (it poisons every byte it hands out): so does the plain
    # VM it is compared with.
    fresh = machine.sanitizer is None
    # The wrappers run one step per instruction, one storage per alloc_storage, so the plain VM
    # they are compared with packs no arenas (vm/memory/arena.py); the default backend as an
    # instance does, as the default does.
    arenas = config == "closures-instance"
    plain = VirtualMachine(exe, allocator=PooledAllocator(fresh_results=fresh, arenas=arenas))
    expected = _run_all(plain, case)
    got = _run_all(machine, case)
    for binding, a, b in zip(case.bindings, expected, got, strict=True):
        harness.assert_same(a, b, where=f"{program}[{harness.binding_id(binding)}] {config}")
    # The wrappers change neither the allocations nor what is freed or lent.
    assert machine.allocator.stats.as_dict() == plain.allocator.stats.as_dict()
    if machine.profiler is not None:
        profiled = VirtualMachine(exe, profile=True)
        _run_all(profiled, case)
        counts = {k: c.count for k, c in machine.profiler.instructions.items()}
        assert counts == {k: c.count for k, c in profiled.profiler.instructions.items()}
        assert sum(counts.values()) > 0
    if machine.sanitizer is not None:
        assert machine.allocator.stats.live_bytes == 0


def test_the_flags_wrap_the_chosen_backend_sanitizer_inside_profiler() -> None:
    exe = elementwise_program("add")
    custom = CountingBackend()
    machine = VirtualMachine(exe, backend=custom, check_memory=True, profile=True)
    layers = [type(layer) for layer in machine.backend.layers()]
    assert layers == [ProfilingBackend, SanitizingBackend, CountingBackend, ClosureBackend]
    assert machine.sanitizer is not None and machine.profiler is not None
    assert [type(layer) for layer in VirtualMachine(exe).backend.layers()] == [ClosureBackend]
    by_hand = VirtualMachine(exe, backend=SanitizingBackend(ProfilingBackend()))
    assert by_hand.sanitizer is not None and by_hand.profiler is not None


def test_a_custom_backend_is_the_one_decoded_and_run() -> None:
    exe = elementwise_program("add")
    custom = CountingBackend()
    machine = VirtualMachine(exe, backend=custom)
    instructions = sum(len(f.code) for f in exe.functions)
    assert custom.decoded == instructions and custom.bound == len(exe.kernels)
    assert custom.ran == 0
    x, y = np.ones((3, 4), np.float32), np.full((3, 4), 2, np.float32)
    np.testing.assert_array_equal(machine.run(x, y), x + y + y)  # main(x, y) = (x + y) + y
    assert custom.ran == len(exe.functions[0].code)  # straight-line: every step once
    machine.run(x, y)
    assert custom.ran == 2 * len(exe.functions[0].code)
    assert custom.decoded == instructions  # decoded once, at construction


def test_a_backend_is_decoded_again_for_every_concurrent_call() -> None:
    """A kernel that calls its own VM makes the VM decode a second instance: the backend binds
    and decodes again, into a context of its own."""
    name = "test_backends.reenter"
    box: dict[str, VirtualMachine] = {}

    def factory(attrs: Any) -> Kernel:
        def kernel(x: np.ndarray, out: np.ndarray) -> None:
            np.copyto(out, box["vm"].invoke("leaf", x) * 2)

        return kernel

    vm.register_kernel(name)(factory)
    try:
        asm = vm.Assembler()
        k = asm.kernel(name)
        spec = vm.tensor("float32", (3,))
        f = asm.function("main", [("x", spec)], spec)
        out = f.empty((3,), "float32")
        f.invoke(k, [f.params[0]], [out])
        f.ret(out)
        leaf = asm.function("leaf", [("x", spec)], spec)
        leaf.ret(leaf.params[0])
        exe = asm.build()
        custom = CountingBackend()
        box["vm"] = machine = VirtualMachine(exe, backend=custom)
        instructions = sum(len(f.code) for f in exe.functions)
        x = np.arange(3, dtype=np.float32)
        np.testing.assert_array_equal(machine.run(x), 2 * x)
        assert custom.decoded == 2 * instructions and custom.bound == 2 * len(exe.kernels)
        assert len(custom.contexts) == 2
        np.testing.assert_array_equal(machine.run(x), 2 * x)  # two idle instances now
        assert custom.decoded == 2 * instructions
    finally:
        vm.unregister_kernel(name)


def test_the_sanitizer_wraps_the_inner_steps_of_alloc_storage_and_kill() -> None:
    """The inner backend allocates and frees; the sanitizer's wrapper names both after the
    instruction, poisons a float storage with NaNs and leaves a marker in the killed register
    (a validated program never reads it again, so the steps are called here one by one)."""
    asm = vm.Assembler()
    f = asm.function("main", [])
    s = f.alloc_storage(16, dtype_hint="float32")
    f.kill(s)
    f.ret(f.load_int(0))
    custom = CountingBackend()
    machine = VirtualMachine(asm.build(), backend=custom, check_memory=True)
    regs: list[Any] = [None] * machine.exe.functions[0].num_registers
    alloc, kill = machine._code[0][0], machine._code[0][1]
    assert alloc(regs) == 1
    storage = regs[s.index]
    assert storage.sanitizer.allocated_by == "main@0: alloc_storage %0, 16, 64, 'float32'"
    assert np.isnan(storage.buf.view(np.float32)).all()
    assert kill(regs) == 2 and custom.ran == 2  # the inner steps ran
    marker = regs[s.index]
    assert isinstance(marker, Killed) and marker.site == "main@1: kill (%0)"
    assert not storage.sanitizer.alive and storage.sanitizer.freed_by == "main@1: kill (%0)"
    assert machine.allocator.stats.live_bytes == 0


def test_a_backend_subclassed_directly_runs() -> None:
    """The protocol is two methods: a backend that is no wrapper works with the flags too."""

    class Direct(Backend):
        def bind_kernel(self, index: int, entry: KernelEntry, ctx: DecodeContext) -> Kernel:
            return ClosureBackend().bind_kernel(index, entry, ctx)

        def decode(self, function: Function, ctx: DecodeContext) -> list[Step]:
            return vm.backend.closure_steps(function.code, ctx)

    x, y = np.ones((3, 4), np.float32), np.full((3, 4), 2, np.float32)
    for flags in ({}, {"check_memory": True, "profile": True}):
        machine = VirtualMachine(elementwise_program("add"), backend=Direct(), **flags)
        np.testing.assert_array_equal(machine.run(x, y), x + y + y)


# ---- messages ------------------------------------------------------------------------------


def test_an_unknown_backend_name() -> None:
    with pytest.raises(VMError, match=r"^unknown backend 'jit' \(use 'closures' or a vm\.Backend"):
        VirtualMachine(elementwise_program("add"), backend="jit")


def test_a_backend_of_the_wrong_type() -> None:
    with pytest.raises(
        VMError,
        match=r"^backend must be a name \('closures'\) or a vm\.Backend instance, got int$",
    ):
        VirtualMachine(elementwise_program("add"), backend=42)  # type: ignore[arg-type]
    with pytest.raises(VMError, match=r"^SanitizingBackend wraps a vm\.Backend, got str$"):
        SanitizingBackend("closures")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("flag", "backend"),
    [("check_memory", SanitizingBackend), ("profile", ProfilingBackend)],
)
def test_a_wrapper_asked_for_twice(flag: str, backend: type[BackendWrapper]) -> None:
    with pytest.raises(
        VMError,
        match=rf"^{flag}=True, but the backend already has a {backend.__name__}: ask for it "
        "one way, not both$",
    ):
        VirtualMachine(
            elementwise_program("add"), backend=CountingBackend(backend()), **{flag: True}
        )


def test_a_sanitizing_backend_serves_one_vm() -> None:
    exe = elementwise_program("add")
    shared = SanitizingBackend()
    VirtualMachine(exe, backend=shared)
    with pytest.raises(
        VMError, match=r"^this SanitizingBackend already serves a VirtualMachine with another "
    ):
        VirtualMachine(exe, backend=shared)
    with pytest.raises(VMError, match=r"^a SanitizingBackend decodes only for a VM it is attached"):
        SanitizingBackend().decode(exe.functions[0], VirtualMachine(exe)._ctx)


class _Short(ClosureBackend):
    def decode(self, function: Function, ctx: DecodeContext) -> list[Step]:
        return super().decode(function, ctx)[:-1]


class _NotCallable(ClosureBackend):
    def decode(self, function: Function, ctx: DecodeContext) -> list[Step]:
        return [0, *super().decode(function, ctx)[1:]]  # type: ignore[list-item]


class _Tuple(ClosureBackend):
    def decode(self, function: Function, ctx: DecodeContext) -> list[Step]:
        return tuple(super().decode(function, ctx))  # type: ignore[return-value]


def test_a_backend_must_decode_one_callable_step_per_instruction() -> None:
    exe = elementwise_program("add")
    n = len(exe.functions[0].code)
    with pytest.raises(
        VMError,
        match=rf"^backend _Short decoded function 'main' into {n - 1} step\(s\), expected {n} "
        r"\(one per instruction\)$",
    ):
        VirtualMachine(exe, backend=_Short())
    with pytest.raises(
        VMError, match=r"^backend _NotCallable decoded function 'main': step 0 is not callable "
    ):
        VirtualMachine(exe, backend=_NotCallable())
    with pytest.raises(
        VMError,
        match=rf"^backend _Tuple decoded function 'main' into a tuple, expected a list of {n} ",
    ):
        VirtualMachine(exe, backend=_Tuple())
    # An inner backend is checked too, with the same message, before a wrapper uses its steps.
    with pytest.raises(VMError, match=r"^backend _Short decoded function 'main' into "):
        VirtualMachine(exe, backend=_Short(), check_memory=True, profile=True)


def test_profile_report_without_a_profiler_names_both_ways() -> None:
    with pytest.raises(
        VMError, match=r"^this VM was built without profile=True \(nor a ProfilingBackend\)$"
    ):
        VirtualMachine(elementwise_program("add")).profile_report()
