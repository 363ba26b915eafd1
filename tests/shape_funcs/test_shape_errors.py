"""Invalid calls get the expected error in both modes.

Each row is an invalid call and a fragment of the expected message. Concretely it raises a
ShapeError naming the op and the inputs. Symbolically on the same static dims it is refuted at
compile time with the very same message. With every dim a symbol, it either fails the same way
(a fact about ranks or attributes) or is recorded as a deferred check that fails, with that
fragment, when the symbols take the row's values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from shape_cases_kit import Case, symbolise

import ir
from dynshape.inference.symbolic_context import SymbolicContext
from shape_funcs import ShapeError, concrete_shapes, get_shape_func

I64 = np.int64
F32 = np.float32
NMS_SCALARS = [np.array(3, I64), np.array(0.5, F32), np.array(0.0, F32)]
CONV = {"strides": [1, 1], "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1}
INVALID: list[tuple[str, list[Any], dict[str, Any], str]] = [
    ("add", [(2, 3), (2, 4)], {}, "cannot broadcast a.shape[1] with b.shape[1]: 3 vs 4"),
    ("add", [(2, 3), (5, 1, 4)], {}, "cannot broadcast a.shape[1] with b.shape[2]: 3 vs 4"),
    ("where", [(2,), (3,), (2,)], {}, "cannot broadcast cond.shape[0] with x.shape[0]: 2 vs 3"),
    (
        "where",
        [(2,), (1,), (3,)],
        {},
        "cannot broadcast broadcast(cond, x).shape[0] with y.shape[0]: 2 vs 3",
    ),
    ("sum", [(2, 3)], {"axis": 2}, "axis 2 is out of range for x of rank 2"),
    ("sum", [(2, 3)], {"axis": [0, -2]}, "axis -2 is repeated in axis=[0, -2]"),
    ("mean", [(2, 3)], {"axis": None, "exclude": True}, "exclude=True needs an explicit axis"),
    (
        "max",
        [(2, 0)],
        {"axis": 1},
        "expected x.shape[1] > 0 (a reduced axis must not be empty), got 0 <= 0",
    ),
    ("argmin", [(0, 3)], {}, "expected x.shape[0] > 0"),
    (
        "reshape",
        [(2, 3)],
        {"newshape": [4, -1]},
        "expected the element count of x divisible by the other dims of newshape, "
        "got 6 not divisible by 4",
    ),
    (
        "reshape",
        [(2, 3)],
        {"newshape": [4, 2]},
        "expected the element count of newshape == that of x, got 8 != 6",
    ),
    ("reshape", [(2, 3)], {"newshape": [-1, -1]}, "newshape has more than one -1 (at 0 and 1)"),
    ("reshape", [(2, 3)], {"newshape": [-2]}, "newshape[0] = -2: only 0 and -1 are special"),
    ("reshape", [(2,)], {"newshape": [2, 0]}, "newshape[1] = 0 copies x.shape[1]"),
    (
        "reshape",
        [(0, 3)],
        {"newshape": [0, -1]},
        "expected the product of the other dims of newshape != 0 (to infer -1), got 0 == 0",
    ),
    ("transpose", [(2, 3)], {"axes": [0, -2]}, "axes=[0, -2] is not a permutation"),
    ("transpose", [(2, 3)], {"axes": [0]}, "axes=[0] must list all 2 axes of x"),
    ("expand_dims", [(2, 3)], {"axis": 4}, "axis 4 is out of range for x with one more axis"),
    ("squeeze", [(2, 1)], {"axis": [0]}, "expected x.shape[0] == 1 (a squeezed axis), got 2 != 1"),
    (
        "concatenate",
        [[(2, 3), (3, 4)]],
        {"axis": 0},
        "expected data[1].shape[1] == data[0].shape[1], got 4 != 3",
    ),
    ("concatenate", [[(2, 3), (3,)]], {}, "data[1] has rank 1 but data[0] has rank 2"),
    ("concatenate", [[(), ()]], {}, "cannot concatenate rank-0 tensors"),
    ("stack", [[(2, 3), (2, 4)]], {}, "expected data[1].shape[1] == data[0].shape[1], got 4 != 3"),
    (
        "split",
        [(7, 2)],
        {"indices_or_sections": 3},
        "expected x.shape[0] divisible by 3 sections, got 7 not divisible by 3",
    ),
    ("split", [(6,)], {"indices_or_sections": 0}, "must be >= 1 sections"),
    (
        "strided_slice",
        [(4, 5)],
        {"begin": [0, 0], "end": [4, 5], "strides": [1, 0]},
        "strides[1] must not be 0",
    ),
    (
        "strided_slice",
        [(4, 5)],
        {"begin": [0, 0, 0], "end": []},
        "begin/end/strides cover 3 axes but x has rank 2",
    ),
    ("take", [(2, 3), (4,)], {"axis": 2}, "axis 2 is out of range for data of rank 2"),
    ("scatter_nd", [(2, 3), (4, 2), (4, 3)], {}, "expected indices.shape[-1] == 1"),
    ("scatter_nd", [(2, 3), (4, 1), (4, 2)], {}, "expected updates.shape[1] == data.shape[1]"),
    ("scatter_nd", [(2, 3), (4, 1), (5, 3)], {}, "expected updates.shape[0] == indices.shape[0]"),
    ("scatter_nd", [(2,), (4, 1), (4, 2, 3)], {}, "updates of rank 3 do not fit indices of rank 2"),
    ("scatter_nd", [(2,), (), ()], {}, "indices must have rank >= 1, got rank 0"),
    (
        "scatter_elements",
        [(2, 3), (2,), (2,)],
        {},
        "indices must have data's rank 2, got rank 1",
    ),
    ("scatter_elements", [(2, 3), (2, 3), (2,)], {}, "updates must have indices' rank 2"),
    ("scatter_elements", [(2, 3), (4, 3), (4, 2)], {}, "expected updates.shape[1] == indices"),
    (
        "scatter_elements",
        [(2, 3), (2, 4), (2, 4)],
        {"axis": 0},
        "expected indices.shape[1] <= data.shape[1], got 4 > 3",
    ),
    ("scatter_elements", [(), (), ()], {}, "axis 0 is out of range for data of rank 0"),
    (
        "dynamic_update_slice",
        [(4, 5), (2,), [(), ()]],
        {},
        "update must have the operand's rank 2, got rank 1",
    ),
    (
        "dynamic_update_slice",
        [(4, 5), (2, 6), [(), ()]],
        {},
        "expected update.shape[1] <= operand.shape[1], got 6 > 5",
    ),
    (
        "dynamic_update_slice",
        [(4, 5), (2, 3), [()]],
        {},
        "1 start indices for an operand of rank 2 (one scalar per axis)",
    ),
    (
        "dynamic_update_slice",
        [(4, 5), (2, 3), [(3,)]],
        {},
        "expected start_indices[0].shape[0] == rank(operand), got 3 != 2",
    ),
    (
        "dynamic_update_slice",
        [(4, 5), (2, 3), [(2,), ()]],
        {},
        "start_indices must be 2 scalars (one per axis of the operand) or one 1-d tensor of 2 "
        "elements, got tensors of ranks [1, 0]",
    ),
    ("tile", [(2,)], {"reps": [-1]}, "reps[0] must be >= 0, got -1"),
    ("repeat", [(2,)], {"repeats": -2}, "repeats must be >= 0, got -2"),
    (
        "broadcast_to",
        [(3,)],
        {"shape": [2, 4]},
        "cannot broadcast x.shape[0] with shape[1]: 3 vs 4",
    ),
    (
        "broadcast_to",
        [(2,)],
        {"shape": [1]},
        "expected x.shape[0] == 1 (to broadcast to shape[0] = 1), got 2 != 1",
    ),
    ("broadcast_to", [(2, 2)], {"shape": [2]}, "cannot broadcast x of rank 2 to a shape of rank 1"),
    ("nn.batch_flatten", [()], {}, "x must have rank >= 1, got rank 0"),
    ("nn.pad", [(2, 3)], {"pad_width": [[1, 1]]}, "pad_width has 1 pairs but x has rank 2"),
    ("nn.pad", [(2,)], {"pad_width": [[1, -1]]}, "pad_width[0] = [1, -1] must not be negative"),
    ("zeros", [], {"shape": [2, -1]}, "shape[1] must be >= 0, got -1"),
    ("full", [(2,)], {"shape": [3]}, "fill_value must be a scalar, got shape ("),
    ("arange", [np.array(0.0), np.array(5.0), np.array(0.0)], {}, "step must not be 0"),
    (
        "arange",
        [np.array(0.0), np.array([5.0]), np.array(1.0)],
        {},
        "stop must be a scalar, got shape (1,)",
    ),
    (
        "dyn.reshape",
        [(2, 3), np.array([5, -1], I64)],
        {},
        "expected the element count of x divisible by the other dims of newshape, "
        "got 6 not divisible by 5",
    ),
    ("dyn.reshape", [(2, 3), np.array([[6]], I64)], {}, "newshape must be a 1-d integer tensor"),
    ("dyn.zeros", [np.array([2, -3], I64)], {}, "shape[1] must be >= 0, got -3"),
    ("dyn.full", [(1,), np.array([2], I64)], {}, "fill_value must be a scalar"),
    (
        "dyn.strided_slice",
        [(4,), np.array([0], I64), np.array([4], I64), np.array([0], I64)],
        {},
        "strides[0] must not be 0",
    ),
    ("topk", [(2, 3)], {"k": 5}, "expected k <= x.shape[1], got 5 > 3"),
    ("topk", [(2, 3)], {"k": -1}, "k must be >= 0, got -1"),
    ("topk", [(2, 3)], {"k": 1, "axis": 2}, "axis 2 is out of range for x of rank 2"),
    ("dyn.topk", [(2, 3), np.array(4, I64)], {"axis": 0}, "expected k <= x.shape[0], got 4 > 2"),
    ("dyn.topk", [(2, 3), np.array([1], I64)], {}, "k must be a scalar tensor"),
    *[
        ("non_max_suppression", [np.zeros(b, F32), np.zeros(s, F32), *scalars], attrs, fragment)
        for b, s, scalars, attrs, fragment in [
            ((1, 2, 4), (1, 1, 3), NMS_SCALARS, {}, "expected boxes.shape[1] == scores.shape[2]"),
            ((2, 3, 4), (1, 1, 3), NMS_SCALARS, {}, "expected boxes.shape[0] == scores.shape[0]"),
            ((1, 3, 5), (1, 1, 3), NMS_SCALARS, {}, "expected boxes.shape[2] == 4"),
            ((1, 3), (1, 1, 3), NMS_SCALARS, {}, "boxes must have rank 3"),
            ((1, 3, 4), (1, 3), NMS_SCALARS, {}, "scores must have rank 3"),
            ((1, 3, 4), (1, 1, 3), NMS_SCALARS, {"center_point_box": 2}, "must be 0 or 1"),
            (
                (1, 3, 4),
                (1, 1, 3),
                [np.array([1, 2], I64), *NMS_SCALARS[1:]],
                {},
                "expected max_output_boxes_per_class.shape[0] == 1",
            ),
            (
                (1, 3, 4),
                (1, 1, 3),
                [np.zeros((1, 1), I64), *NMS_SCALARS[1:]],
                {},
                "max_output_boxes_per_class must be a scalar or hold one value",
            ),
            (
                (1, 3, 4),
                (1, 1, 3),
                [NMS_SCALARS[0], np.array(1.5, F32), NMS_SCALARS[2]],
                {},
                "iou_threshold must be in [0, 1], got 1.5",
            ),
        ]
    ],
    ("nn.dense", [(2, 3), (4, 5)], {}, "expected data.shape[1] == weight.shape[1], got 3 != 5"),
    ("nn.dense", [(2, 3), (3,)], {}, "weight must have rank 2, got rank 1"),
    ("nn.matmul", [(2, 3), (4, 5)], {}, "expected a.shape[1] == b.shape[0], got 3 != 4"),
    ("nn.matmul", [(3,), (4,)], {}, "expected a.shape[0] == b.shape[0], got 3 != 4"),
    (
        "nn.matmul",
        [(2, 2, 3), (3, 3, 4)],
        {},
        "cannot broadcast a.shape[0] with b.shape[0]: 2 vs 3",
    ),
    ("nn.matmul", [(), (3,)], {}, "a must have rank >= 1, got rank 0"),
    (
        "nn.batch_matmul",
        [(2, 3, 4), (3, 5, 4)],
        {},
        "cannot broadcast x.shape[0] with y.shape[0]: 2 vs 3",
    ),
    (
        "nn.batch_matmul",
        [(2, 3, 4), (2, 4, 5)],
        {"transpose_b": True},
        "expected x.shape[2] == y.shape[2], got 4 != 5",
    ),
    ("nn.bias_add", [(2, 3), (4,)], {}, "expected bias.shape[0] == data.shape[1], got 4 != 3"),
    (
        "nn.layer_norm",
        [(2, 3), (3,), (2,)],
        {},
        "expected beta.shape[0] == data.shape[1], got 2 != 3",
    ),
    ("nn.softmax", [(2, 3)], {"axis": 2}, "axis 2 is out of range for x of rank 2"),
    (
        "nn.conv2d",
        [(1, 3, 8, 8), (4, 2, 3, 3)],
        CONV,
        "expected data.shape[1] == weight.shape[1], got 3 != 2",
    ),
    (
        "nn.conv2d",
        [(1, 4, 8, 8), (3, 2, 3, 3)],
        {**CONV, "groups": 2},
        "expected weight.shape[0] divisible by groups=2, got 3 not divisible by 2",
    ),
    (
        "nn.conv2d",
        [(1, 1, 2, 2), (1, 1, 3, 3)],
        CONV,
        "expected the padded height >= the dilated window height, got 2 < 3",
    ),
    (
        "nn.conv2d",
        [(1, 1, 5, 5), (1, 1, 3, 3)],
        {**CONV, "dilation": [1, 3]},
        "expected the padded width >= the dilated window width, got 5 < 7",
    ),
    (
        "nn.conv2d",
        [(1, 1, 5, 5), (1, 1, 3, 3)],
        {**CONV, "padding": [1, 1, 1]},
        "padding must be [top, left, bottom, right] or [h, w]",
    ),
    (
        "nn.conv2d",
        [(1, 1, 5, 5), (1, 1, 3, 3)],
        {**CONV, "strides": [0, 1]},
        "strides must be >= 1, got [0, 1]",
    ),
    (
        "nn.max_pool2d",
        [(1, 1, 2, 5)],
        {"pool_size": [3, 3]},
        "expected the padded height >= the dilated window height, got 2 < 3",
    ),
    (
        "nn.max_pool2d",
        [(1, 1, 4, 5)],
        {"pool_size": [2, 2], "dilation": [4, 1]},
        "expected the padded height >= the dilated window height, got 4 < 5",
    ),
    (
        "nn.avg_pool2d",
        [(1, 1, 4, 5)],
        {"pool_size": [2, 2], "dilation": [0, 1]},
        "dilation must be >= 1, got [0, 1]",
    ),
    (
        "nn.conv2d_transpose",
        [(1, 3, 4, 4), (4, 2, 3, 3)],
        {},
        "expected data.shape[1] == weight.shape[0], got 3 != 4",
    ),
    (
        "nn.conv2d_transpose",
        [(1, 3, 4, 4), (3, 2, 3, 3)],
        {"groups": 2},
        "expected weight.shape[0] divisible by groups=2, got 3 not divisible by 2",
    ),
    (
        "nn.conv2d_transpose",
        [(1, 1, 0, 4), (1, 1, 3, 3)],
        {},
        "expected data.shape[2] > 0 (a transposed convolution needs pixels)",
    ),
    (
        "nn.conv2d_transpose",
        [(1, 1, 1, 2), (1, 1, 2, 2)],
        {"padding": [1, 0, 2, 0]},
        "expected the output height >= 0 (padding crops at most all of it), got -1 < 0",
    ),
    (
        "nn.conv2d_transpose",
        [(1, 1, 2, 2), (1, 1, 2, 2)],
        {"output_padding": [0, -1]},
        "output_padding must be >= 0, got [0, -1]",
    ),
    ("nn.avg_pool2d", [(1, 1, 5, 5)], {"pool_size": [3]}, "pool_size must have 2 values"),
    ("nn.global_max_pool2d", [(1, 1, 0, 5)], {}, "expected data.shape[2] > 0"),
    ("nn.global_avg_pool2d", [(1, 5)], {}, "data must have rank 4, got rank 2"),
]


def _concrete_error(op: str, inputs: list[Any], attrs: dict[str, Any]) -> str:
    with pytest.raises(ShapeError) as info:
        concrete_shapes(op, inputs, attrs)
    return str(info.value)


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "fragment"),
    INVALID,
    ids=[f"{row[0]}-{i}" for i, row in enumerate(INVALID)],
)
def test_invalid_call_fails_in_both_modes(
    op: str, inputs: list[Any], attrs: dict[str, Any], fragment: str
) -> None:
    message = _concrete_error(op, inputs, attrs)
    assert message.startswith(f"{op}: ")
    assert fragment in message
    assert "(inputs: " in message

    with pytest.raises(ShapeError) as info:
        SymbolicContext().shapes(op, inputs, attrs)
    assert str(info.value) == message, "compile time words it as run time does"

    sf = get_shape_func(op)
    sym = symbolise(Case(inputs, attrs, None), [True], sf.data_dependent, known_values=True)
    ctx = SymbolicContext()
    try:
        ctx.shapes(op, sym.inputs, attrs)
    except ShapeError as e:  # a fact about ranks, axes or attributes: symbols do not matter
        assert fragment in str(e)
        return
    failures = [f for f in (c.failure(sym.binding) for c in ctx.deferred) if f is not None]
    assert any(fragment in f for f in failures), failures


def test_error_messages_name_the_op_the_fact_and_the_inputs() -> None:
    assert _concrete_error("add", [(2, 3), (2, 4)], {}) == (
        "add: cannot broadcast a.shape[1] with b.shape[1]: 3 vs 4 (inputs: a (2, 3), b (2, 4))"
    )
    assert _concrete_error("dyn.reshape", [(2, 3), np.array([5, -1])], {}) == (
        "dyn.reshape: expected the element count of x divisible by the other dims of newshape, "
        "got 6 not divisible by 5 (inputs: x (2, 3), newshape = [5, -1])"
    )
    assert _concrete_error("concatenate", [[(2, 3), (2, 4)]], {"axis": 0}) == (
        "concatenate: expected data[1].shape[1] == data[0].shape[1], got 4 != 3 "
        "(inputs: data [(2, 3), (2, 4)])"
    )


def test_a_malformed_call_is_a_shape_error_naming_the_op() -> None:
    message = _concrete_error("add", [(2, 3)], {})
    assert message.startswith("add: bad call of the shape function: TypeError")
    assert _concrete_error("reshape", [(2, 3)], {"newshape": [6], "bogus": 1}).startswith(
        "reshape: bad call of the shape function: TypeError"
    )


def test_symbolic_structure_is_refuted_at_compile_time() -> None:
    n = ir.sym("n")
    with pytest.raises(ShapeError) as info:
        SymbolicContext().shapes("concatenate", [[(n, 3), (n + 1, 3)]], {"axis": 1})
    assert str(info.value) == (
        "concatenate: expected data[1].shape[0] == data[0].shape[0], got n + 1 != n "
        "(inputs: data [(n, 3), (n + 1, 3)])"
    )
    with pytest.raises(ShapeError, match=r"cannot broadcast a.shape\[0\] with b.shape\[0\]"):
        SymbolicContext().shapes("add", [(n + 2,), (n + 3,)], {})
    with pytest.raises(ShapeError, match="got 2\\*n \\+ 1 not divisible by 2"):
        SymbolicContext().shapes("split", [(2 * n + 1,)], {"indices_or_sections": 2})


def test_a_deferred_check_reports_like_the_run_time() -> None:
    n, m = ir.sym("n"), ir.sym("m")
    ctx = SymbolicContext()
    ctx.shapes("add", [(n, 3), (m, 3)], {})
    [check] = ctx.deferred
    assert check.kind == "broadcast" and check.op_name == "add"
    assert check.description == "add: a.shape[0] with b.shape[0]: n == m or n == 1 or m == 1"
    assert check.failure({n: 2, m: 2}) is None
    assert check.failure({n: 3, m: 2}) == (
        "add: cannot broadcast a.shape[0] with b.shape[0]: 3 vs 2 "
        "(inputs: a (n, 3), b (m, 3); m = 2, n = 3)"
    )
    with pytest.raises(ValueError, match="no value for m"):
        check.holds({n: 3})
