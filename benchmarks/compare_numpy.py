"""dynshape against numpy: latency (interleaved medians), ratios, compile time, peak memory.

For every workload and size three implementations (four with onnxruntime) run in the same
process, interleaved round-robin in each repeat (the order rotates from repeat to repeat):

- ``dynshape``: the program compiled once (``dynshape.compile``), run by one ``VirtualMachine``;
- ``numpy``: plain numpy written the obvious way (every operation allocates its result);
- ``np out=``: numpy with every buffer preallocated outside the timed call (``out=`` on every
  ufunc, ``np.matmul(..., out=)``) -- the practical floor for any executor whose kernels are
  numpy calls;
- ``ort`` (only if ``onnx`` and ``onnxruntime`` import: the optional extra ``onnx``, never a
  requirement): ``sess.run(None, feeds)`` of the workload's ONNX graph (onnx_workloads.py: the
  numpy version op for op, standard opset 17, symbolic ``n``/``batch``/``seq``, the weights as
  initializers, the feed dict built outside the timed call).

Each sample is the mean of enough calls to last a few milliseconds; the table shows the median
sample per implementation and the ratios dynshape/numpy, dynshape/np-out (and dynshape/ort).
``compile`` is the time of ``dynshape.compile``; ``ort init`` that of building the ONNX model
and its ``InferenceSession``. Both happen once, untimed: dynshape compiles once per workload
(one executable serves every size); a session is made once per workload and weight set (its
dims are symbolic, so the seed, ``x[x>0]*2`` and the chain keep one session for every size, but
the MLP's and the encoder's weights are drawn anew for every size and are initializers, so those
get one session per size). Peak memory: for dynshape the peak live bytes of the VM allocator
(the planned peak, exact byte counts: ``NaiveAllocator``) over one call, for numpy the peak that
``tracemalloc`` sees during one call of the plain version (numpy reports its buffers to
``tracemalloc``); neither counts the inputs (nor is onnxruntime's memory measured).

onnxruntime's session options (``onnx_workloads.session``, where the measurements behind them
are): the CPU provider; ``intra_op_num_threads`` = the threads numpy's OpenBLAS uses
(``OPENBLAS_NUM_THREADS`` and the like, else one per core: 2 on the 2-core benchmark
machine, where ORT's own default of one per physical core is the same), so ORT and numpy's BLAS
get the same cores; worker threads that do not spin (ORT's default spins: interleaved with
numpy on 2 cores, the spinning worker made plain numpy and ``out=`` ~2x slower in the BLAS-bound
rows; not spinning costs ORT ~30 us per call at some small sizes); sequential execution (one
inter-op thread), as the VM runs its kernels one after the other; graph optimizations
``ORT_ENABLE_ALL`` (ORT's default: constant folding, e.g. of the weights' transposes, and
fusions such as MatMul+Add+Relu into one ``FusedGemm``); memory arena and memory patterns on
(ORT's defaults). Without onnx and onnxruntime the script says so once and has no ``ort``
columns.

Every implementation's result (onnxruntime's too) is checked against the plain numpy one
before timing; a workload that fails to compile, run or agree prints the error in its row and
the run goes on.

    python benchmarks/compare_numpy.py [--quick]

``--quick`` (the CI smoke run) measures the ``ort`` column too when onnxruntime is installed.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import textwrap
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import onnx_workloads as ow  # imports without onnx and onnxruntime: then ow.AVAILABLE is False

import dynshape
from vm.memory.allocator import NaiveAllocator

F32 = np.float32
Arrays = list[np.ndarray]
Fn = Callable[..., Any]

# ----------------------------------------------------------------------------- the programs

SEED = """
def @main(%x: Tensor[(n,), float32], %y: Tensor[(n,), float32]) -> Tensor[(n,), float32] {
  subtract(add(%x, %x), %y)
}
"""

HIDDEN = 512
MLP = """
def @main(%x: Tensor[(batch, 512), float32],
          %w1: Tensor[(512, 512), float32], %b1: Tensor[(512,), float32],
          %w2: Tensor[(512, 512), float32], %b2: Tensor[(512,), float32],
          %w3: Tensor[(512, 512), float32], %b3: Tensor[(512,), float32])
          -> Tensor[(batch, 512), float32] {
  %h1 = nn.relu(add(nn.dense(%x, %w1), %b1));
  %h2 = nn.relu(add(nn.dense(%h1, %w2), %b2));
  nn.relu(add(nn.dense(%h2, %w3), %b3))
}
"""

D_MODEL, D_FFN = 64, 256
GELU_C = 0.7978845608028654  # sqrt(2 / pi)
ENCODER = """
def @main(%x: Tensor[(s, 64), float32],
          %wq: Tensor[(64, 64), float32], %wk: Tensor[(64, 64), float32],
          %wv: Tensor[(64, 64), float32], %wo: Tensor[(64, 64), float32],
          %g1: Tensor[(64,), float32], %be1: Tensor[(64,), float32],
          %w1: Tensor[(256, 64), float32], %c1: Tensor[(256,), float32],
          %w2: Tensor[(64, 256), float32], %c2: Tensor[(64,), float32],
          %g2: Tensor[(64,), float32], %be2: Tensor[(64,), float32]) -> Tensor[(s, 64), float32] {
  %q = nn.dense(%x, %wq);
  %k = nn.dense(%x, %wk);
  %v = nn.dense(%x, %wv);
  %p = nn.softmax(multiply(nn.dense(%q, %k), 0.125f), axis=-1);
  %a = nn.dense(nn.matmul(%p, %v), %wo);
  %h = nn.layer_norm(add(%x, %a), %g1, %be1, epsilon=1e-5);
  %f = add(nn.dense(%h, %w1), %c1);
  %t = tanh(multiply(add(%f, multiply(multiply(multiply(%f, %f), %f), 0.044715f)), 0.7978845608f));
  %g = multiply(multiply(%f, 0.5f), add(%t, 1f));
  nn.layer_norm(add(%h, add(nn.dense(%g, %w2), %c2)), %g2, %be2, epsilon=1e-5)
}
"""

DATA_DEPENDENT = """
def @main(%x: Tensor[(n,), float32]) -> Tensor[(?,), float32] {
  %idx = squeeze(argwhere(greater(%x, 0f)), axis=[1]);
  multiply(take(%x, %idx, axis=0), 2f)
}
"""

CHAIN_LEN = 200
CHAIN_SHAPE = (1, 16)
# The chain cycles through four cheap ops whose values stay bounded.
CHAIN_OPS = ("add_y", "mul_half", "sub_y", "tanh")


def chain_program(n: int = CHAIN_LEN) -> str:
    lines = []
    prev = "%x"
    for i in range(n):
        kind = CHAIN_OPS[i % len(CHAIN_OPS)]
        expr = {
            "add_y": f"add({prev}, %y)",
            "mul_half": f"multiply({prev}, 0.5f)",
            "sub_y": f"subtract({prev}, %y)",
            "tanh": f"tanh({prev})",
        }[kind]
        if i == n - 1:
            lines.append(f"  {expr}")
        else:
            lines.append(f"  %c{i} = {expr};")
            prev = f"%c{i}"
    return (
        "def @main(%x: Tensor[(1, 16), float32], %y: Tensor[(1, 16), float32])"
        " -> Tensor[(1, 16), float32] {\n" + "\n".join(lines) + "\n}\n"
    )


# ------------------------------------------------------------------- the numpy versions


def seed_plain(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (x + x) - y


def seed_out(x: np.ndarray, y: np.ndarray) -> Fn:
    out = np.empty_like(x)

    def run(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        np.add(x, x, out=out)
        np.subtract(out, y, out=out)
        return out

    return run


def mlp_plain(x: np.ndarray, w1, b1, w2, b2, w3, b3) -> np.ndarray:  # type: ignore[no-untyped-def]
    h = np.maximum(x @ w1.T + b1, 0)
    h = np.maximum(h @ w2.T + b2, 0)
    return np.maximum(h @ w3.T + b3, 0)


def mlp_out(x: np.ndarray, w1, b1, w2, b2, w3, b3) -> Fn:  # type: ignore[no-untyped-def]
    h1 = np.empty((x.shape[0], HIDDEN), F32)
    h2 = np.empty_like(h1)
    w1t, w2t, w3t = w1.T, w2.T, w3.T

    def run(x: np.ndarray, w1, b1, w2, b2, w3, b3) -> np.ndarray:  # type: ignore[no-untyped-def]
        np.matmul(x, w1t, out=h1)
        np.add(h1, b1, out=h1)
        np.maximum(h1, 0, out=h1)
        np.matmul(h1, w2t, out=h2)
        np.add(h2, b2, out=h2)
        np.maximum(h2, 0, out=h2)
        np.matmul(h2, w3t, out=h1)
        np.add(h1, b3, out=h1)
        np.maximum(h1, 0, out=h1)
        return h1

    return run


def _layer_norm(h: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = h.mean(axis=-1, keepdims=True)
    var = ((h - mu) ** 2).mean(axis=-1, keepdims=True)
    return (h - mu) / np.sqrt(var + 1e-5) * g + b


# ``f * f * f``, not ``f**3``: numpy's float32 power is ~200x slower than two multiplies, which
# would flatter dynshape (whose program multiplies too).
def encoder_plain(x, wq, wk, wv, wo, g1, be1, w1, c1, w2, c2, g2, be2):  # type: ignore[no-untyped-def]
    q, k, v = x @ wq.T, x @ wk.T, x @ wv.T
    s = (q @ k.T) * F32(0.125)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    h = _layer_norm(x + (p @ v) @ wo.T, g1, be1)
    f = h @ w1.T + c1
    gl = F32(0.5) * f * (1 + np.tanh(F32(GELU_C) * (f + F32(0.044715) * (f * f * f))))
    return _layer_norm(h + (gl @ w2.T + c2), g2, be2)


def encoder_out(x, wq, wk, wv, wo, g1, be1, w1, c1, w2, c2, g2, be2) -> Fn:  # type: ignore[no-untyped-def]
    s_len = x.shape[0]
    q, k, v, a, o, h, c = (np.empty((s_len, D_MODEL), F32) for _ in range(7))
    sc = np.empty((s_len, s_len), F32)
    col = np.empty((s_len, 1), F32)
    col2 = np.empty((s_len, 1), F32)
    f, t = np.empty((s_len, D_FFN), F32), np.empty((s_len, D_FFN), F32)
    wqt, wkt, wvt, wot, w1t, w2t = wq.T, wk.T, wv.T, wo.T, w1.T, w2.T

    def layer_norm(src: np.ndarray, g: np.ndarray, b: np.ndarray, dst: np.ndarray) -> None:
        np.mean(src, axis=-1, keepdims=True, out=col)
        np.subtract(src, col, out=dst)
        np.multiply(dst, dst, out=c)
        np.mean(c, axis=-1, keepdims=True, out=col2)
        np.add(col2, 1e-5, out=col2)
        np.sqrt(col2, out=col2)
        np.divide(dst, col2, out=dst)
        np.multiply(dst, g, out=dst)
        np.add(dst, b, out=dst)

    def run(x, wq, wk, wv, wo, g1, be1, w1, c1, w2, c2, g2, be2):  # type: ignore[no-untyped-def]
        np.matmul(x, wqt, out=q)
        np.matmul(x, wkt, out=k)
        np.matmul(x, wvt, out=v)
        np.matmul(q, k.T, out=sc)
        np.multiply(sc, 0.125, out=sc)
        np.max(sc, axis=-1, keepdims=True, out=col)
        np.subtract(sc, col, out=sc)
        np.exp(sc, out=sc)
        np.sum(sc, axis=-1, keepdims=True, out=col)
        np.divide(sc, col, out=sc)
        np.matmul(sc, v, out=a)
        np.matmul(a, wot, out=o)
        np.add(o, x, out=o)
        layer_norm(o, g1, be1, h)
        np.matmul(h, w1t, out=f)
        np.add(f, c1, out=f)
        np.multiply(f, f, out=t)
        np.multiply(t, f, out=t)
        np.multiply(t, 0.044715, out=t)
        np.add(t, f, out=t)
        np.multiply(t, GELU_C, out=t)
        np.tanh(t, out=t)
        np.add(t, 1, out=t)
        np.multiply(t, f, out=t)
        np.multiply(t, 0.5, out=t)
        np.matmul(t, w2t, out=o)
        np.add(o, c2, out=o)
        np.add(o, h, out=o)
        layer_norm(o, g2, be2, a)
        return a

    return run


def select_plain(x: np.ndarray) -> np.ndarray:
    return x[x > 0] * 2


def select_out(x: np.ndarray) -> Fn:
    """numpy's fastest spelling of ``x[x > 0] * 2`` (issue 16): the mask into a reused buffer,
    ``np.compress``, the multiply in place. ``np.compress`` is used without ``out=``: with it
    numpy computes into a buffered copy of ``out`` (``mode="raise"``), measured slower than the
    one allocation (1.85 vs 1.60 ms at 1e6); ``x[mask]`` is slower still (~5.6 ms at 1e6 with
    a random mask: a branch per element)."""
    mask = np.empty(x.shape, np.bool_)

    def run(x: np.ndarray) -> np.ndarray:
        np.greater(x, 0, out=mask)
        sel = np.compress(mask, x)  # the size depends on the data: one allocation
        np.multiply(sel, 2, out=sel)
        return sel

    return run


def chain_plain(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    c = x
    for i in range(CHAIN_LEN):
        kind = CHAIN_OPS[i % len(CHAIN_OPS)]
        if kind == "add_y":
            c = c + y
        elif kind == "mul_half":
            c = c * F32(0.5)
        elif kind == "sub_y":
            c = c - y
        else:
            c = np.tanh(c)
    return c


def chain_out(x: np.ndarray, y: np.ndarray) -> Fn:
    buf = np.empty_like(x)
    add, mul, sub, tanh = np.add, np.multiply, np.subtract, np.tanh
    half = F32(0.5)

    def run(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        add(x, y, out=buf)
        mul(buf, half, out=buf)
        sub(buf, y, out=buf)
        tanh(buf, out=buf)
        for _ in range(CHAIN_LEN // 4 - 1):
            add(buf, y, out=buf)
            mul(buf, half, out=buf)
            sub(buf, y, out=buf)
            tanh(buf, out=buf)
        return buf

    return run


# ------------------------------------------------------------------------------ workloads


def _rand(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(F32)


def seed_inputs(n: int, rng: np.random.Generator) -> Arrays:
    return [_rand(rng, n), _rand(rng, n)]


def mlp_inputs(b: int, rng: np.random.Generator) -> Arrays:
    s = HIDDEN**-0.5
    out = [_rand(rng, b, HIDDEN)]
    for _ in range(3):
        out += [_rand(rng, HIDDEN, HIDDEN, scale=s), _rand(rng, HIDDEN, scale=0.1)]
    return out


def encoder_inputs(s_len: int, rng: np.random.Generator) -> Arrays:
    d = D_MODEL**-0.5
    ones, zeros = np.ones(D_MODEL, F32), np.zeros(D_MODEL, F32)
    return [
        _rand(rng, s_len, D_MODEL),
        *(_rand(rng, D_MODEL, D_MODEL, scale=d) for _ in range(4)),
        ones,
        zeros,
        _rand(rng, D_FFN, D_MODEL, scale=d),
        _rand(rng, D_FFN, scale=0.1),
        _rand(rng, D_MODEL, D_FFN, scale=D_FFN**-0.5),
        _rand(rng, D_MODEL, scale=0.1),
        ones.copy(),
        zeros.copy(),
    ]


def select_inputs(n: int, rng: np.random.Generator) -> Arrays:
    return [_rand(rng, n)]


def chain_inputs(_: int, rng: np.random.Generator) -> Arrays:
    return [_rand(rng, *CHAIN_SHAPE), _rand(rng, *CHAIN_SHAPE)]


@dataclass
class Workload:
    name: str
    source: str
    sizes: Sequence[int]
    quick_sizes: Sequence[int]
    inputs: Callable[[int, np.random.Generator], Arrays]
    plain: Fn
    out: Callable[..., Fn]
    elements: Callable[[int], int]
    """Elements of the largest activation at this size (the 1e5 threshold of the targets)."""
    onnx: Callable[..., Any] | None = None
    """The ONNX graph (onnx_workloads.py), called with the weights: the arguments after the
    first ``feeds``, which are the graph's run-time inputs in order."""
    feeds: int = 1


