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
    m = VirtualMachine(asm.build(), output_policy="transfer")
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

    if not shape_funcs.has_shape_func("sum"):
        pytest.skip("sum has no shape function yet")
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
    ],
)
def test_fused_validation(steps, scratch, message):
    asm = Assembler()
    asm.fused(FusedKernel("bad", 1, 1, steps, scratch))
    f = asm.function("main", [])
    f.ret(f.load_int(0))
    with pytest.raises(FormatError, match=message):
        asm.build()
