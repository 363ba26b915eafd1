"""Imported ONNX models: dynshape against numpy and onnxruntime, and import + compile time.

    python benchmarks/onnx_models.py [--quick]

The models are those of ``examples/exported/onnx_models.py`` (exported-style graphs with
dynamic axes): the encoder layer with an attention mask at several (batch, seq), against its
plain numpy version and onnxruntime (when installed; one thread, no spinning, the same for
every column), and the CNN against onnxruntime. Each is imported and compiled once for every
size. Latencies are medians of interleaved samples (the order rotates between repeats; each
sample is the mean of enough calls to last a few milliseconds); ratios are dynshape's time
over the other's, so below 1 is faster.

Then import + compile time of stacked encoder layers, 34 nodes each, up to 2,720 nodes: it must
take seconds and grow linearly (the last column: seconds per 1,000 nodes).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "exported"))

from onnx_models import (  # noqa: E402
    D,
    cnn,
    detection,
    detector_output,
    encoder,
    encoder_numpy,
    stacked_encoder,
    weights,
)

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402

try:
    import onnxruntime as ort
except ImportError:  # optional: the ort column is left out
    ort = None


def sample(fn: Callable[[], Any], budget: float = 0.004) -> float:
    """Mean seconds of one call, over enough calls to last ``budget`` seconds."""
    fn()
    count, start = 0, time.perf_counter()
    while True:
        fn()
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= budget:
            return elapsed / count


def medians(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Interleaved samples of every function, the order rotating; the median of each."""
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            times[n].append(sample(fns[n]))
    return {n: statistics.median(t) for n, t in times.items()}


def session(model: Any) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def latency_rows(repeats: int, quick: bool) -> None:
    print(f"{'model':<30}{'dynshape':>11}{'numpy':>11}{'ort':>11}{'vs numpy':>10}{'vs ort':>9}")
    rng = np.random.default_rng(0)
    model = encoder()
    w = weights(model)
    vm = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(model)))
    sess = session(model) if ort else None
    for batch, seq in [(1, 8), (4, 64)] if quick else [(1, 8), (1, 128), (4, 64), (8, 256)]:
        x = rng.standard_normal((batch, seq, D)).astype(np.float32)
        mask = np.ones((batch, seq), np.int64)
        fns: dict[str, Callable[[], Any]] = {
            "dynshape": lambda x=x, mask=mask: vm.run(x, mask),
            "numpy": lambda x=x, mask=mask: encoder_numpy(w, x, mask),
        }
        if sess:
            fns["ort"] = lambda x=x, mask=mask: sess.run(None, {"x": x, "mask": mask})
        _row(f"encoder (batch, seq)=({batch}, {seq})", medians(fns, repeats))
    model = cnn()
    vm = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(model)))
    sess = session(model) if ort else None
    for shape in [(1, 3, 32, 32)] if quick else [(1, 3, 32, 32), (8, 3, 64, 64)]:
        x = rng.standard_normal(shape).astype(np.float32)
        fns = {"dynshape": lambda x=x: vm.run(x)}
        if sess:
            fns["ort"] = lambda x=x: sess.run(None, {"x": x})
        _row(f"cnn {shape}", medians(fns, repeats))
    model = detection()
    vm = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(model)))
    sess = session(model) if ort else None
    for batch, classes, n in [(1, 3, 100)] if quick else [(1, 3, 100), (4, 20, 1000)]:
        boxes, scores = detector_output(rng, batch, classes, n)
        fns = {"dynshape": lambda b=boxes, s=scores: vm.run(b, s)}
        if sess:
            fns["ort"] = lambda b=boxes, s=scores: sess.run(None, {"boxes": b, "scores": s})
        _row(f"detection {(batch, classes, n)}", medians(fns, repeats))


def _row(label: str, t: dict[str, float]) -> None:
    def us(name: str) -> str:
        return f"{t[name] * 1e6:9.0f}us" if name in t else f"{'-':>11}"

    def ratio(name: str) -> str:
        return f"{t['dynshape'] / t[name]:9.2f}x" if name in t else f"{'-':>10}"

    print(f"{label:<30}{us('dynshape')}{us('numpy')}{us('ort')}{ratio('numpy')}{ratio('ort'):>9}")


def compile_rows(quick: bool) -> None:
    print(f"\n{'stacked encoder':<22}{'nodes':>7}{'import':>9}{'compile':>9}{'s / 1k nodes':>14}")
    for layers in (5, 20) if quick else (10, 20, 40, 80):
        model = stacked_encoder(layers)
        start = time.perf_counter()
        program = dynshape.onnx.load(model)
        imported = time.perf_counter()
        dynshape.compile(program)
        done = time.perf_counter()
        nodes = len(model.graph.node)
        print(
            f"{f'{layers} layers':<22}{nodes:>7}{imported - start:>8.2f}s{done - imported:>8.2f}s"
            f"{(done - start) / nodes * 1000:>13.2f}s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats (CI smoke)")
    args = parser.parse_args()
    latency_rows(repeats=3 if args.quick else 9, quick=args.quick)
    compile_rows(args.quick)


if __name__ == "__main__":
    main()
