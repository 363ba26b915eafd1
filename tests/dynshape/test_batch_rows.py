"""prove_row_split: text in, the split (or the refusal's reason) out; each answer checked
against the compiled program (a proven split gives the rows the whole batch gives; a refused
one has a counterexample where a cut would have been wrong)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pass_helpers import parse_typed

import dynshape
from dynshape.analysis.batch_rows import NotRowWise, RowSplit, prove_row_split

W = "const([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [1.0, 1.0, -2.0], [0.1, 0.2, 0.3]], float32)"

#: (program, input row axes, result row axes); every input's rows are ``n`` rows of random data.
PROVEN = [
    ("def @main(%x: Tensor[(n, 4), float32]) { nn.relu(%x) }", (0,), (0,)),
    (f"def @main(%x: Tensor[(n, 4), float32]) {{ nn.dense(%x, transpose({W})) }}", (0,), (0,)),
    (
        f"""def @main(%x: Tensor[(n, 5, 4), float32]) {{
          %0 = nn.matmul(%x, {W});
          %1 = nn.softmax(%0, axis=2);
          %2 = sum(%1, axis=[1]);
          (%2, %0)
        }}""",
        (0,),
        (0, 0),
    ),
    (  # the rows move: a transpose, a reshape merging them with the next axis and back
        """def @main(%x: Tensor[(2, n, 3), float32]) {
          %0 = transpose(%x, axes=[1, 0, 2]);
          %1 = reshape(%0, newshape=[n*2, 3]);
          %2 = cumsum(%1, axis=1);
          %3 = reshape(%2, newshape=[n, 6]);
          mean(%3, axis=[1], keepdims=True)
        }""",
        (1,),
        (0,),
    ),
    (  # a gather of embedding rows by token ids; a constant fill over the batch
        """def @main(%ids: Tensor[(n, 3), int64]) {
          %0 = take(const([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], float32), %ids, axis=0);
          %1 = full(1f, shape=[n, 3, 2], dtype="float32");
          add(%0, %1)
        }""",
        (0,),
        (0,),
    ),
    (  # an input without rows, and the dim of a shape read where it is not the batch
        """def @main(%x: Tensor[(n, k), float32], %y: Tensor[(k,), float32]) {
          %0 = shape_of(%x);
          %1 = take(%0, 1i64);
          %2 = cast(%1, dtype="float32");
          %3 = multiply(%x, %y);
          (add(%3, %2), %y)
        }""",
        (0, None),
        (0, None),
    ),
    (  # a convolution, a pool and the rows kept by a slice of the whole axis
        """def @main(%x: Tensor[(n, 1, 5, 5), float32]) {
          %0 = nn.conv2d(%x, const([[[[1.0, -1.0], [0.5, 2.0]]]], float32), padding=[1, 1, 1, 1]);
          %1 = nn.max_pool2d(%0, pool_size=[2, 2], strides=[2, 2]);
          strided_slice(%1, begin=[0, 0, 1], end=[4611686018427387904, 1, 3], strides=[1, 1, 1])
        }""",
        (0,),
        (0,),
    ),
    (  # concatenation and split away from the rows, a stack in front of them
        """def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(n, 2), float32]) {
          %0 = concatenate((%x, %y), axis=1);
          %1 = split(%0, indices_or_sections=[3], axis=1);
          stack((%1.0, %1.0), axis=0)
        }""",
        (0, 0),
        (1,),
    ),
    (  # PyTorch's multi-head attention: tokens and batch flattened together for a projection
        """def @main(%x: Tensor[(n, 3, 4), float32]) {
          %0 = transpose(%x, axes=[1, 0, 2]);
          %1 = reshape(%0, newshape=[3*n, 4]);
          %2 = nn.dense(%1, const([[1.0, 0.5, 0.0, -1.0], [0.0, 1.0, 2.0, 1.0]], float32));
          %3 = add(%2, const([0.5, -0.25], float32));
          %4 = reshape(%3, newshape=[3, n, 2]);
          %5 = reshape(%0, newshape=[3, 2*n, 2]);
          %6 = reshape(transpose(%5, axes=[1, 0, 2]), newshape=[n, 2, 3, 2]);
          (transpose(%4, axes=[1, 0, 2]), %6, tanh(%4))
        }""",
        (0,),
        (0, 0, 1),
    ),
    (  # ordering, padding and repeating away from the rows; a repeat of whole rows
        """def @main(%x: Tensor[(n, 4), float32], %k: int64) {
          %0 = topk(%x, k=2, axis=1);
          %1 = sort(%x, axis=1, descending=True);
          %2 = argsort(%x, axis=-1);
          %3 = nn.pad(%1, pad_width=[[0, 0], [1, 2]], pad_value=0.5);
          %4 = tile(%3, reps=[2, 1, 2]);
          %5 = repeat(%2, repeats=2, axis=1);
          %6 = repeat(%x, repeats=2, axis=0);
          %7 = repeat(%6, repeats=3);
          %8 = reshape(%7, newshape=[n, 4, 6]);
          %9 = dyn.topk(%x, %k, axis=1, ret_type="values");
          %10 = repeat(%x, repeats=0, axis=0);
          (%0.0, %0.1, %4, %5, reshape(%6, newshape=[n, 8]), %8, %9, %10)
        }""",
        (0, None),
        (0, 0, 1, 0, 0, 0, 0, None),
    ),
]

#: (program, what the refusal names); each row's ``COUNTER`` input shows a cut would be wrong.
REFUSED = [
    ("def @main(%x: Tensor[(n, 4), float32]) { sum(%x, axis=[0]) }", "reduces the rows"),
    ("def @main(%x: Tensor[(n, 4), float32]) { cumsum(%x, axis=0) }", "computed along the rows"),
    ("def @main(%x: Tensor[(n, 4), float32]) { nn.softmax(%x, axis=0) }", "along the rows"),
    (
        "def @main(%x: Tensor[(n, 4), float32]) { nn.matmul(transpose(%x), %x) }",
        "contracted axis",
    ),
    (
        "def @main(%x: Tensor[(n, 4), float32]) { reshape(%x, newshape=[4, n]) }",
        "the axes before the rows change",
    ),
    (
        "def @main(%x: Tensor[(n, 4), float32]) { take(%x, const([0, 0], int64), axis=0) }",
        "gathers along the rows",
    ),
    (
        """def @main(%x: Tensor[(n, 4), float32]) {
          %0 = full(1f, shape=[n], dtype="float32");
          %1 = cumsum(%0, axis=0);
          multiply(%x, expand_dims(%1, axis=1))
        }""",
        "computed along the rows",
    ),
    (
        """def @main(%x: Tensor[(n, 4), float32]) {
          %0 = take(shape_of(%x), 0i64);
          add(%x, cast(%0, dtype="float32"))
        }""",
        "reads n from a shape",
    ),
    (
        "def @main(%x: Tensor[(n, 4), float32]) "
        "{ strided_slice(%x, begin=[1], end=[4611686018427387904], strides=[1]) }",
        "slices the rows",
    ),
    (
        """def @main(%x: Tensor[(n, 4), float32]) {
          concatenate((%x, %x), axis=0)
        }""",
        "joins along the rows",
    ),
    (
        """def @main(%x: Tensor[(n, 4), float32]) {
          %0 = reshape(transpose(%x), newshape=[4*n]);
          transpose(reshape(nn.softmax(%0, axis=0), newshape=[4, n]))
        }""",
        "an operand is rows strided by 4 blocks",
    ),
    (
        "def @main(%x: Tensor[(n, 4), float32]) "
        "{ reshape(reshape(transpose(%x), newshape=[4*n]), newshape=[n, 4]) }",
        "the reshape mixes rows",
    ),
    (
        "def @main(%x: Tensor[(n, 4), float32]) "
        "{ reshape(reshape(transpose(%x), newshape=[4*n]), newshape=[2, n, 2]) }",
        "the reshape mixes rows",
    ),
    ("def @main(%x: Tensor[(n, 4), float32]) { topk(%x, k=2, axis=0).0 }", "orders along the rows"),
    ("def @main(%x: Tensor[(n, 4), float32]) { argsort(%x, axis=0) }", "orders along the rows"),
    (
        "def @main(%x: Tensor[(n, 4), float32]) { nn.pad(%x, pad_width=[[1, 0], [0, 0]]) }",
        "pads the rows",
    ),
    ("def @main(%x: Tensor[(n, 4), float32]) { tile(%x, reps=[2, 1]) }", "repeats the rows"),
    (
        "def @main(%x: Tensor[(n, 4), float32]) { repeat(transpose(%x), repeats=2) }",
        "flattens axes in front of the rows",
    ),
    ("def @main(%x: Tensor[(n, n), float32]) { nn.relu(%x) }", "other than as one dim"),
    ("def @main(%x: Tensor[(n, 4), float32]) { shape_of(%x) }", "a result is a shape"),
]


def _module(source: str):
    module, _ = parse_typed(source)
    return module


def _random_inputs(vm, rows: int, rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for p in vm.inputs:
        shape = tuple(rows if d == "n" else (3 if d == "k" else d) for d in p.type.shape)
        if p.type.dtype.startswith("int"):
            out.append(rng.integers(0, 3, size=shape).astype(p.type.dtype))
        else:
            out.append(rng.standard_normal(shape).astype(p.type.dtype))
    return out


def _rows(a: np.ndarray, axis: int | None, start: int, stop: int) -> np.ndarray:
    if axis is None:
        return a
    index = [slice(None)] * a.ndim
    index[axis] = slice(start, stop)
    return a[tuple(index)]


def _as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def _check_pieces(source: str, split: RowSplit, rows: int = 6, seed: int = 0) -> None:
    """The whole batch's rows [2, rows) equal those of a run on them alone."""
    vm = dynshape.VirtualMachine(dynshape.compile(textwrap.dedent(source)))
    args = _random_inputs(vm, rows, np.random.default_rng(seed))
    whole = _as_tuple(vm.run(*args))
    piece = _as_tuple(
        vm.run(*[_rows(a, ax, 2, rows) for a, ax in zip(args, split.inputs, strict=True)])
    )
    for w, p, axis in zip(whole, piece, split.outputs, strict=True):
        np.testing.assert_allclose(_rows(np.asarray(w), axis, 2, rows), p, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("source", "inputs", "outputs"), PROVEN)
