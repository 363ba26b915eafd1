"""The row proof on index arithmetic: the ways exported transformers gather their attention
masks and position ids (row numbers from a running sum or an ``arange`` of the batch, times
a dim read from a shape, plus a column number; negative-index clamps; out-of-range sentinels),
each checked against the compiled program's pieces, and the refusals against runs where a cut
is wrong."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_batch_rows import _check_pieces, _module

import dynshape
from dynshape import DynShapeError
from dynshape.analysis.batch_rows import NotRowWise, prove_row_split
from dynshape.batch_processes import split_plan

#: torchscript's mask gather: the (n, s) mask flattened, row ``i``'s entries at ``i*s + j``.
TORCHSCRIPT = """def @main(%x: Tensor[(n, 4), float32], %m: Tensor[(n, 4), int64]) {
  %0 = reshape(%m, newshape=[n*4, 1]);
  %1 = cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True);
  %2 = cumsum(full(1i64, shape=[4], dtype="int64"), exclusive=True);
  %3 = take(shape_of(%x), 1i64);
  %4 = multiply(expand_dims(%1, axis=1), stack((%3,)));
  %5 = add(%4, expand_dims(%2, axis=0));
  %6 = take(%0, %5, axis=0);
  %7 = cast(reshape(%6, newshape=[n, 4]), dtype="float32");
  multiply(%x, %7)
}"""

#: dynamo's: the index's two components joined and taken apart, each clamped the way
#: negative indices are (``where(i < 0, i + n, i)``, then out of range to ``n * s``), the
#: untaken branches reading the batch as a value.
DYNAMO = """def @main(%x: Tensor[(n, 4), float32], %m: Tensor[(n, 4), int64]) {
  %0 = reshape(%m, newshape=[n*4]);
  %1 = expand_dims(cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True), axis=1);
  %2 = cumsum(full(1i64, shape=[4], dtype="int64"), exclusive=True);
  %3 = broadcast_to(expand_dims(%2, axis=0), shape=[n, 4]);
  %4 = concatenate((expand_dims(broadcast_to(%1, shape=[n, 4]), axis=2),
                    expand_dims(%3, axis=2)), axis=2);
  %5 = take(%4, 0i64, axis=-1);
  %6 = take(shape_of(%m), 0i64);
  %7 = take(shape_of(%m), 1i64);
  %8 = where(less(%5, 0i64), add(%5, %6), %5);
  %9 = where(logical_or(less(%8, 0i64), greater_equal(%8, %6)), multiply(%6, %7), %8);
  %10 = take(%4, 1i64, axis=-1);
  %11 = where(less(%10, 0i64), add(%10, %7), %10);
  %12 = where(logical_or(less(%11, 0i64), greater_equal(%11, %7)), multiply(%6, %7), %11);
  %13 = take(%0, add(multiply(%9, %7), %12), axis=0);
  multiply(%x, cast(%13, dtype="float32"))
}"""

#: RoBERTa's position ids: ``arange(0, n)`` of the batch read from a shape, per-row positions
#: of unknown bounds clamped to the table (out of range: ``6 * n``, which no row has).
ROBERTA = """def @main(%x: Tensor[(n, 4), float32], %ids: Tensor[(n, 4), int64]) {
  %0 = broadcast_to(const([[10, 11, 12, 13, 14, 15]], int64), shape=[n, 6]);
  %1 = take(shape_of(%ids), 0i64);
  %2 = reshape(arange(0i64, %1, 1i64, dtype="int64"), newshape=[n, 1]);
  %3 = add(%ids, 1i64);
  %4 = logical_or(less(%3, 0i64), greater_equal(%3, 6i64));
  %5 = where(%4, multiply(6i64, %1), %3);
  %6 = take(%0, add(multiply(%2, 6i64), %5));
  add(%x, cast(%6, dtype="float32"))
}"""


@pytest.mark.parametrize("source", [TORCHSCRIPT, DYNAMO, ROBERTA], ids=["ts", "dynamo", "roberta"])
def test_mask_and_position_gathers_are_proven_and_cut_right(source):
    split = prove_row_split(_module(source))
    assert (split.inputs, split.outputs) == ((0, 0), (0,))
    for seed in range(3):
        _check_pieces(source, split, seed=seed)


#: a decoder's mask: ``t`` columns (the total length) read at columns ``[0, s)`` (the past and
#: new tokens), two symbols the types do not relate (every valid run has ``s <= t``).
DECODER = """def @main(%x: Tensor[(n, s), float32], %m: Tensor[(n, t), int64]) {
  %0 = reshape(%m, newshape=[n*t, 1]);
  %1 = cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True);
  %2 = cumsum(full(1i64, shape=[s], dtype="int64"), exclusive=True);
  %3 = take(shape_of(%m), 1i64);
  %4 = multiply(expand_dims(%1, axis=1), stack((%3,)));
  %5 = add(%4, expand_dims(%2, axis=0));
  %6 = take(%0, %5, axis=0);
  %7 = cast(reshape(%6, newshape=[n, s]), dtype="float32");
  multiply(%x, %7)
}"""


@pytest.mark.parametrize("columns", [4, 6, 3])
def test_a_mask_read_past_its_rows_columns_splits_as_the_whole_run_fails(columns):
    """Reading past a row's entries reads the next row's, the same in a piece that holds
    it, else past the piece's end: the piece fails and the caller runs the whole batch."""
    split = prove_row_split(_module(DECODER))
    assert (split.inputs, split.outputs) == ((0, 0), (0,))
    vm = dynshape.VirtualMachine(dynshape.compile(DECODER))
    rng = np.random.default_rng(columns)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    mask = rng.integers(0, 2, size=(6, columns)).astype(np.int64)
    _assert_split_answers_as_whole(vm, [x, mask], split.outputs)


