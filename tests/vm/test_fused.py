"""Fused primitive functions: in-place chains, scratch buffers of every kind, errors."""

from __future__ import annotations

import numpy as np
import pytest

from vm import (
    Assembler,
    FormatError,
    FusedKernel,
    FusedStep,
    KernelError,
    PooledAllocator,
    Ref,
    Scratch,
    ShapeProgramBuilder,
    VirtualMachine,
    tensor,
)

IN0, IN1, OUT0 = Ref("in", 0), Ref("in", 1), Ref("out", 0)


def _run_fused(kernel, params, args, out_shape, out_dtype="float32", extra=None, consts=()):
    """main(params...) = fused(params..., *extra) into a fresh output."""
    asm = Assembler()
    for c in consts:
        asm.const(c)
    k = asm.fused(kernel)
    f = asm.function("main", params)
    regs = list(f.params)
    if extra is not None:
        regs += extra(f)
    out = f.empty(out_shape, out_dtype)
    f.invoke(k, regs, [out])
    f.ret(out)
    # The output from the pool as well (not numpy's, vm/fresh_results.py): the tests count it.
    pool = PooledAllocator(fresh_results=False)
    m = VirtualMachine(asm.build(), allocator=pool, output_policy="transfer")
    return m.run(*args), m


def test_elementwise_chain_runs_in_place_in_the_output():
    fused = FusedKernel(
        "fused_add_relu_mul",
        2,
        1,
        (
            FusedStep("add", {}, (IN0, IN1), (OUT0,)),
            FusedStep("nn.relu", {}, (OUT0,), (OUT0,)),
            FusedStep("multiply", {}, (OUT0, Ref("const", 0)), (OUT0,)),
        ),
    )
    spec = tensor("float32", (2, 3))
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    y = np.ones((2, 3), np.float32)
    c = np.full((3,), 2, np.float32)
    got, m = _run_fused(fused, [("x", spec), ("y", spec)], [x, y], (2, 3), consts=[c])
    np.testing.assert_array_equal(got, np.maximum(x + y, 0) * c)
    assert m.allocator.stats.requests == 1  # only the output: no scratch


def _centered(scratch_shape, extra=None):
    """out = x - sum(x, axis=1, keepdims) with the sum in a scratch buffer."""
    fused = FusedKernel(
        "fused_center",
        1 if extra is None else 2,
        1,
        (
            FusedStep(
                "sum", {"axis": 1, "keepdims": True, "exclude": False}, (IN0,), (Ref("tmp", 0),)
            ),
            FusedStep("subtract", {}, (IN0, Ref("tmp", 0)), (OUT0,)),
        ),
        (Scratch("float32", scratch_shape),),
    )
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    got, m = _run_fused(fused, [("x", tensor("float32", (2, 4)))], [x], (2, 4), extra=extra)
    np.testing.assert_array_equal(got, x - x.sum(axis=1, keepdims=True))
    s = m.allocator.stats
    assert s.requests == 2 and s.frees == 1 and s.live_bytes == 0  # scratch given back
    return m


def test_scratch_with_a_static_shape():
    _centered(("static", (2, 1)))


def test_scratch_shaped_by_the_caller():
    def shape_arg(f):
        b = ShapeProgramBuilder(["n"])
        (n,) = b.inputs
        prog = f.asm.shape_program(b.build([(n, 1)]))
        return f.shape_program(prog, [f.dim(f.params[0], 0)])

    _centered(("input", 1), extra=shape_arg)


def test_scratch_shaped_by_a_shape_function():
    import shape_funcs

    assert shape_funcs.has_shape_func("sum")
    _centered(("shape_func", 0, 0))


def test_scratch_shaped_like_a_value():
    fused = FusedKernel(
        "fused_exp_sub",
        1,
        1,
        (
            FusedStep("exp", {}, (IN0,), (Ref("tmp", 0),)),
            FusedStep("subtract", {}, (Ref("tmp", 0), IN0), (OUT0,)),
        ),
        (Scratch("float32", ("like", IN0)),),
    )
    x = np.linspace(0, 1, 6, dtype=np.float32)
    got, _ = _run_fused(fused, [("x", tensor("float32", (6,)))], [x], (6,))
    np.testing.assert_allclose(got, np.exp(x) - x, rtol=1e-6)


