"""Batching requests with symbolic dims (issue 18, item 2; dynshape/serve/batching.py): which
requests share a call, that each gets exactly the rows it would get alone, and the messages of
what cannot be batched."""

from __future__ import annotations

import numpy as np
import pytest

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
    assert refused == {1: "the inputs disagree on batch, their leading dim (x: 2, w: 3)"}
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
