"""``dynshape.testing.check_op``: every built-in op passes it, and ops whose parts disagree
(shape function against kernel, dtype rule against kernel, symbolic mode against concrete) fail
it with a message naming the op, the inputs and what disagreed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest

import dynshape
import ir
from dynshape.testing import OpCheckError, check_op

F32 = np.float32


def _f(*values: float) -> np.ndarray:
    return np.array(values, F32)


def _i(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def _scalar(value: Any, dtype: Any) -> np.ndarray:
    return np.array(value, dtype)


def _recurrent_inputs(gates: int) -> list[list[np.ndarray]]:
    """nn.lstm/gru/rnn operands, both directions (seq, batch, hidden, input): optional ones
    absent (0-d) or given, lengths 0 to seq among them, seq 0 and batch 0; the LSTM's
    initial_c and peepholes appended for 4 gates."""
    rng = np.random.default_rng(7)
    examples = []
    for (seq, batch, hidden, size), given in [
        ((3, 2, 4, 5), False),
        ((4, 3, 2, 3), True),
        ((1, 1, 3, 1), True),
        ((0, 2, 2, 2), True),
        ((2, 0, 2, 2), True),
    ]:
        dirs, gh = 2, gates * hidden

        def rand(*shape: int) -> np.ndarray:
            return (0.5 * rng.standard_normal(shape)).astype(F32)

        absent = _scalar(0, F32)
        lens = np.minimum(np.arange(batch), seq).astype(np.int32)[::-1].copy()
        ins = [rand(seq, batch, size), rand(dirs, gh, size), rand(dirs, gh, hidden)]
        ins += [rand(dirs, 2 * gh), lens, rand(dirs, batch, hidden)] if given else [absent] * 3
        ins[4] = ins[4] if given else _scalar(0, np.int32)
        if gates == 4:
            ins += [rand(dirs, batch, hidden), rand(dirs, 3 * hidden)] if given else [absent] * 2
        examples.append(ins)
    return examples


_RECURRENT_ATTRS = {
    "direction": "bidirectional",
    "layout": 0,
    "clip": st.sampled_from([None, 0.5]),
    "act_f": st.sampled_from(["sigmoid", "relu"]),
}


_X = np.arange(20, dtype=F32).reshape(4, 5)

#: check_op's arguments for the built-in ops that cannot be checked on drawn inputs alone:
#: required attributes (no default to fall back on), operands read by value (shape tensors,
#: indices in range), or operand ranks the default draw (up to 3 axes) does not reach.
EXAMPLES: dict[str, dict[str, Any]] = {
    "arange": {
        "inputs": [
            [_scalar(0, F32), _scalar(5, F32), _scalar(1, F32)],
            [_scalar(1, F32), _scalar(2, F32), _scalar(0.25, F32)],
            [_scalar(3, np.int64), _scalar(-3, np.int64), _scalar(-2, np.int64)],
            [_scalar(0, F32), _scalar(0, F32), _scalar(1, F32)],
        ],
        "attrs": {"dtype": st.sampled_from(["float32", "int64"])},
    },
    "nn.attention": {
        # (..., S_q, D) x (..., S_k, D) x (..., S_k, Dv) and a mask broadcasting to the scores:
        # heads broadcasting (GQA), S_k = 0, 0-size batch, the head split read through axes.
        "shapes": [
            [(2, 3, 4), (2, 5, 4), (2, 5, 6), (2, 3, 5)],
            [(3, 4), (5, 4), (5, 2), (5,)],
            [(2, 4, 3, 4), (2, 1, 5, 4), (2, 1, 5, 3), (2, 1, 1, 5)],
            [(1, 4), (0, 4), (0, 3), ()],
            [(0, 2, 3), (1, 4, 3), (1, 4, 2), (1, 2, 4)],
        ],
        "attrs": {"scale": st.sampled_from([1.0, 0.35]), "nan_to_zero": st.booleans()},
    },
    "nn.lstm": {"inputs": _recurrent_inputs(4), "attrs": _RECURRENT_ATTRS},
    "nn.gru": {"inputs": _recurrent_inputs(3), "attrs": _RECURRENT_ATTRS},
    "nn.rnn": {"inputs": _recurrent_inputs(1), "attrs": _RECURRENT_ATTRS},
    "argwhere": {"inputs": [[_X > 7], [np.zeros((2, 3), F32)], [_f(0, 1, 2)], [_scalar(1, F32)]]},
    "compress": {
        # masks as long as axis 0: bool, float (non-zero selects), none selected, 0-size
        "inputs": [
            [_X, _X[:, 0] > 7],
            [_f(1, -2, 3), _f(1, 0, 0.5)],
            [_X, np.zeros(4, np.bool_)],
            [_f(), np.zeros(0, np.bool_)],
        ]
    },
    "bitcast": {
        # the same width both ways: float32 <-> int32/uint32 (the drawn inputs are float32)
        "attrs": {"dtype": st.sampled_from(["int32", "uint32", "float32"])},
    },
    "unique": {
        # repeats, all distinct, one element, empty; flat and along an axis, both orders
        "inputs": [
            [_f(3, 1, 3, 2, 1)],
            [np.array([[1, 2], [1, 2], [0, 5]], F32)],
            [_f(7)],
            [_f()],
        ],
        "attrs": {"sorted": st.booleans()},
    },
    "broadcast_to": {
        "shapes": [[(5,)], [(1, 5)], [(3, 1)], [()]],
        "attrs": {"shape": st.sampled_from([[3, 5], [2, 3, 5]])},
    },
    "cast": {"attrs": {"dtype": st.sampled_from(["float32", "float64", "int64", "bool"])}},
    "clip": {"attrs": {"a_min": -1.0, "a_max": 1.5}},
    "dyn.full": {
        "inputs": [[_scalar(2.5, F32), _i(2, 3)], [_scalar(1, F32), _i()], [_scalar(0, F32), _i(0)]]
    },
    "dyn.ones": {"inputs": [[_i(2, 3)], [_i()], [_i(4, 0)]]},
    "dyn.zeros": {"inputs": [[_i(2, 3)], [_i()], [_i(4, 0)]]},
    "dyn.reshape": {"inputs": [[_X, _i(5, 4)], [_X, _i(-1)], [_X, _i(2, -1, 5)], [_X, _i(0, 5)]]},
    "dyn.resize": {
        "inputs": [[_X, _i(8, 3)], [_X, _i(4, 5)], [_X, _i(0, 7)]],
        "attrs": {"mode": st.sampled_from(["nearest", "linear", "cubic"])},
    },
    "dyn.strided_slice": {
        "inputs": [
            [_X, _i(1, 0), _i(3, 5), _i(1, 2)],
            [_X, _i(-1), _i(-5), _i(-1)],
            [_X, _i(0, 4), _i(4, 1), _i(1, 1)],
        ]
    },
    "dyn.topk": {
        "inputs": [[_X, _scalar(2, np.int64)], [_X, _scalar(0, np.int64)]],
        "attrs": {"ret_type": st.sampled_from(["both", "values", "indices"])},
    },
    "expand_dims": {"attrs": {"axis": st.sampled_from([0, 1, -1]), "num_newaxis": 2}},
    "full": {"shapes": [[()]], "attrs": {"shape": st.sampled_from([[2, 3], [], [0]])}},
    "ones": {"attrs": {"shape": st.sampled_from([[2, 3], [], [0]])}},
    "zeros": {"attrs": {"shape": st.sampled_from([[2, 3], [], [0]])}},
    "nn.avg_pool2d": {
        "shapes": [[(1, 2, 5, 5)], [(2, 1, 4, 3)]],
        "attrs": {
            "pool_size": [2, 2],
            "strides": st.sampled_from([[1, 1], [2, 1]]),
            "dilation": st.sampled_from([[1, 1], [2, 1]]),
        },
    },
    "nn.max_pool2d": {
        "shapes": [[(1, 2, 5, 5)], [(2, 1, 4, 3)]],
        "attrs": {
            "pool_size": [2, 2],
            "padding": st.sampled_from([[0, 0, 0, 0], [1, 0, 1, 0]]),
            "dilation": st.sampled_from([[1, 1], [1, 2]]),
        },
    },
    "nn.conv2d": {
        "shapes": [[(1, 2, 5, 5), (3, 2, 3, 3)], [(2, 4, 4, 3), (2, 2, 1, 2)]],
        "attrs": {"groups": st.sampled_from([1, 2]), "strides": st.sampled_from([[1, 1], [2, 1]])},
        "dtypes": ("float32", "float64"),
    },
    "nn.conv3d": {
        "shapes": [[(1, 2, 3, 4, 4), (3, 2, 2, 3, 1)], [(2, 4, 2, 3, 2), (2, 2, 1, 2, 2)]],
        "attrs": {
            "groups": st.sampled_from([1, 2]),
            "strides": st.sampled_from([[1, 1, 1], [2, 1, 2]]),
            "padding": st.sampled_from([[0, 0, 0, 0, 0, 0], [1, 0, 1, 0, 1, 0]]),
        },
        "dtypes": ("float32", "float64"),
    },
    "nn.conv2d_transpose": {
        "shapes": [[(1, 2, 3, 4), (2, 3, 3, 3)], [(2, 4, 2, 3), (4, 1, 2, 2)]],
        "attrs": {
            "groups": st.sampled_from([1, 2]),
            "strides": st.sampled_from([[1, 1], [2, 3]]),
            "padding": st.sampled_from([[0, 0, 0, 0], [1, 0, 0, 1]]),
            "output_padding": st.sampled_from([[0, 0], [1, 0]]),
        },
        "dtypes": ("float32", "float64"),
    },
    "nn.global_avg_pool2d": {"shapes": [[(1, 2, 3, 3)], [(2, 3, 1, 4)], [(1, 1, 0, 2)]]},
    "nn.global_max_pool2d": {"shapes": [[(1, 2, 3, 3)], [(2, 3, 1, 4)]]},
    "nn.pad": {"shapes": [[(2, 3)]], "attrs": {"pad_width": [[1, 0], [0, 2]], "pad_value": 1.5}},
    # numpy refuses an integer to a negative integer power (ValueError: a KernelError in the
    # VM): a fact about values, which check_op does not draw with care; floats have no such case.
    "power": {"dtypes": ("float32", "float64")},
    "repeat": {"attrs": {"repeats": st.sampled_from([0, 1, 2])}},
    "reshape": {"attrs": {"newshape": st.sampled_from([[-1], [0, -1], [-1, 1], [1, 0, 0]])}},
    "resize": {
        "shapes": [[(2, 3)], [(1, 4)], [(3, 1)]],
        "attrs": {
            "sizes": st.sampled_from([[2, 3], [4, 1], [1, 6], [0, 2]]),
            "mode": st.sampled_from(["nearest", "linear", "cubic"]),
        },
    },
    "split": {"attrs": {"indices_or_sections": st.sampled_from([1, 2, [1], [1, 2]])}},
    "strided_slice": {
        "attrs": {
            "begin": st.sampled_from([[0], [1], [-1], [0, 1]]),
            "end": st.sampled_from([[2**31 - 1], [2], [-1, 3]]),
            "strides": st.sampled_from([None, [1], [2], [-1]]),
        }
    },
    "take": {
        "inputs": [[_X, _i(3, 0, 1)], [_X, _scalar(2, np.int64)], [_X, _i()], [_X, _i(-1)]],
        "attrs": {"axis": st.sampled_from([None, 0, 1])},
    },
    "non_max_suppression": {
        # two overlapping boxes and two apart (corners in either order), two classes
        "inputs": [
            [
                np.array([[[0, 0, 2, 2], [0.1, 0.1, 2, 2], [5, 5, 3, 3], [9, 9, 10, 10]]], F32),
                np.array([[[0.9, 0.8, 0.7, 0.1], [0.2, 0.95, 0.5, 0.6]]], F32),
                _scalar(limit, np.int64),
                _scalar(0.5, F32),
                _scalar(threshold, F32),
            ]
            for limit, threshold in [(3, 0.15), (1, 0.0), (0, 0.0), (5, 0.99)]
        ],
        "attrs": {"center_point_box": st.sampled_from([0, 1])},
    },
    "scatter_nd": {
        "inputs": [
            [_X, _i(1, -1, 1).reshape(3, 1), np.ones((3, 5), F32)],
            [_X, np.array([[0, 4], [3, -5]]), _f(7, 8)],
            [_X, np.zeros((2, 0), np.int64), np.ones((2, 4, 5), F32)],
            [_X, np.zeros((0, 1), np.int64), np.ones((0, 5), F32)],
        ],
        "attrs": {"reduction": st.sampled_from(["none", "add", "mul", "max", "min"])},
    },
    "scatter_elements": {
        "inputs": [
            [_X, np.array([[3, 0], [-1, 1], [3, 3]]), np.ones((3, 2), F32)],
            [_X, np.zeros((4, 0), np.int64), np.ones((4, 0), F32)],
        ],
        "attrs": {
            "axis": st.sampled_from([0, -2]),
            "reduction": st.sampled_from(["none", "add", "mul", "max", "min"]),
        },
    },
    "dynamic_update_slice": {
        # scalar starts (in range, clamped from below and above, unsigned), one 1-d start
        # tensor, a 0-size update, a 0-d operand with no starts
        "inputs": [
            [_X, np.ones((2, 3), F32), (_scalar(1, np.int64), _scalar(1, np.int32))],
            [_X, np.ones((2, 3), F32), (_scalar(-7, np.int8), _scalar(9, np.uint64))],
            [_X, np.ones((4, 1), F32), (_i(3, 4),)],
            [_X, np.ones((0, 5), F32), (_i(2, -1),)],
            [_scalar(2, F32), _scalar(3, F32), ()],
        ]
    },
    "tile": {"attrs": {"reps": st.sampled_from([[2], [1, 3], [0, 1, 2]])}},
    "topk": {"attrs": {"k": st.sampled_from([0, 1, 2]), "ret_type": st.sampled_from(["both"])}},
}


@pytest.mark.parametrize("name", [op.name for op in ir.tensor_ops(builtin_only=True)])
def test_every_builtin_op_passes(name):
    # No built-in op is skipped: each is checked on drawn inputs, or on EXAMPLES' arguments.
    assert check_op(name, max_examples=15, **EXAMPLES.get(name, {})) > 0


def test_every_example_names_a_builtin_op():
    assert set(EXAMPLES) <= {op.name for op in ir.tensor_ops(builtin_only=True)}


# ---- ops whose parts disagree ----------------------------------------------------------------


@pytest.fixture
def custom() -> Iterator[Any]:
    """``register(name, **kw)``: dynshape.register_op, undone after the test."""
    names: list[str] = []

    def register(name: str, **kw: Any) -> None:
        dynshape.register_op(name, **kw)
        names.append(name)

    yield register
    for name in names:
        dynshape.unregister_op(name)


def _one_longer(ctx: Any, x: Any) -> Any:
    return (x[0] + 1,)


def _fails(name: str, **kw: Any) -> str:
    with pytest.raises(OpCheckError) as info:
        check_op(name, max_examples=10, **kw)
    return str(info.value)


def test_a_shape_function_longer_than_what_the_kernel_writes(custom):
    def copy_into_prefix(x, out):
        out[: len(x)] = x

    custom("wrong.longer", shape_func=_one_longer, kernel=copy_into_prefix)
    message = _fails("wrong.longer", shapes=[[(3,)]], dtypes=["float32"])
    assert message == (
        "check_op wrong.longer: the kernel did not write 1 of 4 element(s) (the first at index "
        "(3,)) of output 0 (declared float32 (4,))\n  inputs: x float32 (3,)"
    )


def test_a_returning_kernel_whose_result_is_shorter_than_declared(custom):
    custom("wrong.returns", shape_func=_one_longer, kernel=lambda x, out: x * 2)
    message = _fails("wrong.returns", shapes=[[(3,)]], dtypes=["float32"])
    assert message == (
        "check_op wrong.returns: the kernel returned a result of shape (3,), but the shape "
        "function declares (4,)\n  inputs: x float32 (3,)"
    )


def test_a_kernel_that_cannot_write_the_declared_shape(custom):
    custom("wrong.ufunc", shape_func=_one_longer, kernel=lambda x, out: np.negative(x, out=out))
    message = _fails("wrong.ufunc", shapes=[[(3,)]], dtypes=["float32"])
    assert message == (
        "check_op wrong.ufunc: the kernel raised ValueError: operands could not be broadcast "
        "together with shapes (3,) (4,)  (declared outputs: float32 (4,))\n"
        "  inputs: x float32 (3,)"
    )


def test_a_returning_kernel_of_another_dtype_kind(custom):
    custom("wrong.dtype", dtype="int64", pattern="elementwise", kernel=lambda x, out: np.sin(x))
    message = _fails("wrong.dtype", shapes=[[(2, 3)]], dtypes=["float32"])
    assert message == (
        "check_op wrong.dtype: the kernel returned a result of dtype float32, but the dtype rule "
        "declares int64\n  inputs: x float32 (2, 3)"
    )


def test_a_writing_kernel_of_another_dtype_kind(custom):
    custom(
        "wrong.dtype_out",
        dtype="int64",
        pattern="elementwise",
        kernel=lambda x, out: np.sin(x, out=out),
    )
    message = _fails("wrong.dtype_out", shapes=[[(2,)]], dtypes=["float32"])
    assert message.startswith("check_op wrong.dtype_out: the kernel raised UFuncTypeError:")
    assert "(declared outputs: int64 (2,))\n  inputs: x float32 (2,)" in message


def test_a_symbolic_mode_that_disagrees_with_the_concrete_one(custom):
    def off_symbolically(ctx, x):
        return (x[0] * 2,) if ctx.symbolic else (x[0],)

    custom("wrong.symbolic", shape_func=off_symbolically, kernel=lambda x, out: np.copyto(out, x))
    message = _fails("wrong.symbolic", shapes=[[(3,)]], dtypes=["float32"])
    assert message == (
        "check_op wrong.symbolic: the symbolic shape function (with a symbol per dim) gives "
        "(2*x_0,), which is (6,) at x_0 = 3, but the concrete one gives (3,)\n"
        "  inputs: x float32 (3,)"
    )


def test_a_symbolic_mode_that_refuses_what_the_concrete_one_accepts(custom):
    def refuses_symbols(ctx, x):
        ctx.check(x[0], "<", 0, "x.shape[0] < 0") if ctx.symbolic else None
        return x

    custom("wrong.refuses", shape_func=refuses_symbols, kernel=lambda x, out: np.copyto(out, x))
    message = _fails("wrong.refuses", shapes=[[(2,)]], dtypes=["float32"])
    assert message.startswith(
        "check_op wrong.refuses: the symbolic shape function refuses inputs the concrete one "
        "accepts: with a symbol per dim: "
    )
    assert "x.shape[0] < 0" in message and "with the dims as ints:" in message


def test_a_kernel_that_modifies_its_input(custom):
    def in_place(x, out):
        x += 1
        np.copyto(out, x)

    custom("wrong.clobbers", pattern="elementwise", kernel=in_place)
    message = _fails("wrong.clobbers", shapes=[[(2,)]], dtypes=["float32"])
    assert message == (
        "check_op wrong.clobbers: the kernel modified its input x\n  inputs: x float32 (2,)"
    )


def test_a_correct_custom_op_passes_with_drawn_attributes(custom):
    custom(
        "right.scale",
        attrs={"factor": 1.0, "flip": False},
        pattern="elementwise",
        # Not None (the input's dtype): check_op found that an int input fails in the kernel,
        # which cannot write float products into an int output.
        dtype="float",
        kernel=lambda x, out, factor, flip: np.multiply(x, -factor if flip else factor, out=out),
    )
    assert check_op("right.scale", attrs={"factor": st.floats(-2, 2)}, max_examples=10) == 10


# ---- calls that cannot work ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kw", "message"),
    [
        ("no.such", {}, "check_op: no op 'no.such' is registered"),
        (
            "sum",
            {"attrs": {"axes": 1}},
            "check_op('sum'): the op has no attribute(s) axes (its attributes: axis, keepdims, "
            "exclude)",
        ),
        (
            "clip",
            {"attrs": {"a_min": "low", "a_max": 1.0}},
            "check_op('clip'): op clip: attribute a_min='low' is ill-typed: expected a number",
        ),
        (
            "reshape",
            {},
            "check_op('reshape'): give the required attribute(s) newshape (a value or a "
            "Hypothesis strategy) in attrs=",
        ),
        (
            "dyn.ones",
            {},
            "check_op('dyn.ones'): the shape function reads shape by value; give inputs= "
            "(arrays whose values are valid for the op)",
        ),
        (
            "memory.kill",
            {},
            "check_op: 'memory.kill' is a memory-dialect op (it has no shape function)",
        ),
    ],
)
def test_calls_that_cannot_work(name, kw, message):
    with pytest.raises(ValueError) as info:
        check_op(name, **kw)
    assert str(info.value) == message


def test_no_accepted_input():
    # nn.dense needs matching inner dims, which these never have.
    message = _fails("nn.dense", shapes=st.just([(2, 3), (4, 5)]))
    assert message == (
        "check_op nn.dense: no drawn input was accepted by the op's shape function and dtype "
        "rule; give shapes=, inputs=, dtypes= or attrs= it accepts"
    )


def test_a_given_example_the_op_refuses():
    message = _fails("nn.dense", shapes=[[(2, 3), (4, 5)]], dtypes=["float32"])
    assert message.startswith(
        "check_op nn.dense: a given example is not valid for the op: nn.dense: "
    )


def test_an_in_place_kernel_that_reads_what_it_wrote(custom):
    def reverse(x, out):
        # right into a fresh output; in place, the second half reads the first half's writes
        for i in range(x.shape[0]):
            out[i] = x[x.shape[0] - 1 - i]

    same = lambda ctx, x: x  # noqa: E731
    custom("wrong.in_place", pattern="opaque", shape_func=same, kernel=reverse, in_place=True)
    message = _fails("wrong.in_place", inputs=[[np.arange(4, dtype=F32)]])
    assert message == (
        "check_op wrong.in_place: the kernel, declared in_place, gives another result when its "
        "output is its first input's array\n  inputs: x float32 (4,)"
    )
    # the same kernel, not declared in_place, passes
    custom("right.not_in_place", pattern="opaque", shape_func=same, kernel=reverse)
    assert check_op("right.not_in_place", inputs=[[np.arange(4, dtype=F32)]]) == 1