def test_a_bad_position_fails_the_whole_run_and_the_piece_holding_it():
    """The sentinel ``6 * n`` is out of range in every run: the split's fallback (a failing
    piece makes the caller run the whole batch) then gives the whole run's error."""
    vm = dynshape.VirtualMachine(dynshape.compile(ROBERTA))
    x = np.ones((6, 4), np.float32)
    ids = np.zeros((6, 4), np.int64)
    ids[4, 2] = 9  # position 10: past the table
    with pytest.raises(DynShapeError, match="out of bounds"):
        vm.run(x, ids)
    with pytest.raises(DynShapeError, match="out of bounds"):
        vm.run(x[3:], ids[3:])
    np.testing.assert_array_equal(
        vm.run(x[:3], ids[:3]), 12.0
    )  # position 1 (11) + 1: the other piece is fine


def _wrong_when_cut(source: str, args: list[np.ndarray]) -> bool:
    """Whether some cut of the batch in two answers otherwise than the whole run does."""
    vm = dynshape.VirtualMachine(dynshape.compile(textwrap.dedent(source)))
    try:
        _assert_split_answers_as_whole(vm, args, (0,))
    except AssertionError:
        return True
    return False


#: (program, what the refusal names); each is wrong when cut, on the inputs of ``_inputs``.
REFUSED = [
    (  # row numbers used as data
        """def @main(%x: Tensor[(n, 4), float32], %m: Tensor[(n, 4), int64]) {
          %0 = cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True);
          add(%x, cast(expand_dims(%0, axis=1), dtype="float32"))
        }""",
        "an operand is a row number",
    ),
    (  # a fixed table read at row numbers
        """def @main(%x: Tensor[(n, 4), float32], %m: Tensor[(n, 4), int64]) {
          %0 = cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True);
          %1 = take(const([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], float32), %0, axis=0);
          add(%x, expand_dims(%1, axis=1))
        }""",
        "gathers from a value without rows at row numbers",
    ),
    (  # rows numbered by 3 (not 4): row i reads the end of row i - 1
        TORCHSCRIPT.replace("stack((%3,))", "3i64"),
        "row numbers scaled by 3 for rows of 4 entries",
    ),
    (  # column numbers from -1: row i reads the last entry of row i - 1
        TORCHSCRIPT.replace(
            "%5 = add(%4, expand_dims(%2, axis=0));",
            "%5 = add(%4, subtract(expand_dims(%2, axis=0), 1i64));",
        ),
        "may index an earlier row's entries",
    ),
    (  # a sentinel of n (not n * 4): row 0's bad index is an entry of row n / 4
        ROBERTA.replace("multiply(6i64, %1)", "%1"),
        "a bad index may land in another row",
    ),
    (  # a running sum along the rows of something other than a fill
        """def @main(%x: Tensor[(n, 4), float32], %m: Tensor[(n, 4), int64]) {
          %0 = reshape(%m, newshape=[n*4]);
          %1 = cumsum(take(%m, 0i64, axis=1), exclusive=True);
          %2 = take(%0, %1, axis=0);
          multiply(%x, cast(expand_dims(%2, axis=1), dtype="float32"))
        }""",
        "computed along the rows",
    ),
]


