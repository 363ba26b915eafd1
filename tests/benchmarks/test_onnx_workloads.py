"""The ONNX graphs of benchmarks/onnx_workloads.py (compare_numpy.py's optional ort column):
each agrees with the plain numpy version at small sizes, its varying dims are symbolic, and
compare_numpy.py has the ort columns with onnxruntime and runs as before without it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def load(script: Path) -> ModuleType:
    if str(script.parent) not in sys.path:  # as when the script runs: its folder on the path
        sys.path.insert(0, str(script.parent))
    spec = importlib.util.spec_from_file_location(f"benchmarks_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


cn = load(BENCHMARKS / "compare_numpy.py")
CASES = [(w, size) for w in cn.WORKLOADS for size in w.quick_sizes]


@pytest.fixture
def onnxruntime() -> ModuleType:
    pytest.importorskip("onnx")
    return pytest.importorskip("onnxruntime")


def _inputs(w: Any, size: int) -> list[np.ndarray]:
    return list(w.inputs(size, np.random.default_rng(size)))


def test_every_workload_has_an_onnx_graph() -> None:
    for w in cn.WORKLOADS:
        assert w.onnx is not None, w.name
        assert 1 <= w.feeds <= len(_inputs(w, w.quick_sizes[0])), w.name


@pytest.mark.parametrize("w, size", CASES, ids=[f"{w.name}-{size}" for w, size in CASES])
def test_the_onnx_graph_agrees_with_plain_numpy(onnxruntime: ModuleType, w: Any, size: int) -> None:
    args = _inputs(w, size)
    run, init_s = cn.ort_runner(w, size, args, {})
    got, want = run(*args), w.plain(*args)
    assert init_s > 0
    assert got.dtype == np.float32
    cn._check("onnxruntime", got, want)  # the script's own check and tolerance


def _dims(value_info: Any) -> list[int | str | None]:
    dims = value_info.type.tensor_type.shape.dim
    return [d.dim_param or (d.dim_value if d.HasField("dim_value") else None) for d in dims]


def test_the_varying_dims_are_symbolic(onnxruntime: ModuleType) -> None:
    ow = cn.ow
    models = {w.name: w.onnx(*_inputs(w, 2)[w.feeds :]) for w in cn.WORKLOADS}
    seed, mlp, encoder, select, chain = (models[w.name] for w in cn.WORKLOADS)
    assert [_dims(i) for i in seed.graph.input] == [["n"], ["n"]]
    assert _dims(mlp.graph.input[0]) == ["batch", cn.HIDDEN]
    assert _dims(encoder.graph.input[0]) == ["seq", cn.D_MODEL]
    assert _dims(select.graph.input[0]) == ["n"] and _dims(select.graph.output[0]) == [None]
    assert _dims(chain.graph.input[0]) == list(cn.CHAIN_SHAPE)
    for model in models.values():
        assert model.opset_import[0].version == ow.OPSET
        assert all(node.domain == "" for node in model.graph.node)  # standard ops only
    # the weights are initializers, not inputs
    assert len(mlp.graph.input) == 1 and len(mlp.graph.initializer) == 6
    assert {i.name for i in encoder.graph.initializer} >= set(ow.ENCODER_WEIGHTS)


def test_one_session_serves_every_size_of_a_weightless_workload(onnxruntime: ModuleType) -> None:
    seed, mlp = cn.WORKLOADS[0], cn.WORKLOADS[1]
    sessions: dict[Any, Any] = {}
    for n in (1, 7, 1000):
        args = _inputs(seed, n)
        run, _ = cn.ort_runner(seed, n, args, sessions)
        np.testing.assert_array_equal(run(*args), seed.plain(*args))
    for b in (1, 3):  # the weights are drawn per size: one session each
        args = _inputs(mlp, b)
        cn._check("onnxruntime", cn.ort_runner(mlp, b, args, sessions)[0](*args), mlp.plain(*args))
    assert len(sessions) == 3


def test_select_keeps_no_element_of_a_negative_vector(onnxruntime: ModuleType) -> None:
    select = next(w for w in cn.WORKLOADS if w.name.startswith("x[x>0]"))
    x = -np.abs(_inputs(select, 5)[0]) - 1
    run, _ = cn.ort_runner(select, 5, [x], {})
    assert run(x).shape == (0,)


def _quick_run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    keep = [w for w in cn.WORKLOADS if w.name.startswith(("seed", "x[x>0]"))]
    monkeypatch.setattr(cn, "WORKLOADS", keep)
    cn.main(["--quick", "--repeats", "1"])
    return capsys.readouterr().out


def test_the_quick_run_has_the_ort_columns(
    onnxruntime: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _quick_run(monkeypatch, capsys)
    lines = out.splitlines()
    assert f"onnxruntime {onnxruntime.__version__}" in lines[0]
    assert lines[1] == cn.header(with_ort=True)
    assert [c.strip() for c in lines[1].split("|")][6:11] == [
        "ort",
        "ds/np",
        "ds/out",
        "ds/ort",
        "compile",
    ]
    assert "ort init" in lines[1]
    assert "not installed" not in out and "onnxruntime disagrees" not in out
    rows = [line for line in lines[3:] if line.startswith("| ") and "ERROR" not in line]
    for row in rows:  # every measured row has an ort time
        assert len(row.split("|")) == len(lines[1].split("|")), row
        assert row.split("|")[6].strip().endswith("us"), row


def test_without_onnxruntime_the_table_is_as_before(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cn.ow, "AVAILABLE", False)
    out = _quick_run(monkeypatch, capsys)
    lines = out.splitlines()
    assert out.count("onnxruntime is not installed") == 1
    assert lines[2] == cn.HEADER == cn.header(with_ort=False)
    assert "ort" not in cn.HEADER
    assert "ort" not in "".join(line for line in lines if line.startswith("| "))
