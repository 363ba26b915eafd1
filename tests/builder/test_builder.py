"""The model-building API: programs built with numpy-like Python, compiled and compared with
numpy; build-time errors with their messages and the user's line."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dynshape
import dynshape.builder as ds
import ir
from dynshape.builder.ops import builder_name
from dynshape.errors import BuildError

RNG = np.random.default_rng(7)

# Annotations of traced functions. Written as variables because linters read string literals
# inside an annotation as forward references (ruff F821); inline ones work the same at run time.
N4 = ds.Tensor[("n", 4), "float32"]
M4 = ds.Tensor[("m", 4)]
N = ds.Tensor[("n",)]
N3 = ds.Tensor[("n", 3)]


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def run(program: ds.Program, *args: np.ndarray) -> Any:
    return dynshape.VirtualMachine(dynshape.compile(program)).run(*args)


def next_line() -> int:
    """The line after the caller's current line (where the failing call is written)."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno + 1


# ---- building and running ---------------------------------------------------------------


def test_mlp_with_a_symbolic_batch_prints_compiles_and_runs() -> None:
    x = ds.tensor("x", ("batch", 8), "float32")
    w1, b1 = ds.tensor("w1", (16, 8)), ds.tensor("b1", (16,))
    w2 = ds.tensor("w2", (16, 3))
    h = ds.relu(ds.dense(x, w1) + b1)
    y = ds.softmax(h @ w2, axis=-1)
    assert y.shape == (ir.sym("batch"), 3) and y.dtype == "float32"
    program = ds.build(y, [x, w1, b1, w2], ranges={"batch": (1, 4096)})
    text = str(program)
    assert text.startswith(
        "def @main(%x: Tensor[(batch, 8), float32], %w1: Tensor[(16, 8), float32]"
    )
    assert "where batch in [1, 4096]" in text and program.ranges == {"batch": (1, 4096)}
    assert ir.structurally_equal(ir.parse(text), program)
    exe = dynshape.compile(program)
    params = rand(16, 8), rand(16), rand(16, 3)
    for batch in (1, 5):
        xv = rand(batch, 8)
        logits = np.maximum(xv @ params[0].T + params[1], 0) @ params[2]
        e = np.exp(logits - logits.max(-1, keepdims=True))
        got = dynshape.VirtualMachine(exe).run(xv, *params)
        np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-5)


def test_nodes_carry_the_python_line_as_span() -> None:
    line = next_line()
    x = ds.tensor("x", ("n",))
    y = ds.exp(x) * 2
    assert x.expr.span is not None and x.expr.span.line == line
    assert y.expr.span == ir.Span(line + 1, 9, source=__file__)
    assert y.expr.args[0].span.line == line + 1  # type: ignore[attr-defined]


def test_operators_and_scalar_promotion() -> None:
    x, y = ds.tensor("x", ("n", 3)), ds.tensor("y", (3,))
    i = ds.tensor("i", ("n",), "int32")
    outs = [
        x + y, x - 1, 2 - x, x * y, x / 2, 1 / (x * x + 1), -x, x ** 2, abs(x),
        x > 0, x <= y, (x == y) | (x != 0), ~(x < 0) & (x >= -1),
        i + 1, i * 2, i // 2, i % 3, x @ y.reshape(3, 1),
    ]  # fmt: skip
    assert [o.dtype for o in outs[9:13]] == ["bool"] * 4
    assert outs[13].expr.args[1].value.dtype == np.int32  # type: ignore[attr-defined]
    assert outs[1].expr.args[1].value.dtype == np.float32  # type: ignore[attr-defined]
    xv, yv, iv = rand(4, 3), rand(3), np.arange(4, dtype=np.int32)
    want = [
        xv + yv, xv - 1, 2 - xv, xv * yv, xv / 2, 1 / (xv * xv + 1), -xv, xv**2, abs(xv),
        xv > 0, xv <= yv, (xv == yv) | (xv != 0), ~(xv < 0) & (xv >= -1),
        iv + 1, iv * 2, iv // 2, iv % 3, xv @ yv.reshape(3, 1),
    ]  # fmt: skip
    got = run(ds.build(tuple(outs), [x, y, i]), xv, yv, iv)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(g, w, rtol=1e-5, err_msg=f"output {k}")


