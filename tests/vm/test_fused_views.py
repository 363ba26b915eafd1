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
        # what it views written later: the view would see the write
        (
            _step("exp", (IN0,), (T0,)),
            _step("reshape", (T0,), (T1,), RESHAPE),
            _step("negative", (T0,), (T0,)),
            _step("add", (T1, T0), (OUT0,)),
        ),
        # into an output: the caller's buffer must hold the values
        (_step("transpose", (IN0,), (OUT0,), TRANSPOSE),),
    ],
    ids=["viewed-written", "output"],
)
def test_a_step_whose_view_someone_could_tell_apart_stays_a_copy(steps: tuple) -> None:
    assert 0 not in view_steps(steps) and 1 not in view_steps(steps)


def _fused_vm(
    steps: tuple, scratch: list[tuple[int, ...]], inputs: list[tuple[int, ...]], out: tuple
) -> VirtualMachine:
    """A VM whose main runs one fused kernel of ``steps`` on float32 inputs of ``inputs``'
    shapes into one output of shape ``out``, every scratch (``scratch``' shapes) the caller's."""
    fused = FusedKernel(
        "fused_test",
        len(inputs),
        1,
        steps,
        tuple(Scratch("float32", ("arg", k)) for k in range(len(scratch))),
    )
    asm = Assembler()
    k = asm.fused(fused)
    params = [(f"x{i}", tensor("float32", shape)) for i, shape in enumerate(inputs)]
    f = asm.function("main", params, tensor("float32", out))
    result = f.empty(out, "float32")
    f.invoke(k, list(f.params), [result, *(f.empty(shape, "float32") for shape in scratch)])
    f.ret(result)
    return VirtualMachine(asm.build())


# Steps whose scratch is written again after (or before) a view of it: the view has a name of
# its own, the writes go to the scratch's buffer. Each: the steps, the scratch shapes, the
# inputs' shapes, numpy's answer, the steps that are views.
REUSED = {
    "view-written-later": (
        (
            _step("exp", (IN0,), (T0,)),
            _step("transpose", (T0,), (T1,), TRANSPOSE),
            _step("negative", (T1,), (T1,)),
            _step("add", (T1, IN1), (OUT0,)),
        ),
        [(3, 4), (4, 3)],
        [(3, 4), (4, 3)],
        lambda x, y: -np.exp(x).T + y,
        [1],
    ),
    "scratch-written-after-its-view": (
        (
            _step("reshape", (IN0,), (T0,), RESHAPE),
            _step("exp", (IN1,), (T0,)),
            _step("add", (T0, IN1), (OUT0,)),
        ),
        [(2, 6)],
        [(3, 4), (2, 6)],
        lambda x, y: np.exp(y) + y,
        [0],
    ),
    "view-of-a-view-written-later": (
        (
            _step("exp", (IN0,), (T0,)),
            _step("reshape", (T0,), (T1,), RESHAPE),
            _step("transpose", (T1,), (T2,), TRANSPOSE),
            _step("negative", (T2,), (T2,)),
            _step("add", (T2, IN1), (OUT0,)),
        ),
        [(3, 4), (2, 6), (6, 2)],
        [(3, 4), (6, 2)],
        lambda x, y: -np.exp(x).reshape(2, 6).T + y,
        [1, 2],
    ),
    "slot-reused-by-a-second-view": (
        (
            _step("reshape", (IN0,), (T0,), RESHAPE),
            _step("exp", (T0,), (T1,)),
            _step("reshape", (IN1,), (T0,), RESHAPE),
            _step("add", (T1, T0), (OUT0,)),
        ),
        [(2, 6), (2, 6)],
        [(3, 4), (3, 4)],
        lambda x, y: np.exp(x.reshape(2, 6)) + y.reshape(2, 6),
        [0, 2],
    ),
}


@pytest.mark.parametrize("case", sorted(REUSED))
def test_a_scratch_written_again_keeps_its_views_and_their_results(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps, scratch, inputs, numpy_answer, viewed = REUSED[case]
    assert sorted(view_steps(steps)) == viewed
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(shape).astype(np.float32) for shape in inputs]
    out_shape = numpy_answer(*args).shape
    got = _fused_vm(steps, scratch, inputs, out_shape).run(*args)
    np.testing.assert_array_equal(got, numpy_answer(*args).astype(np.float32))
    source_views = _fused_vm(steps, scratch, inputs, out_shape)
    checked = VirtualMachine(source_views.exe, check_memory=True)
    np.testing.assert_array_equal(checked.run(*args), got)
    import vm.fused

    monkeypatch.setattr(vm.fused, "view_steps", lambda steps, constants=(): {})
    copies = _fused_vm(steps, scratch, inputs, out_shape).run(*args)
    np.testing.assert_array_equal(got, copies)  # the copies' bits


def test_a_later_write_to_a_views_class_keeps_it_a_copy() -> None:
    steps = (
        _step("exp", (IN0,), (T0,)),
        _step("reshape", (T0,), (T1,), RESHAPE),  # a view of t0: nothing writes t0 later
        _step("reshape", (T1,), (T2,), {"newshape": (3, 4)}),  # its class {t0, t1}: t1 is...
        _step("exp", (IN1,), (T1,)),  # ...written later (its buffer, but classes only grow)
        _step("add", (T2, IN0), (OUT0,)),
    )
    assert sorted(view_steps(steps)) == [1]


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
