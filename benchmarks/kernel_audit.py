"""Kernel audit (issue 27, item 2): every kernel of the VM's registry on a large input, timed
against ``np.add`` on an input of the same size, to find per-element Python on the run path.

For each registered op the table below (``CASES``) builds valid inputs of about ``--size``
elements (the op's largest operand) and its attributes; the op catalogue fills in the default
attributes and gives the output shapes and dtypes (its concrete shape function and dtype
rule), exactly as a compiled program would. Each kernel is bound once and called on
preallocated outputs; ``np.add(a, a, out)`` on an array of the op's largest operand's size and
dtype (float32 for non-numeric ones) is timed in the same round, interleaved, and the table
shows the ratio of medians. Every kernel slower than ``LIMIT`` (20x) ``np.add`` is listed
with its reason from ``KNOWN`` (work that is legitimately more than one pass: a matmul, a sort,
a transcendental) or flagged ``UNEXPLAINED``: a kernel doing Python per element shows up as
hundreds or thousands of times ``np.add``. An op of the registry with no case is flagged
``NO CASE`` (add one when you add a kernel).

    python benchmarks/kernel_audit.py [--quick] [--size N] [--repeats R] [--all] [--op NAME]

``--quick`` (the CI smoke run) uses 2^14 elements and 3 repeats: a few seconds. Exit status 0
(a benchmark, not a test: the flags are for a reader). Timings are wall-clock medians; on a
busy machine compare ratios from the same run only.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ir
import vm.kernels  # noqa: F401  (registers every built-in kernel)
from shape_funcs import concrete_shapes, get_shape_func
from vm.kernels.registry import get_kernel_factory, registered_kernels

#: Kernels slower than this many times ``np.add`` on the same size are listed.
LIMIT = 20.0

#: Why a kernel may legitimately cost more than 20 elementwise passes (shown in the table).
KNOWN: dict[str, str] = {
    "nn.dense": "matmul: O(m*n*k) flops, not O(size) (BLAS)",
    "nn.matmul": "matmul: O(m*n*k) flops, not O(size) (BLAS)",
    "nn.batch_matmul": "matmul: O(b*m*n*k) flops, not O(size) (BLAS)",
    "nn.attention": "two batched matmuls + softmax: O(s^2 * d) flops",
    "nn.conv2d": "convolution: O(size * c_in * kh * kw) flops (issue 27 item 1: on BLAS)",
    "nn.conv2d_transpose": "convolution: O(size * c * kh * kw) flops (issue 27 item 1)",
    "nn.max_pool2d": "one reduction per window offset (issue 27 item 1)",
    "nn.avg_pool2d": "one reduction per window offset (issue 27 item 1)",
    "resize": "interpolation: index tables, gathers and weights per axis (issue 27 item 1)",
    "topk": "np.partition per row, then a sort of the candidates (a full stable sort when "
    "k > n/8, with NaNs or many ties)",
    "dyn.topk": "as topk",
    "erf": "tanh(x P(x^2) / Q(x^2)): 17 ufunc passes, one of them a tanh (kernels/erf.py)",
    "power": "pow: a transcendental per element (libm; small integer exponents: products)",
    "non_max_suppression": "greedy NMS in shape_funcs.select_boxes: O(boxes^2) IoU, run twice "
    "(shape function, then kernel)",
    "scatter_elements": "np.ufunc.at / fancy assignment with repeated-index handling (np.unique)",
    "scatter_nd": "np.ufunc.at / fancy assignment with repeated-index handling (np.unique)",
    "argwhere": "np.argwhere: a count, then one index array per axis",
    "mod": "float remainder (fmod and a sign fix) per element",
    "floor_divide": "float floor division (divmod) per element",
    "sin": "a transcendental per element",
    "cos": "a transcendental per element",
    "tanh": "a transcendental per element",
    "exp": "a transcendental per element",
    "log": "a transcendental per element",
    "nn.softmax": "max, subtract, exp, sum, divide: several passes with an exp",
    "nn.log_softmax": "max, subtract, exp, sum, log, subtract: several passes with an exp",
    "nn.layer_norm": "mean, variance, normalise, scale, shift: several passes",
    "sigmoid": "tanh-based: four passes with a transcendental",
    "silu": "tanh-based: four passes with a transcendental, over cache-sized chunks",
    "cumsum": "a sequential scan along the axis",
    "cumprod": "a sequential scan along the axis",
    **{
        op: "a transcendental per element"
        for op in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")
    },
    "prod": "a reduction in float32 accumulation (float16/32 inputs) or the dtype",
}


def _f32(*shape: int, positive: bool = False, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return np.abs(x) + np.float32(0.5) if positive else x


def _bool(*shape: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).random(shape) < 0.5


def _i64(values: Any) -> np.ndarray:
    return np.asarray(values, np.int64)


#: A case: ``size -> (inputs, attrs)``; ``size`` is the number of elements wanted in the
#: largest operand. Inputs are arrays (a tuple of arrays for a tuple operand).
Case = Callable[[int], tuple[list[Any], dict[str, Any]]]
W = 256  # the inner dim of the 2-d inputs


def _rows(n: int) -> int:
    return max(1, n // W)


def _unary(positive: bool = False) -> Case:
    return lambda n: ([_f32(_rows(n), W, positive=positive)], {})


def _binary(positive: bool = False) -> Case:
    return lambda n: ([_f32(_rows(n), W, positive=positive), _f32(_rows(n), W, seed=2)], {})


def _with(attrs: dict[str, Any], positive: bool = False) -> Case:
    return lambda n: ([_f32(_rows(n), W, positive=positive)], dict(attrs))


def _i32(n: int, seed: int = 7, high: int = 1 << 30) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, high, (_rows(n), W)).astype(np.int32)


def _square(n: int) -> int:
    return max(2, int(n**0.5))


def _image(n: int) -> tuple[int, int]:
    """Channels and side of a (1, c, h, h) image of about n elements."""
    c = 16
    return c, max(4, int((n / c) ** 0.5))


def _nms(n: int) -> tuple[list[Any], dict[str, Any]]:
    boxes = max(8, min(n // 4, 4000))  # NMS is O(boxes^2): a realistic detector count
    rng = np.random.default_rng(3)
    corner = rng.random((1, boxes, 2)).astype(np.float32) * 100
    size = rng.random((1, boxes, 2)).astype(np.float32) * 10 + 1
    b = np.concatenate([corner, corner + size], axis=-1)
    scores = rng.random((1, 1, boxes)).astype(np.float32)
    return [b, scores, _i64(100), np.float32(0.5), np.float32(0.1)], {}


def _scatter_elements(n: int) -> tuple[list[Any], dict[str, Any]]:
    r = _rows(n)
    idx = np.random.default_rng(4).integers(0, r, (r, W)).astype(np.int64)
    return [_f32(r, W), idx, _f32(r, W, seed=5)], {"axis": 0, "reduction": "add"}


def _scatter_nd(n: int) -> tuple[list[Any], dict[str, Any]]:
    r = _rows(n)
    idx = np.random.default_rng(4).integers(0, r, (r, 1)).astype(np.int64)
    return [_f32(r, W), idx, _f32(r, W, seed=5)], {"reduction": "add"}


def _attention(n: int) -> tuple[list[Any], dict[str, Any]]:
    s = max(4, min(512, int((n / 64) ** 0.5) * 2))
    h = max(1, n // (s * 64))
    q, k, v = (_f32(1, h, s, 64, seed=i) for i in range(3))
    return [q, k, v, np.zeros((1, 1, s, s), np.float32)], {}


CASES: dict[str, Case] = {
    **{
        op: _unary()
        for op in [
            "exp",
            "sin",
            "cos",
            "tanh",
            "floor",
            "ceil",
            "round",
            "negative",
            "abs",
            "sigmoid",
            "silu",
            "erf",
            "copy",
        ]
    },
    **{
        op: _unary() for op in ["zeros_like", "ones_like", "nn.relu", "nn.leaky_relu", "nn.softmax"]
    },
    **{op: _unary(positive=True) for op in ("log", "sqrt", "rsqrt")},
    "nn.log_softmax": _unary(),
    "logical_not": lambda n: ([_bool(_rows(n), W)], {}),
    **{
        op: _binary()
        for op in [
            "add",
            "subtract",
            "multiply",
            "divide",
            "maximum",
            "minimum",
            "equal",
            "not_equal",
            "less",
            "less_equal",
            "greater",
            "greater_equal",
        ]
    },
    **{op: _binary(positive=True) for op in ("floor_divide", "mod", "power")},
    **{
        op: (lambda n: ([_bool(_rows(n), W), _bool(_rows(n), W, seed=2)], {}))
        for op in ("logical_and", "logical_or")
    },
    "where": lambda n: ([_bool(_rows(n), W), _f32(_rows(n), W), _f32(_rows(n), W, seed=2)], {}),
    **{op: _unary() for op in ("tan", "atan", "sinh", "cosh", "asinh")},
    # inside the domains: |x| < 1, x >= 1 (NaN elsewhere would time another path)
    **{op: (lambda n: ([np.tanh(_f32(_rows(n), W))], {})) for op in ("asin", "acos", "atanh")},
    "acosh": lambda n: ([_f32(_rows(n), W, positive=True) + np.float32(1)], {}),
    **{
        op: (lambda n: ([_i32(n), _i32(n, seed=8)], {}))
        for op in ("bitwise_and", "bitwise_or", "bitwise_xor")
    },
    **{
        op: (lambda n: ([_i32(n), _i32(n, seed=8, high=40)], {}))
        for op in ("left_shift", "right_shift")
    },
    "bitwise_not": lambda n: ([_i32(n)], {}),
    "bitcast": _with({"dtype": "int32"}),
    "cast": _with({"dtype": "int32"}),
    "clip": _with({"a_min": -1.0, "a_max": 1.0}),
    **{
        op: _with({"axis": 1})
        for op in ["sum", "mean", "max", "min", "prod", "argmax", "argmin", "cumsum", "cumprod"]
    },
    "nn.layer_norm": lambda n: ([_f32(_rows(n), W), _f32(W), _f32(W, seed=2)], {"axis": -1}),
    "nn.bias_add": lambda n: ([_f32(_rows(n), W), _f32(W)], {"axis": 1}),
    "nn.batch_flatten": lambda n: ([_f32(_rows(n), 16, 16)], {}),
    "reshape": _with({"newshape": (-1,)}),
    "transpose": _with({}),
    "expand_dims": _with({"axis": 0}),
    "squeeze": lambda n: ([_f32(1, _rows(n), W)], {"axis": (0,)}),
    "broadcast_to": lambda n: ([_f32(1, W)], {"shape": (_rows(n), W)}),
    "concatenate": lambda n: ([(_f32(_rows(n) // 2 + 1, W), _f32(_rows(n) // 2 + 1, W))], {}),
    "stack": lambda n: ([(_f32(_rows(n) // 2 + 1, W), _f32(_rows(n) // 2 + 1, W))], {}),
    "split": _with({"indices_or_sections": 2, "axis": 1}),
    "take": lambda n: (
        [_f32(_rows(n), W), np.random.default_rng(6).integers(0, _rows(n), _rows(n))],
        {"axis": 0},
    ),
    "strided_slice": lambda n: (
        [_f32(_rows(n), W)],
        {"begin": (0, 0), "end": (_rows(n), W), "strides": (2, 1)},
    ),
    "tile": lambda n: ([_f32(max(1, _rows(n) // 2), W)], {"reps": (2, 1)}),
    "repeat": lambda n: ([_f32(max(1, _rows(n) // 2), W)], {"repeats": 2, "axis": 0}),
    "nn.pad": _with({"pad_width": ((1, 1), (1, 1))}),
    "compress": lambda n: ([_f32(_rows(n), W), _bool(_rows(n))], {"axis": 0}),
    "scatter_elements": _scatter_elements,
    "scatter_nd": _scatter_nd,
    "shape_of": _unary(),
    "argwhere": lambda n: ([_bool(_rows(n), W)], {}),
    "topk": _with({"k": 8, "axis": -1}),
    "dyn.topk": lambda n: ([_f32(_rows(n), W), _i64(8)], {"axis": -1}),
    "dyn.reshape": lambda n: ([_f32(_rows(n), W), _i64([-1])], {}),
    "dyn.strided_slice": lambda n: (
        [_f32(_rows(n), W), _i64([0, 0]), _i64([_rows(n), W]), _i64([2, 1])],
        {},
    ),
    "dyn.full": lambda n: ([np.float32(1.5), _i64([_rows(n), W])], {"dtype": "float32"}),
    "dyn.ones": lambda n: ([_i64([_rows(n), W])], {"dtype": "float32"}),
    "dyn.zeros": lambda n: ([_i64([_rows(n), W])], {"dtype": "float32"}),
    "full": lambda n: ([np.float32(1.5)], {"shape": (_rows(n), W), "dtype": "float32"}),
    "ones": lambda n: ([], {"shape": (_rows(n), W), "dtype": "float32"}),
    "zeros": lambda n: ([], {"shape": (_rows(n), W), "dtype": "float32"}),
    "arange": lambda n: ([np.float32(0), np.float32(n), np.float32(1)], {"dtype": "float32"}),
    "nn.dense": lambda n: (
        [_f32(_square(n), _square(n)), _f32(_square(n), _square(n), seed=2)],
        {},
    ),
    "nn.matmul": lambda n: (
        [_f32(_square(n), _square(n)), _f32(_square(n), _square(n), seed=2)],
        {},
    ),
    "nn.batch_matmul": lambda n: (
        [
            _f32(8, _square(n // 8), _square(n // 8)),
            _f32(8, _square(n // 8), _square(n // 8), seed=2),
        ],
        {},
    ),
    "nn.attention": _attention,
    "nn.conv2d": lambda n: (
        [_f32(1, _image(n)[0], _image(n)[1], _image(n)[1]), _f32(16, _image(n)[0], 3, 3)],
        {"padding": (1, 1)},
    ),
    "nn.conv2d_transpose": lambda n: (
        [_f32(1, _image(n)[0], _image(n)[1] // 2, _image(n)[1] // 2), _f32(_image(n)[0], 16, 2, 2)],
        {"strides": (2, 2)},
    ),
    "nn.max_pool2d": lambda n: (
        [_f32(1, _image(n)[0], _image(n)[1], _image(n)[1])],
        {"pool_size": (2, 2), "strides": (2, 2)},
    ),
    "nn.avg_pool2d": lambda n: (
        [_f32(1, _image(n)[0], _image(n)[1], _image(n)[1])],
        {"pool_size": (2, 2), "strides": (2, 2)},
    ),
    "nn.global_avg_pool2d": lambda n: ([_f32(1, _image(n)[0], _image(n)[1], _image(n)[1])], {}),
    "nn.global_max_pool2d": lambda n: ([_f32(1, _image(n)[0], _image(n)[1], _image(n)[1])], {}),
    "resize": lambda n: (
        [_f32(1, _image(n)[0], _image(n)[1] // 2, _image(n)[1] // 2)],
        {"sizes": (1, _image(n)[0], _image(n)[1], _image(n)[1]), "mode": "linear"},
    ),
    "non_max_suppression": _nms,
}


def _prepare(op_name: str, size: int) -> tuple[Callable[[], Any], np.ndarray, str]:
    """The bound kernel call on fresh outputs, the ``np.add`` reference array, and a shape note."""
    op = ir.get_op(op_name)
    args, given = CASES[op_name](size)
    attrs = dict(op.make_attrs(given))
    sf = get_shape_func(op_name)
    shape_inputs: list[Any] = []
    for i, a in enumerate(args):
        if isinstance(a, tuple):
            shape_inputs.append([tuple(p.shape) for p in a])
        elif i < len(sf.data_dependent) and sf.data_dependent[i]:
            shape_inputs.append(np.asarray(a))
        else:
            shape_inputs.append(tuple(np.shape(a)))
    result = concrete_shapes(op_name, shape_inputs, attrs)
    dtype_of = [
        tuple(str(p.dtype) for p in a) if isinstance(a, tuple) else str(np.asarray(a).dtype)
        for a in args
    ]
    dtypes = op.dtype_rule(dtype_of, ir.Attrs(attrs))
    shapes = list(result) if isinstance(result, list) else [result]
    dts = list(dtypes) if isinstance(dtypes, tuple) else [dtypes]
    outs = [np.empty(tuple(s), d) for s, d in zip(shapes, dts, strict=True)]
    kernel = get_kernel_factory(op_name)(attrs)
    call_args = [a if isinstance(a, tuple) else np.asarray(a) for a in args]
    final = [*call_args, *outs]  # every output positionally, a tuple result's too
    arrays = [p for a in call_args for p in (a if isinstance(a, tuple) else (a,))] + outs
    biggest = max(arrays, key=lambda a: a.size)
    ref_dtype = biggest.dtype if biggest.dtype.kind in "fiu" else np.dtype(np.float32)
    ref = np.ones(max(1, biggest.size), ref_dtype)
    note = f"{tuple(biggest.shape)} {biggest.dtype}"
    return (lambda: kernel(*final)), ref, note


def _median_time(fn: Callable[[], Any], target_s: float, repeats: int) -> float:
    """Median seconds per call: each repeat runs enough calls to last ``target_s``."""
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    number = max(1, int(target_s / once))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times)


def audit(size: int, repeats: int, target_s: float, only: list[str] | None) -> list[dict[str, Any]]:
    """One row per registered op (or per op of ``only``)."""
    rows = []
    for name in only or registered_kernels():
        if name not in CASES:
            rows.append({"op": name, "status": "NO CASE"})
            continue
        try:
            call, ref, note = _prepare(name, size)
            out = np.empty_like(ref)
            add_s, kernel_s = [], []
            reference = functools.partial(np.add, ref, ref, out)
            for _ in range(repeats):  # interleaved: both see the same machine load
                add_s.append(_median_time(reference, target_s, 1))
                kernel_s.append(_median_time(call, target_s, 1))
        except Exception as e:  # a broken case is shown, not fatal: the audit covers the rest
            rows.append({"op": name, "status": f"SETUP FAILED: {type(e).__name__}: {e}"[:160]})
            continue
        k, a = statistics.median(kernel_s), statistics.median(add_s)
        rows.append(
            {"op": name, "kernel_us": k * 1e6, "add_us": a * 1e6, "ratio": k / a, "input": note}
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2^14 elements, 3 repeats (CI smoke)")
    parser.add_argument("--size", type=int, default=None, help="elements of the largest operand")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--all", action="store_true", help="print every kernel, not only the slow")
    parser.add_argument("--op", action="append", help="audit only this op (repeatable)")
    args = parser.parse_args(argv)
    size = args.size or ((1 << 14) if args.quick else (1 << 18))
    repeats = args.repeats or (3 if args.quick else 7)
    target = 0.0005 if args.quick else 0.01
    rows = audit(size, repeats, target, args.op)
    timed = [r for r in rows if "ratio" in r]
    print(
        f"kernel audit: {len(rows)} kernels, largest operand ~{size} elements, medians of {repeats}"
    )
    shown = " (all shown: --all)" if args.all else ""
    print(f"listed: slower than {LIMIT:g}x np.add on the same size{shown}")
    print()
    head = f"{'op':<22} {'kernel us':>11} {'np.add us':>10} {'x add':>8}  "
    head += f"{'largest operand':<24} reason"
    print(head)
    print("-" * len(head))
    unexplained = 0
    for r in sorted(timed, key=lambda r: -r["ratio"]):
        slow = r["ratio"] > LIMIT
        if not (slow or args.all):
            continue
        reason = KNOWN.get(r["op"], "")
        if slow and not reason:
            reason = "UNEXPLAINED (per-element Python?)"
            unexplained += 1
        print(
            f"{r['op']:<22} {r['kernel_us']:>11.1f} {r['add_us']:>10.1f} {r['ratio']:>8.1f}  "
            f"{r['input']:<24} {reason}"
        )
    for r in rows:
        if "status" in r:
            print(f"{r['op']:<22} {r['status']}")
    slow_count = sum(r["ratio"] > LIMIT for r in timed)
    print()
    print(
        f"{slow_count} of {len(timed)} timed kernels slower than {LIMIT:g}x np.add; "
        f"{unexplained} unexplained; {len(rows) - len(timed)} without a timing"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
