"""Helpers shared by the VM tests: dtype groups, Hypothesis strategies, running one kernel,
running one function on several threads at once."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from vm.kernels import get_kernel_factory

FLOATS = ("float16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8")
NUMERIC = INTS + FLOATS
ALL = ("bool", *NUMERIC)

#: Settings for every kernel property: few examples (the suite must stay fast), no deadline
#: (the first call of a numpy function may be slow).
KERNEL_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def shapes(
    min_dims: int = 0, max_dims: int = 3, min_side: int = 0, max_side: int = 4
) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes including rank 0 and size-0 dims by default."""
    return hnp.array_shapes(
        min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side
    )


def elements(dtype: str, small: bool = False) -> st.SearchStrategy[Any]:
    """Element values of ``dtype``: finite, and for ``small`` in a range safe for exp/power."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        bound = 8.0 if small else 1e3
        return st.floats(-bound, bound, width=dt.itemsize * 8, allow_nan=False)
    if dt.kind == "b":
        return st.booleans()
    info = np.iinfo(dt)
    if small:
        return st.integers(max(info.min, -5), min(info.max, 5))
    return st.integers(int(info.min), int(info.max))


def arrays(dtype: str, shape: Any, small: bool = False) -> st.SearchStrategy[np.ndarray]:
    """Arrays of ``dtype`` and ``shape`` (a shape or a strategy of shapes)."""
    return hnp.arrays(np.dtype(dtype), shape, elements=elements(dtype, small))


def sentinel_like(shape: Sequence[int], dtype: Any) -> np.ndarray:
    """An output buffer pre-filled with junk, so unwritten elements show up."""
    dt = np.dtype(dtype)
    fill: Any = True if dt.kind == "b" else (np.nan if dt.kind == "f" else 77)
    return np.full(tuple(shape), fill, dtype=dt)


def run_kernel(
    op: str,
    attrs: Mapping[str, Any],
    inputs: Sequence[Any],
    outs: Sequence[tuple[Sequence[int], Any]],
) -> list[np.ndarray]:
    """Call ``op``'s kernel on ``inputs`` with fresh outputs of the given shapes and dtypes."""
    buffers = [sentinel_like(s, d) for s, d in outs]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "mean of empty slice" and the like
        get_kernel_factory(op)(dict(attrs))(*inputs, *buffers)
    return buffers


def run_like(
    op: str, attrs: Mapping[str, Any], inputs: Sequence[Any], expected: np.ndarray
) -> np.ndarray:
    """Run ``op`` with one output shaped like ``expected``; returns it."""
    return run_kernel(op, attrs, inputs, [(expected.shape, expected.dtype)])[0]


def assert_same(got: np.ndarray, expected: np.ndarray, rtol: float | None = None) -> None:
    """Equal shapes and dtypes, values equal (NaNs too) or close for floats when ``rtol``."""
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    if rtol is None or got.dtype.kind != "f":
        np.testing.assert_array_equal(got, expected)
    else:
        atol = {2: 1e-3, 4: 1e-6, 8: 1e-12}[got.dtype.itemsize]
        np.testing.assert_allclose(
            got.astype(np.float64),
            expected.astype(np.float64),
            rtol=rtol,
            atol=atol,
            equal_nan=True,
        )


def tol(dtype: Any) -> float:
    """A relative tolerance for ``dtype`` (for kernels that compute differently from numpy)."""
    dt = np.dtype(dtype)
    return {2: 5e-3, 4: 1e-5, 8: 1e-12}[dt.itemsize] if dt.kind == "f" else 0.0


def elementwise_program(
    op: str = "add",
    dims: Sequence[int | str] = ("n", 4),
    dtype: str = "float32",
    attrs: Mapping[str, Any] | None = None,
    kill_intermediate: bool = True,
) -> Any:
    """``main(x, y) = op(op(x, y), y)`` with shapes computed from ``x.shape[0]`` at run time.

    The intermediate's storage is killed after its last use; the output's is not (it is
    returned). Returns the executable.
    """
    from vm import Assembler, ShapeProgramBuilder, tensor

    asm = Assembler()
    k = asm.kernel(op, attrs, num_inputs=2)
    spec = tensor(dtype, dims)
    f = asm.function("main", [("x", spec), ("y", spec)], spec)
    x, y = f.params
    n = f.dim(x, 0)
    b = ShapeProgramBuilder(["n"])
    (sym,) = b.inputs
    rest = [d for d in dims[1:]]
    row = int(np.prod([int(d) for d in rest])) if rest else 1
    prog = asm.shape_program(
        b.build([sym * (row * np.dtype(dtype).itemsize), (sym, *[int(d) for d in rest])])
    )
    size, shape = f.shape_program(prog, [n])
    s1 = f.alloc_storage(size)
    t = f.alloc_tensor(s1, 0, shape, dtype)
    f.invoke(k, [x, y], [t])
    s2 = f.alloc_storage(size)
    out = f.alloc_tensor(s2, 0, shape, dtype)
    f.invoke(k, [t, y], [out])
    if kill_intermediate:
        f.kill(t, s1)
    f.ret(out)
    return asm.build()


def run_in_threads(work: Callable[[int], object], count: int) -> None:
    """Run ``work(k)`` for ``k`` in ``range(count)``, each on a thread of its own, all at once;
    return when every one has finished (``work`` records its own failures)."""
    threads = [threading.Thread(target=work, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
