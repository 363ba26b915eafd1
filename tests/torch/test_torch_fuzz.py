"""A fuzz of ``.pt2`` files: structured edits of the graph (targets, arguments, range
constraints, tensor metadata) and of the archive (truncation, flipped bytes, a missing
member). Whatever the edit, ``load`` and ``compile`` either succeed or raise the project's
errors (a ``DynShapeError``), never anything else."""

from __future__ import annotations

import json
import random
import zipfile
from collections.abc import Callable
from pathlib import Path
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
from dynshape_errors import DynShapeError


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 3, stride=2)
        self.norm = nn.LayerNorm(4)

    def forward(self, x: Any) -> Any:
        return self.norm(torch.relu(self.conv(x)).transpose(1, 2))


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    ep = export(
        Small().eval(),
        (torch.randn(2, 2, 9),),
        dynamic_shapes={"x": {0: Dim("batch", max=8), 2: Dim("t", min=5, max=99)}},
    )
    path = tmp_path_factory.mktemp("fuzz") / "small.pt2"
    torch.export.save(ep, str(path))
    return path


def _rewrite(src: Path, dst: Path, edit: Callable[[str, bytes], bytes | None]) -> None:
    """Copy the archive, each member through ``edit`` (None drops it)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = edit(item.filename, zin.read(item))
            if data is not None:
                zout.writestr(item, data)


def _graph_edit(change: Callable[[dict[str, Any]], None]) -> Callable[[str, bytes], bytes]:
    def edit(name: str, data: bytes) -> bytes:
        if not name.endswith("models/model.json"):
            return data
        model = json.loads(data)
        change(model)
        return json.dumps(model).encode()

    return edit


def _nodes(model: dict[str, Any]) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = model["graph_module"]["graph"]["nodes"]
    return nodes


def _set_target(old: str, new: str) -> Callable[[dict[str, Any]], None]:
    def change(model: dict[str, Any]) -> None:
        for node in _nodes(model):
            if node["target"] == f"torch.ops.aten.{old}":
                node["target"] = f"torch.ops.aten.{new}"

    return change


def _node(model: dict[str, Any], target: str) -> dict[str, Any]:
    return next(n for n in _nodes(model) if n["target"] == f"torch.ops.aten.{target}")


def _drop_weight(model: dict[str, Any]) -> None:
    conv = _node(model, "conv1d.default")
    conv["inputs"] = [a for a in conv["inputs"] if a["name"] != "weight"]


def _rewire(model: dict[str, Any]) -> None:
    """The convolution reads its bias where its input was (a wrong tensor, a valid file)."""
    conv = _node(model, "conv1d.default")
    conv["inputs"][0]["arg"] = {"as_tensor": {"name": "p_conv_bias"}}


def _lying_range(model: dict[str, Any]) -> None:
    """Sizes the convolution cannot take, declared valid: ``t`` down to 0."""
    for bounds in model["range_constraints"].values():
        bounds["min_val"] = 0


def _narrow_ranges(model: dict[str, Any]) -> None:
    for bounds in model["range_constraints"].values():
        bounds["min_val"], bounds["max_val"] = 7, 3


def _tensor_meta(model: dict[str, Any]) -> None:
    for meta in model["graph_module"]["graph"]["tensor_values"].values():
        meta["sizes"] = meta["sizes"][:-1]


def _dtype(model: dict[str, Any]) -> None:
    for meta in model["graph_module"]["graph"]["tensor_values"].values():
        meta["dtype"] = 12  # another ScalarType


GRAPH_EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "unknown_target": _set_target("conv1d.default", "nonexistent_op.default"),
    "other_schema": _set_target("conv1d.default", "flip.default"),
    "other_target": _set_target("relu.default", "lgamma.default"),
    "other_layout_op": _set_target("transpose.int", "select.int"),
    "dropped_argument": _drop_weight,
    "rewired_argument": _rewire,
    "lying_range": _lying_range,
    "empty_ranges": _narrow_ranges,
    "truncated_sizes": _tensor_meta,
    "other_dtype": _dtype,
}


def _check(path: Path) -> None:
    """Load, compile and run: success or the project's errors only."""
    try:
        exe = dynshape.compile(dstorch.load(path))
        dynshape.VirtualMachine(exe).run(np.ones((1, 2, 9), np.float32))
    except DynShapeError:
        pass


@pytest.mark.parametrize("name", sorted(GRAPH_EDITS))
def test_a_structured_graph_edit_gives_the_projects_errors_only(
    name: str, archive: Path, tmp_path: Path
) -> None:
    edited = tmp_path / f"{name}.pt2"
    _rewrite(archive, edited, _graph_edit(GRAPH_EDITS[name]))
    _check(edited)


def test_a_damaged_graph_is_refused_with_torchs_reason(archive: Path, tmp_path: Path) -> None:
    edited = tmp_path / "ranges.pt2"
    _rewrite(archive, edited, _graph_edit(GRAPH_EDITS["empty_ranges"]))
    with pytest.raises(DynShapeError, match=r"ValueRangeError: Invalid ranges \[7:3\]"):
        dstorch.load(edited)
    edited = tmp_path / "rewired.pt2"
    _rewrite(archive, edited, _graph_edit(GRAPH_EDITS["rewired_argument"]))
    with pytest.raises(DynShapeError, match=r"node 'conv1d' \(aten\.conv1d\.default\)"):
        dstorch.load(edited)


def test_an_unknown_target_is_named(archive: Path, tmp_path: Path) -> None:
    edited = tmp_path / "flip.pt2"
    _rewrite(archive, edited, _graph_edit(GRAPH_EDITS["other_target"]))
    with pytest.raises(DynShapeError, match=r"unsupported target aten\.lgamma\.default \(1 node"):
        dstorch.load(edited)


@pytest.mark.parametrize("seed", range(12))
def test_archive_damage_gives_the_projects_errors_only(
    seed: int, archive: Path, tmp_path: Path
) -> None:
    rng = random.Random(seed)
    edited = tmp_path / "damaged.pt2"
    kind = seed % 3
    if kind == 0:  # truncated
        data = archive.read_bytes()
        edited.write_bytes(data[: rng.randrange(1, len(data))])
    elif kind == 1:  # bytes flipped in one member

        def flip(name: str, data: bytes) -> bytes:
            if not data or rng.random() < 0.5:
                return data
            mutable = bytearray(data)
            for _ in range(rng.randrange(1, 8)):
                mutable[rng.randrange(len(mutable))] ^= 1 << rng.randrange(8)
            return bytes(mutable)

        _rewrite(archive, edited, flip)
    else:  # a member dropped
        with zipfile.ZipFile(archive) as z:
            victim = rng.choice(z.namelist())
        _rewrite(archive, edited, lambda name, data: None if name == victim else data)
    _check(edited)