def _inputs(source: str) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    other = rng.integers(1, 3, size=(6, 4)).astype(np.int64)
    other[1, 0] = 0
    if "%ids" in source:
        other[3, 0] = 7  # position 8: past the table, so the sentinel is read
    return [x, other]


@pytest.mark.parametrize(("source", "reason"), REFUSED)
def test_index_refusals_name_the_op_and_a_cut_would_be_wrong(source, reason):
    with pytest.raises(NotRowWise, match=reason):
        prove_row_split(_module(source))
    assert _wrong_when_cut(source, _inputs(source)), "a cut would have been right here"


def test_a_dropped_branch_that_may_fail_is_not_dropped():
    """An untaken branch whose op may raise (a division) refuses at once: were it dropped, a
    run failing in it would fail whole and not cut, or the other way round."""
    source = """def @main(%x: Tensor[(n, 4), float32]) {
      %0 = cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True);
      %1 = where(less(%0, 0i64), floor_divide(%0, 0i64), %0);
      %2 = take(reshape(%x, newshape=[n*4]), multiply(%1, 4i64), axis=0);
      multiply(%x, expand_dims(%2, axis=1))
    }"""
    with pytest.raises(NotRowWise, match=r"floor_divide.*an operand is a row number"):
        prove_row_split(_module(source))


def test_an_unproven_value_reaching_a_result_refuses_with_its_own_reason():
    source = """def @main(%x: Tensor[(n, 4), float32]) {
      %0 = take(shape_of(%x), 0i64);
      %1 = where(less(%0, 0i64), 1i64, %0);
      (%x, %1)
    }"""
    with pytest.raises(NotRowWise, match="take -> int64: reads n from a shape as a value"):
        prove_row_split(_module(source))


# -- random index arithmetic: whatever is proven must cut right ---------------------------


@settings(max_examples=40, deadline=None)
@given(
    scale=st.sampled_from([3, 4, 5]),
    offset=st.integers(-1, 1),
    exclusive=st.booleans(),
    columns=st.sampled_from([3, 4]),
    seed=st.integers(0, 99),
)
def test_random_row_gathers_cut_right_when_proven(scale, offset, exclusive, columns, seed):
    """``take(flat, i * scale + j + offset)`` for column numbers ``j``: proven exactly when
    rows are numbered by their 4 entries and no index reads before its row's (then a split
    run answers as the whole run: an index past the last row fails both)."""
    flag = "True" if exclusive else "False"
    source = f"""def @main(%x: Tensor[(n, 4), float32]) {{
      %0 = reshape(%x, newshape=[n*4]);
      %1 = cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True);
      %2 = cumsum(full(1i64, shape=[{columns}], dtype="int64"), exclusive={flag});
      %3 = add(multiply(expand_dims(%1, axis=1), {scale}i64), expand_dims(%2, axis=0));
      take(%0, add(%3, {offset}i64), axis=0)
    }}"""
    low = offset + (0 if exclusive else 1)
    fits = scale == 4 and low >= 0
    try:
        prove_row_split(_module(source))
    except NotRowWise:
        assert not fits, "an index from its own row's group on was refused"
        return
    assert fits
    vm = dynshape.VirtualMachine(dynshape.compile(textwrap.dedent(source)))
    x = np.random.default_rng(seed).standard_normal((6, 4)).astype(np.float32)
    _assert_split_answers_as_whole(vm, [x], (0,))


def test_the_work_formula_knows_an_arange_of_the_batch_is_the_batch():
    """The session's split rule evaluates the work per set of input shapes: a dim of the
    program's types that is not an input's (an ``arange``'s length) would leave it unknown,
    and the call unsplit."""
    plan = split_plan(_module(ROBERTA))
    assert not isinstance(plan, str)
    assert plan.split.equal_dims and {str(s) for s in plan.work.free_symbols} == {"n"}


# -- the idioms mutated: whatever is proven must cut right, bad indices included ---------

_MUTATIONS = [
    ("exclusive=True", "exclusive=False"),
    ("less(", "less_equal("),
    ("less(", "greater("),
    ("greater_equal(", "greater("),
    ("logical_or(", "logical_and("),
    ("0i64", "1i64"),
    ("1i64", "0i64"),
    ("1i64", "2i64"),
    ("6i64", "5i64"),
    ("6i64", "7i64"),
    ("multiply(6i64, %1)", "%1"),
    ("multiply(6i64, %1)", "multiply(12i64, %1)"),
    ("stack((%3,))", "stack((add(%3, 1i64),))"),
    ("multiply(%9, %7)", "multiply(%9, %6)"),
    ("add(%5, %6)", "%5"),
    ("add(%10, %7)", "subtract(%10, %7)"),
    ("%12), axis=0)", "%11), axis=0)"),
    ("shape=[4]", "shape=[3]"),
]