def test_proven_splits_and_their_pieces(source, inputs, outputs):
    split = prove_row_split(_module(source))
    assert (split.symbol, split.inputs, split.outputs) == ("n", inputs, outputs)
    _check_pieces(source, split)


@pytest.mark.parametrize(("source", "reason"), REFUSED)
def test_refusals_name_the_op_and_a_cut_would_be_wrong(source, reason):
    with pytest.raises(NotRowWise, match=reason):
        prove_row_split(_module(source))
    vm = dynshape.VirtualMachine(dynshape.compile(textwrap.dedent(source)))
    if [tuple(p.type.shape) for p in vm.inputs] != [("n", 4)]:
        return  # (n, n): no cut of one axis is even defined
    x = np.random.default_rng(1).standard_normal((6, 4)).astype(np.float32) + 1
    whole = np.asarray(vm.run(x))
    pieces = [np.asarray(vm.run(x[:3])), np.asarray(vm.run(x[3:]))]
    joined = np.concatenate(pieces) if whole.ndim else pieces[0]
    same = joined.shape == whole.shape
    assert not (same and np.allclose(joined, whole)), "a cut would have been right here"


def test_the_batch_symbol_is_found_on_another_axis():
    source = """def @main(%x: Tensor[(s, b, 4), float32]) {
      %0 = cumsum(%x, axis=0);
      nn.relu(%0)
    }"""
    split = prove_row_split(_module(source))
    assert (split.symbol, split.inputs, split.outputs) == ("b", (1,), (1,))