def chain_onnx() -> Any:
    """The chain as an ONNX graph: the same ops, cycling through ``CHAIN_OPS``."""
    return ow.chain_model(CHAIN_LEN, CHAIN_OPS, CHAIN_SHAPE)


WORKLOADS = [
    Workload(
        "seed (x+x)-y", SEED, [10, 1000, 100_000, 10_000_000], [10, 1000],
        seed_inputs, seed_plain, seed_out, lambda n: n, ow.seed_model, 2,
    ),
    Workload(
        "mlp batch", MLP, [1, 8, 64, 512], [1, 8],
        mlp_inputs, mlp_plain, mlp_out, lambda b: b * HIDDEN, ow.mlp_model, 1,
    ),
    Workload(
        "encoder seq", ENCODER, [8, 64, 256, 1024], [8, 16],
        encoder_inputs, encoder_plain, encoder_out, lambda s: max(s * s, s * D_FFN),
        ow.encoder_model, 1,
    ),
    Workload(
        "x[x>0]*2", DATA_DEPENDENT, [1000, 1_000_000], [1000],
        select_inputs, select_plain, select_out, lambda n: n, ow.select_model, 1,
    ),
    Workload(
        "chain 200 (1,16)", chain_program(), [16], [16],
        chain_inputs, chain_plain, chain_out, lambda n: n, chain_onnx, 2,
    ),
]  # fmt: skip


