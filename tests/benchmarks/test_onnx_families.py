"""The model families of examples/exported/families.py (benchmarks/onnx_models.py, issue 27):
each builds with onnx alone, passes the checker, has the exporter's dynamic axes, runs in
onnxruntime, and gives onnxruntime's answer in dynshape at the small size; and the benchmark's
own machinery (--dir with npz inputs or random ones at --dim sizes, --both, --only) runs.
No timing is asserted: the machine is shared."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "exported"))

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import families  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402

NAMES = list(families.FAMILIES)

#: Families dynshape cannot import, compile or run correctly today, with the reason: their test
#: is a strict xfail, so it fails (asking for this entry to go) as soon as they work.
KNOWN_FAILURES: dict[str, str] = {}


def _dims(value: object) -> list[int | str]:
    dims = value.type.tensor_type.shape.dim  # type: ignore[attr-defined]
    return [d.dim_param or d.dim_value for d in dims]


def _ort(model: object, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    data = model.SerializeToString()  # type: ignore[attr-defined]
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.fixture(scope="module")
def models() -> dict[str, object]:
    return {name: f.build() for name, f in families.FAMILIES.items()}


@pytest.mark.parametrize("name", NAMES)
def test_the_family_is_an_opset_17_model_with_dynamic_axes(models: dict, name: str) -> None:
    model = models[name]
    onnx.checker.check_model(model, full_check=True)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert all(node.domain == "" for node in model.graph.node)
    assert model.graph.initializer, "weights are initializers"
    inputs = {i.name for i in model.graph.input}
    assert not inputs & {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        assert any(isinstance(d, str) and d for d in _dims(value)), value.name
    # the TorchScript exporter's constants are Constant nodes (a plain CNN has none)
    cnn = name in ("resnet18", "mobilenetv3_small")
    assert cnn or any(node.op_type == "Constant" for node in model.graph.node)


def test_the_exporter_subgraphs_are_there(models: dict) -> None:
    ops = {name: [n.op_type for n in m.graph.node] for name, m in models.items()}
    for name in ("bert_encoder", "gpt2_decoder_step", "llama_decoder_step", "speech_frontend"):
        assert {"Shape", "Gather", "Unsqueeze", "Concat", "Reshape"} <= set(ops[name]), name
        assert "Identity" in ops[name], name
    assert "Erf" in ops["bert_encoder"] and "Tanh" in ops["gpt2_decoder_step"]
    assert {"Sin", "Cos", "Neg", "Slice", "Expand", "ReduceMean"} <= set(ops["llama_decoder_step"])
    assert {"HardSwish", "HardSigmoid", "GlobalAveragePool"} <= set(ops["mobilenetv3_small"])
    assert "BatchNormalization" not in ops["resnet18"] + ops["mobilenetv3_small"]
    assert "LSTM" in ops["lstm_tagger"] and "InstanceNormalization" in ops["speech_frontend"]
    groups = [
        a.i
        for n in models["mobilenetv3_small"].graph.node
        for a in n.attribute
        if a.name == "group"
    ]
    assert max(groups) > 1  # depthwise
    gpt2 = models["gpt2_decoder_step"]
    assert [i.name for i in gpt2.graph.input][:4] == [
        "input_ids",
        "attention_mask",
        "position_ids",
        "past_key_values.0.key",
    ]
    assert _dims(gpt2.graph.input[3]) == ["batch", 4, "past_seq", 32]
    assert [o.name for o in gpt2.graph.output][:2] == ["logits", "present.0.key"]


@pytest.mark.parametrize("size", families.SIZES)
@pytest.mark.parametrize("name", NAMES)
def test_the_inputs_are_valid(name: str, size: str) -> None:
    feeds = families.FAMILIES[name].feeds(size)
    for key, value in feeds.items():
        if key in ("input_ids",):
            assert value.min() >= 0 and value.max() < families.VOCAB
        if key == "attention_mask":
            assert set(np.unique(value)) <= {0, 1}
            assert value[:, -1].all()  # left padding: the last position is always a token


@pytest.mark.parametrize("name", NAMES)
def test_the_family_runs_in_onnxruntime(models: dict, name: str) -> None:
    model = models[name]
    feeds = families.FAMILIES[name].feeds("small")
    outputs = _ort(model, feeds)
    for value, out in zip(model.graph.output, outputs, strict=True):
        assert np.isfinite(out).all(), value.name
        assert out.ndim == len(_dims(value))


def _check(model: object, feeds: dict[str, np.ndarray]) -> None:
    want = _ort(model, feeds)
    vm = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(model)))
    got = vm.run(feeds)
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        scale = max(float(np.max(np.abs(w))), 1.0)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[n]))
        if n in KNOWN_FAILURES
        else n
        for n in NAMES
    ],
)
def test_dynshape_gives_onnxruntimes_answer(models: dict, name: str) -> None:
    _check(models[name], families.FAMILIES[name].feeds("small"))


@pytest.mark.parametrize("name", ["gpt2_decoder_step", "llama_decoder_step"])
def test_a_decoder_prefill_with_an_empty_cache(models: dict, name: str) -> None:
    feeds = families.FAMILIES[name].feeds("prefill")
    assert feeds["past_key_values.0.key"].shape[2] == 0
    _check(models[name], feeds)


# --- the benchmark script ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    script = ROOT / "benchmarks" / "onnx_models.py"
    spec = importlib.util.spec_from_file_location("benchmarks_onnx_models", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_flags(bench: ModuleType) -> None:
    args = bench.parse(["--quick", "--both", "--only", "a,b", "--only", "c", "--dim", "n=3"])
    assert args.quick and args.both and not args.load
    assert args.only == ["a,b", "c"] and args.dim == [("n", 3)]
    with pytest.raises(SystemExit):
        bench.parse(["--load", "--both"])
    with pytest.raises(SystemExit):
        bench.parse(["--dim", "n"])


def test_onnxruntime_threads_by_flag(
    bench: ModuleType,
    models: dict,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--ort-threads sets onnxruntime's intra-op threads (the header says so); 0 is refused."""
    monkeypatch.setattr(bench, "ort_threads", bench.THREADS)
    onnx.save(models["mlp_gelu"], str(tmp_path / "m.onnx"))
    bench.main(["--dir", str(tmp_path), "--dim", "batch=2", "--repeats", "1", "--ort-threads", "1"])
    assert "intra_op_num_threads=1;" in capsys.readouterr().out
    assert bench.session(models["mlp_gelu"]).get_session_options().intra_op_num_threads == 1
    with pytest.raises(SystemExit, match="--ort-threads must be at least 1, got 0"):
        bench.main(["--ort-threads", "0"])


