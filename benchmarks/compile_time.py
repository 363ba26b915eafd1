"""Compile time of the example models and of op chains, with where it goes.

For each program: the median of ``dynshape.compile`` over several runs, and the share spent in
type inference (``InferTypes.run``, however often the pipeline calls it) and in each pass. The
chains (200 to 1,600 ops) show how compile time grows with program size: a flat time per op is
linear growth.

    python benchmarks/compile_time.py [--quick] [--repeat N]
    python benchmarks/compile_time.py --against ../base-checkout [--rounds 5]
    python benchmarks/compile_time.py --models     # the CNN reproducers of issue 27 only

The second table (needs ``onnx``): import + compile of convolution networks built the way
PyTorch exports them (``onnx_cnns``: a ResNet-18 structure, a MobileNetV3-like stack with
depthwise convolutions and squeeze-excite, a conv1d speech front end), each also with a strange
input dim (2^31, a dim_param ``n//0``): seconds per phase, the slowest pass, the size proofs
asked, and the memory plans given up for want of proof budget. Issue 27's target: under 2 s
each (design/compiler.md, "Compile time and proof budgets").

``--against`` compares with another checkout of the project (an older commit, say) on the same
programs (this checkout's): each round compiles every program in a fresh process of each
checkout, the two alternating which goes first, and each cell is the median over rounds of
each round's median compile time (the figures in benchmarks/RESULTS.md were measured so).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import compare_numpy as cn

import dynshape
from dynshape.passes import infer_types

PROGRAMS: dict[str, Callable[[], str]] = {
    "seed": lambda: cn.SEED,
    "mlp": lambda: cn.MLP,
    "encoder": lambda: cn.ENCODER,
    "data-dependent": lambda: cn.DATA_DEPENDENT,
    "chain 200": lambda: cn.chain_program(200),
    "chain 400": lambda: cn.chain_program(400),
    "chain 800": lambda: cn.chain_program(800),
    "chain 1600": lambda: cn.chain_program(1600),
}


class _Timer:
    """Seconds spent in each wrapped callable, by label, over one compile."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[label] += time.perf_counter() - t0
                self.calls[label] += 1

        return timed


def measure(text: str, repeat: int) -> tuple[float, dict[str, float], int]:
    """Median compile seconds, the median share of inference, and inference runs per compile."""
    totals, shares, runs = [], [], 0
    original = infer_types.InferTypes.run
    for _ in range(repeat):
        timer = _Timer()
        infer_types.InferTypes.run = timer.wrap("infer", original)  # type: ignore[method-assign]
        try:
            t0 = time.perf_counter()
            dynshape.compile(text)
            total = time.perf_counter() - t0
        finally:
            infer_types.InferTypes.run = original  # type: ignore[method-assign]
        totals.append(total)
        shares.append(timer.spent["infer"] / total)
        runs = timer.calls["infer"]
    return statistics.median(totals), {"infer": statistics.median(shares)}, runs


# Run in a child process with the other checkout first on the path: times each program's
# dynshape.compile (median of N after one warm-up) and prints the medians as JSON.
_CHILD = """
import json, statistics, sys, time
import dynshape
programs, repeat = json.loads(sys.stdin.read())
out = {}
for name, text in programs.items():
    dynshape.compile(text)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        dynshape.compile(text)
        times.append(time.perf_counter() - t0)
    out[name] = statistics.median(times)
print(json.dumps(out))
"""