# -------------------------------------------------------------------------------- measuring


def _calibrate(fn: Fn, args: Arrays, target: float) -> int:
    """Calls per sample so that one sample lasts about ``target`` seconds."""
    t0 = time.perf_counter()
    fn(*args)
    one = time.perf_counter() - t0
    return max(1, min(100_000, int(target / max(one, 1e-7))))


def _sample(fn: Fn, args: Arrays, inner: int) -> float:
    t0 = time.perf_counter()
    for _ in range(inner):
        fn(*args)
    return (time.perf_counter() - t0) / inner


def interleaved_medians(
    fns: dict[str, Fn], args: Arrays, repeats: int, target: float
) -> dict[str, float]:
    """Median seconds per call of each function, sampled round-robin (order rotating)."""
    names = list(fns)
    for name in names:  # warm up (pools, caches, BLAS threads)
        fns[name](*args)
    inner = {name: _calibrate(fns[name], args, target) for name in names}
    samples: dict[str, list[float]] = {name: [] for name in names}
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for r in range(repeats):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                samples[name].append(_sample(fns[name], args, inner[name]))
    finally:
        if gc_was:
            gc.enable()
    return {name: statistics.median(s) for name, s in samples.items()}


def numpy_peak(fn: Fn, args: Arrays) -> int:
    """Peak bytes traced during one call (numpy reports its buffers to tracemalloc)."""
    fn(*args)
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        result = fn(*args)
        _, peak = tracemalloc.get_traced_memory()
        del result
    finally:
        tracemalloc.stop()
    return peak - base