def _outcome(vm, args: list[np.ndarray]) -> np.ndarray | None:
    try:
        return np.asarray(vm.run(*args))
    except DynShapeError:
        return None


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([TORCHSCRIPT, DYNAMO, ROBERTA]),
    st.lists(st.tuples(st.sampled_from(range(len(_MUTATIONS))), st.integers(0, 3)), max_size=3),
    st.integers(0, 999),
)
def test_mutated_idioms_cut_right_when_proven(source, mutations, seed):
    """A split run answers as the whole run: both pieces' rows when it succeeds, a failing
    piece (then the caller runs the whole batch) when it fails."""
    for index, occurrence in mutations:
        old, new = _MUTATIONS[index]
        at = -1
        for _ in range(occurrence % max(1, source.count(old)) + 1):
            at = source.find(old, at + 1)
        if at >= 0:
            source = source[:at] + new + source[at + len(old) :]
    try:
        split = prove_row_split(_module(source))
    except (NotRowWise, DynShapeError):
        return
    vm = dynshape.VirtualMachine(dynshape.compile(textwrap.dedent(source)))
    rng = np.random.default_rng(seed)
    for _ in range(3):
        args = [
            rng.standard_normal((6, 4)).astype(np.float32),
            rng.integers(-2, 9 if rng.random() < 0.5 else 5, size=(6, 4)).astype(np.int64),
        ]
        _assert_split_answers_as_whole(vm, args, split.outputs)


def _assert_split_answers_as_whole(vm, args: list[np.ndarray], outputs: tuple) -> None:
    """Cut after each row: when the whole run succeeds both pieces do, and their results
    joined are the whole run's; when it fails, a piece fails (and the caller, running the
    whole batch, fails as it does)."""
    assert outputs == (0,)
    whole = _outcome(vm, args)
    for cut in range(1, len(args[0])):
        pieces = [_outcome(vm, [a[:cut] for a in args]), _outcome(vm, [a[cut:] for a in args])]
        if whole is None:
            assert any(p is None for p in pieces), "the whole run fails, no piece does"
            continue
        assert all(p is not None for p in pieces), "a piece fails where the whole run does not"
        np.testing.assert_allclose(np.concatenate(pieces), whole, rtol=1e-6)


def test_a_shape_read_past_its_rank_refuses_with_the_index():
    source = """def @main(%x: Tensor[(n, 4), float32]) {
      %0 = take(shape_of(%x), 2i64);
      add(%x, cast(%0, dtype="float32"))
    }"""
    with pytest.raises(NotRowWise, match=r"reads a shape of rank 2 at 2"):
        prove_row_split(_module(source))


def test_an_index_from_the_rows_data_that_may_reach_the_next_row_refuses():
    """Ids + 2 clamped to ``[0, 6]`` (``greater``, not ``greater_equal``) for rows of 6
    entries: a row whose id is 4 reads the next row's first entry, the last row may not, and
    a piece ending at that row would fail where the whole run does not (found by the mutated
    idioms). Clamped to ``[0, 5]`` the same program is proven."""
    source = """def @main(%x: Tensor[(n, 4), float32], %ids: Tensor[(n, 4), int64]) {
      %0 = broadcast_to(const([[10, 11, 12, 13, 14, 15]], int64), shape=[n, 6]);
      %1 = take(shape_of(%ids), 0i64);
      %2 = reshape(arange(0i64, %1, 1i64, dtype="int64"), newshape=[n, 1]);
      %3 = add(%ids, 2i64);
      %4 = logical_or(less(%3, 0i64), COMPARE(%3, 6i64));
      %5 = where(%4, multiply(6i64, %1), %3);
      %6 = take(%0, add(multiply(%2, 6i64), %5));
      add(%x, cast(%6, dtype="float32"))
    }"""
    with pytest.raises(NotRowWise, match="an index from the row's data may reach the next row"):
        prove_row_split(_module(source.replace("COMPARE", "greater")))
    proven = source.replace("COMPARE", "greater_equal")
    split = prove_row_split(_module(proven))
    vm = dynshape.VirtualMachine(dynshape.compile(textwrap.dedent(proven)))
    ids = np.array([[4, 0, 1, 2]] * 3 + [[0, 1, 2, 3]] * 3, np.int64)
    x = np.zeros((6, 4), np.float32)
    _assert_split_answers_as_whole(vm, [x, ids], split.outputs)
