"""The fold_decided pass: comparisons and ``where``s decided by bounds are folded (text in,
text out), never dropping what may fail, and every stage computes what the parsed program
does."""

from __future__ import annotations

import textwrap
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_batch_row_numbers import _MUTATIONS as MUTATIONS
from test_batch_row_numbers import DYNAMO, ROBERTA, TORCHSCRIPT

import dynshape
from dynshape.passes.fold_decided import FoldDecided
from dynshape.testing import check_stages

#: dynamo's clamp of a row number and of a column number, then a gather of the flattened
#: mask; the untaken branches read the batch as a value.
CLAMPS = """
def @main(%x: Tensor[(n, 4), float32], %m: Tensor[(n, 4), int64]) -> Tensor[(n, 4), float32] {
  %rows = broadcast_to(expand_dims(cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True), axis=1), shape=[n, 4]);
  %cols = broadcast_to(expand_dims(cumsum(full(1i64, shape=[4], dtype="int64"), exclusive=True), axis=0), shape=[n, 4]);
  %b = take(shape_of(%m), 0i64);
  %r0 = where(less(%rows, 0i64), add(%rows, %b), %rows);
  %r1 = where(logical_or(less(%r0, 0i64), greater_equal(%r0, %b)), multiply(%b, 4i64), %r0);
  %c0 = where(less(%cols, 0i64), add(%cols, 4i64), %cols);
  %index = add(multiply(%r1, 4i64), %c0);
  %g = take(reshape(%m, newshape=[n*4]), %index, axis=0);
  multiply(%x, cast(%g, dtype="float32"))
}
"""

#: name -> (program, a fragment of the folded text, fragments that must not remain)
FOLDED = {
    # the clamps decided, the index left enumerates the mask: the gather is a reshape
    "clamps": (CLAMPS, "reshape(%0, newshape=[n, 4])", ["where", "less", "greater_eq", "take("]),
    "a_comparison_to_a_fill": (
        """
        def @main(%x: Tensor[(n, 3), float32]) -> Tensor[(n, 3), float32] {
          %k = cumsum(full(1i64, shape=[3], dtype="int64"), exclusive=True);
          %ok = less(%k, 3i64);
          where(%ok, %x, multiply(%x, 0f))
        }
        """,
        "%x",
        ["less", "where", "multiply"],
    ),
    "a_branch_broadcast_to_the_where": (
        """
        def @main(%x: Tensor[(n, 3), float32]) -> Tensor[(n, 3), float32] {
          %n = take(shape_of(%x), 0i64);
          where(greater_equal(%n, 0i64), const([1.0, 2.0, 3.0], float32), %x)
        }
        """,
        "broadcast_to(",
        ["where", "greater_equal"],
    ),
    # torchscript's mask gather at ``row * 4 + column``: the mask reshaped
    "an_enumerating_gather": (TORCHSCRIPT, "reshape(%0, newshape=[n, 4, 1])", ["take(", "cumsum"]),
    # dynamo's: its components joined, taken apart (a take at a constant index in range,
    # which cannot fail, dropped) and clamped
    "the_dynamo_gather": (DYNAMO, "reshape(%0, newshape=[n, 4])", ["take(", "concatenate"]),
    "a_logical_not_kept_as_its_answer": (
        """
        def @main(%x: Tensor[(n,), int64]) -> Tensor[(n,), bool] {
          %n = take(shape_of(%x), 0i64);
          logical_and(logical_not(less(%n, 0i64)), greater(%x, 0i64))
        }
        """,
        "full(True",
        ["less("],
    ),
}

#: name -> program the pass must leave as it is (the reason in the name)
KEPT = {
    "undecided": """
        def @main(%x: Tensor[(n,), int64]) -> Tensor[(n,), int64] {
          where(less(%x, 0i64), add(%x, 5i64), %x)
        }
        """,
    "bounds_of_a_float": """
        def @main(%x: Tensor[(n,), float32]) -> Tensor[(n,), float32] {
          where(less(abs(%x), 0f), %x, negative(%x))
        }
        """,
}


def _folded(program: str) -> str:
    return str(dynshape.stages(textwrap.dedent(program))["rewritten"]["main"])


