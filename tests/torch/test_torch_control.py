"""Control flow and data-dependent sizes: ``torch.cond`` as an ``if`` (a predicate computed
from data, and one on sizes that the ranges leave open, computed at run time from the input
shapes), ``while_loop`` as a loop, ``nonzero``'s unbacked size as a ``?`` dim."""

from __future__ import annotations

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


class Branches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: Any, flag: Any) -> Any:
        by_data = torch.cond(flag.sum() > 0, lambda x: self.lin(x).relu(), lambda x: x * 2, (x,))
        by_size = torch.cond(x.shape[0] > 4, lambda x: x + 1, lambda x: x - 1, (x,))
        return by_data, by_size


def test_cond_becomes_an_if_on_data_and_on_sizes() -> None:
    torch.manual_seed(0)
    ep = export(
        Branches().eval(),
        (torch.randn(3, 4), torch.ones(2)),
        dynamic_shapes={"x": {0: Dim("n", max=16)}, "flag": None},
    )
    program = dstorch.load(ep)
    text = str(program)
    assert text.count("if (") == 2
    assert "shape_of(%x)" in text and "4i64)" in text  # n > 4, read off x at run time
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    reference = ep.module()
    for n, sign in [(1, 1.0), (4, -1.0), (5, 1.0), (16, -1.0)]:
        x = np.random.randn(n, 4).astype(np.float32)
        flag = np.full(2, sign, np.float32)
        got = vm.run(x, flag)
        expected = reference(torch.from_numpy(x), torch.from_numpy(flag))
        for ours, theirs in zip(got, expected, strict=True):
            np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_a_branch_with_an_unsupported_op_is_listed_with_the_others() -> None:
    class Flipping(nn.Module):
        def forward(self, x: Any) -> Any:
            return torch.cond(x.sum() > 0, lambda x: torch.flip(x, [0]), lambda x: x.clone(), (x,))

    ep = export(Flipping(), (torch.randn(3, 4),))
    with pytest.raises(dynshape.ModelImportError, match=r"unsupported target aten\.flip"):
        dstorch.load(ep)


class NonZero(nn.Module):
    def forward(self, x: Any) -> Any:
        rows = torch.nonzero(x > 0)
        return rows, rows.shape[0] * 2 + x.sum()


def test_an_unbacked_size_is_a_data_dependent_dim() -> None:
    """``nonzero``'s row count (torch's ``u0``) is the ``?`` dim of ``argwhere``; torch's
    assertions ``u0 >= 0`` and ``u0 <= 64`` are proved (rows <= numel = 4n <= 64) and dropped;
    ``u0`` used as a number is read off the result's shape at run time."""
    ep = export(NonZero(), (torch.randn(3, 4),), dynamic_shapes={"x": {0: Dim("n", max=16)}})
    assert sum(str(n.target) == "aten._assert_scalar.default" for n in ep.graph.nodes) == 2
    program = dstorch.load(ep)
    assert program.ranges == {"n": (0, 16)}
    assert "argwhere(" in str(program)
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    for n in (0, 3, 16):
        x = np.random.randn(n, 4).astype(np.float32)
        rows, total = vm.run(x)
        expected_rows, expected_total = NonZero()(torch.from_numpy(x))
        np.testing.assert_array_equal(rows, expected_rows.numpy())
        np.testing.assert_allclose(total, expected_total.numpy(), rtol=1e-6)


def test_an_assertion_on_an_unbacked_size_that_is_not_proved_is_unsupported() -> None:
    class Checked(nn.Module):
        def forward(self, x: Any) -> Any:
            rows = torch.nonzero(x > 0)
            torch._check(rows.shape[0] <= 10)
            return rows

    ep = export(Checked(), (torch.randn(3, 4),), dynamic_shapes={"x": {0: Dim("n", max=16)}})
    with pytest.raises(dynshape.ModelImportError, match=r"unsupported: the assertion u0 <= 10"):
        dstorch.load(ep)


class Repeated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: Any, steps: Any) -> Any:
        from torch._higher_order_ops.while_loop import while_loop

        def cond(i: Any, y: Any) -> Any:
            return i < steps.sum()

        def body(i: Any, y: Any) -> Any:
            return i + 1, self.lin(y).tanh()

        i, y = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), x))
        return y, i


def test_while_loop_becomes_a_loop() -> None:
    torch.manual_seed(0)
    ep = export(
        Repeated().eval(),
        (torch.randn(3, 4), torch.tensor([3])),
        dynamic_shapes={"x": {0: Dim("b", max=16)}, "steps": None},
    )
    program = dstorch.load(ep)
    assert "def @loop(" in str(program)
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    reference = ep.module()
    for b, steps in [(1, 0), (3, 2), (16, 5)]:
        x, k = np.random.randn(b, 4).astype(np.float32), np.array([steps])
        got = vm.run(x, k)
        expected = reference(torch.from_numpy(x), torch.from_numpy(k))
        for ours, theirs in zip(got, expected, strict=True):
            np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-5, atol=1e-6)
