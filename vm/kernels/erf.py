"""The error function, vectorised: numpy has no erf ufunc and the VM may import numpy only.

Three evaluations, by dtype and size (the accuracy and measurements: design/vm.md, "Vectorised
erf and the kernel audit"):

- float64: W. J. Cody's rational approximations, one per region of |x|, in chunks of
  ``ERF_CHUNK`` elements (``_erf_chunk``): within 5 ulp of ``math.erf``.
- float32 and float16 arrays of more than ``ERF_NARROW_MAX`` elements: two approximations
  evaluated in float32 arithmetic over every element and selected by bit masks
  (``_erf32_chunk``): within 1 ulp of the correctly rounded value on every float32.
- float32 and float16 arrays of at most ``ERF_NARROW_MAX`` elements, where the per-call cost
  of ~40 ufunc calls would dominate: one rational function in float64, its polynomials as one
  matrix product of the coefficients by the powers of ``x^2`` (``_erf_narrow_small``, 12
  calls a piece of ``ERF_POWERS_MAX`` elements), within 1 ulp too.

The two narrow evaluations are different arithmetic: an element's result may differ by one ulp
between an array of at most ``ERF_NARROW_MAX`` elements and a larger one (as BLAS products
already differ between a gemv and a GEMM), never within one call, whatever its chunks or threads.
"""

from __future__ import annotations

import threading

import numpy as np

from ..worker_thread import shared
from .registry import register_table

# ---- float64: W. J. Cody's rational Chebyshev approximations -------------------------------
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

#: Small float32 and float16 arrays (``_erf_narrow_small``): erf(x) = x * P(x^2) / Q(x^2) on
#: |x| <= ``_ERF_NARROW_CLIP`` (one formula for every x: no regions to select, no exp),
#: evaluated in float64 and rounded once. P (degree 6) and Q (degree 5) were fitted for this
#: kernel: linearised least squares weighted for relative error, iterated (Sanathanan-Koerner)
#: on 20,001 Chebyshev points of [0, 3.92]; the largest relative error in float64 is 2.2e-9,
#: float32's half ulp is 6e-8. Past 3.92, erfc < 6e-9 and erf rounds to +-1 in float32
#: (clipping also takes care of the infinities; NaN passes through the clip). Highest degree
#: first, Q padded to P's degree.
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
#: Rows of the powers of ``x^2`` (``_erf_scratch``): the zeroth to the sixth.
_ERF_POWERS = len(_ERF_NARROW_NUM_DEN[0])
#: The same coefficients lowest degree first, ``(2, 7)``: the rational function as one matrix
#: product with the powers of ``x^2`` (``_erf_narrow_small``).
_ERF_NARROW_POWERS = np.array([c[::-1] for c in _ERF_NARROW_NUM_DEN])
_ERF_NARROW_CLIP = 3.92

#: Larger float32 and float16 arrays (``_erf32_chunk``), in float32 arithmetic: two regions of
#: |x|, both computed for every element, the result selected by a bit mask (numpy's masked
#: copies and ``np.where`` cost 10-20 plain passes):
#: |x| <= 1: erf = |x| + |x| * S(x^2), S (degree 6) fitted to erf(x)/x - 1 (the leading |x|
#: is added last, exactly scaled: the rounding of S's steps is shrunk by |S| <= 0.16);
#: 1 < |x| <= 3.92: erf = 1 - exp(L(|x|) - x^2), L (degree 6) fitted to log(erfc(x)) + x^2 (a
#: slowly varying function: without the x^2 it took a degree more; folding the x^2 into L gave
#: 2 ulp). Both by Lawson's iteratively reweighted least squares (the minimax error) on 4,000
#: Chebyshev points, S for the relative error of erf (1.2e-9), L for its absolute error, weighted
#: by erfc (1.0e-9), the coefficients then rounded to float32 (``benchmarks/erf_float32.py``
#: refits them and checks every float32). |x| is clipped to 3.92 first: then every step is
#: finite (no overflow to silence), infinities give +-1 and NaN passes through every step.
#: Checked against the correctly rounded erf on every float32 of [-4.5, 4.5] (2.2e9 values;
#: beyond, erf rounds to +-1 and so does the kernel): at most 1 ulp, equal on 94.1%.
_ERF32_SPLIT = 1.0
_ERF32_S = (
    7.854020077502355e-05,
    -0.0008010246092453599,
    0.00518833426758647,
    -0.026853816583752632,
    0.1128358542919159,
    -0.3761262595653534,
    0.12837916612625122,
)
_ERF32_L = (
    0.00018557511793915182,
    -0.002939617959782481,
    0.021805360913276672,
    -0.10303745418787003,
    0.36177441477775574,
    -1.127040147781372,
    -0.0003537046432029456,
)
_ERF32_CLIP = _ERF_NARROW_CLIP  # the same bound: past it erf rounds to +-1 in float32
#: The split's bits: for floats >= 0 (and NaN) the order of the bits is the order of the values.
_ERF32_SPLIT_BITS = int(np.float32(_ERF32_SPLIT).view(np.int32))
_SIGN32 = np.uint32(0x80000000)