def dynshape_peak(exe: Any, args: Arrays) -> int:
    """The planned peak: live bytes of an exact (naive) allocator over one call."""
    vm = dynshape.VirtualMachine(exe, allocator=NaiveAllocator())
    vm.run(*args)
    return int(vm.allocator.stats.peak_live_bytes)


def _check(name: str, got: Any, want: np.ndarray) -> None:
    got = np.asarray(got)
    if got.shape != want.shape or not np.allclose(got, want, rtol=2e-3, atol=2e-4):
        err = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("nan")
        raise AssertionError(
            f"{name} disagrees with numpy (shape {got.shape} vs {want.shape}, max err {err:.3g})"
        )


@dataclass
class Row:
    workload: str
    size: int
    elements: int
    ds: float = float("nan")
    np_plain: float = float("nan")
    np_out: float = float("nan")
    compile_s: float = float("nan")
    mem_ds: int = -1
    mem_np: int = -1
    ort: float = float("nan")
    ort_init_s: float = float("nan")
    error: str = ""


Sessions = dict[tuple[str, int | None], tuple[Any, float]]


def ort_runner(w: Workload, size: int, args: Arrays, sessions: Sessions) -> tuple[Fn, float]:
    """``sess.run`` of the workload's ONNX graph on ``args`` and the seconds that building the
    graph and creating its session took (untimed, like compile). ``sessions`` keeps one session
    per workload and weight set: the graphs' dims are symbolic, so a workload without weights
    has one session for every size; the weights are drawn anew for every size."""
    assert w.onnx is not None
    feeds, weights = args[: w.feeds], args[w.feeds :]
    key = (w.name, size if weights else None)
    if key not in sessions:
        t0 = time.perf_counter()
        sess = ow.session(w.onnx(*weights))
        sessions[key] = (sess, time.perf_counter() - t0)
    sess, init_s = sessions[key]
    feed = {i.name: a for i, a in zip(sess.get_inputs(), feeds, strict=True)}

    def run(*_: np.ndarray) -> Any:  # the same arrays every call: the feed dict is built once
        return sess.run(None, feed)[0]

    return run, init_s


