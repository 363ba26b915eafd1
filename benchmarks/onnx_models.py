"""Imported ONNX models: dynshape against onnxruntime, per call and import + compile time,
with the targets of issue 27 marked met/MISSED.

    python benchmarks/onnx_models.py                     # every model, quiet machine
    python benchmarks/onnx_models.py --quick             # CI smoke: small size, few repeats
    python benchmarks/onnx_models.py --load              # the same rows under load
    python benchmarks/onnx_models.py --both              # quiet and loaded, and loaded/quiet
    python benchmarks/onnx_models.py --only bert_encoder --only mlp_gelu
    python benchmarks/onnx_models.py --dir models/ --dim batch=4 --dim seq=64

The models (``examples/exported/families.py``) are eight families written as PyTorch's
TorchScript exporter writes them (ResNet-18, MobileNetV3-small, a wav2vec2-style speech front
end, a BERT encoder, GPT-2 and Llama decoder steps with a KV cache, an LSTM tagger, a tabular
MLP), each run at three sizes (``small``, ``mid``, ``large``). Every model is imported and
compiled once (its dims stay symbolic) and runs at every size; onnxruntime gets a session
with ``intra_op_num_threads`` = the machine's cores (its other options at their defaults), and
dynshape the session option that uses a second core, ``batch_processes=2`` (at most 2), so
both may use every core. The first call of each
size is checked against onnxruntime (a wrong answer is printed in the row).

Flags:
  --quick          the small size only, 3 rounds, a 5 s limit on a model's compile (it runs in
                   a child process that is stopped then), no latency for a model whose one
                   call takes over 0.5 s, fewer stacked-encoder rows: under a minute in CI.
  --load           one competing CPU-bound process (a pure-Python busy loop, one core) runs
                   while measuring; the rows are "under load".
  --both           quiet and loaded rounds interleaved for every row (the load process is
                   paused and resumed between rounds), with each side's loaded/quiet ratio.
  --only NAME      only the named models (repeatable or comma-separated); the older rows are
                   named ``encoder``, ``cnn``, ``detection`` and ``stacked_encoder``.
  --dir PATH       instead of the families, every ``*.onnx`` in PATH; its inputs are read from
                   ``NAME.small.npz``, ``NAME.mid.npz``, ``NAME.large.npz`` beside it (arrays
                   keyed by input name), or, without them, made at random (floats normal,
                   integers 0 or 1, booleans) with the named dims of ``--dim name=value``.
  --compile-timeout SECONDS   stop a model's import + compile after this long (default: none,
                   5 s with --quick); the row reports it and the compile target is MISSED.
  --repeats N      rounds per row (default 9, 3 with --quick).
  --ort-threads N  onnxruntime's intra-op threads (default: the cores, as the targets assume);
                   1 shows how much of the gap is onnxruntime's second core.
  --processes N    dynshape's ``batch_processes`` (1 or 2; default: onnxruntime's threads, at
                   most 2): with 2, a model whose batch rows the compiler proves independent
                   runs half of a large batch in a worker process (the proof's time counts in
                   the compile's; the model's line says whether it splits, or why not).

Targets (issue 27), counted over the family (or --dir) rows: dynshape / onnxruntime <= 3.0x
at the small size and <= 2.0x at the others; the geometric mean over all rows <= 1.5x; import
+ compile < 2 s per model; under load, no row above 3.0x onnxruntime under the same load, and
dynshape's loaded/quiet ratio no worse than onnxruntime's. A model that fails to import or
compile prints ``import failed: <message>`` and counts as MISSED.

Latencies are medians of interleaved samples: in every round each function (and with
``--both`` each condition) is sampled once, the order rotating between rounds; a sample is the
mean of enough calls to last a few milliseconds (at least one call), timed after a 50 ms busy
wait (``SETTLE_S``: onnxruntime's pool spins 40-50 ms after a run) and 10 ms of untimed calls
(``WARM_S``, at least one). A row stops after 3
rounds once it has taken 30 s, so that slow models do not take the run hostage.

Then the older rows: the encoder layer, the CNN and the detection post-processing of
``examples/exported/onnx_models.py`` against numpy and onnxruntime, and import + compile time
of stacked encoder layers, 34 nodes each, up to 2,720 nodes (it must grow linearly: the last
column is seconds per 1,000 nodes).
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import pickle
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "exported"))

import onnx  # noqa: E402
from families import FAMILIES, SIZES  # noqa: E402
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
from dynshape.batch_processes import runner  # noqa: E402

try:
    import onnxruntime as ort
except ImportError:  # optional: the ort columns are left out (and no target can be judged)
    ort = None

THREADS = os.cpu_count() or 1
#: onnxruntime's intra-op threads: the machine's cores, or ``--ort-threads`` (1 shows how much
#: of the gap is onnxruntime's second core: dynshape's products run on one).
ort_threads = THREADS
#: dynshape's processes (``InferenceSession(batch_processes=)``): as many as onnxruntime's
#: threads, up to the 2 it supports (``--processes``).
processes = min(THREADS, 2)
RATIO_SMALL, RATIO_OTHER, GEOMEAN, COMPILE_S, LOADED_RATIO = 3.0, 2.0, 1.5, 2.0, 3.0
QUICK_SLOW_CALL_S = 0.5  # --quick measures no latency for a model slower than this a call
ROW_BUDGET_S = 30.0  # a row stops after MIN_ROUNDS rounds once it has taken this long
MIN_ROUNDS = 3
Feeds = dict[str, np.ndarray]


# --- measuring ------------------------------------------------------------------------------


#: Seconds of waiting before each sample: onnxruntime's intra-op pool spins (one core busy,
#: 40-50 ms of its threads' CPU measured after a run of BERT's large row) before its threads
#: sleep, so whatever ran next ran on a busy machine. The spin helps its own next call within
#: a sample; across samples it took the core from the other side, and dynshape's worker
#: thread, whose help is judged by measured calls (``vm/adaptive_choice``), learnt a busy
#: machine: its BERT large took 16.0-16.6 ms a call against 12.5-12.8 with this wait
#: (onnxruntime 6.2-6.4 either way). The wait spins in Python on the calling thread.
SETTLE_S = 0.05
#: Seconds of untimed calls (at least one) between the wait and the timed ones: after 50 ms of
#: anything else a model's next calls ran slower for a few milliseconds (caches: the GPT-2
#: step's small row 327 us hot, 412 right after the wait, 327 after 10 ms of calls; ResNet-18
#: small 912, 1,119, 943), on both sides.
WARM_S = 0.01


def settle() -> None:
    """Busy-waits ``SETTLE_S`` on this thread (see there)."""
    end = time.perf_counter() + SETTLE_S
    while time.perf_counter() < end:
        pass


def sample(fn: Callable[[], Any], budget: float = 0.004) -> float:
    """Mean seconds of one call, over enough calls to last ``budget`` seconds (at least one),
    after ``settle`` and ``WARM_S`` of untimed calls."""
    settle()
    start = time.perf_counter()
    while True:
        fn()
        if time.perf_counter() - start >= WARM_S:
            break
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
    for fn in fns.values():  # one warm-up call each, outside the samples
        settle()
        fn()
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            times[n].append(sample(fns[n]))
    return {n: statistics.median(t) for n, t in times.items()}


# The children below (the competing load, the compile) are new interpreters, never forks of
# this process: a fork shuts this process's OpenBLAS thread pool down (OpenBLAS's own
# ``pthread_atfork`` handler) until some multi-threaded product recreates it, which the VM's
# default single-thread policy never runs. In that state both dynshape and onnxruntime ran ~2x
# slower here whenever onnxruntime's spinning worker was on (the LSTM's small row: 2,780 / 920
# us against 1,390 / 460 in a process that never forked), a state no user's process is in.

_BUSY = "total = 0\nwhile True:\n    for i in range(200_000):\n        total += i * i\n"


class Load:
    """One competing CPU-bound process (pure-Python arithmetic), started once and switched on
    and off between rounds by ``SIGCONT``/``SIGSTOP`` (a stopped process takes no CPU)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", _BUSY])
        self.running = True
        time.sleep(0.2)  # past the interpreter's start: the first loaded round is loaded
        self.set(False)

    def set(self, on: bool) -> None:
        if on != self.running:
            self.process.send_signal(signal.SIGCONT if on else signal.SIGSTOP)
            self.running = on
            if on:
                time.sleep(0.02)  # let it get scheduled before sampling starts

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