#: Elements per chunk: every temporary is an array of at most this many elements, kept per thread
#: and reused by every chunk and call. float64 (Cody's regions; numerator/denominator scratch
#: twice that): ~1.8 MB of scratch whatever the input's size; measured (CPU time, 1e6 float32
#: elements, loaded 2-core machine, the float64 evaluation float32 had until session 23): chunks
#: of 4 Ki 44 ms, 8 Ki 35, 16 Ki 27, 32 Ki 25-27: the ~40 ufunc calls per chunk cost ~1 us each,
#: which small chunks pay per few thousand elements. float32: five float32 arrays (640 KiB, in a
#: 1 MiB L2 cache).
ERF_CHUNK = 1 << 15
#: Elements from which the chunks are shared with the worker thread (``vm/worker_thread.py``):
#: two chunks, ~0.3 ms of work against a hand-off of tens of microseconds.
ERF_THREAD_MIN = 2 * ERF_CHUNK
#: Up to this many elements a float32/float16 erf takes ``_erf_narrow_small`` in one piece: its
#: rational function as one matrix product of the coefficients by the powers of ``x^2`` in
#: float64, 12 ufunc calls where ``_erf32_chunk`` makes ~40, whose fixed cost is most of a small
#: erf (256 elements: 7 against 20 us; 4 Ki: 19 against 34 us). Its powers are a (7, this)
#: float64 scratch per thread (448 KiB).
ERF_POWERS_MAX = 1 << 13
#: Up to this many elements a float32/float16 erf takes ``_erf_narrow_small``, in pieces of
#: ``ERF_POWERS_MAX``; larger calls ``_erf32_chunk``. Measured on this AVX-512 machine (session
#: 24, one thread, medians of 15 interleaved rounds, time against the float32 chunks): pieces of
#: 8 Ki took 0.66x at 8 Ki elements, 0.79x at 16 Ki, 1.05x at 32 Ki, 1.11x at 64 Ki; pieces of
#: 4 Ki (session 23's bound) 0.80x, 1.00x, 1.21x, 1.25x.
ERF_NARROW_MAX = 2 * ERF_POWERS_MAX


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
    """erf of a float32 or float16 array of at most ``ERF_POWERS_MAX`` elements into ``out``
    (may be ``x``): ``_ERF_NARROW_NUM_DEN`` in float64, its polynomials as one product of the
    coefficients by the powers of ``x^2`` (summed in another order than Horner's, within
    float64's rounding, far below float32's), rounded once (session 16: 22 against 46 us on
    256 float32 elements, where the fixed cost is most of the work)."""
    b, powers, p1, p2, p3, p4, p5, p6, q, num, den = _erf_small_views(x.size)
    multiply = np.multiply
    np.copyto(b.reshape(x.shape), x, casting="unsafe")
    # The clip method, not np.clip (whose two Python wrappers cost more than the clip on
    # small arrays) nor np.minimum and np.maximum (two passes); NaN passes through alike.
    b.clip(-_ERF_NARROW_CLIP, _ERF_NARROW_CLIP, out=b)
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


def _erf32_scratch() -> tuple[np.ndarray, ...]:
    """This thread's float32 scratch for ``_erf32_chunk``, ``ERF_CHUNK`` elements each: ``a, y,
    s, sign, mask`` and ``wide`` (a float16 chunk converted to float32). Kept per thread like
    ``_erf_scratch`` (no fresh pages per call; concurrent calls never share it)."""
    cached: tuple[np.ndarray, ...] | None = getattr(_erf_local, "scratch32", None)
    if cached is None or cached[0].size < ERF_CHUNK:
        cached = _erf_local.scratch32 = tuple(np.empty(ERF_CHUNK, np.float32) for _ in range(6))
    return cached