@pytest.mark.parametrize(
    "key",
    [
        (1,),
        (-1,),
        (slice(1, 3),),
        (slice(None), slice(1, 4)),
        (slice(None), slice(None, None, -2)),
        (Ellipsis, 2),
        (Ellipsis, slice(1, None), None),
        (None, 0, slice(None), -1),
        (slice(None, None, 2), None, 3, slice(None, 2)),
        (slice(-2, None), slice(5, 1, -1), slice(None, None, 3)),
    ],
)
def test_indexing_matches_numpy(key: tuple[Any, ...]) -> None:
    x = ds.tensor("x", ("n", 6, 5))
    xv = rand(4, 6, 5)
    np.testing.assert_array_equal(run(ds.build(x[key], [x]), xv), xv[key])


def test_slices_have_exact_symbolic_types() -> None:
    x = ds.tensor("x", ("n", 8))
    n = ir.sym("n")
    assert x[:, 1:3].shape == (n, 2)
    assert x[1:].shape[1] == 8 and x[0].shape == (8,) and x[:, -1].shape == (n,)
    assert x[None, ..., None].shape == (1, n, 8, 1)


def test_tensor_indices_and_masks() -> None:
    x = ds.tensor("x", ("n", 3))
    idx = ds.tensor("idx", ("k",), "int64")
    program = ds.build((x[idx], x[:, idx], x[x > 0] * 2, x[x[:, 0] > 0]), [x, idx])
    xv, iv = rand(5, 3), np.array([2, 0, 2], np.int64)
    got = run(program, xv, iv)
    want = [xv[iv], xv[:, iv], xv[xv > 0] * 2, xv[xv[:, 0] > 0]]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    # a mask selects with compress, never through an index tensor
    assert "compress(" in str(program) and "argwhere" not in str(program)


def test_mask_of_a_vector_and_its_length() -> None:
    v, m = ds.tensor("v", ("n",)), ds.tensor("m", ("k",), "bool")
    program = ds.build((v[m] + 1, v[v < 0]), [v, m])
    vv = rand(7)
    mv = np.array([1, 0, 0, 1, 1, 0, 1], bool)
    got = run(program, vv, mv)
    for g, w in zip(got, [vv[mv] + 1, vv[vv < 0]], strict=True):
        np.testing.assert_array_equal(g, w)
    with pytest.raises(Exception, match=r"mask\.shape\[0\] == x\.shape\[0\]"):
        run(program, vv, mv[:5])  # numpy refuses a shorter mask too


def test_layout_reduction_and_cast_methods() -> None:
    x = ds.tensor("x", ("n", 2, 3))
    outs = (
        x.reshape(-1, 3), x.reshape((0, 6)), x.T, x.transpose(1, 0, 2), x.astype("int32"),
        x.sum(), x.sum(axis=1), x.mean(axis=(1, 2), keepdims=True), x.max(axis=-1),
        x.min(0), x.flatten(), ds.sum(x, 2), ds.argmax(x, axis=1),
    )  # fmt: skip
    xv = rand(3, 2, 3)
    want = (
        xv.reshape(-1, 3), xv.reshape(3, 6), xv.T, xv.transpose(1, 0, 2), xv.astype(np.int32),
        xv.sum(), xv.sum(1), xv.mean((1, 2), keepdims=True), xv.max(-1), xv.min(0),
        xv.reshape(-1), xv.sum(2), xv.argmax(1),
    )  # fmt: skip
    for g, w in zip(run(ds.build(outs, [x]), xv), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5)


