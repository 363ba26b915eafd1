"""Layout steps of fused kernels as views (``vm/fused_views.py``): which steps, the same results
as copies, the sanitizer's output check, and a scratch that does not match the view."""

from __future__ import annotations

import numpy as np
import pytest

from vm import (
    Assembler,
    FusedKernel,
    FusedStep,
    KernelError,
    PooledAllocator,
    Ref,
    Scratch,
    VirtualMachine,
    tensor,
)
from vm.fused_views import view_steps

IN0, IN1, OUT0 = Ref("in", 0), Ref("in", 1), Ref("out", 0)
T0, T1, T2 = Ref("tmp", 0), Ref("tmp", 1), Ref("tmp", 2)
RESHAPE = {"newshape": (2, 6)}
TRANSPOSE = {"axes": (1, 0)}


def _step(op: str, inputs: tuple, outputs: tuple, attrs: dict | None = None) -> FusedStep:
    return FusedStep(op, attrs or {}, inputs, outputs)


def test_a_layout_step_into_scratch_read_later_is_a_view() -> None:
    steps = (
        _step("exp", (IN0,), (T0,)),
        _step("reshape", (T0,), (T1,), RESHAPE),
        _step("transpose", (T1,), (T2,), TRANSPOSE),
        _step("add", (T2, IN1), (OUT0,)),
    )
    assert sorted(view_steps(steps)) == [1, 2]


def test_a_view_of_an_input_is_a_view_while_nothing_writes_it() -> None:
    steps = (_step("reshape", (IN0,), (T0,), RESHAPE), _step("exp", (T0,), (OUT0,)))
    assert sorted(view_steps(steps)) == [0]


@pytest.mark.parametrize(
    "steps",
    [
        # the view written in place later: the write would reach what it views
        (
            _step("exp", (IN0,), (T0,)),
            _step("transpose", (T0,), (T1,), TRANSPOSE),
            _step("negative", (T1,), (T1,)),
            _step("add", (T1, IN1), (OUT0,)),
        ),
        # what it views written later: the view would see the write
        (
            _step("exp", (IN0,), (T0,)),
            _step("reshape", (T0,), (T1,), RESHAPE),
            _step("negative", (T0,), (T0,)),
            _step("add", (T1, T0), (OUT0,)),
        ),
        # into an output: the caller's buffer must hold the values
        (_step("transpose", (IN0,), (OUT0,), TRANSPOSE),),
        # scratch written by two steps
        (
            _step("reshape", (IN0,), (T0,), RESHAPE),
            _step("exp", (IN1,), (T0,)),
            _step("add", (T0, IN1), (OUT0,)),
        ),
    ],
    ids=["view-written", "viewed-written", "output", "scratch-written-twice"],
)
def test_a_step_whose_view_someone_could_tell_apart_stays_a_copy(steps: tuple) -> None:
    assert 0 not in view_steps(steps) and 1 not in view_steps(steps)


def test_a_write_through_a_view_of_a_view_reaches_the_whole_class() -> None:
    steps = (
        _step("exp", (IN0,), (T0,)),
        _step("reshape", (T0,), (T1,), RESHAPE),  # a view: t0 and t1 read only after...
        _step("transpose", (T1,), (T2,), TRANSPOSE),  # ...but t2 joins them and is written
        _step("negative", (T2,), (T2,)),
        _step("add", (T2, IN1), (OUT0,)),
    )
    views = view_steps(steps)
    assert 2 not in views  # the write to t2 would change t0 and t1
    assert 1 in views  # nothing writes t0 or t1 (t2 stays a copy of its own)


def _rotate_half_vm(**options: object) -> VirtualMachine:
    """``out = reshape(transpose(reshape(x)))`` + 1 with every layout step into scratch the
    caller passes (as the compiler's fusion does): x (3, 4) -> (2, 6) -> (6, 2) -> (12,)."""
    fused = FusedKernel(
        "fused_reshape_transpose_add",
        1,
        1,
        (
            _step("reshape", (IN0,), (T0,), {"newshape": (2, 6)}),
            _step("transpose", (T0,), (T1,), TRANSPOSE),
            _step("reshape", (T1,), (T2,), {"newshape": (12,)}),
            _step("add", (T2, Ref("const", 0)), (OUT0,)),
        ),
        (Scratch("float32", ("arg", 0)), Scratch("float32", ("arg", 1))),
    )
    fused = FusedKernel(
        fused.name,
        fused.num_inputs,
        fused.num_outputs,
        fused.steps,
        (*fused.scratch, Scratch("float32", ("arg", 2))),
    )
    asm = Assembler()
    asm.const(np.ones((12,), np.float32))
    k = asm.fused(fused)
    f = asm.function("main", [("x", tensor("float32", (3, 4)))], tensor("float32", (12,)))
    (x,) = f.params
    out = f.empty((12,), "float32")
    f.invoke(
        k,
        [x],
        [out, f.empty((2, 6), "float32"), f.empty((6, 2), "float32"), f.empty((12,), "float32")],
    )
    f.ret(out)
    return VirtualMachine(asm.build(), **options)  # type: ignore[arg-type]


def test_views_give_the_copies_results_and_pass_the_sanitizer() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = x.reshape(2, 6).T.reshape(12) + 1
    for options in ({}, {"check_memory": True}, {"profile": "trace"}):
        np.testing.assert_array_equal(_rotate_half_vm(**options).run(x), want)


def test_scratch_that_does_not_match_its_view_is_an_error_naming_the_step() -> None:
    fused = FusedKernel(
        "fused_reshape_exp",
        1,
        1,
        (_step("reshape", (IN0,), (T0,), RESHAPE), _step("exp", (T0,), (OUT0,))),
        (Scratch("float32", ("arg", 0)),),
    )
    asm = Assembler()
    k = asm.fused(fused)
    f = asm.function("main", [("x", tensor("float32", (3, 4)))], tensor("float32", (12,)))
    (x,) = f.params
    out = f.empty((12,), "float32")
    f.invoke(k, [x], [out, f.empty((5,), "float32")])  # 5 elements: no view of 12
    f.ret(out)
    vm = VirtualMachine(asm.build(), allocator=PooledAllocator())
    with pytest.raises(KernelError, match=r"step 0 \(reshape\) failed: .*\(3, 4\) has no view"):
        vm.run(np.ones((3, 4), np.float32))


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)  # as the executable's constants are
    return a


@pytest.mark.parametrize("axis", [1, -1])
def test_a_take_of_a_constant_range_is_a_slice_and_other_indices_gather(axis: int) -> None:
    take = _step("take", (IN0, Ref("const", 0)), (T0,), {"axis": axis})
    steps = (take, _step("exp", (T0,), (OUT0,)))
    ranged = [_read_only(np.arange(2, 5))]
    assert list(view_steps(steps, ranged)) == [0]
    assert view_steps(steps, [_read_only(np.array([4, 2, 3]))]) == {}
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    scratch = np.empty((4, 3), np.float32)
    part = view_steps(steps, ranged)[0](x, scratch)
    assert np.shares_memory(part, x) and np.array_equal(part, x[:, 2:5])
    with pytest.raises(ValueError, match="out of range"):
        view_steps(steps, [_read_only(np.arange(5, 8))])[0](x, scratch)
