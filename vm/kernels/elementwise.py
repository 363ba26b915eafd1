"""Elementwise and broadcasting kernels.

Most are numpy ufuncs registered as they are (``np.add(a, b, out)`` is already the calling
convention); the rest are short compositions that write into ``out`` step by step, in place, so
they allocate no temporary the size of the output (except where a docstring says so).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..worker_thread import shared
from .registry import Kernel, register_kernel, register_table

#: Unary ufuncs that cost nanoseconds an element (numpy's SIMD or libm transcendental loops:
#: float32 tanh ~3 ns, exp ~1.7 ns on the benchmark machine, against ~0.12 ns for add):
#: worth sharing with the worker thread on large arrays (``_shared_unary``).
TRANSCENDENTAL: dict[str, np.ufunc] = {
    "exp": np.exp,
    "log": np.log,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
}
#: Elements from which a transcendental ufunc's work is shared with the worker thread, and the
#: elements each thread takes at a time (a float32 chunk is 128 KiB: in cache).
SHARED_MIN = 1 << 16
SHARED_CHUNK = 1 << 15


def _shared_unary(ufunc: np.ufunc) -> Kernel:
    """``ufunc(x, out=out)``; from ``SHARED_MIN`` elements (same shape and dtype, both
    C-contiguous) in chunks that the calling thread and the worker thread share
    (``vm/worker_thread.py``): each element is computed by the same loop either way."""

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        n = out.size
        if (
            n < SHARED_MIN
            or x.shape != out.shape
            or x.dtype != out.dtype
            or not (x.flags.c_contiguous and out.flags.c_contiguous)
        ):
            ufunc(x, out=out)
            return
        src, dst = x.reshape(-1), out.reshape(-1)
        chunks = iter(range(0, n, SHARED_CHUNK))

        def work() -> None:
            for i in chunks:
                ufunc(src[i : i + SHARED_CHUNK], out=dst[i : i + SHARED_CHUNK])

        shared(work, ufunc.__name__, n)

    kernel.__doc__ = f"``np.{ufunc.__name__}``, shared with the worker thread on large arrays."
    return kernel


#: The transcendental kernels, by op name (also what softmax, attention and sigmoid call for
#: their exp and tanh).
SHARED_UNARY: dict[str, Kernel] = {name: _shared_unary(u) for name, u in TRANSCENDENTAL.items()}


register_table(
    {
        "sqrt": np.sqrt,
        **SHARED_UNARY,
        "floor": np.floor,
        "ceil": np.ceil,
        "round": np.rint,  # half to even
        "abs": np.absolute,
        "logical_not": np.logical_not,
        "add": np.add,
        "subtract": np.subtract,
        "multiply": np.multiply,
        "floor_divide": np.floor_divide,
        "mod": np.remainder,  # sign of the divisor, as numpy
        "power": np.power,
        "equal": np.equal,
        "not_equal": np.not_equal,
        "less": np.less,
        "less_equal": np.less_equal,
        "greater": np.greater,
        "greater_equal": np.greater_equal,
        "logical_and": np.logical_and,
        "logical_or": np.logical_or,
        "bitwise_and": np.bitwise_and,
        "bitwise_or": np.bitwise_or,
        "bitwise_xor": np.bitwise_xor,
        "bitwise_not": np.invert,
        # numpy's shifts already give 0 (-1 for a negative a shifted right) where the shift is
        # negative or at least the bit width, as ONNX's BitShift specifies (C leaves it
        # undefined); checked against that rule in tests/vm/test_kernels_bitwise_trig.py.
        "left_shift": np.left_shift,
        "right_shift": np.right_shift,
    }
)


def _negative(x: np.ndarray, out: np.ndarray) -> None:
    """``-x``. numpy 2.4.6's ``np.negative`` writes wrong elements into a strided output (the
    column view ``a[:, :1]`` of a (rows, 4) float32 or int32 array, in place or not: it steps
    through the output as if it were contiguous; measured, tests/vm/test_kernels_elementwise.py),
    so an output that is neither C- nor F-contiguous gets the values through a contiguous
    temporary."""
    if out.flags.c_contiguous or out.flags.f_contiguous:
        np.negative(x, out=out)
    else:
        np.copyto(out, np.negative(x))


def _divide(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """True division for floats, floor division (numpy ``//``) for integers."""
    if out.dtype.kind == "f":
        np.true_divide(a, b, out)
    else:
        np.floor_divide(a, b, out)


def _rsqrt(x: np.ndarray, out: np.ndarray) -> None:
    """``1 / sqrt(x)``, in place in ``out``."""
    np.sqrt(x, out)
    np.reciprocal(out, out)


def _sigmoid(x: np.ndarray, out: np.ndarray) -> None:
    """``1 / (1 + exp(-x))`` computed as ``(1 + tanh(x / 2)) / 2``: no overflow for large |x|."""
    np.multiply(x, 0.5, out)
    SHARED_UNARY["tanh"](out, out)
    np.add(out, 1.0, out)
    np.multiply(out, 0.5, out)


# ---- erf: W. J. Cody's rational Chebyshev approximations, vectorised -------------------------
#
# numpy has no erf ufunc and the VM may import numpy only. Cody, "Rational Chebyshev
# approximations for the error function", Math. Comp. 23 (1969), 631-638, as in his CALERF
# (SPECFUN, netlib): for |x| <= 0.46875 erf is x times a rational function of x^2 (A/B); for
# 0.46875 < |x| <= 4, erfc(|x|) = exp(-x^2) R(|x|) with R rational in |x| (C/D); for |x| > 4,
# erfc(|x|) = exp(-x^2) / |x| * (1/sqrt(pi) - z R(z)) with z = 1/x^2 (P/Q). erf = 1 - erfc there.
# The coefficients are the published double-precision ones (as printed in CALERF).
_ERF_A = (
    3.16112374387056560e00,
    1.13864154151050156e02,
    3.77485237685302021e02,
    3.20937758913846947e03,
    1.85777706184603153e-1,
)
_ERF_B = (
    2.36012909523441209e01,
    2.44024637934444173e02,
    1.28261652607737228e03,
    2.84423683343917062e03,
)
_ERF_C = (
    5.64188496988670089e-1,
    8.88314979438837594e00,
    6.61191906371416295e01,
    2.98635138197400131e02,
    8.81952221241769090e02,
    1.71204761263407058e03,
    2.05107837782607147e03,
    1.23033935479799725e03,
    2.15311535474403846e-8,
)
_ERF_D = (
    1.57449261107098347e01,
    1.17693950891312499e02,
    5.37181101862009858e02,
    1.62138957456669019e03,
    3.29079923573345963e03,
    4.36261909014324716e03,
    3.43936767414372164e03,
    1.23033935480374942e03,
)
_ERF_P = (
    3.05326634961232344e-1,
    3.60344899949804439e-1,
    1.25781726111229246e-1,
    1.60837851487422766e-2,
    6.58749161529837803e-4,
    1.63153871373020978e-2,
)
_ERF_Q = (
    2.56852019228982242e00,
    1.87295284992346047e00,
    5.27905102951428412e-1,
    6.05183413124413191e-2,
    2.33520497626869185e-3,
)
_ERF_THRESH = 0.46875
_ONE_OVER_SQRT_PI = 5.6418958354775628695e-1
#: 2/sqrt(pi) (A[3]/B[3]): erf(x) = x * (2/sqrt(pi) + N1(x^2)/B(x^2)) with ``N1 = A - 2/sqrt(pi) B``
#: (coefficients below, computed exactly from A and B and rounded once). Adding the leading
#: constant last rounds a little less than ``x * A/B`` (mean error 0.63 against 0.70 ulp on
#: |x| <= 0.46875, at most 3 ulp either way).
_TWO_OVER_SQRT_PI = 1.1283791670955126
_ERF_N1 = (
    -0.9426014609109095,
    -23.47008128331435,
    -161.48816355220197,
    -1069.7925297128231,
    -2.8063891728300123e-13,
)


#: A rational function as its numerator's and its denominator's coefficients, highest degree
#: first (``_polynomials``).
Rational = tuple[tuple[float, ...], tuple[float, ...]]


def _polynomials(num: tuple[float, ...], den: tuple[float, ...]) -> Rational:
    """``(num, den)`` without their leading zero coefficients: Horner's first steps on them
    would make ``0 * y + c``, which is ``c`` for the finite ``y`` every caller passes (a NaN
    ``y`` gives NaN either way)."""

    def stripped(coefs: tuple[float, ...]) -> tuple[float, ...]:
        lead = next(i for i, c in enumerate(coefs) if c != 0.0)
        return tuple(float(c) for c in coefs[lead:])

    return stripped(num), stripped(den)


# Highest degree first: Cody's A[4] (or C[8], P[5]) leads, the denominators are monic.
_ERF_R1 = _polynomials(_ERF_N1, (1.0, *_ERF_B))
_ERF_R2 = _polynomials((_ERF_C[8], *_ERF_C[:8]), (1.0, *_ERF_D))
_ERF_R3 = _polynomials((_ERF_P[5], *_ERF_P[:5]), (1.0, *_ERF_Q))
#: Beyond this |x|, erf is +-1 in float64 (erfc(6) = 2.2e-17 < 2^-54): |x| is clipped to it, so
#: infinities need no case of their own.
_ERF_ONE = 6.0

#: float32 and float16 need less: erf(x) = x * P(x^2) / Q(x^2) on |x| <= ``_ERF_NARROW_CLIP`` (one
#: formula for every x: no regions to gather and scatter, no exp), evaluated in float64 and
#: rounded once. P (degree 6) and Q (degree 5) were fitted for this kernel: linearised
#: least squares weighted for relative error, iterated (Sanathanan-Koerner) on 20,001 Chebyshev
#: points of [0, 3.92]; the largest relative error in float64 is 2.2e-9, float32's half ulp is
#: 6e-8. Past 3.92, erfc < 6e-9 and erf rounds to +-1 in float32 (clipping also takes care of
#: the infinities; NaN passes through the clip). Highest degree first, Q padded to P's degree.
_ERF_NARROW_NUM_DEN = (
    (
        -1.2917109715182562e-08,
        4.630631174163541e-06,
        0.00037767741201252055,
        0.003845660789414284,
        0.05427725693042532,
        0.18524451989065985,
        1.1283791679597839,
    ),
    (
        0.0,
        6.260456191329363e-05,
        0.0013042152393177046,
        0.015447130121675898,
        0.11393556547142974,
        0.4975020715432107,
        1.0,
    ),
)
_ERF_NARROW = _polynomials(*_ERF_NARROW_NUM_DEN)
#: Rows of the powers of ``x^2`` (``_erf_scratch``): the zeroth to the sixth.
_ERF_POWERS = len(_ERF_NARROW_NUM_DEN[0])
#: The same coefficients lowest degree first, ``(2, 7)``: the rational function as one matrix
#: product with the powers of ``x^2`` (``_erf_narrow_chunk`` on small chunks).
_ERF_NARROW_POWERS = np.array([c[::-1] for c in _ERF_NARROW_NUM_DEN])
_ERF_NARROW_CLIP = 3.92

#: Elements per chunk: every temporary is a float64 array of at most this many elements (the
#: numerator/denominator scratch twice that), kept per thread and reused by every chunk and call,
#: so the scratch is ~1.8 MB whatever the input's size. Measured (CPU time, 1e6 float32
#: elements, loaded 2-core machine): chunks of 4 Ki 44 ms, 8 Ki 35, 16 Ki 27, 32 Ki 25-27: the
#: ~40 ufunc calls per chunk cost ~1 us each, which small chunks pay per few thousand elements.
ERF_CHUNK = 1 << 15
#: Elements from which the chunks are shared with the worker thread (``vm/worker_thread.py``):
#: two chunks, ~0.5 ms of work against a hand-off of tens of microseconds.
ERF_THREAD_MIN = 2 * ERF_CHUNK
#: Up to this many elements a float32/float16 chunk evaluates its rational function as one
#: matrix product of the coefficients by the powers of ``x^2`` (5 multiplies and one small
#: matmul instead of Horner's 22 ufunc calls, whose fixed cost is most of a small erf);
#: the powers are 7 rows of float64 scratch, which past this size cost more passes over memory
#: than Horner's steps.
ERF_POWERS_MAX = 1 << 12


#: Whether float32/float16 erfs of at most ``ERF_POWERS_MAX`` elements take
#: ``_erf_narrow_small`` (a switch for tests and measurements).
ERF_SMALL = True

_erf_local = threading.local()


def _erf_scratch(m: int) -> tuple[np.ndarray, ...]:
    """This thread's erf scratch, at least ``m`` elements each: ``ax, y, xs, rs`` (float64),
    ``nd`` (2 x), ``spare``, and ``powers`` (7 x ``ERF_POWERS_MAX``, its first row ones: the
    zeroth powers, never written). Kept per thread and reused by every call: allocated per call, the
    ~1.8 MB were fresh pages for every call as soon as other work had reused the heap (page
    faults: 32 Ki float32 elements took 1.5 ms instead of 0.75 ms, interleaved with other
    kernels). Per thread, so concurrent calls never share it; erf calls nothing that could
    re-enter it."""
    cached: tuple[np.ndarray, ...] | None = getattr(_erf_local, "scratch", None)
    if cached is None or cached[0].size < m:
        size = max(m, ERF_CHUNK)
        powers = np.empty((_ERF_POWERS, ERF_POWERS_MAX))
        powers[0] = 1.0
        cached = (*(np.empty(size) for _ in range(4)), np.empty((2, size)), np.empty(size), powers)
        _erf_local.scratch = cached
        _erf_local.views = {}  # views of the scratch this replaces
    return cached


#: Sizes whose scratch views a thread keeps (``_erf_small_views``); past it they are dropped.
ERF_VIEWS_MAX = 32


def _erf_small_views(n: int) -> tuple[np.ndarray, ...]:
    """This thread's views of its scratch for ``n <= ERF_POWERS_MAX`` elements: the float64
    copy, the powers (all rows, then rows 1-6), the ``(2, n)`` quotient and its two rows. Kept per
    size: a model calls erf on the same few sizes, and slicing eleven views is a tenth of a
    small erf."""
    scratch = _erf_scratch(n)
    views: dict[int, tuple[np.ndarray, ...]] = _erf_local.views
    found = views.get(n)
    if found is None:
        if len(views) >= ERF_VIEWS_MAX:
            views.clear()
        _, _, _, _, nd, spare, powers = scratch
        rows = tuple(powers[i, :n] for i in range(1, _ERF_POWERS))
        found = views[n] = (spare[:n], powers[:, :n], *rows, nd[:, :n], nd[0, :n], nd[1, :n])
    return found


def _erf_narrow_small(x: np.ndarray, out: np.ndarray) -> None:
    """``_erf_narrow_chunk`` for one array of at most ``ERF_POWERS_MAX`` elements, without its
    slicing and loops (the same products in the same order: the same bits): 22 against 46 us
    on 256 float32 elements, where the fixed cost is most of the work."""
    b, powers, p1, p2, p3, p4, p5, p6, q, num, den = _erf_small_views(x.size)
    multiply = np.multiply
    np.copyto(b.reshape(x.shape), x, casting="unsafe")
    b.clip(-_ERF_NARROW_CLIP, _ERF_NARROW_CLIP, out=b)  # as _erf_narrow_chunk's
    multiply(b, b, p1)
    multiply(p1, p1, p2)
    multiply(p1, p2, p3)
    multiply(p2, p2, p4)
    multiply(p1, p4, p5)
    multiply(p2, p4, p6)
    np.matmul(_ERF_NARROW_POWERS, powers, q)
    np.divide(num, den, num)
    multiply(num, b, b)
    np.copyto(out, b.reshape(out.shape), casting="unsafe")


def _horner(coefs: tuple[float, ...], y: np.ndarray, acc: np.ndarray) -> None:
    """``acc`` = the polynomial ``coefs`` (highest degree first) at ``y``, by Horner: one
    multiply and one add of a Python float per degree (a leading 1.0 saves the first multiply:
    ``y * 1.0`` is ``y``). Outputs are positional (the ``out=`` keyword costs a dict a call)."""
    multiply, add = np.multiply, np.add
    if coefs[0] == 1.0:
        add(y, coefs[1], acc)
    else:
        multiply(y, coefs[0], acc)
        add(acc, coefs[1], acc)
    for c in coefs[2:]:
        multiply(acc, y, acc)
        add(acc, c, acc)


def _rational(coefs: Rational, y: np.ndarray, nd: np.ndarray) -> np.ndarray:
    """``num(y) / den(y)``, each polynomial by Horner into its row of the ``(2, n)`` scratch
    ``nd``; the quotient is written into (and returned as) ``nd[0]``. Each polynomial on its
    own, with scalar coefficients: the same operations per element as both advanced together
    on ``nd`` with ``(2, 1)`` coefficient columns (the same bits), but each call over ``n``
    elements without a broadcast operand costs a fifth less (32 Ki float64 elements: a
    Horner step of both 45 us stacked, 36 us one after the other), and the stripped leading
    zero and 1.0 coefficients save steps."""
    num: np.ndarray = nd[0]
    den = nd[1]
    _horner(coefs[0], y, num)
    _horner(coefs[1], y, den)
    np.divide(num, den, num)
    return num


def _erf_small(x: np.ndarray, y: np.ndarray, nd: np.ndarray, out: np.ndarray) -> None:
    """erf for |x| <= 0.46875 into ``out`` (may be ``x``: it is read last, element by element);
    ``y`` and ``nd`` are scratch of at least ``x.size`` elements."""
    k = x.size
    y, nd = y[:k], nd[:, :k]
    np.multiply(x, x, out=y)
    q = _rational(_ERF_R1, y, nd)
    q += _TWO_OVER_SQRT_PI
    np.multiply(q, x, out=out)


def _erf_large(
    x: np.ndarray, ax: np.ndarray, y: np.ndarray, nd: np.ndarray, out: np.ndarray
) -> None:
    """erf for |x| > 0.46875 (or NaN) into ``out`` (may be ``x``); the others are scratch."""
    k = x.size
    ax, y, nd = ax[:k], y[:k], nd[:, :k]
    np.absolute(x, out=ax)
    np.minimum(ax, _ERF_ONE, out=ax)
    np.minimum(ax, 4.0, out=y)
    q = _rational(_ERF_R2, y, nd)
    far = np.flatnonzero(ax > 4.0)  # rare in practice (|x| > 4): its own small arrays
    if far.size:
        yf = ax[far]
        z = yf * yf
        np.reciprocal(z, out=z)
        qf = _rational(_ERF_R3, z, np.empty((2, far.size)))
        qf *= z
        np.subtract(_ONE_OVER_SQRT_PI, qf, out=qf)
        qf /= yf
        q[far] = qf
    # One exp(-x^2): Cody splits it in two to keep erfc's relative accuracy for large |x|, but
    # erf = 1 - erfc only needs erfc's absolute accuracy, which the plain product gives.
    np.multiply(ax, ax, out=y)
    np.negative(y, out=y)
    np.exp(y, out=y)
    q *= y
    np.subtract(1.0, q, out=q)
    np.copysign(q, x, out=out)


def _erf_chunk(
    x: np.ndarray,
    out: np.ndarray,
    ax: np.ndarray,
    y: np.ndarray,
    nd: np.ndarray,
    xs: np.ndarray,
    rs: np.ndarray,
) -> None:
    """erf of one float64 chunk ``x`` into the float64 ``out`` (may be ``x``); the others are
    scratch of at least ``x.size`` elements (``nd`` twice that)."""
    k = x.size
    np.absolute(x, out=ax[:k])
    small = ax[:k] <= _ERF_THRESH
    n_small = int(np.count_nonzero(small))
    if n_small == k:
        _erf_small(x, y, nd, out)
    elif n_small == 0:
        _erf_large(x, ax, y, nd, out)
    else:
        # Each region computes only on its own elements (gathered, then scattered back): both
        # formulas on every element cost more than the gathers (measured).
        i_small = np.flatnonzero(small)
        i_large = np.flatnonzero(np.logical_not(small, out=small))
        n_large = k - n_small
        xl, rl = xs[:n_large], rs[:n_large]
        np.take(x, i_large, out=xl)
        xm, rm = xs[n_large:k], rs[n_large:k]
        np.take(x, i_small, out=xm)  # both gathered before out (maybe x) is written
        _erf_large(xl, ax, y, nd, rl)
        _erf_small(xm, y, nd, rm)
        out[i_large] = rl
        out[i_small] = rm


def _erf_narrow_chunk(b: np.ndarray, y: np.ndarray, nd: np.ndarray, powers: np.ndarray) -> None:
    """erf of the float64 chunk ``b`` in place, to float32's accuracy (``_ERF_NARROW``); ``y``
    and ``nd`` are scratch of at least ``b.size`` elements (``nd`` twice that), ``powers``
    ``_erf_scratch``'s (used up to ``ERF_POWERS_MAX`` elements: the sums of the rational
    function's terms then round in another order than Horner's, within float64's rounding,
    far below float32's)."""
    k = b.size
    y, nd = y[:k], nd[:, :k]
    # The clip method, not np.clip (whose two Python wrappers cost more than the clip on
    # small arrays) nor np.minimum and np.maximum (two passes, each slower than the one clip:
    # 36 against 16 us on 32 Ki float64 elements); NaN passes through alike.
    b.clip(-_ERF_NARROW_CLIP, _ERF_NARROW_CLIP, out=b)
    if k <= ERF_POWERS_MAX and k <= powers.shape[1]:  # (the scratch is that wide)
        v = powers[:, :k]  # row 0: ones
        np.multiply(b, b, v[1])
        # x^4, then x^6 and x^8, then x^10 and x^12: each product doubles the powers known
        # (three calls for six powers, against five one by one)
        known = 2
        while known < len(v):
            more = min(known - 1, len(v) - known)
            np.multiply(v[1 : 1 + more], v[known - 1], v[known : known + more])
            known += more
        np.matmul(_ERF_NARROW_POWERS, v, nd)
        q: np.ndarray = nd[0]
        np.divide(q, nd[1], q)
    else:
        np.multiply(b, b, y)
        q = _rational(_ERF_NARROW, y, nd)
    np.multiply(q, b, b)


def _erf(x: np.ndarray, out: np.ndarray) -> None:
    """The error function, vectorised, computed in float64 and rounded once into ``out``.

    float64: W. J. Cody's rational approximations (1969, as in his CALERF), one formula per
    region of |x|. Against ``math.erf`` (tests/vm/test_erf.py, 2e6 points on [-7, 7] and the
    extremes): within 5 ulp, relative error below 7e-16 (92% of results equal; the worst just
    above |x| = 0.46875, where erf = 1 - erfc cancels a little).
    float32 and float16: one rational function for every x (``_ERF_NARROW``), about half the
    ufunc calls and no gathers: within 1 ulp of the correctly rounded value, equal on 98.8% of
    a float32 grid (2.2e6 points). NaN propagates, erf(+-inf) = +-1, erf(-0.0) = -0.0.

    Works in chunks of ``ERF_CHUNK`` elements with float64 scratch kept per thread (a fixed
    ~1.8 MB, allocated on the thread's first call); from ``ERF_THREAD_MIN`` elements the
    chunks are shared with the worker thread (``vm/worker_thread.py``): each chunk is computed
    the same way whichever thread takes it, so the result does not depend on the sharing.
    Safe in place (``out`` may be ``x``); a non-contiguous ``x`` (or one of another dtype) is
    first copied into ``out`` and computed there in place. float32/float16 calls of at most
    ``ERF_POWERS_MAX`` elements skip the chunk loop (``_erf_narrow_small``: the same bits)."""
    if x.shape != out.shape:
        raise ValueError(f"erf: input shape {x.shape} but output shape {out.shape}")
    n = out.size
    if n == 0:
        return
    if n <= ERF_POWERS_MAX and out.dtype != np.float64 and ERF_SMALL:
        _erf_narrow_small(x, out)
        return
    if x.dtype != out.dtype or not x.flags.c_contiguous:
        np.copyto(out, x, casting="unsafe")
        x = out
    src = x.reshape(-1)  # views: both are C-contiguous
    dst = out.reshape(-1)
    chunks = iter(range(0, n, ERF_CHUNK))
    narrow = out.dtype != np.float64

    def work() -> None:
        ax, y, xs, rs, nd, spare, powers = _erf_scratch(min(n, ERF_CHUNK))  # this thread's
        if narrow:
            # No floating-point state to silence here (the clip bounds every power of x), so
            # no errstate context either: it costs more than the formula on a few hundred
            # elements.
            for i in chunks:
                part = src[i : i + ERF_CHUNK]
                b = spare[: part.size]
                np.copyto(b, part, casting="unsafe")
                _erf_narrow_chunk(b, y, nd, powers)
                np.copyto(dst[i : i + ERF_CHUNK], b, casting="unsafe")
            return
        with np.errstate(all="ignore"):  # underflow to 0 near +-6, NaN inputs: expected
            for i in chunks:
                _erf_chunk(src[i : i + ERF_CHUNK], dst[i : i + ERF_CHUNK], ax, y, nd, xs, rs)

    if n >= ERF_THREAD_MIN:
        shared(work, "erf", n)  # the chunks, shared with the worker thread
    else:
        work()


def _copy(x: np.ndarray, out: np.ndarray) -> None:
    """A copy of ``x`` (``np.copyto``, which has the destination first)."""
    np.copyto(out, x)


def _zeros_like(x: np.ndarray, out: np.ndarray) -> None:
    """Zeros (``out.fill``; the input is only used for its shape)."""
    out.fill(0)


def _ones_like(x: np.ndarray, out: np.ndarray) -> None:
    """Ones (``out.fill``)."""
    out.fill(1)


def _relu(x: np.ndarray, out: np.ndarray) -> None:
    """``max(x, 0)``."""
    np.maximum(x, 0, out=out)


# numpy 2.4 deprecates a positional ``out`` for maximum and minimum (and only for them).
def _maximum(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """Elementwise max (NaN propagates, as ``np.maximum``)."""
    np.maximum(a, b, out=out)


def _minimum(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """Elementwise min (NaN propagates, as ``np.minimum``)."""
    np.minimum(a, b, out=out)


#: Unsigned integer views of each itemsize: ``where`` selects bit patterns (exact for any dtype).
_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are the same elements in the same layout."""
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and a.strides == b.strides
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )


#: The largest output ``where`` computes with ``np.where`` and a copy (see ``_where``).
WHERE_SELECT_MAX = 4096


def _where(cond: np.ndarray, x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
    """``x where cond else y``, broadcast. ``np.where`` has no ``out=``.

    When ``x``, ``y`` and ``out`` share a dtype, a bit select on unsigned views:
    ``y ^ ((x ^ y) & m)`` with ``m`` all ones where ``cond`` holds (three SIMD passes into
    ``out``; the only temporary is ``m``, of ``cond``'s size). Masked copies
    (``np.copyto(..., where=cond)``), the general path, branch per element and ran ~36x
    ``np.add`` on a random mask (the kernel audit); so did ``np.where``.

    Safe in place: a fused chain may pass the output buffer itself as ``x`` or ``y``.

    Small outputs (at most ``WHERE_SELECT_MAX`` elements) of one dtype take ``np.where`` into
    a temporary and one copy: two calls, where the bit select's views and passes are ~12
    (measured, random masks: 17 elements 12.1 -> 2.8 us, 2,048 10.2 -> 5.2 us, 8,192 15.3 ->
    21.1 us). The temporary makes any overlap with the output safe.
    """
    if out.size <= WHERE_SELECT_MAX and x.dtype == out.dtype == y.dtype:
        np.copyto(out, np.where(cond, x, y))
        return
    # the planner may pass the output's storage as another array object: the same memory
    # and layout is the output itself, else a copy first (a partial overlap is read whole)
    if x is not out and np.may_share_memory(x, out):
        x = out if _same_view(x, out) else x.copy()
    if y is not out and np.may_share_memory(y, out):
        y = out if _same_view(y, out) else y.copy()
    bits = _BITS.get(out.dtype.itemsize)
    if (
        bits is not None
        and x.dtype == out.dtype == y.dtype
        and cond.dtype == np.bool_
        and x is not y
    ):
        xv, yv, ov = x.view(bits), y.view(bits), out.view(bits)
        mask = np.empty(cond.shape, bits)  # an array even for a 0-d cond
        np.negative(cond.view(np.uint8), out=mask, dtype=bits)  # 1 -> all ones
        if y is out:  # y is overwritten first: x ^ ((x ^ y) & ~m) selects the same bits
            np.invert(mask, out=mask)
            np.bitwise_xor(xv, yv, out=ov)
            np.bitwise_and(ov, mask, out=ov)
            np.bitwise_xor(ov, xv, out=ov)
        else:
            np.bitwise_xor(xv, yv, out=ov)
            np.bitwise_and(ov, mask, out=ov)
            np.bitwise_xor(ov, yv, out=ov)
        return
    if x is out:
        np.copyto(out, y, where=np.logical_not(cond))
    elif y is out:
        np.copyto(out, x, where=cond)
    else:
        np.copyto(out, y)
        np.copyto(out, x, where=cond)


register_table(
    {
        "divide": _divide,
        "negative": _negative,
        "rsqrt": _rsqrt,
        "sigmoid": _sigmoid,
        "erf": _erf,
        "copy": _copy,
        "zeros_like": _zeros_like,
        "ones_like": _ones_like,
        "nn.relu": _relu,
        "maximum": _maximum,
        "minimum": _minimum,
        "where": _where,
    }
)


@register_kernel("cast")
def cast(attrs: Mapping[str, Any]) -> Kernel:
    """``x`` converted to the output's dtype, as ``astype`` does (``copyto`` unsafe casting)."""

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, x, casting="unsafe")

    return kernel


@register_kernel("bitcast")
def bitcast(attrs: Mapping[str, Any]) -> Kernel:
    """``x``'s bytes reinterpreted as the output's dtype, of the same width (a view, copied:
    numpy's native byte order, little endian on every platform the VM runs on). A bool output
    is ``bits != 0``: a byte other than 0 or 1 is no bool numpy (or anything after) handles."""

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        if x.dtype.itemsize != out.dtype.itemsize:
            raise ValueError(f"bitcast: {x.dtype} and {out.dtype} differ in width")
        if out.dtype == np.bool_:
            np.not_equal(x.view(np.uint8), 0, out=out)
        else:
            np.copyto(out, x.view(out.dtype))

    return kernel


@register_kernel("clip")
def clip(attrs: Mapping[str, Any]) -> Kernel:
    """``x`` limited to ``[a_min, a_max]``. For integer dtypes the bounds are first rounded
    inward (ceil of a_min, floor of a_max) and limited to the dtype's range, so the result is
    what clipping the exact values would give."""
    lo, hi = attrs["a_min"], attrs["a_max"]

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        # The method, not np.clip: the same call without np.clip's two Python wrappers (~3 us
        # of a hard-swish's clip on a small map, where the clip itself is ~2 us).
        if out.dtype.kind == "f":
            x.clip(lo, hi, out=out)
            return
        info = np.iinfo(out.dtype)
        ilo = info.min if math.isinf(lo) and lo < 0 else min(max(math.ceil(lo), info.min), info.max)
        ihi = (
            info.max if math.isinf(hi) and hi > 0 else max(min(math.floor(hi), info.max), info.min)
        )
        x.clip(ilo, ihi, out=out)

    return kernel


@register_kernel("nn.leaky_relu")
def leaky_relu(attrs: Mapping[str, Any]) -> Kernel:
    """``x if x > 0 else alpha * x``. For a float output and a finite ``alpha > 0`` it is
    ``max(x, alpha * x)`` when ``alpha <= 1`` and ``min(x, alpha * x)`` when ``alpha > 1`` (the
    same values, NaN and signed zeros included): two SIMD passes, where the masked multiply
    ran ~30x ``np.add`` (the kernel audit). Otherwise (and when ``out`` overlaps ``x``), a copy
    then a masked multiply in place (the mask is a temporary bool array)."""
    alpha = attrs["alpha"]
    pick = np.maximum if alpha <= 1 else np.minimum
    # alpha > 0 keeps the sign of a zero (numpy's max/min may return either operand on a tie);
    # 0 * inf is NaN where the masked path gives inf: so alpha, as the dtype computes with it,
    # must be finite and positive (1e-30 is 0 in float16).
    with np.errstate(all="ignore"):
        fast = {
            np.dtype(t)
            for t in (np.float16, np.float32, np.float64)
            if math.isfinite(alpha) and 0 < t(alpha) < np.inf
        }

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        if out.dtype in fast and x.dtype == out.dtype and not np.may_share_memory(x, out):
            np.multiply(x, alpha, out=out)
            pick(x, out, out=out)
            return
        np.copyto(out, x)
        np.multiply(out, alpha, out=out, where=out < 0)

    return kernel