def test_random_inputs_at_the_given_dims(bench: ModuleType, models: dict) -> None:
    model = models["bert_encoder"]
    feeds = bench.random_feeds(model, {"batch": 2, "seq": 5}, np.random.default_rng(0))
    assert {k: v.shape for k, v in feeds.items()} == {"input_ids": (2, 5), "attention_mask": (2, 5)}
    assert feeds["input_ids"].dtype == np.int64
    with pytest.raises(ValueError, match="--dim"):
        bench.random_feeds(model, {"batch": 2}, np.random.default_rng(0))


def test_the_check_against_onnxruntime(bench: ModuleType) -> None:
    a = np.ones((2, 3), np.float32)
    assert bench.check([a], [a]) is None
    assert "shape" in bench.check([a], [a.T])
    assert "error" in bench.check([a + 1], [a])


def test_a_folder_of_models_quiet_and_loaded(
    bench: ModuleType, models: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--dir: npz inputs by size where they are, random ones at --dim sizes elsewhere; --both
    runs every row quiet and loaded and prints the summary."""
    mlp = models["mlp_gelu"]
    onnx.save(mlp, str(tmp_path / "with_inputs.onnx"))
    np.savez(tmp_path / "with_inputs.small.npz", **families.FAMILIES["mlp_gelu"].feeds("small"))
    np.savez(tmp_path / "with_inputs.mid.npz", **families.FAMILIES["mlp_gelu"].feeds("mid"))
    onnx.save(mlp, str(tmp_path / "random.onnx"))
    onnx.save(mlp, str(tmp_path / "skipped.onnx"))
    flags = ["--dim", "batch=3", "--both", "--repeats", "1", "--only", "with_inputs,random"]
    bench.main(["--dir", str(tmp_path), *flags])
    out = capsys.readouterr().out
    rows = [line.split()[:2] for line in out.splitlines() if line.startswith(("with_", "random "))]
    assert ["with_inputs", "small"] in rows and ["with_inputs", "mid"] in rows
    assert ["random", "random"] in rows
    assert "skipped" not in out
    assert "dyn l/q" in out and "loaded/quiet" in out
    assert "import + compile < 2 s" in out and "geometric mean" in out


def test_a_failing_import_is_a_row_not_a_crash(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from onnx import TensorProto, helper

    node = helper.make_node("Bernoulli", ["x"], ["y"])  # random: not an op dynshape imports
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(tmp_path / "bernoulli.onnx"))
    bench.main(["--dir", str(tmp_path), "--dim", "n=4", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "bernoulli" in out and "import failed:" in out
    assert "MISSED" in out


def test_a_compile_past_its_timeout_is_stopped(bench: ModuleType, models: dict) -> None:
    """The compile runs in a child interpreter, which ``--compile-timeout`` stops (a new
    interpreter takes far longer than a millisecond to start)."""
    compiled = bench.compile_model(models["mlp_gelu"], timeout=0.001)
    assert compiled.vm is None and compiled.import_s == float("inf")
    assert compiled.error == "import + compile stopped after 0.001 s (--compile-timeout)"


def test_the_competing_load_is_switched_on_and_off(bench: ModuleType) -> None:
    """The competing process is stopped (state ``T``) while off and runs while on; a signal is
    delivered asynchronously, so each state is awaited (for at most 5 s)."""
    load = bench.Load()

    def reaches(states: str) -> bool:
        stat = Path(f"/proc/{load.process.pid}/stat")
        for _ in range(500):
            if stat.read_text().rsplit(")", 1)[-1].split()[0] in states:
                return True
            time.sleep(0.01)
        return False

    try:
        assert reaches("T")
        load.set(True)
        assert reaches("RS")
        load.set(False)
        assert reaches("T")
    finally:
        load.close()
    assert load.process.poll() is not None
