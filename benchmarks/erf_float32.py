"""The float32 erf (``vm/kernels/erf.py``, ``_erf32_chunk``: ``tanh(x R(x^2))``, R = P/Q): R
refitted, the kernel's error on every float32, and its speed against the float64 erf and
``np.add``.

    python benchmarks/erf_float32.py           # refit, every float32 of [-4.5, 4.5], timings
    python benchmarks/erf_float32.py --quick   # CI smoke: every 4,096th float32, few repeats

1. The fit: R(y) = artanh(erf(x)) / x (y = x^2, 0 < x <= 3.92) as P(y) / Q(y), P and Q of
   degree 3, by Loeb's iteration (the linearised problem ``P - R Q``, reweighted by the last
   Q) inside Lawson's iteratively reweighted least squares (which converges to the minimax
   fit) on 8,000 Chebyshev points, weighted for erf's relative error: an error e in R moves erf
   by ``(1 - erf^2) x e``, and relatively by that over erf. Q is then made monic. Printed
   with the kernel's coefficients (the fit rounded to float32; another BLAS may move the
   fit's last bits, not its error).
2. Every float32 of [-4.5, 4.5] (beyond, erf rounds to +-1 and the kernel gives +-1) through
   the kernel, against the correctly rounded erf: the VM's float64 erf (Cody's; within 5 ulp
   of ``math.erf``, tests/vm/test_erf.py) rounded to float32, and where a float32 rounding
   boundary lies within 8 ulp of that float64 value, ``math.erf`` itself rounded. Prints the
   largest error in ulp, where it is, and how many results are off by 0, 1, 2 and 3 or more.
3. Medians of interleaved timings of the kernel (float32 input, one call per array: chunks
   and, from ``ERF_THREAD_MIN`` elements, the worker thread), the float64 erf on the same
   values, and ``np.add`` on the float32 array, at sizes from 256 to 1 Mi elements.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vm.kernels import erf as erf_module

CLIP = erf_module._ERF32_CLIP
DEGREES = (len(erf_module._ERF32_P) - 1, len(erf_module._ERF32_Q) - 1)
POINTS = 8000


def loeb_lawson(
    y: np.ndarray, target: np.ndarray, weight: np.ndarray, p: int, q: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """``(P, Q, error)``: P of degree ``p`` and Q of degree ``q`` with Q(0) = 1 (highest degree
    first), minimising max |weight * (P/Q - target)|: Lawson's reweighting of least squares
    on the linearised ``(P - target Q) / Q_last``, ``Q_last`` refreshed between rounds (Loeb)."""
    vp, vq = np.vander(y, p + 1), np.vander(y, q + 1)[:, :-1]
    q_last = np.ones_like(y)
    best: tuple[np.ndarray, np.ndarray, float] | None = None
    for _ in range(80):
        lw = np.full(len(y), 1.0 / len(y))
        for _ in range(40):
            s = np.sqrt(lw) * weight / q_last
            basis = np.hstack([vp, -target[:, None] * vq]) * s[:, None]
            c, *_ = np.linalg.lstsq(basis, target * s, rcond=None)
            num, den = vp @ c[: p + 1], 1 + vq @ c[p + 1 :]
            err = np.abs(weight * (num / den - target))
            lw = lw * err
            lw /= lw.sum()
        q_last = den
        if best is None or err.max() < best[2]:
            best = (c[: p + 1], np.concatenate([c[p + 1 :], [1.0]]), float(err.max()))
    assert best is not None
    return best


def fit() -> None:
    x = CLIP * (1 - np.cos(np.linspace(0.0, np.pi, POINTS))) / 2
    x[0] = 1e-8  # artanh(erf(x)) / x at 0 is its limit, 2/sqrt(pi)
    erf_x = np.array([math.erf(v) for v in x])
    erfc_x = np.array([math.erfc(v) for v in x])
    # artanh(e) = log((1 + e) / (1 - e)) / 2, with 1 - e as erfc (no cancellation near 1)
    r = np.log((1 + erf_x) / erfc_x) / (2 * x)
    weight = erfc_x * (1 + erf_x) * x / erf_x
    num, den, err = loeb_lawson(x * x, r, weight, *DEGREES)
    num, den = num / den[0], den / den[0]  # Q monic: its Horner starts with an add
    kernel = np.asarray([*erf_module._ERF32_P, *erf_module._ERF32_Q])
    refit = np.concatenate([num, den])
    rounded = np.asarray(refit, np.float32).astype(np.float64)
    moved = np.max(np.abs(rounded - kernel) / np.abs(kernel))
    print(f"R = P/Q (relative error of erf): fit error {err:.2e}; the kernel's coefficients:")
    print("    P", ", ".join(f"{c!r}" for c in erf_module._ERF32_P))
    print("    Q", ", ".join(f"{c!r}" for c in erf_module._ERF32_Q))
    print(f"    refitted and rounded to float32: largest relative change {moved:.1e}")


def _ordered(bits: np.ndarray) -> np.ndarray:
    """float32 bit patterns as integers in the order of their values (ulp distances)."""
    b = bits.astype(np.int64)
    return np.where(b < 0, -(b & 0x7FFFFFFF), b)


def check(stride: int) -> None:
    top = int(np.float32(4.5).view(np.int32))
    worst, total = 0, 0
    worst_at = 0.0
    counts = np.zeros(4, np.int64)
    step = (1 << 22) * stride
    start = time.perf_counter()
    for first in range(0, top + 1, step):
        bits = np.arange(first, min(first + step, top + 1), stride, dtype=np.int32)
        for x in (bits.view(np.float32), -bits.view(np.float32)):
            got = np.empty_like(x)
            erf_module._erf(x, got)
            wide = np.empty(x.size)
            erf_module._erf(x.astype(np.float64), wide)
            want = wide.astype(np.float32)
            # The float64 erf is within 5 ulp of its own: its float32 rounding is the correct
            # one unless a float32 rounding boundary lies within that reach; math.erf settles
            # those few.
            reach = 8 * np.spacing(np.abs(wide))
            near = (wide - reach).astype(np.float32) != (wide + reach).astype(np.float32)
            off = np.flatnonzero(near)
            if off.size:
                want[off] = np.array([math.erf(v) for v in x[off].astype(np.float64).tolist()])
            ulps = np.abs(_ordered(got.view(np.int32)) - _ordered(want.view(np.int32)))
            if ulps.max() > worst:
                worst, worst_at = int(ulps.max()), float(x[ulps.argmax()])
            counts += np.bincount(np.minimum(ulps, 3), minlength=4)
            total += x.size
    print(
        f"every {stride}th float32 of [-4.5, 4.5]: {total:,} values in "
        f"{time.perf_counter() - start:.0f} s; largest error {worst} ulp (at {worst_at!r})"
    )
    shares = ", ".join(f"{k} ulp {100 * c / total:.4f}%" for k, c in enumerate(counts.tolist()))
    print(f"    off by {shares}" + (" (3 or more)" if worst > 3 else ""))


def _median_us(fn: Callable[[], object], repeats: int, budget: float = 0.02) -> list[float]:
    samples = []
    for _ in range(repeats):
        calls, begin = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - begin
            if elapsed >= budget:
                break
        samples.append(elapsed / calls * 1e6)
    return samples


def _calls(n: int, rng: np.random.Generator) -> dict[str, Callable[[], object]]:
    """The three timed calls on ``n`` random elements (float32, and the same values widened)."""
    x = (rng.standard_normal(n) * 1.5).astype(np.float32)
    x64 = x.astype(np.float64)
    out, out64, added = np.empty_like(x), np.empty_like(x64), np.empty_like(x)
    return {
        "f32": lambda: erf_module._erf(x, out),
        "f64": lambda: erf_module._erf(x64, out64),
        "add": lambda: np.add(x, x, added),
    }


def timings(repeats: int, sizes: list[int]) -> None:
    rng = np.random.default_rng(0)
    print("\nelements   float32 kernel   float64 erf   np.add f32   kernel/float64   kernel/add")
    for n in sizes:
        fns = _calls(n, rng)
        runs: dict[str, list[float]] = {name: [] for name in fns}
        names = list(fns)
        for r in range(repeats):  # interleaved, the order rotating
            for name in names[r % 3 :] + names[: r % 3]:
                runs[name] += _median_us(fns[name], 1)
        f32, f64, add = (statistics.median(runs[k]) for k in names)
        print(
            f"{n:>8,}   {f32:>11.1f} us   {f64:>8.1f} us   {add:>7.1f} us"
            f"   {f32 / f64:>14.2f}x   {f32 / add:>9.1f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI smoke: a sample, few repeats")
    args = parser.parse_args()
    fit()
    check(4096 if args.quick else 1)
    sizes = [1 << 13, 1 << 15] if args.quick else [1 << 8, 1 << 12, 1 << 15, 1 << 18, 1 << 20]
    timings(3 if args.quick else 11, sizes)


if __name__ == "__main__":
    main()