@dataclass
class Timing:
    """Medians per condition (``quiet``/``loaded``) of dynshape and onnxruntime."""

    dyn: dict[str, float] = field(default_factory=dict)
    ort: dict[str, float] = field(default_factory=dict)


def measure(
    dyn: Callable[[], Any],
    ort_fn: Callable[[], Any] | None,
    conditions: Sequence[str],
    load: Load | None,
    repeats: int,
) -> Timing:
    """Rounds of one sample per (condition, function), orders rotating; medians."""
    fns = {"dyn": dyn, **({"ort": ort_fn} if ort_fn else {})}
    keys = [(c, f) for c in conditions for f in fns]
    times: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
    for fn in fns.values():  # one warm-up call each, outside the samples
        settle()
        fn()
    start = time.perf_counter()
    for r in range(repeats):
        order = keys[r % len(keys) :] + keys[: r % len(keys)]
        for condition, name in order:
            if load is not None:
                load.set(condition == "loaded")
            times[condition, name].append(sample(fns[name]))
        if r + 1 >= MIN_ROUNDS and time.perf_counter() - start > ROW_BUDGET_S:
            break
    if load is not None:
        load.set(False)
    timing = Timing()
    for (condition, name), t in times.items():
        getattr(timing, name)[condition] = statistics.median(t)
    return timing