@pytest.mark.parametrize("name", sorted(FOLDED))
def test_decided_comparisons_are_folded(name: str) -> None:
    program, present, absent = FOLDED[name]
    text = _folded(program)
    assert present in text, text
    for fragment in absent:
        assert fragment not in text, text


@pytest.mark.parametrize("name", sorted(KEPT))
def test_what_is_not_decided_or_may_fail_is_kept(name: str) -> None:
    typed = dynshape.stages(textwrap.dedent(KEPT[name]))["types"]
    p = FoldDecided()
    assert p.run(typed) is typed and p.folded == 0


UNTAKEN_MAY_FAIL = """
def @main(%x: Tensor[(n,), float32], %i: Tensor[(n,), int64]) -> Tensor[(n,), float32] {
  %n = take(shape_of(%x), 0i64);
  where(greater_equal(%n, 0i64), %x, take(%x, %i, axis=0))
}
"""


def test_a_where_whose_untaken_branch_may_fail_is_kept() -> None:
    """Its condition is decided (and folded to a fill), the gather stays: it may fail."""
    text = _folded(UNTAKEN_MAY_FAIL)
    assert "full(True" in text and "where(" in text and "take(%x, %i" in text, text


def test_the_pass_counts_its_folds_and_types_them() -> None:
    typed = dynshape.stages(CLAMPS)["types"]
    p = FoldDecided()
    out = p.run(typed)
    # 3 wheres, the 5 comparisons and logical ops of their conditions, and the gather
    assert p.folded == 9
    assert "where" not in str(out)
    dynshape.compile(CLAMPS, debug=True)  # every stage re-checked against a full inference


def _args(name: str, rows: int, rng: np.random.Generator) -> list[np.ndarray]:
    pairs = ("clamps", "an_enumerating_gather", "the_dynamo_gather")
    x = rng.standard_normal((rows, 4 if name in pairs else 3)).astype(np.float32)
    if name in pairs:
        return [x, rng.integers(0, 2, size=(rows, 4)).astype(np.int64)]
    if name == "a_logical_not_kept_as_its_answer":
        return [rng.integers(-2, 3, size=rows).astype(np.int64)]
    return [x]


@pytest.mark.parametrize("name", sorted(FOLDED))
@pytest.mark.parametrize("rows", [1, 5])
def test_folded_programs_compute_what_the_parsed_ones_do(name: str, rows: int) -> None:
    program = textwrap.dedent(FOLDED[name][0])
    args = _args(name, rows, np.random.default_rng(rows))
    results = check_stages(program, *args)  # every stage interpreted, then the VM
    want = results.outputs["parsed"]
    got = dynshape.VirtualMachine(dynshape.compile(program), check_memory=True).run(*args)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_a_shape_read_past_its_rank_is_not_dropped() -> None:
    """``take(shape_of(%x), 2i64)`` of a rank-2 ``%x`` fails every run: the where whose
    untaken branch reads it stays, and so does the failure."""
    program = textwrap.dedent(
        """
        def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] {
          %n = take(shape_of(%x), 0i64);
          %bad = take(shape_of(%x), 2i64);
          where(greater_equal(%n, 0i64), %x, multiply(%x, cast(%bad, dtype="float32")))
        }
        """
    )
    text = _folded(program)
    assert "take(%1, 2i64)" in text and "where(" in text, text
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    with pytest.raises(dynshape.DynShapeError, match="out of bounds"):
        vm.run(np.ones((2, 4), np.float32))


def test_an_enumerating_gather_whose_index_may_fail_is_kept() -> None:
    """The columns come from an ``arange``, which may fail (a step of 0): the gather that
    enumerates the mask is not made a reshape, since that would drop it."""
    program = textwrap.dedent(
        """
        def @main(%x: Tensor[(n, 4), float32], %m: Tensor[(n, 4), int64]) -> Tensor[(n, 4), float32] {
          %rows = expand_dims(cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True), axis=1);
          %cols = expand_dims(arange(0i64, 4i64, 1i64, dtype="int64"), axis=0);
          %g = take(reshape(%m, newshape=[n*4]), add(multiply(%rows, 4i64), %cols), axis=0);
          multiply(%x, cast(%g, dtype="float32"))
        }
        """
    )
    assert "take(" in _folded(program)
    m = np.arange(8, dtype=np.int64).reshape(2, 4)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(dynshape.VirtualMachine(dynshape.compile(program)).run(x, m), m)