def test_declared_lower_bound_is_the_fewest_rows():
    source = "def @main(%x: Tensor[(n, 4), float32]) where n in [4, 64] { nn.relu(%x) }"
    assert prove_row_split(_module(source)).min_rows == 4


def test_an_unnamed_dim_is_a_batch_too():
    """A '?' dim has no range to declare: the proof's comparisons go without one."""
    split = prove_row_split(_module("def @main(%x: Tensor[(?, 4), float32]) { nn.relu(%x) }"))
    assert (split.inputs, split.outputs, split.min_rows) == ((0,), (0,), 1)


def test_a_refusal_lists_every_candidate():
    source = "def @main(%x: Tensor[(n, k), float32]) { sum(%x) }"
    with pytest.raises(NotRowWise) as caught:
        prove_row_split(_module(source))
    assert "along n:" in caught.value.reason and "along k:" in caught.value.reason


def test_no_symbolic_dim_no_split():
    with pytest.raises(NotRowWise, match="no input has a symbolic dim"):
        prove_row_split(_module("def @main(%x: Tensor[(2, 4), float32]) { nn.relu(%x) }"))


# -- random programs: whatever is proven must cut right ------------------------------------

_STEPS = [
    "tanh(%v)",
    "add(%v, const([1.0, 2.0, 3.0, 4.0], float32))",
    "nn.softmax(%v, axis=1)",
    "nn.softmax(%v, axis=0)",
    "cumsum(%v, axis=1)",
    "cumsum(%v, axis=0)",
    "nn.dense(%v, const([[1.0, 0.5, 0.0, -1.0], [0.0, 1.0, 2.0, 1.0], [1.0, 1.0, 1.0, 1.0],"
    " [0.5, 0.5, -0.5, 0.25]], float32))",
    "reshape(reshape(%v, newshape=[n*2, 2]), newshape=[n, 4])",
    "reshape(transpose(%v), newshape=[n, 4])",
    "subtract(%v, mean(%v, axis=[1], keepdims=True))",
    "subtract(%v, mean(%v, axis=[0], keepdims=True))",
    "multiply(%v, sum(%v))",
    "take(%v, const([3, 0, 1, 2], int64), axis=1)",
    "concatenate((strided_slice(%v, begin=[0, 2], end=[n, 4]),"
    " strided_slice(%v, begin=[0, 0], end=[n, 2])), axis=1)",
    "concatenate((strided_slice(%v, begin=[1, 0], end=[n, 4]),"
    " strided_slice(%v, begin=[0, 0], end=[1, 4])), axis=0)",
    "transpose(reshape(tanh(reshape(transpose(%v), newshape=[4*n])), newshape=[4, n]))",
    "transpose(reshape(nn.softmax(reshape(transpose(%v), newshape=[4*n]), axis=0),"
    " newshape=[4, n]))",
    "reshape(transpose(reshape(nn.dense(reshape(transpose(reshape(%v, newshape=[n, 2, 2]),"
    " axes=[1, 0, 2]), newshape=[2*n, 2]), const([[1.0, 2.0], [-1.0, 0.5]], float32)),"
    " newshape=[2, n, 2]), axes=[1, 0, 2]), newshape=[n, 4])",
    "reshape(reshape(transpose(%v), newshape=[4*n]), newshape=[n, 4])",
    "sort(%v, axis=1)",
    "sort(%v, axis=0, descending=True)",
    "topk(%v, k=4, axis=1).0",
    "topk(%v, k=4, axis=0, is_ascend=True).0",
    "strided_slice(reshape(repeat(%v, repeats=2, axis=0), newshape=[n, 8]),"
    " begin=[0, 0], end=[n, 4])",
    "strided_slice(nn.pad(%v, pad_width=[[0, 0], [1, 0]], pad_value=2.0),"
    " begin=[0, 0], end=[n, 4])",
    "strided_slice(nn.pad(%v, pad_width=[[1, 0], [0, 0]]), begin=[0, 0], end=[n, 4])",
]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(range(len(_STEPS))), min_size=1, max_size=5), st.integers(0, 99))
def test_random_chains_cut_right_when_proven(steps, seed):
    lines, value = [], "%x"
    for i, step in enumerate(steps):
        lines.append(f"  %{i} = {_STEPS[step].replace('%v', value)};")
        value = f"%{i}"
    source = "def @main(%x: Tensor[(n, 4), float32]) {\n" + "\n".join(lines) + f"\n  {value}\n}}"
    try:
        split = prove_row_split(_module(source))
    except NotRowWise:
        return
    _check_pieces(source, split, seed=seed)
