"""What a user gets for what the importer cannot take: every unsupported target at once
with its count, decomposition where it helps, mismatched inputs at run time, wrong
arguments to ``load``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

# torch.export, not torch: without torch installed, "torch" would import tests/torch itself
# (a namespace package: tests/ is on the path)
pytest.importorskip("torch.export")
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim, export

import dynshape
import dynshape.torch as dstorch
from dynshape.errors import ModelImportError
from vm.errors import VMArgumentError


class Unsupported(nn.Module):
    def forward(self, x: Any) -> Any:
        return torch.flip(x, [0]) + torch.flip(x, [1]) + torch.cumprod(x, 0)


def test_every_unsupported_target_is_listed_at_once_with_its_count() -> None:
    ep = export(Unsupported(), (torch.randn(3, 4),))
    with pytest.raises(ModelImportError) as info:
        dstorch.load(ep)
    e = info.value
    assert e.message == "the exported program cannot be imported: 2 problem(s)"
    assert e.problems == (
        "unsupported target aten.cumprod.default (1 node(s): cumprod)",
        "unsupported target aten.flip.default (2 node(s): flip, flip_1)",
    )


class HardSwish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        return F.hardswish(self.lin(x))


def test_a_target_without_converter_is_decomposed_when_that_helps() -> None:
    model = HardSwish().eval()
    ep = export(model, (torch.randn(3, 4),), dynamic_shapes={"x": {0: Dim("batch", max=64)}})
    assert dstorch.missing_targets(ep) == [
        "unsupported target aten.hardswish.default (1 node(s): hardswish)"
    ]
    imported = dstorch.import_program(ep)
    assert imported.decomposed
    assert "aten.hardswish.default" not in imported.targets
    assert imported.program.ranges == {"batch": (0, 64)}
    x = np.random.randn(5, 4).astype(np.float32)
    got = dynshape.VirtualMachine(dynshape.compile(imported.program)).run(x)
    np.testing.assert_allclose(got, model(torch.from_numpy(x)).detach().numpy(), atol=1e-6)


def test_a_training_mode_program_is_refused_with_the_fix() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    ep = export(model, (torch.randn(2, 3, 8, 8),))
    with pytest.raises(
        ModelImportError,
        match=r"unsupported: it updates state \(aten.add_.Tensor of b_1_num_batches_tracked\); "
        r"export the model in eval mode \(model.eval\(\)\)",
    ):
        dstorch.load(ep)


def test_a_mismatched_input_is_refused_at_run_time_naming_it() -> None:
    model = nn.Linear(8, 3)
    ep = export(model, (torch.randn(2, 8),), dynamic_shapes={"input": {0: Dim("batch")}})
    vm = dynshape.VirtualMachine(dynshape.compile(dstorch.load(ep)))
    with pytest.raises(VMArgumentError, match=r"parameter 'input': axis 1 must be 8, got 5"):
        vm.run(np.zeros((2, 5), np.float32))


def test_load_refuses_what_is_not_a_program(tmp_path: Any) -> None:
    with pytest.raises(
        ModelImportError,
        match=r"expected a torch\.export\.ExportedProgram or a \.pt2 path, got Linear",
    ):
        dstorch.load(nn.Linear(2, 2))
    with pytest.raises(ModelImportError, match="no such file"):
        dstorch.load(tmp_path / "missing.pt2")
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"not a zip at all")
    with pytest.raises(ModelImportError, match=r"junk.pt2 is not a .pt2 archive"):
        dstorch.load(junk)


def test_outputs_may_be_renamed() -> None:
    ep = export(nn.Linear(2, 2), (torch.randn(1, 2),))
    assert dstorch.load(ep).outputs == ("linear",)
    assert dstorch.load(ep, outputs=["logits"]).outputs == ("logits",)
    with pytest.raises(ModelImportError, match="outputs= gives 2 names for 1 outputs"):
        dstorch.load(ep, outputs=["a", "b"])