def _child_medians(checkout: Path, programs: dict[str, str], repeat: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps([programs, repeat]),
        capture_output=True,
        text=True,
        cwd=checkout,
        env=env,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compare(other: Path, rounds: int, repeat: int, quick: bool) -> None:
    """Print this checkout's compile times against ``other``'s, interleaved (module docstring)."""
    here = Path(__file__).resolve().parent.parent
    programs = {n: make() for n, make in PROGRAMS.items() if not (quick and n == "chain 1600")}
    samples: dict[Path, list[dict[str, float]]] = {here: [], other: []}
    for r in range(rounds):
        for checkout in (other, here) if r % 2 == 0 else (here, other):
            samples[checkout].append(_child_medians(checkout, programs, repeat))
    print(f"{'program':<16} {'before ms':>10} {'after ms':>10} {'after/before':>13}")
    for name in programs:
        before = statistics.median(s[name] for s in samples[other])
        after = statistics.median(s[name] for s in samples[here])
        print(f"{name:<16} {before * 1e3:>10.2f} {after * 1e3:>10.2f} {after / before:>13.2f}")


def onnx_cnns() -> dict[str, Callable[[], Any]]:
    """The reproducer models of issue 27 (``onnx.helper`` graphs), by name."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    class Graph:
        def __init__(self, seed: int) -> None:
            self.nodes: list[Any] = []
            self.inits: list[Any] = []
            self.count = 0
            self.rng = np.random.default_rng(seed)

        def const(self, value: Any) -> str:
            self.count += 1
            name = f"c{self.count}"
            self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
            return name

        def weight(self, *shape: int, scale: float = 0.1) -> str:
            return self.const(self.rng.standard_normal(shape) * scale)

        def op(self, op_type: str, inputs: list[str], **attrs: Any) -> str:
            self.count += 1
            out = f"{op_type.lower()}{self.count}"
            self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
            return out

        def conv(self, x: str, cin: int, cout: int, k: int, s: int = 1, group: int = 1) -> str:
            nd = 1 if self.conv1d else 2
            return self.op(
                "Conv",
                [x, self.weight(cout, cin // group, *[k] * nd)],
                kernel_shape=[k] * nd,
                strides=[s] * nd,
                pads=[0 if self.conv1d else k // 2] * (2 * nd),
                group=group,
            )

        def bn(self, x: str, c: int) -> str:
            ins = [self.weight(c), self.weight(c), self.weight(c), self.const(np.ones(c))]
            return self.op("BatchNormalization", [x, *ins])

        def model(self, dims: list[int | str], out: str) -> Any:
            graph = helper.make_graph(
                self.nodes,
                "g",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
                self.inits,
            )
            m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
            m.ir_version = 8
            return m

        conv1d = False

    def resnet18(dims: list[int | str]) -> Any:
        g = Graph(0)
        stem = g.op("Conv", ["x", g.weight(16, 3, 7, 7)], kernel_shape=[7, 7], strides=[2, 2])
        g.nodes[-1].attribute.append(helper.make_attribute("pads", [3] * 4))
        x = g.op("Relu", [g.bn(stem, 16)])
        x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
        cin = 16
        for stage, width in enumerate((16, 32, 64, 128)):
            for block in range(2):
                s = 2 if stage and not block else 1
                y = g.op("Relu", [g.bn(g.conv(x, cin, width, 3, s), width)])
                y = g.bn(g.conv(y, width, width, 3), width)
                short = x if s == 1 and cin == width else g.bn(g.conv(x, cin, width, 1, s), width)
                x, cin = g.op("Relu", [g.op("Add", [y, short])]), width
        x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
        return g.model(dims, g.op("Gemm", [x, g.weight(10, cin), g.weight(10)], transB=1))

    def mobilenet(dims: list[int | str]) -> Any:
        g = Graph(1)
        x = g.op("HardSwish", [g.bn(g.conv("x", 3, 16, 3, 2), 16)])
        cin = 16
        blocks = [  # expansion, out channels, kernel, stride, squeeze-excite
            (16, 16, 3, 2, True),
            (72, 24, 3, 2, False),
            (88, 24, 3, 1, False),
            (96, 40, 5, 2, True),
            (240, 40, 5, 1, True),
            (120, 48, 5, 1, True),
            (288, 96, 5, 2, True),
            (576, 96, 5, 1, True),
        ]
        for exp, out, k, s, se in blocks:
            y = x if exp == cin else g.op("HardSwish", [g.bn(g.conv(x, cin, exp, 1), exp)])
            y = g.op("HardSwish", [g.bn(g.conv(y, exp, exp, k, s, group=exp), exp)])
            if se:
                z = g.op("Relu", [g.conv(g.op("GlobalAveragePool", [y]), exp, exp // 4, 1)])
                z = g.op("HardSigmoid", [g.conv(z, exp // 4, exp, 1)], alpha=1 / 6, beta=0.5)
                y = g.op("Mul", [y, z])
            y = g.bn(g.conv(y, exp, out, 1), out)
            x, cin = (g.op("Add", [y, x]) if s == 1 and cin == out else y), out
        x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
        return g.model(dims, g.op("Gemm", [x, g.weight(10, cin), g.weight(10)], transB=1))

    def speech(dims: list[int | str]) -> Any:
        g = Graph(2)
        g.conv1d = True

        def gelu(t: str) -> str:
            e = g.op("Erf", [g.op("Div", [t, g.const([2**0.5])])])
            return g.op("Mul", [g.op("Mul", [t, g.const([0.5])]), g.op("Add", [e, g.const([1])])])

        x = gelu(g.conv("x", 1, 32, 10, 5))
        for _ in range(4):
            x = gelu(g.conv(x, 32, 32, 3, 2))
        x = g.op("Transpose", [gelu(g.conv(x, 32, 32, 2, 2))], perm=[0, 2, 1])
        return g.model(dims, g.op("Add", [g.op("MatMul", [x, g.weight(32, 48)]), g.weight(48)]))

    return {
        "resnet18": lambda: resnet18(["N", 3, "H", "W"]),
        "resnet18 N=2^31": lambda: resnet18([2**31, 3, "H", "W"]),
        "mobilenet": lambda: mobilenet(["N", 3, "H", "W"]),
        "mobilenet H='n//0'": lambda: mobilenet(["N", 3, "n//0", "W"]),
        "speech": lambda: speech(["batch", 1, "samples"]),
        "speech samples=2^31": lambda: speech(["batch", 1, 2**31]),
    }


def model_rows() -> None:
    """Import + compile of ``onnx_cnns`` (module docstring), each in a fresh process (no
    proof or evaluation cached from another model)."""
    print(
        f"\n{'model':<20} {'import s':>9} {'compile s':>10} {'total s':>8} {'cpu s':>6} "
        f"{'slowest pass':<22} "
        "size proofs / plan notes"
    )
    for name in onnx_cnns():
        done = subprocess.run(
            [sys.executable, __file__, "--one-model", name],
            capture_output=True,
            text=True,
            check=True,
        )
        print(done.stdout.rstrip())


def one_model(name: str) -> None:
    """One row of ``model_rows``."""
    import dynshape.onnx
    from dynshape.pipeline import CompileReport

    model = onnx_cnns()[name]()
    report = CompileReport()
    c0, t0 = time.process_time(), time.perf_counter()
    program = dynshape.onnx.load(model)
    t1 = time.perf_counter()
    dynshape.compile(program, report=report)
    c2, t2 = time.process_time(), time.perf_counter()
    _, slowest, seconds = max(report.passes, key=lambda p: p[2])
    proofs = report.proofs.split(" (")[0]
    print(
        f"{name:<20} {t1 - t0:>9.2f} {t2 - t1:>10.2f} {t2 - t0:>8.2f} {c2 - c0:>6.2f} "
        f"{slowest + f' {seconds:.2f}':<22} {proofs}; {len(report.notes)} plan note(s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, no 1,600-op chain")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --against")
    parser.add_argument("--models", action="store_true", help="only the ONNX CNN table")
    parser.add_argument("--one-model", help=argparse.SUPPRESS)  # a row, in a child process
    args = parser.parse_args()
    if args.one_model:
        one_model(args.one_model)
        return
    if args.models:
        model_rows()
        return
    repeat = args.repeat or (3 if args.quick else 7)
    if args.against is not None:
        compare(args.against.resolve(), args.rounds, repeat, args.quick)
        return
    print(f"{'program':<16} {'ops':>6} {'compile ms':>11} {'ms/op':>7} {'infer':>6} {'runs':>5}")
    for name, make in PROGRAMS.items():
        if args.quick and name == "chain 1600":
            continue
        text = make()
        ops = text.count("(") - text.count("Tensor[(")  # calls, roughly: one paren each
        seconds, share, runs = measure(text, repeat)
        print(
            f"{name:<16} {ops:>6} {seconds * 1e3:>11.1f} {seconds * 1e3 / max(ops, 1):>7.2f} "
            f"{share['infer']:>6.0%} {runs:>5}"
        )
    try:
        import onnx  # noqa: F401
    except ImportError:
        print("\n(onnx is not installed: no model table)")
        return
    model_rows()


if __name__ == "__main__":
    main()