def test_dense_bias_relu_epilogue_and_tuple_operand():
    fused = FusedKernel(
        "fused_dense_bias_relu",
        3,
        1,
        (
            FusedStep("nn.dense", {}, (IN0, IN1), (OUT0,)),
            FusedStep("nn.bias_add", {"axis": -1}, (OUT0, Ref("in", 2)), (OUT0,)),
            FusedStep("nn.relu", {}, (OUT0,), (OUT0,)),
        ),
    )
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (5, 4), (5,)])
    params = [
        ("x", tensor("float32", (3, 4))),
        ("w", tensor("float32", (5, 4))),
        ("b", tensor("float32", (5,))),
    ]
    got, _ = _run_fused(fused, params, [x, w, b], (3, 5))
    np.testing.assert_allclose(got, np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-6)
    cat = FusedKernel(
        "fused_cat_neg",
        2,
        1,
        (
            FusedStep("concatenate", {"axis": 0}, ((IN0, IN1),), (OUT0,)),
            FusedStep("negative", {}, (OUT0,), (OUT0,)),
        ),
    )
    spec = tensor("float32", (2,))
    got, _ = _run_fused(
        cat, [("a", spec), ("b", spec)], [np.ones(2, np.float32), np.zeros(2, np.float32)], (4,)
    )
    assert got.tolist() == [-1, -1, 0, 0]


def test_a_failing_step_is_named():
    fused = FusedKernel("fused_take", 2, 1, (FusedStep("take", {"axis": 0}, (IN0, IN1), (OUT0,)),))
    params = [("x", tensor("float32", (3,))), ("i", tensor("int64", (1,)))]
    with pytest.raises(KernelError, match=r"fused kernel fused_take: step 0 \(take\) failed"):
        _run_fused(fused, params, [np.zeros(3, np.float32), np.array([7])], (1,))


@pytest.mark.parametrize(
    ("steps", "scratch", "message"),
    [
        ((FusedStep("relu_typo", {}, (IN0,), (OUT0,)),), (), "no registered kernel"),
        ((FusedStep("nn.relu", {}, (OUT0,), (OUT0,)),), (), "reads out0 before any step"),
        (
            (FusedStep("nn.relu", {}, (IN0,), (Ref("tmp", 0),)),),
            (Scratch("float32", ("static", (1,))),),
            "no step writes output 0",
        ),
        ((FusedStep("nn.relu", {}, (Ref("in", 5),), (OUT0,)),), (), "out of range"),
        (
            (FusedStep("nn.relu", {}, (IN0,), (OUT0,)),),
            (Scratch("float32", ("like", Ref("tmp", 0))),),
            "earlier scratch",
        ),
        (
            (FusedStep("nn.relu", {}, (IN0,), (OUT0,)),),
            (Scratch("float32", ("arg", 0)), Scratch("float32", ("arg", 0))),
            "'arg' takes an index not used before",
        ),
        (
            (FusedStep("nn.relu", {}, (IN0,), (OUT0,)),),
            (Scratch("float32", ("arg", 1)),),
            r"scratch args must be numbered 0\.\.0",
        ),
    ],
)
def test_fused_validation(steps, scratch, message):
    asm = Assembler()
    asm.fused(FusedKernel("bad", 1, 1, steps, scratch))
    f = asm.function("main", [])
    f.ret(f.load_int(0))
    with pytest.raises(FormatError, match=message):
        asm.build()


def test_scratch_passed_by_the_caller_is_used_and_not_allocated():
    """``("arg", j)``: the invoke passes the scratch after the outputs (the compiler planned it)."""
    fused = FusedKernel(
        "fused_center",
        1,
        1,
        (
            FusedStep(
                "sum", {"axis": 1, "keepdims": True, "exclude": False}, (IN0,), (Ref("tmp", 0),)
            ),
            FusedStep("subtract", {}, (IN0, Ref("tmp", 0)), (OUT0,)),
        ),
        (Scratch("float32", ("arg", 0)),),
    )
    assert fused.num_scratch_args == 1 and fused.num_destinations == 2
    asm = Assembler()
    k = asm.fused(fused)
    f = asm.function("main", [("x", tensor("float32", (2, 4)))])
    (x,) = f.params
    out, tmp = f.empty((2, 4), "float32"), f.empty((2, 1), "float32")
    f.invoke(k, [x], [out, tmp])
    f.ret(out)
    m = VirtualMachine(asm.build(), allocator=PooledAllocator(fresh_results=False))
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(m.run(a), a - a.sum(axis=1, keepdims=True))
    assert m.allocator.stats.requests == 2  # the two the bytecode made, nothing in the kernel


def test_an_invoke_must_pass_the_scratch_args():
    fused = FusedKernel(
        "fused_neg",
        1,
        1,
        (FusedStep("negative", {}, (IN0,), (OUT0,)),),
        (Scratch("float32", ("arg", 0)),),
    )
    asm = Assembler()
    k = asm.fused(fused)
    f = asm.function("main", [("x", tensor("float32", (2,)))])
    out = f.empty((2,), "float32")
    f.invoke(k, list(f.params), [out])
    f.ret(out)
    with pytest.raises(FormatError, match="which takes 1 and 1 plus 1 scratch buffers"):
        asm.build()