# --- compiling (in a child process, so that a limit can stop it) -----------------------------


@dataclass
class Compiled:
    vm: Any = None
    import_s: float = math.nan
    compile_s: float = math.nan
    error: str | None = None
    split: Any = None
    """The ``BatchSplit`` of ``--processes 2`` (None: every call in this process)."""
    split_note: str = ""

    def run(self, feeds: Feeds) -> Any:
        return self.split.run(feeds) if self.split is not None else self.vm.run(feeds)

    @property
    def total_s(self) -> float:
        return self.import_s + self.compile_s


#: The compiling child: argv model path, executable path; prints the import and compile
#: seconds, or the error's first line after ``error:``.
_COMPILE = """
import sys, time, pickle
import dynshape, dynshape.onnx
from dynshape.batch_processes import split_plan
try:
    start = time.perf_counter()
    program = dynshape.onnx.load(sys.argv[1])
    imported = time.perf_counter()
    report = dynshape.CompileReport()
    exe = dynshape.compile(program, report=report)
    if sys.argv[3] == "2":
        plan = split_plan(report.typed)  # the session's batch_processes=2 does this too
    done = time.perf_counter()
    exe.save(sys.argv[2])
    if sys.argv[3] == "2":
        with open(sys.argv[2] + ".split", "wb") as f:
            pickle.dump(plan, f)
except Exception as e:
    print("error:", f"{type(e).__name__}: {e}".splitlines()[0][:300])
else:
    print(imported - start, done - imported)
"""