def _erf32_chunk(
    x: np.ndarray,
    out: np.ndarray,
    a: np.ndarray,
    y: np.ndarray,
    s: np.ndarray,
    sign: np.ndarray,
    mask: np.ndarray,
) -> None:
    """erf of the contiguous float32 chunk ``x`` into ``out`` (may be ``x``: it is read by the
    first two calls only), in float32 (``_ERF32_S``, ``_ERF32_L``); the others are float32
    scratch of at least ``x.size`` elements. Both regions are computed for every element and
    the result is picked by bits: ``s ^ ((s ^ l) & mask)``, ``mask`` all ones where |x| > 1."""
    k = x.size
    a, y, s, sign, mask = a[:k], y[:k], s[:k], sign[:k], mask[:k]
    multiply, add = np.multiply, np.add
    x.clip(-_ERF32_CLIP, _ERF32_CLIP, out=a)
    np.bitwise_and(x.view(np.uint32), _SIGN32, sign.view(np.uint32))
    np.absolute(a, a)
    multiply(a, a, y)
    _horner(_ERF32_S, y, s)
    multiply(s, a, s)
    add(s, a, s)  # |x| <= 1: |x| + |x| S(x^2)
    _horner(_ERF32_L, a, out)
    np.subtract(out, y, out)
    np.exp(out, out)
    np.subtract(1.0, out, out)  # |x| > 1: 1 - exp(L(|x|) - x^2)
    m = mask.view(np.int32)
    np.subtract(_ERF32_SPLIT_BITS, a.view(np.int32), m)
    np.right_shift(m, 31, m)  # the sign of split - |x| spread to all bits: ones where |x| > 1
    bits, small = out.view(np.uint32), s.view(np.uint32)
    np.bitwise_xor(bits, small, bits)
    np.bitwise_and(bits, mask.view(np.uint32), bits)
    np.bitwise_xor(bits, small, bits)
    np.bitwise_or(bits, sign.view(np.uint32), bits)  # erf is odd: x's sign bit


def _erf(x: np.ndarray, out: np.ndarray) -> None:
    """The error function, vectorised, into ``out`` (see the module doc for the three paths).

    float64: W. J. Cody's rational approximations (1969, as in his CALERF), one formula per
    region of |x|, in float64. Against ``math.erf`` (tests/vm/test_erf.py, 2e6 points on [-7,
    7] and the extremes): within 5 ulp, relative error below 7e-16 (92% of results equal; the
    worst just above |x| = 0.46875, where erf = 1 - erfc cancels a little).
    float32 and float16: ``_erf32_chunk`` in float32 (a float16 chunk converted, rounded once
    at the end), or ``_erf_narrow_small`` in float64 for at most ``ERF_NARROW_MAX`` elements
    (in pieces of ``ERF_POWERS_MAX``): within 1 ulp of the correctly rounded value either way.
    NaN propagates, erf(+-inf) = +-1, erf(-0.0) = -0.0.

    Works in chunks of ``ERF_CHUNK`` elements with scratch kept per thread (allocated on the
    thread's first call); from ``ERF_THREAD_MIN`` elements the chunks are shared with the worker
    thread (``vm/worker_thread.py``): each chunk is computed the same way whichever thread
    takes it, so the result does not depend on the sharing. Safe in place (``out`` may be
    ``x``); a non-contiguous ``x`` (or one of another dtype) is first copied into ``out`` and
    computed there in place."""
    if x.shape != out.shape:
        raise ValueError(f"erf: input shape {x.shape} but output shape {out.shape}")
    n = out.size
    if n == 0:
        return
    if n <= ERF_POWERS_MAX and out.dtype != np.float64:
        _erf_narrow_small(x, out)
        return
    if x.dtype != out.dtype or not x.flags.c_contiguous:
        np.copyto(out, x, casting="unsafe")
        x = out
    src = x.reshape(-1)  # views: both are C-contiguous
    dst = out.reshape(-1)
    if n <= ERF_NARROW_MAX and out.dtype != np.float64:
        for i in range(0, n, ERF_POWERS_MAX):
            _erf_narrow_small(src[i : i + ERF_POWERS_MAX], dst[i : i + ERF_POWERS_MAX])
        return
    chunks = iter(range(0, n, ERF_CHUNK))
    dtype = out.dtype

    def work() -> None:
        if dtype != np.float64:
            # The clip keeps every step finite: nothing overflows or is invalid, so no
            # errstate context (tiny |x| underflow in x^2, as in the caller's own arithmetic).
            *scratch, wide = _erf32_scratch()
            for i in chunks:
                if dtype == np.float32:
                    _erf32_chunk(src[i : i + ERF_CHUNK], dst[i : i + ERF_CHUNK], *scratch)
                    continue
                # float16: the chunk converted to float32, computed, rounded once back
                part = src[i : i + ERF_CHUNK]
                b = wide[: part.size]
                np.copyto(b, part)
                _erf32_chunk(b, b, *scratch)
                np.copyto(dst[i : i + ERF_CHUNK], b, casting="same_kind")
        else:
            ax, y, xs, rs, nd, _, _ = _erf_scratch(min(n, ERF_CHUNK))  # this thread's
            with np.errstate(all="ignore"):  # underflow to 0 near +-6, NaN inputs: expected
                for i in chunks:
                    _erf_chunk(src[i : i + ERF_CHUNK], dst[i : i + ERF_CHUNK], ax, y, nd, xs, rs)

    if n >= ERF_THREAD_MIN:
        shared(work, "erf", n)  # the chunks, shared with the worker thread
    else:
        work()


register_table({"erf": _erf})
