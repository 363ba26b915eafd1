"""Elementwise and broadcasting kernels.

Most are numpy ufuncs registered as they are (``np.add(a, b, out)`` is already the calling
convention); the rest are short compositions that write into ``out`` step by step, in place, so
they allocate no temporary the size of the output (except where a docstring says so).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..worker_thread import shared
from .against_value import against_value, same_view
from .registry import Kernel, register_kernel, register_table
from .thread_scratch import scratch

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


#: Integer exponents that ``_power`` computes by float64 products for float32/float16 bases: numpy's
#: float32 and float64 ``power`` took ~60 ns an element with such an exponent on bases of
#: either sign (1,024 elements: 61-62 us, against 0.6-1.2 us for the exponents 0, 1, 2 and -1,
#: which numpy computes quickly itself and keep its path).
PRODUCT_EXPONENTS = frozenset(float(e) for e in (*range(3, 9), *range(-8, -1)))
#: Elements per chunk of ``_integer_power_narrow``'s float64 products (a 512 KiB temporary).
POWER_CHUNK = 1 << 16


def _integer_power_narrow(a: np.ndarray, e: int, out: np.ndarray) -> None:
    """``a ** e`` for a float32/float16 ``a`` of ``out``'s shape and an integer ``2 < |e| <= 8``:
    the product of ``|e|`` factors in float64 (each rounding 2^-53 relative, at most 7 of them),
    its reciprocal for ``e < 0``, rounded once into ``out``: the correctly rounded power but
    for double rounding's rare ties (numpy's float32 ``power(x, 3)`` was 1 ulp off that on
    10.6% of 3.5e6 values). Signed zeros, infinities and NaN come out as ``np.power``'s. In
    chunks of ``POWER_CHUNK`` when both arrays are contiguous, else one temporary of ``a``'s
    size; safe in place (a chunk is read whole before its part of ``out`` is written)."""
    n = abs(e)

    def chunk(x: np.ndarray, target: np.ndarray) -> None:
        wide = np.multiply(x, x, dtype=np.float64)  # exact: 2 x 24 bits fit in 53
        for _ in range(n - 2):
            np.multiply(wide, x, wide)
        if e < 0:
            np.reciprocal(wide, wide)
        np.copyto(target, wide, casting="same_kind")

    if a.flags.c_contiguous and out.flags.c_contiguous:
        src, dst = a.reshape(-1), out.reshape(-1)
        for i in range(0, src.size, POWER_CHUNK):
            chunk(src[i : i + POWER_CHUNK], dst[i : i + POWER_CHUNK])
    else:
        chunk(a, out)


def _power(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``np.power``, except for a float32/float16 base and one exponent of its dtype in
    ``PRODUCT_EXPONENTS`` (the ``Pow(x, 3)`` of GELU's tanh form in every GPT-2-style export):
    ``_integer_power_narrow``, more accurate than numpy's and 25x faster there. The exponent
    broadcasts to the base's shape (one element, no more axes), which is then ``out``'s."""
    if (
        b.size == 1
        and b.ndim <= a.ndim
        and b.dtype == a.dtype == out.dtype
        and out.dtype.kind == "f"
        and out.dtype.itemsize <= 4
    ):
        e = b.item()
        if e in PRODUCT_EXPONENTS:
            _integer_power_narrow(a, int(e), out)
            return
    np.power(a, b, out)


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
    """``max(x, 0)``, the 0 read from a block of zeros (``against_value``: 4-5x faster)."""
    against_value(np.maximum, x, 0, out)


# numpy 2.4 deprecates a positional ``out`` for maximum and minimum (and only for them).
def _extremum(ufunc: np.ufunc, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``ufunc(a, b, out=out)``; where one operand is a single value of ``out``'s dtype and
    the other is ``out``-shaped, by ``against_value`` (numpy's loops take a broadcast value
    4-5x slower than an array)."""
    if b.size == 1 and b.dtype == out.dtype and a.shape == out.shape:
        against_value(ufunc, a, b.reshape(()), out)
    elif a.size == 1 and a.dtype == out.dtype and b.shape == out.shape:
        against_value(ufunc, b, a.reshape(()), out, value_first=True)
    else:
        ufunc(a, b, out=out)


def _maximum(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """Elementwise max (NaN propagates, as ``np.maximum``)."""
    _extremum(np.maximum, a, b, out)


def _minimum(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """Elementwise min (NaN propagates, as ``np.minimum``)."""
    _extremum(np.minimum, a, b, out)


#: Unsigned integer views of each itemsize: ``where`` selects bit patterns (exact for any dtype).
_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


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
        x = out if same_view(x, out) else x.copy()
    if y is not out and np.may_share_memory(y, out):
        y = out if same_view(y, out) else y.copy()
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
        "power": _power,
        "negative": _negative,
        "rsqrt": _rsqrt,
        "sigmoid": _sigmoid,
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


#: Elements per chunk of ``nn.leaky_relu`` in place: the chunk's product (128 KiB of float32)
#: is read back from L2. Measured (4x16x96x96 float32, one thread, medians): the masked path
#: 2.85 ms, chunks of 32 Ki 0.09 ms (as the out-of-place path, 0.08-0.09 ms).
LEAKY_CHUNK = 1 << 15


def _leaky_in_place(flat: np.ndarray, alpha: float, pick: np.ufunc) -> None:
    """``pick(x, alpha * x)`` over the flat array, in place, a chunk at a time."""
    (product,) = scratch("leaky_relu", flat.dtype, 1, LEAKY_CHUNK)
    for i in range(0, flat.size, LEAKY_CHUNK):
        chunk = flat[i : i + LEAKY_CHUNK]
        part = product[: chunk.size]
        np.multiply(chunk, alpha, out=part)
        pick(chunk, part, out=chunk)


@register_kernel("nn.leaky_relu")
def leaky_relu(attrs: Mapping[str, Any]) -> Kernel:
    """``x if x > 0 else alpha * x``. For a float output and a finite ``alpha > 0`` it is
    ``max(x, alpha * x)`` when ``alpha <= 1`` and ``min(x, alpha * x)`` when ``alpha > 1`` (the
    same values, NaN and signed zeros included): two SIMD passes, where the masked multiply
    ran ~30x ``np.add`` (the kernel audit). In place (``out`` the same elements as ``x``, as the
    memory planner often makes it) the product goes chunk by chunk through a kept scratch
    (``LEAKY_CHUNK``; the same operations, so the same bits). Otherwise (another overlap,
    another dtype or ``alpha``), a copy then a masked multiply in place (the mask is a
    temporary bool array)."""
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
        if out.dtype in fast and x.dtype == out.dtype:
            if not np.may_share_memory(x, out):
                np.multiply(x, alpha, out=out)
                pick(x, out, out=out)
                return
            if out.flags.c_contiguous and same_view(x, out):
                _leaky_in_place(out.reshape(-1), alpha, pick)
                return
        np.copyto(out, x)
        np.multiply(out, alpha, out=out, where=out < 0)

    return kernel