def test_an_entry_read_past_its_axis_is_not_dropped() -> None:
    """``take(const([1, 2]), 5i64)`` fails every run: a constant index drops nothing unless
    it lies within the axis."""
    program = textwrap.dedent(
        """
        def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] {
          %n = take(shape_of(%x), 0i64);
          %bad = take(const([1, 2], int64), 5i64, axis=0);
          where(greater_equal(%n, 0i64), %x, multiply(%x, cast(%bad, dtype="float32")))
        }
        """
    )
    assert "5i64" in _folded(program)
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    with pytest.raises(dynshape.DynShapeError, match="out of bounds"):
        vm.run(np.ones((2, 4), np.float32))


def test_a_kept_branch_still_fails_where_it_failed() -> None:
    """The gather the fold would drop fails on a bad index: the program still does."""
    program = textwrap.dedent(UNTAKEN_MAY_FAIL)
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    x = np.ones(3, np.float32)
    with pytest.raises(dynshape.DynShapeError, match="out of bounds"):
        vm.run(x, np.array([0, 7, 1], np.int64))


# -- the exporters' idioms mutated: folded and unfolded programs answer alike --------------


def _unfolded(source: str) -> dynshape.VirtualMachine:
    with mock.patch.object(FoldDecided, "run", lambda self, module: module):
        return dynshape.VirtualMachine(dynshape.compile(source))


def _outcome(vm: dynshape.VirtualMachine, args: list[np.ndarray]) -> np.ndarray | str:
    try:
        return np.asarray(vm.run(*args))
    except dynshape.DynShapeError as e:
        return type(e).__name__


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([TORCHSCRIPT, DYNAMO, ROBERTA, CLAMPS]),
    st.lists(st.tuples(st.sampled_from(range(len(MUTATIONS))), st.integers(0, 3)), max_size=3),
    st.integers(0, 999),
)
def test_mutated_idioms_answer_alike_folded_or_not(source, mutations, seed):
    for index, occurrence in mutations:
        old, new = MUTATIONS[index]
        at = -1
        for _ in range(occurrence % max(1, source.count(old)) + 1):
            at = source.find(old, at + 1)
        if at >= 0:
            source = source[:at] + new + source[at + len(old) :]
    source = textwrap.dedent(source)
    try:
        folded = dynshape.VirtualMachine(dynshape.compile(source))
    except dynshape.DynShapeError:
        return
    unfolded = _unfolded(source)
    rng = np.random.default_rng(seed)
    for rows in (1, 4):
        args = [
            rng.standard_normal((rows, 4)).astype(np.float32),
            rng.integers(-2, 9, size=(rows, 4)).astype(np.int64),
        ]
        want, got = _outcome(unfolded, args), _outcome(folded, args)
        if isinstance(want, str) or isinstance(got, str):  # a failure: the same, or none
            assert isinstance(want, str) and isinstance(got, str) and want == got, (want, got)
            continue
        np.testing.assert_array_equal(got, want)


def test_folds_inside_the_branches_of_an_if() -> None:
    program = textwrap.dedent(
        """
        def @main(%x: Tensor[(n,), float32], %c: bool) -> Tensor[(n,), float32] {
          %n = take(shape_of(%x), 0i64);
          if (%c) {
            where(greater_equal(%n, 0i64), %x, take(%x, const([0], int64), axis=0))
          } else {
            where(less(%n, 0i64), negative(%x), %x)
          }
        }
        """
    )
    text = _folded(program)
    assert "less(" not in text and "negative" not in text, text  # folded: nothing may fail
    assert "take(%x, " in text, text  # kept: the gather may fail
    x = np.arange(3, dtype=np.float32)
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    for c in (True, False):
        np.testing.assert_array_equal(vm.run(x, np.array(c)), x)