# Generated code ------------------------------------------------------------------------------

LONG = 40


def _long_chain(fail_at: int | None) -> tuple[FusedKernel, list]:
    """``LONG`` steps on a (1,) output; step ``fail_at`` (if any) takes an out-of-range index."""
    steps = [FusedStep("take", {"axis": 0}, (IN0, IN1), (OUT0,))]
    steps += [
        FusedStep("negative", {}, (OUT0,), (OUT0,))
        if i % 2
        else FusedStep("add", {}, (OUT0, OUT0), (OUT0,))
        for i in range(1, LONG)
    ]
    if fail_at is not None:
        steps[fail_at] = FusedStep("take", {"axis": 0}, (IN0, Ref("in", 2)), (OUT0,))
    fused = FusedKernel("fused_long", 3, 1, tuple(steps))
    params = [
        ("x", tensor("float32", (3,))),
        ("i", tensor("int64", (1,))),
        ("bad", tensor("int64", (1,))),
    ]
    return fused, params


@pytest.mark.parametrize("fail_at", [0, 1, 17, LONG - 1])
def test_a_failing_step_in_a_long_kernel_is_named_by_its_index(fail_at):
    fused, params = _long_chain(fail_at)
    args = [np.array([1, -2, 3], np.float32), np.array([1]), np.array([7])]
    for _ in range(2):  # the second VM reuses the cached code object: the same answer
        with pytest.raises(KernelError) as info:
            _run_fused(fused, params, args, (1,))
        cause = info.value.__cause__
        assert isinstance(cause, IndexError)
        assert info.value.message == (
            f"fused kernel fused_long: step {fail_at} (take) failed: IndexError: {cause}"
        )


def test_a_long_kernel_runs_every_step_in_order():
    fused, params = _long_chain(None)
    x, i, unused = np.array([1, -2, 3], np.float32), np.array([2]), np.array([0])
    got, m = _run_fused(fused, params, [x, i, unused], (1,))
    # x[2], negated at the 20 odd steps and doubled at the 19 even ones
    assert got.tolist() == [3.0 * 2**19]
    assert m.allocator.stats.requests == 1


def test_tuple_operands_of_one_and_several_values_and_a_constant():
    fused = FusedKernel(
        "fused_cats",
        2,
        2,
        (
            FusedStep("concatenate", {"axis": 0}, ((IN0,),), (Ref("out", 1),)),
            FusedStep(
                "concatenate", {"axis": 0}, ((IN1, Ref("const", 0), Ref("out", 1)),), (OUT0,)
            ),
            FusedStep("negative", {}, (OUT0,), (OUT0,)),
        ),
    )
    asm = Assembler()
    asm.const(np.array([5, 6], np.float32))
    k = asm.fused(fused)
    spec = tensor("float32", (2,))
    f = asm.function("main", [("a", spec), ("b", spec)])
    out0, out1 = f.empty((6,), "float32"), f.empty((2,), "float32")
    f.invoke(k, list(f.params), [out0, out1])
    f.ret(f.tuple([out0, out1]))
    got = VirtualMachine(asm.build()).run(
        np.array([1, 2], np.float32), np.array([3, 4], np.float32)
    )
    assert got[0].tolist() == [-3, -4, -5, -6, -1, -2]
    assert got[1].tolist() == [1, 2]


def _two_scratch(fail: bool) -> FusedKernel:
    """out = (exp(x) + x) - sum(exp(x)), in two scratch buffers; ``fail`` adds a bad step 2."""
    t0, t1 = Ref("tmp", 0), Ref("tmp", 1)
    steps = [
        FusedStep("exp", {}, (IN0,), (t0,)),
        FusedStep("sum", {"axis": 1, "keepdims": True, "exclude": False}, (t0,), (t1,)),
        FusedStep("add", {}, (t0, IN0), (t0,)),
        FusedStep("subtract", {}, (t0, t1), (OUT0,)),
    ]
    if fail:  # a (2, 4) result does not fit the (2, 1) scratch
        steps[2] = FusedStep("add", {}, (t0, IN0), (t1,))
    scratch = (Scratch("float32", ("like", IN0)), Scratch("float32", ("static", (2, 1))))
    return FusedKernel("fused_two_scratch", 1, 1, tuple(steps), scratch)


def _two_scratch_vm(fail: bool, **options: object) -> VirtualMachine:
    """main(x) = the two-scratch kernel of ``x`` (2, 4) into a fresh output."""
    asm = Assembler()
    k = asm.fused(_two_scratch(fail=fail))
    f = asm.function("main", [("x", tensor("float32", (2, 4)))])
    out = f.empty((2, 4), "float32")
    f.invoke(k, list(f.params), [out])
    f.ret(out)
    return VirtualMachine(asm.build(), **options)  # type: ignore[arg-type]  # options are VM keywords