def compile_model(model: onnx.ModelProto, timeout: float | None) -> Compiled:
    """Import + compile ``model`` with dynshape, timed, in a child interpreter that saves the
    executable for this process to load (so that ``timeout`` can stop a runaway compile)."""
    with tempfile.TemporaryDirectory() as tmp:
        model_path, exe_path = os.path.join(tmp, "model.onnx"), os.path.join(tmp, "model.dsx")
        onnx.save(model, model_path)
        command = [sys.executable, "-c", _COMPILE, model_path, exe_path, str(processes)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Compiled(
                error=f"import + compile stopped after {timeout:g} s (--compile-timeout)",
                import_s=math.inf,
                compile_s=0.0,
            )
        words = done.stdout.split(maxsplit=1)
        if done.returncode != 0 or not words:
            last = (done.stderr.strip().splitlines() or [""])[-1][:300]
            return Compiled(error=f"the compiling process died ({done.returncode}): {last}")
        if words[0] == "error:":
            return Compiled(error=words[1].strip())
        import_s, compile_s = map(float, words)
        vm = dynshape.VirtualMachine(dynshape.Executable.load(exe_path))
        compiled = Compiled(vm=vm, import_s=import_s, compile_s=compile_s)
        if processes == 2:  # the proof ran in the child, timed with the compile
            with open(exe_path + ".split", "rb") as f:
                compiled.split, compiled.split_note = runner(pickle.load(f), vm)
    return compiled


def session(model: onnx.ModelProto) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = ort_threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


# --- the models and their inputs --------------------------------------------------------------


@dataclass
class Case:
    """A model to benchmark and its inputs by size name."""

    name: str
    model: Callable[[], onnx.ModelProto]
    feeds: Callable[[str], Feeds]
    sizes: list[str]


def family_cases(sizes: Sequence[str]) -> list[Case]:
    return [Case(f.name, f.build, f.feeds, list(sizes)) for f in FAMILIES.values()]


_NP_TYPES = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.BOOL: np.bool_,
}