def measure(
    w: Workload,
    size: int,
    repeats: int,
    target: float,
    compiled: dict[str, tuple[Any, float]],
    sessions: Sessions | None = None,
) -> Row:
    """One row; with ``sessions`` (onnxruntime is installed) onnxruntime runs too."""
    row = Row(w.name, size, w.elements(size))
    try:
        if w.name not in compiled:  # compile once per workload: the program is size-free
            t0 = time.perf_counter()
            exe = dynshape.compile(textwrap.dedent(w.source))
            compiled[w.name] = (exe, time.perf_counter() - t0)
        exe, row.compile_s = compiled[w.name]
        vm = dynshape.VirtualMachine(exe)
        args = w.inputs(size, np.random.default_rng(size))
        want = w.plain(*args)
        np_out = w.out(*args)
        _check("dynshape", vm.run(*args), want)
        _check("numpy out=", np_out(*args), want)
        fns = {"ds": vm.run, "np": w.plain, "out": np_out}
        if sessions is not None and w.onnx is not None:
            fns["ort"], row.ort_init_s = ort_runner(w, size, args, sessions)
            _check("onnxruntime", fns["ort"](*args), want)
        med = interleaved_medians(fns, args, repeats, target)
        row.ds, row.np_plain, row.np_out = med["ds"], med["np"], med["out"]
        row.ort = med.get("ort", float("nan"))
        row.mem_ds = dynshape_peak(exe, args)
        row.mem_np = numpy_peak(w.plain, args)
    except Exception as e:  # a failing workload is reported in its row, the run goes on
        row.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:150]
    return row


