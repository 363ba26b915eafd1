"""Batching requests with symbolic dims (issue 18, item 2; dynshape/serve/batching.py): which
requests share a call, that each gets exactly the rows it would get alone, and the messages of
what cannot be batched."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dynshape
from dynshape.errors import RequestError, ServeConfigError
from dynshape.serve import BatchPlan

MLP = """
def @main(%x: Tensor[(batch, 4), float32], %w: Tensor[(batch, 4), float32])
    -> (Tensor[(batch, 3), float32], Tensor[(batch,), float32]) {
  %h = tanh(add(%x, %w));
  (strided_slice(%h, begin=[0, 0], end=[1073741824, 3], strides=[1, 1]), sum(%h, axis=[1]))
}
"""

SEQ = """
def @main(%x: Tensor[(batch, seq, 4), float32]) -> Tensor[(batch, seq), float32] {
  sum(exp(%x), axis=[2])
}
"""


def _requests(rng, sizes, seq=None):
    out = []
    for n in sizes:
        shape = (n, 4) if seq is None else (n, seq, 4)
        count = 2 if seq is None else 1
        out.append(tuple(rng.standard_normal(shape).astype(np.float32) for _ in range(count)))
    return out


def _serve(plan, vm, requests, max_batch):
    """What a batching handler does: group, join, run once per group, split back."""
    groups, refused = plan.group(requests, max_batch)
    answers: dict[int, object] = {}
    for g in groups:
        for i, part in zip(g.indices, plan.split(vm.run(*plan.join(requests, g)), g), strict=True):
            answers[i] = part
    return groups, refused, answers


def test_each_request_gets_exactly_its_rows_back():
    exe = dynshape.compile(MLP)
    plan = BatchPlan.for_executable(exe, "batch")
    assert plan.batches and plan.params == ("x", "w")
    vm = dynshape.VirtualMachine(exe)
    requests = _requests(np.random.default_rng(0), [1, 3, 2, 5, 1])
    groups, refused, answers = _serve(plan, vm, requests, max_batch=64)
    assert refused == {} and len(groups) == 1 and groups[0].total == 12
    for i, req in enumerate(requests):
        alone = vm.run(*req)
        got = answers[i]
        assert isinstance(got, tuple) and len(got) == 2
        for a, b in zip(got, alone, strict=True):
            np.testing.assert_array_equal(a, b)  # same rows, bit for bit


def test_requests_with_another_seq_go_to_another_call():
    exe = dynshape.compile(SEQ)
    plan = BatchPlan.for_executable(exe, "batch")
    rng = np.random.default_rng(1)
    requests = [
        *_requests(rng, [2, 1], seq=5),
        *_requests(rng, [3], seq=7),
        *_requests(rng, [1], seq=5),
    ]
    vm = dynshape.VirtualMachine(exe)
    groups, _, answers = _serve(plan, vm, requests, max_batch=64)
    assert [g.indices for g in groups] == [(0, 1, 3), (2,)]
    for i, (x,) in enumerate(requests):
        np.testing.assert_allclose(answers[i], np.exp(x).sum(axis=2), rtol=1e-6)


def test_max_batch_bounds_each_call():
    plan = BatchPlan.for_executable(dynshape.compile(MLP), "batch")
    requests = _requests(np.random.default_rng(2), [3, 3, 3, 9, 1])
    groups, _ = plan.group(requests, max_batch=6)
    # 3 + 3 fill one call; the third 3 opens the next, which the 9 (alone: larger than the
    # bound) does not join; the 1 joins the open one
    assert [g.indices for g in groups] == [(0, 1), (2, 4), (3,)]
    assert all(g.total <= 6 for g in groups if len(g.indices) > 1)
    assert sorted(i for g in groups for i in g.indices) == list(range(5))


def test_a_request_whose_inputs_disagree_is_refused_alone():
    plan = BatchPlan.for_executable(dynshape.compile(MLP), "batch")
    rng = np.random.default_rng(3)
    good = _requests(rng, [2, 2])
    bad = (np.ones((2, 4), np.float32), np.ones((3, 4), np.float32))
    groups, refused = plan.group([good[0], bad, good[1]], max_batch=8)
    assert [g.indices for g in groups] == [(0, 2)]
    assert refused == {1: "the inputs disagree on batch (x axis 0: 2, w axis 0: 3)"}
    with pytest.raises(RequestError, match=r"expected 2 input\(s\) \(x, w\), got 1"):
        plan.size((np.ones((2, 4), np.float32),))


def test_a_data_dependent_result_is_served_one_request_per_call():
    exe = dynshape.compile(  # x[x > 0]: a result of a size only the data knows
        "def @main(%x: Tensor[(batch,), float32]) { "
        "take(%x, squeeze(argwhere(greater(%x, 0f)), axis=[1]), axis=0) }"
    )
    plan = BatchPlan.for_executable(exe, "batch")
    assert not plan.batches
    assert "cannot be cut back per request" in plan.reason
    groups, _ = plan.group([(np.ones(3, np.float32),), (np.ones(2, np.float32),)], max_batch=8)
    assert [g.indices for g in groups] == [(0,), (1,)]


@pytest.mark.parametrize(
    ("program", "message"),
    [
        (
            "def @main(%x: Tensor[(4, batch), float32]) -> Tensor[(4, batch), float32] { exp(%x) }",
            "parameter 'x' is Tensor[(4, batch), float32], whose leading dim is not batch",
        ),
        (
            "def @main(%x: Tensor[(batch, batch), float32]) -> Tensor[(batch, batch), float32] "
            "{ exp(%x) }",
            "which uses it beyond the leading dim",
        ),
        (
            "def @main(%x: Tensor[(batch, batch + 1), float32]) { exp(%x) }",
            "parameter 'x' is Tensor[(batch, batch + 1), float32], which uses it beyond the "
            "leading dim",
        ),
        (
            "def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] { exp(%x) }",
            "parameter 'x' is Tensor[(n, 4), float32], whose leading dim is not batch",
        ),
    ],
)
def test_a_batch_symbol_that_does_not_fit_is_refused_at_start_up(program, message):
    with pytest.raises(ServeConfigError) as info:
        BatchPlan.for_executable(dynshape.compile(program), "batch")
    assert message in str(info.value)


def test_no_batch_symbol_means_one_request_per_call():
    plan = BatchPlan.for_executable(dynshape.compile(MLP), None)
    assert not plan.batches and plan.reason == "no batch symbol was given"


def test_a_result_that_uses_the_batch_symbol_in_an_expression_is_not_batched():
    # (batch, 2*batch): a joined call's rows would hold the other requests' columns
    exe = dynshape.compile(
        "def @main(%x: Tensor[(batch, 2), float32]) { "
        "add(reshape(sum(%x, axis=[1]), newshape=[-1, 1]), reshape(%x, newshape=[1, -1])) }"
    )
    plan = BatchPlan.for_executable(exe, "batch")
    assert not plan.batches
    assert plan.reason == (
        "result 0 is Tensor[(batch, 2*batch), float32], which uses batch beyond the leading dim"
    )


PADDED = """
def @main(%x: Tensor[(batch, seq, 4), float32], %mask: Tensor[(batch, seq), float32])
    -> (Tensor[(batch, seq, 4), float32], Tensor[(batch,), float32]) {
  %h = tanh(multiply(%x, 2f));
  (%h, sum(multiply(sum(%h, axis=[2]), %mask), axis=[1]))
}
"""


def _padded_requests(rng, shapes):
    return [
        (
            rng.standard_normal((n, s, 4)).astype(np.float32),
            (rng.random((n, s)) > 0.3).astype(np.float32),
        )
        for n, s in shapes
    ]


def _check_each_as_alone(vm, requests, answers):
    for i, req in enumerate(requests):
        alone = vm.run(*req)
        per_position, pooled = answers[i]
        assert per_position.shape == alone[0].shape and pooled.shape == alone[1].shape
        np.testing.assert_array_equal(per_position, alone[0])  # padding never reaches a row
        # the masked sum adds the fill's zeros: the same up to summation order
        np.testing.assert_allclose(pooled, alone[1], rtol=1e-6, atol=1e-6)


def test_padding_lets_requests_of_another_seq_share_a_call():
    exe = dynshape.compile(PADDED)
    plan = BatchPlan.for_executable(exe, "batch", pad={"seq": 0})
    (pad,) = plan.pads
    assert (pad.symbol, pad.inputs, pad.outputs) == ("seq", ((0, 1), (1, 1)), ((0, 1),))
    vm = dynshape.VirtualMachine(exe)
    requests = _padded_requests(np.random.default_rng(4), [(1, 2), (3, 5), (2, 3), (1, 5), (2, 1)])
    groups, refused, answers = _serve(plan, vm, requests, max_batch=64)
    assert refused == {} and len(groups) == 1
    assert groups[0].extents == ((2,), (5,), (3,), (5,), (1,))
    joined = plan.join(requests, groups[0])
    assert [a.shape for a in joined] == [(9, 5, 4), (9, 5)]
    assert joined[1][0, 2:].tolist() == [0, 0, 0]  # the fill
    _check_each_as_alone(vm, requests, answers)


@settings(max_examples=40, deadline=None)
@given(
    shapes=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 7)), min_size=1, max_size=12),
    max_batch=st.integers(1, 16),
    seed=st.integers(0, 2**16),
)
def test_padded_batches_answer_each_request_as_it_runs_alone(shapes, max_batch, seed):
    exe = _compiled(PADDED)
    plan = BatchPlan.for_executable(exe, "batch", pad={"seq": 0})
    requests = _padded_requests(np.random.default_rng(seed), shapes)
    groups, refused, answers = _serve(plan, dynshape.VirtualMachine(exe), requests, max_batch)
    assert refused == {}
    assert sorted(i for g in groups for i in g.indices) == list(range(len(requests)))
    assert all(g.total <= max_batch or len(g.indices) == 1 for g in groups)
    _check_each_as_alone(dynshape.VirtualMachine(exe), requests, answers)


_COMPILED: dict[str, object] = {}


def _compiled(program):
    if program not in _COMPILED:
        _COMPILED[program] = dynshape.compile(program)
    return _COMPILED[program]


def test_a_request_that_disagrees_on_a_padded_symbol_is_refused_not_padded():
    plan = BatchPlan.for_executable(_compiled(PADDED), "batch", pad={"seq": 0})
    good = _padded_requests(np.random.default_rng(5), [(1, 3), (2, 2)])
    bad = (np.ones((1, 3, 4), np.float32), np.ones((1, 4), np.float32))
    wrong_rank = (np.ones((1, 3), np.float32), np.ones((1, 3), np.float32))
    groups, refused = plan.group([good[0], bad, good[1], wrong_rank], max_batch=8)
    assert refused == {1: "the inputs disagree on seq (x axis 1: 3, mask axis 1: 4)"}
    # another rank runs alone, so that the VM names what is wrong
    assert [g.indices for g in groups] == [(0, 2), (3,)]


@pytest.mark.parametrize(
    ("pad", "message"),
    [
        ({"batch": 0}, "cannot pad 'batch': it is the batch symbol"),
        ({"sequence": 0}, "cannot pad 'sequence': no parameter has it as a dim (signature: "),
        ({"seq": float("nan")}, None),  # float inputs hold any fill
    ],
)
def test_padding_checks_its_symbol_at_start_up(pad, message):
    exe = _compiled(PADDED)
    if message is None:
        assert BatchPlan.for_executable(exe, "batch", pad=pad).pads[0].symbol == "seq"
        return
    with pytest.raises(ServeConfigError) as info:
        BatchPlan.for_executable(exe, "batch", pad=pad)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("program", "pad", "message"),
    [
        (
            "def @main(%x: Tensor[(batch, seq), float32], %y: Tensor[(batch, seq + 1), float32])"
            " { %x }",
            {"seq": 0},
            "cannot pad 'seq': parameter 'y' is Tensor[(batch, seq + 1), float32], where it "
            "stands inside an expression",
        ),
        (
            "def @main(%x: Tensor[(batch, seq), float32]) { concatenate((%x, %x), axis=1) }",
            {"seq": 0},
            "cannot pad 'seq': result 0 is Tensor[(batch, 2*seq), float32], where it stands "
            "inside an expression (a padded result could not be cut back)",
        ),
        (
            "def @main(%x: Tensor[(batch, seq), int32]) { %x }",
            {"seq": 0.5},
            "cannot pad 'seq' with 0.5: parameter 'x' is int32, which cannot hold it",
        ),
        (
            "def @main(%x: Tensor[(batch, seq), int64]) { %x }",
            {"seq": float("-inf")},
            "cannot pad 'seq' with -inf: parameter 'x' is int64, which cannot hold it",
        ),
        (
            "def @main(%x: Tensor[(batch, s, t), float32]) { %x }",
            {"s": 0, "t": 1},
            "parameter 'x' is padded along s, t with different fills (0, 1): one fill per input",
        ),
    ],
)
def test_what_cannot_be_padded_is_refused_at_start_up(program, pad, message):
    with pytest.raises(ServeConfigError) as info:
        BatchPlan.for_executable(dynshape.compile(program), "batch", pad=pad)
    assert message in str(info.value)


def test_padding_needs_a_batch_symbol():
    with pytest.raises(ServeConfigError, match=r"padding \(seq\) needs a batch symbol"):
        BatchPlan.for_executable(_compiled(PADDED), None, pad={"seq": 0})