def test_reductions_of_bool_and_int_follow_numpy_dtypes() -> None:
    mask = ds.tensor("mask", ("n", 3), "bool")
    counts = ds.tensor("counts", ("n", 3), "int32")
    outs = (mask.max(axis=1), mask.min(), mask.argmax(axis=0), counts.mean(axis=1), counts.mean())
    rng = np.random.default_rng(3)
    mv, cv = rng.random((4, 3)) > 0.5, rng.integers(-9, 9, (4, 3)).astype(np.int32)
    want = (mv.max(1), mv.min(), mv.argmax(0), cv.mean(1), cv.mean())
    for g, w in zip(run(ds.build(outs, [mask, counts]), mv, cv), want, strict=True):
        assert np.asarray(g).dtype == w.dtype  # bool, bool, int64, float64, float64
        np.testing.assert_array_equal(g, w)


def test_nn_and_creation_functions() -> None:
    x = ds.tensor("x", ("n", 4))
    g, b = ds.tensor("g", (4,)), ds.tensor("b", (4,))
    img = ds.tensor("img", ("n", 2, "h", "w"))
    k = ds.tensor("k", (3, 2, 3, 3))
    values, indices = ds.topk(x, k=2, axis=1)
    outs = (
        ds.layer_norm(x, g, b), ds.exp(x), ds.tanh(x), ds.sigmoid(x), ds.erf(x),
        ds.sqrt(x * x), ds.concatenate([x, x * 2], axis=1), ds.stack([x, x]),
        ds.where(x > 0, x, 0.0), ds.argwhere(x > 0), ds.take(x, ds.argmax(x, axis=0), axis=0),
        values, indices, ds.zeros((2, 3)), ds.full((2,), 7, "int32"), ds.arange(5),
        ds.arange(1, 7, 2, dtype="int64"), ds.shape_of(x),
        ds.conv2d(img, k, padding=[1, 1, 1, 1]), ds.max_pool2d(img, pool_size=[2, 2], strides=[2, 2]),
    )  # fmt: skip
    xv, gv, bv = rand(3, 4), rand(4), rand(4)
    iv, kv = rand(3, 2, 6, 4), rand(3, 2, 3, 3)
    got = run(ds.build(outs, [x, g, b, img, k]), xv, gv, bv, iv, kv)
    mu, var = xv.mean(-1, keepdims=True), xv.var(-1, keepdims=True)
    import math

    order = np.argsort(-xv, axis=1, kind="stable")[:, :2]
    padded = np.pad(iv, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((3, 3, 6, 4), np.float32)
    for i in range(6):
        for j in range(4):
            conv[:, :, i, j] = np.einsum("nchw,ochw->no", padded[:, :, i : i + 3, j : j + 3], kv)
    want = (
        (xv - mu) / np.sqrt(var + 1e-5) * gv + bv, np.exp(xv), np.tanh(xv),
        1 / (1 + np.exp(-xv)), np.vectorize(math.erf)(xv), np.abs(xv),
        np.concatenate([xv, xv * 2], 1), np.stack([xv, xv]), np.where(xv > 0, xv, 0),
        np.argwhere(xv > 0), np.take(xv, xv.argmax(0), axis=0),
        np.take_along_axis(xv, order, 1), order, np.zeros((2, 3)), np.full(2, 7),
        np.arange(5), np.arange(1, 7, 2), np.array(xv.shape),
        conv, iv.reshape(3, 2, 3, 2, 2, 2).max(axis=(3, 5)),
    )  # fmt: skip
    for n, (gv_, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(gv_, w, rtol=1e-4, atol=1e-5, err_msg=f"output {n}")


def test_every_op_of_the_catalogue_has_a_builder_function() -> None:
    missing = [op.name for op in ir.tensor_ops() if not hasattr(ds, builder_name(op.name))]
    assert not [m for m in missing if not m.startswith(("test_custom.", "example."))]
    assert ds.relu.__doc__ is not None and ds.relu.__doc__.startswith("max(x, 0)\n")


# ---- control flow -------------------------------------------------------------------------


def test_cond_builds_an_if_and_joins_the_branch_types() -> None:
    x = ds.tensor("x", ("n", 2))
    y = ds.cond(x.sum() > 0, lambda: x * 2, lambda: ds.concatenate([x, x]))
    assert y.shape[1] == 2 and ir.is_anonymous(y.shape[0])
    pair = ds.cond(x.sum() > 0, lambda: (x, x + 1), lambda: (x - 1, x))
    program = ds.build((y, *pair), [x])
    assert "if (" in str(program)
    for xv in (np.ones((3, 2), np.float32), -np.ones((2, 2), np.float32)):
        got = run(program, xv)
        pos = xv.sum() > 0
        want = [
            xv * 2 if pos else np.concatenate([xv, xv]),
            *((xv, xv + 1) if pos else (xv - 1, xv)),
        ]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)


def test_while_loop_with_growing_values_and_captured_weights() -> None:
    x = ds.tensor("x", ("n", 4))
    w = ds.tensor("w", (4, 4))
    steps = ds.tensor("steps", (), "int32")

    def body(i: Any, h: Any, rows: Any) -> tuple[Any, Any, Any]:
        return i + 1, ds.tanh(h @ w), ds.concatenate([rows, h[:1]])

    _, h, rows = ds.while_loop(lambda i, h, rows: i < steps, body, (0, x, x[:0]))
    assert h.shape == (ir.sym("n"), 4) and ir.is_anonymous(rows.shape[0])
    program = ds.build((h, rows), [x, w, steps])
    text = str(program)
    assert "def @loop(" in text and "-> (int32, Tensor[(n, 4), float32], Tensor[(?, 4)" in text
    wv = rand(4, 4) / 2
    for n, k in ((3, 0), (2, 4)):
        xv = rand(n, 4)
        hv, acc = xv, xv[:0]
        for _ in range(k):
            hv, acc = np.tanh(hv @ wv), np.concatenate([acc, hv[:1]])
        got = run(program, xv, wv, np.int32(k))
        np.testing.assert_allclose(got[0], hv, rtol=1e-5)
        np.testing.assert_allclose(got[1], acc, rtol=1e-5)


def test_while_loop_of_one_value() -> None:
    x = ds.tensor("x", ("n",))
    y = ds.while_loop(lambda v: v.sum() < 100, lambda v: v * 2, x)
    xv = np.array([1, 2], np.float32)
    np.testing.assert_array_equal(run(ds.build(y, [x]), xv), [64, 128])


# ---- the decorator ------------------------------------------------------------------------


def test_function_decorator_traces_runs_and_inlines() -> None:
    @ds.function(ranges={"n": (0, 64)})
    def f(x: N4, b: ds.Tensor[(4,)]) -> Any:
        return ds.relu(x + b)

    assert "where n in [0, 64]" in str(f.program) and f.program.inputs == ("x", "b")
    xv, bv = rand(3, 4), rand(4)
    np.testing.assert_array_equal(f(xv, bv), np.maximum(xv + bv, 0))

    @ds.function
    def g(x: M4) -> Any:
        return f(x, ds.constant_of(np.ones(4, np.float32))) * 2

    np.testing.assert_array_equal(g(xv), np.maximum(xv + 1, 0) * 2)


# ---- errors at the user's line ------------------------------------------------------------


def _raises(fn: Callable[[], Any], line: int, message: str) -> BuildError:
    with pytest.raises(BuildError) as info:
        fn()
    error = info.value
    assert error.span is not None and error.span.source == __file__
    assert error.span.line == line, str(error)
    assert message in error.message, error.message
    assert str(error).startswith(f"{__file__}:{line}:")
    return error


def test_adding_incompatible_shapes_fails_at_the_line() -> None:
    x, y = ds.tensor("x", ("batch", 3)), ds.tensor("y", ("batch", 4))
    line = next_line()
    error = _raises(lambda: x + y, line, "add: cannot broadcast a.shape[1] with b.shape[1]: 3 vs 4")
    assert str(error) == (
        f"{__file__}:{line}:29: add: cannot broadcast a.shape[1] with b.shape[1]: 3 vs 4 "
        "(inputs: a (batch, 3), b (batch, 4))\n"
        '  error = _raises(lambda: x + y, line, "add: cannot broadcast a.shape[1] with '
        'b.shape[1]: 3 vs 4")\n'
        "                          ^"
    )


def test_wrong_calls_fail_at_the_line() -> None:
    x = ds.tensor("x", ("n", 4))
    i = ds.tensor("i", ("n", 4), "int32")
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: ds.add(x), "op add takes 2 arguments (a, b), got 1"),
        (lambda: ds.exp(x, x), "op exp takes 1 argument (x), got 2"),
        (lambda: ds.softmax(x, axes=1), "op nn.softmax has no attribute 'axes'"),
        (lambda: x + i, "add: inputs must have the same dtype, got float32, int32"),
        (lambda: i + 1.5, "1.5 is not a whole number: it cannot be a int32 constant"),
        (lambda: x @ ds.tensor("w", (3, 2)), "nn.matmul"),
        (lambda: x.reshape("n", 4), "reshape takes ints"),
        (lambda: x[0, 0, 0], "too many indices for a tensor of rank 2: 3"),
        (lambda: x[:, 7], "index 7 is out of bounds for axis 1 with size 4"),
        (lambda: x["a"], "cannot index a tensor with 'a'"),
        (lambda: bool(x > 0), "use ds.cond"),
        (lambda: list(x), "cannot iterate"),
        (lambda: ds.cond(x, lambda: x, lambda: x), "predicate must be a scalar bool"),
        (lambda: ds.cond(x.sum() > 0, lambda: x, lambda: i), "dtype"),
        (lambda: ds.tensor("z", ("n", -1)), "bad dim -1"),
        (lambda: ds.tensor("z", ("n",), "flaot32"), "bad dtype 'flaot32'"),
    ]
    for fn, message in cases:
        _raises(fn, inspect.getsourcelines(fn)[1], message)