# -------------------------------------------------------------------------------- reporting


def _time(s: float) -> str:
    if s != s:  # nan
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _bytes(b: int) -> str:
    if b < 0:
        return "-"
    if b < 1 << 20:
        return f"{b / 1024:.1f} KiB"
    return f"{b / (1 << 20):.1f} MiB"


def _ratio(a: float, b: float) -> str:
    return "-" if b != b else f"{a / b:.2f}"  # nan: not measured


def _if(on: bool, cell: str) -> str:
    return cell if on else ""


def header(with_ort: bool = False) -> str:
    """The table's header; ``with_ort`` adds the columns ort, ds/ort and ort init."""
    return (
        f"| {'workload':<18} | {'size':>9} | {'dynshape':>10} | {'numpy':>10} | {'np out=':>10} "
        + _if(with_ort, f"| {'ort':>10} ")
        + f"| {'ds/np':>6} | {'ds/out':>6} "
        + _if(with_ort, f"| {'ds/ort':>6} ")
        + f"| {'compile':>9} "
        + _if(with_ort, f"| {'ort init':>9} ")
        + f"| {'mem ds':>10} | {'mem np':>10} |"
    )


HEADER = header()


def format_row(r: Row, with_ort: bool = False) -> str:
    head = f"| {r.workload:<18} | {r.size:>9,} |"
    if r.error:
        return f"{head} ERROR: {r.error}"
    return (
        f"{head} {_time(r.ds):>10} | {_time(r.np_plain):>10} | {_time(r.np_out):>10} "
        + _if(with_ort, f"| {_time(r.ort):>10} ")
        + f"| {r.ds / r.np_plain:>6.2f} | {r.ds / r.np_out:>6.2f} "
        + _if(with_ort, f"| {_ratio(r.ds, r.ort):>6} ")
        + f"| {_time(r.compile_s):>9} "
        + _if(with_ort, f"| {_time(r.ort_init_s):>9} ")
        + f"| {_bytes(r.mem_ds):>10} | {_bytes(r.mem_np):>10} |"
    )