def random_feeds(model: onnx.ModelProto, dims: dict[str, int], rng: np.random.Generator) -> Feeds:
    """Inputs of ``model`` at the named dims: floats normal, integers 0 or 1, booleans."""
    feeds: Feeds = {}
    initializers = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = []
        for d in tensor.shape.dim:
            if d.HasField("dim_value"):
                shape.append(d.dim_value)
            elif d.dim_param in dims:
                shape.append(dims[d.dim_param])
            else:
                raise ValueError(f"input {value.name} has dim {d.dim_param or '?'}: give --dim")
        dtype = _NP_TYPES.get(tensor.elem_type)
        if dtype is None:
            raise ValueError(f"input {value.name}: element type {tensor.elem_type} not supported")
        if np.issubdtype(dtype, np.floating):
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[value.name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


def dir_cases(folder: Path, dims: dict[str, int], sizes: Sequence[str]) -> list[Case]:
    cases = []
    for path in sorted(folder.glob("*.onnx")):
        stem = path.name[: -len(".onnx")]
        present = [s for s in sizes if (folder / f"{stem}.{s}.npz").exists()]

        def model(path: Path = path) -> onnx.ModelProto:
            return onnx.load(str(path))

        def feeds(size: str, stem: str = stem, path: Path = path) -> Feeds:
            if size == "random":
                return random_feeds(
                    onnx.load(str(path), load_external_data=False), dims, np.random.default_rng(0)
                )
            with np.load(folder / f"{stem}.{size}.npz") as data:
                return {k: data[k] for k in data.files}

        cases.append(Case(stem, model, feeds, present or ["random"]))
    return cases


# --- the family rows --------------------------------------------------------------------------


@dataclass
class Row:
    model: str
    size: str
    timing: Timing | None  # None: no latency (failed or skipped)


@dataclass
class Results:
    rows: list[Row] = field(default_factory=list)
    compiles: dict[str, Compiled] = field(default_factory=dict)


def _outputs(result: Any) -> list[np.ndarray]:
    return (
        [np.asarray(r) for r in result]
        if isinstance(result, (tuple, list))
        else [np.asarray(result)]
    )


def check(got: list[np.ndarray], want: list[np.ndarray]) -> str | None:
    """None when dynshape's outputs are onnxruntime's within float32 tolerance, else why not."""
    if len(got) != len(want):
        return f"{len(got)} outputs, onnxruntime {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.shape != w.shape:
            return f"output {i}: shape {g.shape}, onnxruntime {w.shape}"
        scale = float(np.max(np.abs(w))) if w.size else 0.0
        if w.size and not np.allclose(g, w, rtol=1e-3, atol=1e-4 * max(scale, 1.0), equal_nan=True):
            err = float(np.max(np.abs(g.astype(np.float64) - w)))
            return f"output {i}: max |error| {err:.3g} (scale {scale:.3g})"
    return None


def _us(t: float | None) -> str:
    if t is None:
        return f"{'-':>10}"
    return f"{t * 1e3:8.1f}ms" if t >= 0.1 else f"{t * 1e6:8.0f}us"


def _ratio_target(size: str) -> float:
    """The smallest size (or a --dir model's one random size) may be 3x, the others 2x."""
    return RATIO_SMALL if size in ("small", "random") else RATIO_OTHER


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def header(conditions: Sequence[str]) -> str:
    cols = ""
    for c in conditions:
        tag = "" if len(conditions) == 1 else f" {c}"
        cols += f"{'dyn' + tag:>14}{'ort' + tag:>14}{'ratio':>9}{'':>8}"
    if len(conditions) == 2:
        cols += f"{'dyn l/q':>9}{'ort l/q':>9}"
    return f"{'model':<20}{'size':<8}{cols}"


def print_row(model: str, size: str, t: Timing, conditions: Sequence[str]) -> None:
    line = f"{model:<20}{size:<8}"
    for c in conditions:
        d, o = t.dyn.get(c), t.ort.get(c)
        if d is None or o is None:
            line += f"{_us(d):>14}{_us(o):>14}{'-':>9}{'':>8}"
            continue
        target = LOADED_RATIO if c == "loaded" else _ratio_target(size)
        line += f"{_us(d):>14}{_us(o):>14}{d / o:8.2f}x{_verdict(d / o <= target):>8}"
    if len(conditions) == 2 and t.ort:
        dq, dl, oq, ol = t.dyn["quiet"], t.dyn["loaded"], t.ort["quiet"], t.ort["loaded"]
        line += f"{dl / dq:8.2f}x{ol / oq:8.2f}x"
    print(line, flush=True)


def run_cases(
    cases: Sequence[Case],
    conditions: Sequence[str],
    load: Load | None,
    repeats: int,
    quick: bool,
    timeout: float | None,
) -> Results:
    results = Results()
    print(header(conditions))
    for case in cases:
        model = case.model()
        compiled = compile_model(model, timeout)
        results.compiles[case.name] = compiled
        sess = session(model) if ort else None
        if compiled.error:
            # a compile stopped by --compile-timeout is not a failure of the importer
            what = "not compiled" if compiled.import_s == math.inf else "import failed"
            print(f"{case.name:<20}{what}: {compiled.error}", flush=True)
        else:
            ok = compiled.total_s < COMPILE_S
            note = f"; {compiled.split_note[:90]}" if compiled.split_note else ""
            print(
                f"{case.name:<20}import {compiled.import_s:.2f} s + compile "
                f"{compiled.compile_s:.2f} s = {compiled.total_s:.2f} s  "
                f"{_verdict(ok)} (< {COMPILE_S:g} s){note}",
                flush=True,
            )
        for size in case.sizes:
            try:
                feeds = case.feeds(size)
            except Exception as e:
                print(f"{case.name:<20}{size:<8}no inputs: {e}", flush=True)
                continue
            want = sess.run(None, feeds) if sess else None
            if compiled.error:
                results.rows.append(Row(case.name, size, None))
                continue
            start = time.perf_counter()
            try:
                got = _outputs(compiled.run(feeds))
            except Exception as e:
                print(
                    f"{case.name:<20}{size:<8}run failed: {type(e).__name__}: {str(e)[:200]}",
                    flush=True,
                )
                results.rows.append(Row(case.name, size, None))
                continue
            one_call = time.perf_counter() - start
            wrong = check(got, want) if want is not None else None
            if wrong:
                print(f"{case.name:<20}{size:<8}WRONG against onnxruntime: {wrong}", flush=True)
            if quick and one_call > QUICK_SLOW_CALL_S:
                print(
                    f"{case.name:<20}{size:<8}latency skipped (--quick): "
                    f"one call took {one_call:.2f} s",
                    flush=True,
                )
                results.rows.append(Row(case.name, size, None))
                continue
            timing = measure(
                functools.partial(compiled.run, feeds),
                functools.partial(sess.run, None, feeds) if sess else None,
                conditions,
                load,
                repeats,
            )
            results.rows.append(Row(case.name, size, timing))
            print_row(case.name, size, timing, conditions)
    return results


def summary(results: Results, conditions: Sequence[str]) -> None:
    """One line per target: how many rows met it and how many missed."""
    print("\ntargets")

    def line(name: str, met: int, missed: int, extra: str = "") -> None:
        print(f"  {name:<52} met {met:>3}  MISSED {missed:>3}{extra}")

    quiet = "quiet" if "quiet" in conditions else "loaded"
    for label, small in (
        (f"dynshape/ort <= {RATIO_SMALL:g}x at small ({quiet})", True),
        (f"dynshape/ort <= {RATIO_OTHER:g}x at mid and large ({quiet})", False),
    ):
        met = missed = 0
        for row in results.rows:
            if (_ratio_target(row.size) == RATIO_SMALL) != small:
                continue
            t = row.timing
            if (
                t is not None
                and quiet in t.ort
                and t.dyn[quiet] / t.ort[quiet] <= _ratio_target(row.size)
            ):
                met += 1
            else:
                missed += 1  # slower, failed, or not measured: not met
        line(label, met, missed)
    ratios = [
        r.timing.dyn[quiet] / r.timing.ort[quiet] for r in results.rows if r.timing and r.timing.ort
    ]
    unmeasured = sum(1 for r in results.rows if not (r.timing and r.timing.ort))
    if ratios:
        geo = math.exp(statistics.fmean(math.log(r) for r in ratios))
        ok = geo <= GEOMEAN and not unmeasured
        note = f"  ({geo:.2f}x over {len(ratios)} rows" + (
            f", {unmeasured} unmeasured)" if unmeasured else ")"
        )
        line(f"geometric mean dynshape/ort <= {GEOMEAN:g}x ({quiet})", int(ok), int(not ok), note)
    met = sum(1 for c in results.compiles.values() if not c.error and c.total_s < COMPILE_S)
    line(f"import + compile < {COMPILE_S:g} s", met, len(results.compiles) - met)
    failed = [n for n, c in results.compiles.items() if c.error and c.import_s != math.inf]
    stopped = [n for n, c in results.compiles.items() if c.import_s == math.inf]
    if failed:
        print(f"  (import failed: {', '.join(failed)})")
    if stopped:
        print(f"  (compile stopped by its time limit: {', '.join(stopped)})")
    if "loaded" in conditions:
        loaded = [r.timing for r in results.rows if r.timing and r.timing.ort]
        met = sum(1 for t in loaded if t.dyn["loaded"] / t.ort["loaded"] <= LOADED_RATIO)
        line(f"under load dynshape/ort <= {LOADED_RATIO:g}x", met, len(loaded) - met + unmeasured)
    if len(conditions) == 2:
        both = [r.timing for r in results.rows if r.timing and r.timing.ort]
        met = sum(
            1 for t in both if t.dyn["loaded"] / t.dyn["quiet"] <= t.ort["loaded"] / t.ort["quiet"]
        )
        line("dynshape loaded/quiet <= onnxruntime's", met, len(both) - met + unmeasured)


# --- the older rows ---------------------------------------------------------------------------


def latency_rows(repeats: int, quick: bool, only: set[str] | None) -> None:
    print(f"\n{'model':<30}{'dynshape':>11}{'numpy':>11}{'ort':>11}{'vs numpy':>10}{'vs ort':>9}")
    rng = np.random.default_rng(0)
    if only is None or "encoder" in only:
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
    if only is None or "cnn" in only:
        model = cnn()
        vm = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(model)))
        sess = session(model) if ort else None
        for shape in [(1, 3, 32, 32)] if quick else [(1, 3, 32, 32), (8, 3, 64, 64)]:
            x = rng.standard_normal(shape).astype(np.float32)
            fns = {"dynshape": lambda x=x: vm.run(x)}
            if sess:
                fns["ort"] = lambda x=x: sess.run(None, {"x": x})
            _row(f"cnn {shape}", medians(fns, repeats))
    if only is None or "detection" in only:
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
            f"{(done - start) / nodes * 1000:>13.2f}s",
            flush=True,
        )


