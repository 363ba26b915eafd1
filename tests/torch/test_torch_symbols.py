"""torch's symbols as dynshape's: Dim names, derived dims as expressions, ranges (on the
program, in the memory report, checked at entry), ``dims=``, assertions as entry checks."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import pytest

# torch.export, not torch: without torch installed, "torch" would import tests/torch itself
# (a namespace package: tests/ is on the path)
pytest.importorskip("torch.export")
import torch
from torch import nn
from torch.export import Dim, export

import dynshape
import dynshape.torch as dstorch
import ir
from dynshape.errors import ModelImportError
from dynshape.memory_report import memory_report
from dynshape_errors import DynShapeError
from vm.errors import RunTimeShapeError


class Halves(nn.Module):
    def forward(self, x: Any, y: Any) -> Any:
        n = x.shape[0]
        return x[: n // 2] + y, torch.cat([x, x], 0), x[1:].sum(0, keepdim=True)


def test_derived_dims_stay_expressions() -> None:
    dx = Dim("dx", min=2, max=100)
    ep = export(
        Halves(),
        (torch.randn(8, 3), torch.randn(4, 3)),
        dynamic_shapes={"x": {0: 2 * dx}, "y": {0: dx}},
    )
    program = dstorch.load(ep)
    text = str(program)
    assert "%x: Tensor[(2*dx, 3), float32], %y: Tensor[(dx, 3), float32]" in text
    assert program.ranges == {"dx": (2, 100)}
    exe = dynshape.compile(program)
    assert "-> (Tensor[(dx, 3), float32], Tensor[(4*dx, 3), float32]" in repr(exe)
    x, y = np.random.randn(10, 3).astype(np.float32), np.random.randn(5, 3).astype(np.float32)
    got = dynshape.VirtualMachine(exe).run(x, y)
    expected = Halves()(torch.from_numpy(x), torch.from_numpy(y))
    for ours, theirs in zip(got, expected, strict=True):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-5, atol=1e-6)


class Positions(nn.Module):
    def forward(self, x: Any, past: Any) -> Any:
        pos = torch.arange(past.shape[1], past.shape[1] + x.shape[1])
        return x + pos.to(x.dtype)


def test_arange_between_dims_reads_them_at_run_time() -> None:
    ep = export(
        Positions(),
        (torch.randn(2, 3), torch.randn(2, 5)),
        dynamic_shapes={"x": {1: Dim("seq")}, "past": {1: Dim("past")}},
    )
    vm = dynshape.VirtualMachine(dynshape.compile(dstorch.load(ep)))
    for seq, past in [(1, 0), (4, 7)]:
        x, p = np.random.randn(2, seq).astype(np.float32), np.zeros((2, past), np.float32)
        expected = Positions()(torch.from_numpy(x), torch.from_numpy(p)).numpy()
        np.testing.assert_array_equal(vm.run(x, p), expected)


class Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: Any) -> Any:
        return self.lin(x) * 2


def _scale(batch: Any = None, seq: Any = None) -> Any:
    batch = batch or Dim("batch", min=1, max=64)
    seq = seq or Dim("seq", min=1, max=2048)
    return export(Scale().eval(), (torch.randn(2, 5, 8),), dynamic_shapes={"x": {0: batch, 1: seq}})


def test_the_ranges_bound_the_memory_report_and_are_checked_at_entry() -> None:
    program = dstorch.load(_scale())
    assert program.ranges == {"batch": (1, 64), "seq": (1, 2048)}
    report = memory_report(program)["main"]
    bound = ir.upper_bound(report.planned_peak, program.ranges)
    assert bound is not None  # a finite peak: seq <= 2048 and batch <= 64
    at_max = report.evaluate({ir.sym("batch"): 64, ir.sym("seq"): 2048})["planned_peak"]
    assert 0 < at_max <= bound
    with pytest.raises(DynShapeError, match=r"seq.*2049|2049.*seq"):
        memory_report(program, {"batch": 1, "seq": 2049})
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    with pytest.raises(RunTimeShapeError, match=r"seq = 2049 is outside its declared range"):
        vm.run(np.zeros((1, 2049, 8), np.float32))


def test_dims_renames_fixes_and_narrows() -> None:
    ep = _scale()
    program = dstorch.load(ep, dims={"batch": "b", "seq": (1, 128)})
    assert program.ranges == {"b": (1, 64), "seq": (1, 128)}
    assert "Tensor[(b, seq, 8), float32]" in str(program)
    fixed = dstorch.load(ep, dims={"batch": 1})
    assert "Tensor[(1, seq, 8), float32]" in str(fixed)
    assert fixed.ranges == {"seq": (1, 2048)}
    with pytest.raises(ModelImportError, match="dims= names bat, which no input"):
        dstorch.load(ep, dims={"bat": 1})
    with pytest.raises(ModelImportError, match=r"outside the range torch recorded \[1, 64\]"):
        dstorch.load(ep, dims={"batch": 65})
    with pytest.raises(ModelImportError, match="no size is also in the range"):
        dstorch.load(ep, dims={"seq": (4000, 5000)})


def _with_assertion(relation: Any) -> Any:
    """``x * 2`` with an ``aten._assert_scalar`` of ``relation(x.shape[0])`` inserted, as
    torch writes one for a check it could not prove at export."""
    ep = export(
        nn.Identity(), (torch.randn(8, 3),), dynamic_shapes={"input": {0: Dim("n", max=100)}}
    )
    graph = ep.graph
    x = next(n for n in graph.nodes if n.op == "placeholder")
    out = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(out):
        size = graph.call_function(torch.ops.aten.sym_size.int, (x, 0))
        size.meta["val"] = x.meta["val"].shape[0]
        cond = graph.call_function(operator.ge, (size, 4))
        cond.meta["val"] = relation(x.meta["val"].shape[0])
        graph.call_function(torch.ops.aten._assert_scalar.default, (cond, "the check"))
    return ep


def test_a_bound_assertion_becomes_an_entry_check() -> None:
    program = dstorch.load(_with_assertion(lambda n: n >= 4))
    assert program.ranges == {"n": (4, 100)}
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    assert vm.run(np.ones((4, 3), np.float32)).shape == (4, 3)
    with pytest.raises(RunTimeShapeError, match=r"n = 2 is outside its declared range \[4, 100\]"):
        vm.run(np.ones((2, 3), np.float32))


def test_an_assertion_the_ranges_prove_is_dropped() -> None:
    program = dstorch.load(_with_assertion(lambda n: n <= 1000))
    assert program.ranges == {"n": (0, 100)}
    assert dstorch.load(_with_assertion(lambda n: n < 50)).ranges == {"n": (0, 49)}


def test_an_assertion_on_a_relation_is_unsupported() -> None:
    with pytest.raises(ModelImportError, match=r"_assert_scalar.*unsupported: the assertion"):
        dstorch.load(_with_assertion(lambda n: n % 2 == 0))