def test_loop_errors_point_at_the_loop_body() -> None:
    x = ds.tensor("x", ("n",))
    line = next_line()
    bad_body = lambda v: ds.concatenate([v, ds.tensor("u", (3, 2))])  # noqa: E731
    _raises(lambda: ds.while_loop(lambda v: v.sum() < 1, bad_body, x), line, "concatenate")
    _raises(
        lambda: ds.while_loop(lambda v: v.sum() < 1, lambda v: v.astype("int32"), x),
        line + 3,
        "changes loop value 0 from Tensor[(n,), float32] to Tensor[(n,), int32]",
    )
    _raises(lambda: ds.while_loop(lambda v: v, lambda v: v, x), line + 7, "scalar bool")


def test_build_errors() -> None:
    x, y = ds.tensor("x", ("n",)), ds.tensor("y", ("n",))
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: ds.build(x + y, [x]), "the outputs use input 'y' (declared at "),
        (lambda: ds.build(x, [x, x]), "input 'x' is listed twice"),
        (lambda: ds.build(x, [x * 2]), "must be Values made by ds.tensor"),
        (lambda: ds.build(x, [x], ranges={"m": (1, 2)}), "symbol m does not occur"),
        (lambda: ds.build(x, [x], ranges={"n": (5, 2)}), "n"),
        (lambda: ds.build(3, [x]), "outputs must be a Value"),
    ]
    for fn, message in cases:
        _raises(fn, inspect.getsourcelines(fn)[1], message)


def test_decorator_errors() -> None:
    line = next_line()

    def no_annotation(x):  # type: ignore[no-untyped-def]
        return x

    _raises(lambda: ds.function(no_annotation), line + 4, "needs an annotation ds.Tensor")

    @ds.function
    def f(x: N) -> Any:
        return x

    _raises(lambda: f(1, 2), line + 10, "f takes 1 inputs (x), got 2")

    line = next_line()

    def wrong(x: N3, y: N4) -> Any:
        return x * y

    _raises(lambda: ds.function(wrong), line + 2, "multiply: cannot broadcast")