# --- the command line -------------------------------------------------------------------------


def _dim(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--dim takes name=value, got {text!r}")
    return name, int(value)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join((__doc__ or "").splitlines()[1:]),
    )
    parser.add_argument("--quick", action="store_true", help="small size, few repeats (CI smoke)")
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--load", action="store_true", help="measure under one competing process")
    load.add_argument("--both", action="store_true", help="quiet and loaded, interleaved")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="models to run")
    parser.add_argument("--dir", type=Path, help="benchmark the *.onnx files of this folder")
    parser.add_argument("--dim", action="append", type=_dim, default=[], metavar="NAME=VALUE")
    parser.add_argument("--compile-timeout", type=float, metavar="SECONDS")
    parser.add_argument("--repeats", type=int)
    parser.add_argument(
        "--ort-threads", type=int, metavar="N", help="onnxruntime's intra-op threads (cores)"
    )
    parser.add_argument(
        "--processes",
        type=int,
        choices=(1, 2),
        help="dynshape's batch_processes (default: onnxruntime's threads, at most 2)",
    )
    return parser.parse_args(argv)


@contextmanager
def competing(active: bool) -> Iterator[Load | None]:
    load = Load() if active else None
    try:
        yield load
    finally:
        if load is not None:
            load.close()


def main(argv: Sequence[str] | None = None) -> None:
    global ort_threads, processes
    args = parse(argv)
    if args.ort_threads is not None:
        if args.ort_threads < 1:
            raise SystemExit(f"--ort-threads must be at least 1, got {args.ort_threads}")
        ort_threads = args.ort_threads
    processes = args.processes or min(ort_threads, 2)
    only = {n.strip() for item in args.only for n in item.split(",") if n.strip()} or None
    repeats = args.repeats or (3 if args.quick else 9)
    timeout = (
        args.compile_timeout if args.compile_timeout is not None else (5.0 if args.quick else None)
    )
    conditions = ["quiet", "loaded"] if args.both else ["loaded"] if args.load else ["quiet"]
    sizes = ["small"] if args.quick else list(SIZES)
    if args.dir is not None:
        cases = dir_cases(args.dir, dict(args.dim), sizes)
    else:
        cases = family_cases(sizes)
    if only is not None:
        cases = [c for c in cases if c.name in only]
    print(
        f"{THREADS} cores; onnxruntime {ort.__version__ if ort else '(not installed)'} with "
        f"intra_op_num_threads={ort_threads}; dynshape with batch_processes={processes}; "
        f"{'+'.join(conditions)}; {repeats} rounds a row\n"
    )
    with competing(args.load or args.both) as load:
        results = run_cases(cases, conditions, load, repeats, args.quick, timeout)
        if args.dir is None:
            if only is None or only & {"encoder", "cnn", "detection"}:
                if load is not None:
                    load.set(args.load)  # the older rows: quiet, or all under load with --load
                latency_rows(repeats, args.quick, only)
                if load is not None:
                    load.set(False)
            if only is None or "stacked_encoder" in only:
                compile_rows(args.quick)
    if cases:
        summary(results, conditions)


if __name__ == "__main__":
    main()