@pytest.mark.parametrize("allocator", ["pooled", "naive"])
def test_scratch_is_allocated_before_the_steps_and_freed_after(allocator):
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    m = _two_scratch_vm(False, allocator=allocator, output_policy="copy")
    for _ in range(3):
        got = m.run(x)
        e = np.exp(x)
        np.testing.assert_allclose(got, e + x - e.sum(axis=1, keepdims=True), rtol=1e-6)
    assert m.allocator.stats.live_bytes == 0


def test_a_failing_step_after_scratch_frees_the_scratch():
    x = np.ones((2, 4), np.float32)
    with pytest.raises(KernelError, match=r"fused_two_scratch: step 2 \(add\) failed: ValueError"):
        _run_fused(_two_scratch(fail=True), [("x", tensor("float32", (2, 4)))], [x], (2, 4))
    m = _two_scratch_vm(True)
    with pytest.raises(KernelError):
        m.run(x)
    s = m.allocator.stats
    # The two scratch buffers; the (small) output is numpy's own array (vm/fresh_results.py).
    assert s.requests == 2 and s.frees == 2 and s.live_bytes == 0


def test_an_int_where_a_scratch_shape_is_expected_is_refused_at_build():
    def not_a_shape(f):
        return [f.load_int(3)]  # an int where the scratch wants a shape tuple

    # The register-kind analysis sees it before anything runs (vm/register_kinds.py).
    with pytest.raises(FormatError, match=r"input 1 %1 holds int, expected shape or shapes"):
        _centered(("input", 1), extra=not_a_shape)


HOSTILE = "x); import os; os.system('echo pwned'); ("


def _strings_in(code) -> list:
    """Every string constant of a code object and the code objects nested in it."""
    out = []
    for c in code.co_consts:
        if isinstance(c, str):
            out.append(c)
        elif hasattr(c, "co_consts"):
            out += _strings_in(c)
    return out


@pytest.mark.parametrize("scratch", [False, True])
def test_no_string_of_the_spec_reaches_the_generated_code(monkeypatch, scratch):
    from vm.fused import build_fused
    from vm.kernels import registry
    from vm.memory.allocator import NaiveAllocator

    # Even a registered kernel with a hostile name reaches the code only as a value.
    monkeypatch.setitem(registry._REGISTRY, HOSTILE, lambda attrs: np.negative)
    mid = Ref("tmp", 0) if scratch else OUT0
    fused = FusedKernel(
        HOSTILE,
        1,
        1,
        (
            FusedStep(HOSTILE, {HOSTILE: HOSTILE}, (IN0,), (mid,)),
            FusedStep(HOSTILE, {}, (mid,), (OUT0,)),
        ),
        (Scratch("float32", ("like", IN0)),) if scratch else (),
    )
    fused.validate(0, "kernel 0")
    allocator = NaiveAllocator()
    run = build_fused(fused, [], allocator)
    x, out = np.array([1, 2], np.float32), np.zeros(2, np.float32)
    run(x, out)
    assert out.tolist() == [1, 2]
    assert _strings_in(run.__code__) == []
    code = run.__code__
    if scratch:
        assert set(code.co_names) == {"k0", "k1", "n0", "free", "KERNEL_FAILURES", "fail"}
        assert set(code.co_varnames) == {"i0", "o0", "held", "t0", "e"}
        assert allocator.stats.live_bytes == 0
    else:
        assert set(code.co_names) == {"k0", "k1", "KERNEL_FAILURES", "fail"}
        assert code.co_varnames == ("i0", "o0", "e")


@pytest.mark.parametrize(
    "bad",
    [
        FusedStep("negative", {}, (Ref(HOSTILE, 0),), (OUT0,)),
        FusedStep("negative", {}, (Ref("in", HOSTILE),), (OUT0,)),
        FusedStep("negative", {}, (IN0,), (Ref("in", 0),)),  # a step may not write an input
        FusedStep("negative", {}, (IN0,), (Ref("const", 0),)),
        FusedStep("negative", {}, (HOSTILE,), (OUT0,)),
        FusedStep("negative", {}, ((IN0, HOSTILE),), (OUT0,)),
    ],
)
def test_a_hostile_ref_is_refused_by_validation_and_by_the_generator(bad):
    from vm.codegen import UnsafeSourceError
    from vm.fused import build_fused
    from vm.memory.allocator import NaiveAllocator

    fused = FusedKernel("bad", 1, 1, (bad,))
    with pytest.raises(FormatError):
        fused.validate(1, "kernel 0")
    with pytest.raises(UnsafeSourceError):
        build_fused(fused, [np.zeros(1, np.float32)], NaiveAllocator())
