"""Comparing results (arrays, or nested tuples of them) with a message that says where and how
they differ: which output, shapes and dtypes, the largest absolute and relative errors."""

from __future__ import annotations

from typing import Any

import numpy as np

#: Default ``(rtol, atol)`` per float dtype.
TOLERANCES = {"float16": (1e-2, 1e-2), "float32": (1e-4, 1e-5), "float64": (1e-9, 1e-12)}


def difference(
    actual: Any,
    expected: Any,
    rtol: float | None = None,
    atol: float | None = None,
    where: str = "result",
    exact_dtype: bool = True,
) -> str | None:
    """None if ``actual`` matches ``expected``, else a description of the first difference.

    Floats compare with tolerances (by dtype unless given), NaN equal to NaN; other dtypes
    exactly. With ``exact_dtype`` the dtypes must be equal, else only their kind.
    """
    if isinstance(expected, tuple) or isinstance(actual, tuple):
        if not (isinstance(actual, tuple) and isinstance(expected, tuple)):
            return f"{where}: {_show(actual)} vs expected {_show(expected)}"
        if len(actual) != len(expected):
            return f"{where}: a tuple of {len(actual)}, expected {len(expected)} fields"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            found = difference(a, e, rtol, atol, f"{where}[{i}]", exact_dtype)
            if found:
                return found
        return None
    got, want = np.asarray(actual), np.asarray(expected)
    head = f"{where}: got {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if got.shape != want.shape:
        return f"{head}: shapes differ"
    if exact_dtype and got.dtype != want.dtype:
        return f"{head}: dtypes differ"
    if not exact_dtype and _kind(got.dtype) != _kind(want.dtype):
        return f"{head}: dtype kinds differ"
    if got.dtype.kind == "f" or want.dtype.kind == "f":
        dt = got.dtype if got.dtype.kind == "f" else want.dtype
        r0, a0 = TOLERANCES.get(dt.name, (1e-6, 1e-8))
        r, a = (r0 if rtol is None else rtol), (a0 if atol is None else atol)
        g, w = got.astype(np.float64), want.astype(np.float64)
        close = np.isclose(g, w, rtol=r, atol=a, equal_nan=True)
        if close.all():
            return None
        with np.errstate(all="ignore"):  # a NaN against a number is an infinite error
            err = np.where(close, 0.0, np.nan_to_num(np.abs(g - w), nan=np.inf))
            rel = np.where(close, 0.0, np.nan_to_num(err / np.abs(w), nan=np.inf))
        at = np.unravel_index(int(np.argmax(err)), g.shape)
        return (
            f"{head}: {int((~close).sum())} of {close.size} elements differ (rtol={r}, atol={a}); "
            f"max abs error {np.max(err):.6g}, max rel error {np.max(rel):.6g}; "
            f"at index {tuple(int(i) for i in at)}: "
            f"got {float(g[at]):.9g}, expected {float(w[at]):.9g}"
        )
    if np.array_equal(got, want.astype(got.dtype) if not exact_dtype else want):
        return None
    bad = got != want
    at = np.unravel_index(int(np.argmax(bad)), got.shape) if got.ndim else ()
    return (
        f"{head}: {int(bad.sum())} of {bad.size} elements differ; at index "
        f"{tuple(int(i) for i in at)}: got {got[at].item()!r}, expected {want[at].item()!r}"
    )


def _kind(dtype: np.dtype) -> str:
    return {"b": "bool", "i": "int", "u": "int", "f": "float"}.get(dtype.kind, dtype.kind)


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    v = np.asarray(value)
    return f"{v.dtype}{list(v.shape)}"