def targets(rows: list[Row]) -> list[str]:
    """Issue 16's targets, each with met/missed and the figure (ratios to numpy with ``out=``,
    ``np out``, measured in the same run; for the selection ``np out`` is ``np.compress``)."""
    ok = [r for r in rows if not r.error]
    lines = []

    def verdict(good: bool) -> str:
        return "met   " if good else "MISSED"

    def out_ratio(workload: str, size: int, limit: float, what: str = "np out=") -> None:
        for r in ok:
            if r.workload.startswith(workload) and r.size == size:
                q = r.ds / r.np_out
                head = f"{verdict(q <= limit)} <={limit:.2f}x {what:<11}"
                lines.append(f"{head} {r.workload} {size:,}: {q:.2f}x")

    out_ratio("seed", 10, 3.0)
    out_ratio("seed", 100_000, 1.0)
    out_ratio("seed", 10_000_000, 0.6)
    for r in ok:
        if r.workload.startswith("seed") and r.size == 10_000_000 and r.ort == r.ort:  # NaN: no ort
            q = r.ds / r.ort
            lines.append(f"{verdict(q < 1.0)} faster than onnxruntime  seed 10,000,000: {q:.2f}x")
    out_ratio("x[x>0]", 1_000_000, 0.8, "np.compress")
    out_ratio("chain", 16, 0.3)
    for r in ok:
        if r.workload.startswith(("mlp", "encoder")):
            q = r.ds / r.np_out
            lines.append(
                f"{verdict(q <= 1.0)} <=1.00x np out=     {r.workload} {r.size:,}: {q:.2f}x"
            )
    for r in ok:
        if r.workload.startswith(("mlp", "encoder")) and r.size >= 64 and r.ort == r.ort:
            lines.append(f"report  vs onnxruntime   {r.workload} {r.size:,}: {r.ds / r.ort:.2f}x")
    for r in rows:
        if r.error:
            lines.append(f"ERROR  {r.workload} {r.size:,}: {r.error}")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 3 repeats (CI smoke)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 9)
    target = 0.002 if args.quick else 0.02
    with_ort = ow.AVAILABLE
    print(
        f"median of {repeats} interleaved repeats; numpy {np.__version__}, "
        f"python {sys.version.split()[0]}" + (f"; {ow.describe()}" if with_ort else "")
    )
    if not with_ort:
        print("onnxruntime is not installed (optional: pip install -e '.[onnx]'): no ort column")
    head = header(with_ort)
    print(head)
    print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
    rows: list[Row] = []
    compiled: dict[str, tuple[Any, float]] = {}
    sessions: Sessions | None = {} if with_ort else None
    for w in WORKLOADS:
        for size in w.quick_sizes if args.quick else w.sizes:
            # one call of the largest sizes lasts tens of ms: fewer calls per sample there
            row = measure(w, size, repeats, target, compiled, sessions)
            rows.append(row)
            print(format_row(row, with_ort), flush=True)
    print("\ntargets (same run):")
    for line in targets(rows):
        print("  " + line)


if __name__ == "__main__":
    main()
