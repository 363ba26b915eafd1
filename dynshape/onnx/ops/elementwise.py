"""Elementwise ONNX ops: arithmetic, comparisons, logic, ``Where`` and the activations.

Binary ops broadcast as numpy (ONNX's multidirectional rule) and take inputs of one dtype: ONNX
does not promote types, so a mismatch is an error naming both (``Pow`` alone lets the exponent
differ). Where ONNX and numpy differ, ONNX is followed: integer ``Div`` truncates toward zero,
``Mod`` is Python's ``%`` (the divisor's sign) with ``fmod=0`` and C's ``fmod`` (the dividend's
sign) with ``fmod=1``, ``Round`` rounds half to even. An op with no catalogue op of its own is
composed of catalogue ops (``Reciprocal`` is ``divide(1, x)``, ``Xor`` is ``not_equal``).
The bit ops take integers only; ``BitShift`` follows opset 28 for counts out of range (the
sign fill alone), as numpy's shifts do.

Folding. When every input is ``Known`` the node is evaluated at import: numpy with ONNX's
semantics on numeric arrays; on symbolic ones (dims of shape subgraphs, ``Mul(Gather(Shape(x),
0), 4)``) the arithmetic, ``Min``/``Max``, the comparisons and ``Where`` work on the dims
themselves, where the result is decidable (a comparison ``ir.compare`` proves, a truncating
division of dims non-negative: proved, or made so by narrowing a symbol's range, see
``_sym_div``). What is not decidable is built as ops on the
materialised inputs, which is always correct.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import sympy

import ir
from dynshape.builder import trace

from .. import float_dims
from ..known import Known
from ..model import DTYPES
from ..registry import Node, NodeError, Unsupported, converter
from .operands import value_dtype

Elem = Any
"""One element of a symbolic ``Known``: an int (or a bool) or a sympy dim."""

SymbolicFn = Callable[..., Elem | None]
"""The op on elements of symbolic arrays; None when the result is not decidable."""

_FLOAT = "f"
_SIGNED = "i"
_UNSIGNED = "u"
_BOOL = "b"
_INTEGER = _SIGNED + _UNSIGNED
_NUMERIC = _FLOAT + _INTEGER
_ANY = _NUMERIC + _BOOL
_KIND_NAMES = {
    _FLOAT: "floating-point",
    _INTEGER: "integer",
    _NUMERIC: "numeric",
    _BOOL: "bool",
}


# ---- inputs, dtypes ------------------------------------------------------------------------


def _kind(dtype: str) -> str:
    return np.dtype(dtype).kind


def _inputs(node: Node, count: int | None = None) -> list[Any]:
    """The node's first ``count`` inputs (all given ones for None), each required."""
    n = len(node.inputs) if count is None else count
    values = [node.input(i) for i in range(n)]
    if not values:
        raise NodeError(f"{node.op_type} needs at least one input")
    for i, v in enumerate(values):
        if v is None:
            raise NodeError(f"input {i} is required")
    return values


def _one_dtype(node: Node, values: Sequence[Any], kinds: str) -> str:
    """The dtype shared by ``values``; a NodeError naming the dtypes when they differ, or when
    it is not one of ``kinds`` (numpy kind letters)."""
    dtypes = [value_dtype(v) for v in values]
    for dt in dtypes[1:]:
        if dt != dtypes[0]:
            raise NodeError(
                f"{node.op_type} needs inputs of one dtype (ONNX does not promote types), "
                f"got {dtypes[0]} and {dt}"
            )
    _check_kind(node, dtypes[0], kinds)
    return dtypes[0]


def _check_kind(node: Node, dtype: str, kinds: str) -> None:
    if _kind(dtype) not in kinds:
        what = _KIND_NAMES.get(kinds, "/".join(_KIND_NAMES.get(k, k) for k in kinds))
        raise NodeError(f"{node.op_type} expects {what} inputs, got {dtype}")


# ---- folding -----------------------------------------------------------------------------


def _fold(
    node: Node,
    values: Sequence[Any],
    dtype: str,
    numeric: Callable[..., Any],
    symbolic: SymbolicFn | None = None,
) -> Known | None:
    """``values`` evaluated at import when all are ``Known``, as a ``Known`` of ``dtype``; None
    when some is not known, or the symbolic result is not decidable."""
    if not all(isinstance(v, Known) for v in values):
        return None
    knowns: list[Known] = list(values)
    arrays = [k.numeric() for k in knowns]
    if all(a is not None for a in arrays):
        try:
            with np.errstate(all="ignore"):
                out = numeric(*arrays)
        except ValueError as e:
            raise NodeError(f"the inputs do not broadcast: {_shapes(knowns)} ({e})") from None
        return Known(np.asarray(out).astype(dtype, copy=False), dtype)
    if any(k.symbolic and _kind(k.dtype) == _FLOAT for k in knowns):
        symbolic = float_dims.FOLDING.get(node.op_type)  # exact float math only
    if symbolic is None:
        return None
    try:
        parts = np.broadcast_arrays(*(k.array.astype(object) for k in knowns))
    except ValueError:
        raise NodeError(f"the inputs do not broadcast: {_shapes(knowns)}") from None
    out = np.empty(parts[0].shape, dtype=object)
    for index in np.ndindex(*out.shape):
        elem = symbolic(*(_element(p[index]) for p in parts))
        if elem is None:
            return None
        out[index] = ir.simplify(elem) if isinstance(elem, sympy.Basic) else elem
    try:
        return Known.of(out, dtype)
    except ir.IRError:  # a dim that is provably negative: computed at run time instead
        return None


def _element(v: Any) -> Elem:
    """A numpy scalar of an object array as a Python int or bool (a dim stays as it is)."""
    if isinstance(v, np.bool_):
        return bool(v)
    return int(v) if isinstance(v, np.integer) else v


def _shapes(knowns: Sequence[Known]) -> str:
    return " and ".join(str(list(k.shape)) for k in knowns)


def _elementwise(
    node: Node,
    values: Sequence[Any],
    dtype: str,
    numeric: Callable[..., Any],
    build: Callable[..., Any],
    symbolic: SymbolicFn | None = None,
) -> Any:
    """Fold (``_fold``) or build: ``build(*tensors)`` on the materialised inputs."""
    folded = _fold(node, values, dtype, numeric, symbolic)
    if folded is not None:
        return folded
    return build(*(node.materialize(v) if isinstance(v, Known) else v for v in values))


def _apply(op_name: str, **attrs: Any) -> Callable[..., Any]:
    return lambda *args: trace.apply(op_name, *args, **attrs)


def _const(value: Any, dtype: str) -> Any:
    """A 0-d constant of ``dtype``."""
    return trace.constant(np.array(value, dtype=dtype), dtype)


def _chain(op_name: str, args: Sequence[Any]) -> Any:
    return functools.reduce(lambda a, b: trace.apply(op_name, a, b), args)


# ---- elements of symbolic arrays ---------------------------------------------------------


def _nonneg(d: Elem) -> bool:
    return ir.compare(d, ">=", 0) is True


def _trunc_div_int(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


def _sym_div(nonnegative: Callable[[Elem], bool]) -> SymbolicFn:
    """Integer division truncating toward zero, of dims: the floor of the quotient where both
    are non-negative (a dim divisor that is 0 is as undefined as at run time). A numerator
    whose sign is not proved (``height - 1``) is made non-negative by ``nonnegative``, which
    narrows its symbol's range (``Node.nonnegative``): the program refuses the sizes where it
    is negative at entry, rather than compute a floor where ONNX truncates."""

    def div(a: Elem, b: Elem) -> Elem | None:
        if isinstance(a, int) and isinstance(b, int):
            return None if b == 0 else _trunc_div_int(a, b)
        if b == 0 or not _nonneg(b) or not nonnegative(a):
            return None
        return sympy.floor(sympy.sympify(a) / b)

    return div


def _sym_mod(fmod: int, nonnegative: Callable[[Elem], bool]) -> SymbolicFn:
    def mod(a: Elem, b: Elem) -> Elem | None:
        if isinstance(a, int) and isinstance(b, int):
            if b == 0:
                return None
            if fmod:
                r = abs(a) % abs(b)
                return -r if a < 0 else r
            return a % b
        if b == 0 or not _nonneg(b) or (fmod and not nonnegative(a)):
            return None
        # sympy's Mod has the divisor's sign, as fmod=0; fmod=1 is the same for a >= 0.
        return sympy.Mod(a, b)

    return mod


def _sym_pow(a: Elem, b: Elem) -> Elem | None:
    if isinstance(b, int) and b >= 0:
        return a**b
    return None


def _sym_abs(a: Elem) -> Elem | None:
    if isinstance(a, int) or _nonneg(a):
        return abs(a) if isinstance(a, int) else a
    return -a if ir.compare(a, "<=", 0) is True else None


def _sym_compare(op: str) -> SymbolicFn:
    return lambda a, b: ir.compare(a, op, b)


def _sym_where(c: Elem, x: Elem, y: Elem) -> Elem:
    return x if c else y


def _sym_reduce(fn: Callable[[Elem, Elem], Elem]) -> SymbolicFn:
    return lambda *elems: functools.reduce(fn, elems)


# ---- numpy with ONNX's semantics (for folding) -------------------------------------------


def _np_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray
    if np.result_type(a, b).kind == "f":
        out = np.true_divide(a, b)
    elif np.result_type(a, b).kind == "u":
        out = np.floor_divide(a, b)
    else:
        q = np.floor_divide(np.abs(a), np.abs(b))
        out = np.where((a < 0) != (b < 0), -q, q)
    return out


def _np_pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray
    if a.dtype.kind in "iu" and (b.dtype.kind == "f" or np.any(b < 0)):
        # ONNX runtimes compute an integer power in double and convert (toward zero).
        out = np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)
    else:
        out = np.power(a, b.astype(a.dtype))
    return out


def _np_erf(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.vectorize(math.erf, otypes=[np.float64])(x)
    return out


# ---- built compositions --------------------------------------------------------------------


def _trunc_divide(a: Any, b: Any) -> Any:
    """Signed integer division toward zero: ``floor_divide`` of the magnitudes, negated where
    the signs differ."""
    dtype = a.dtype
    q = trace.apply("floor_divide", trace.apply("abs", a), trace.apply("abs", b))
    zero = _const(0, dtype)
    signs_differ = trace.apply(
        "not_equal", trace.apply("less", a, zero), trace.apply("less", b, zero)
    )
    return trace.apply("where", signs_differ, trace.apply("negative", q), q)


def _c_fmod(a: Any, b: Any) -> Any:
    """C's ``fmod`` (the dividend's sign): ``mod`` of the magnitudes (exact, no sign fix-up
    needed for non-negative operands), negated where ``a < 0``."""
    r = trace.apply("mod", trace.apply("abs", a), trace.apply("abs", b))
    negative = trace.apply("less", a, _const(0, a.dtype))
    return trace.apply("where", negative, trace.apply("negative", r), r)


# ---- binary arithmetic ---------------------------------------------------------------------


_ARITH: dict[str, tuple[str, Callable[..., Any], SymbolicFn]] = {
    "Add": ("add", np.add, lambda a, b: a + b),
    "Sub": ("subtract", np.subtract, lambda a, b: a - b),
    "Mul": ("multiply", np.multiply, lambda a, b: a * b),
}


@converter(*_ARITH)
def arithmetic(node: Node) -> Any:
    op_name, numeric, symbolic = _ARITH[node.op_type]
    values = _inputs(node, 2)
    dtype = _one_dtype(node, values, _NUMERIC)
    return _elementwise(node, values, dtype, numeric, _apply(op_name), symbolic)


@converter("Div")
def div(node: Node) -> Any:
    """True division for floats; for signed integers toward zero (not numpy's floor)."""
    values = _inputs(node, 2)
    dtype = _one_dtype(node, values, _NUMERIC)
    kind = _kind(dtype)
    build = _trunc_divide if kind == _SIGNED else _apply("divide")
    symbolic = _sym_div(node.nonnegative) if kind != _FLOAT else None
    return _elementwise(node, values, dtype, _np_div, build, symbolic)


#: The opset from which ``Mod`` takes ``fmod=0`` for floats (``A - floor(A / B) * B``).
FLOAT_MOD_OPSET = 28


@converter("Mod")
def mod(node: Node) -> Any:
    """``fmod=0``: the divisor's sign (Python's ``%``; for floats from opset 28, numpy's
    ``remainder``, whose special cases are the opset's); ``fmod=1``: the dividend's sign (C's
    ``fmod``)."""
    values = _inputs(node, 2)
    dtype = _one_dtype(node, values, _NUMERIC)
    fmod = int(node.attr("fmod", 0))
    kind = _kind(dtype)
    if kind == _FLOAT and not fmod and node.opset < FLOAT_MOD_OPSET:
        raise NodeError(
            f"Mod of {dtype} inputs needs fmod=1 before opset {FLOAT_MOD_OPSET} (ONNX's rule "
            "for floats)"
        )
    numeric = np.fmod if fmod else np.mod
    build = _c_fmod if fmod and kind != _UNSIGNED else _apply("mod")
    symbolic = _sym_mod(fmod, node.nonnegative) if kind != _FLOAT else None
    return _elementwise(node, values, dtype, numeric, build, symbolic)


@converter("Pow")
def pow_(node: Node) -> Any:
    """``base ** exponent`` of the base's dtype; the exponent may have another dtype (ONNX's
    ``T1``): it is converted to the base's, or for an integer base and a float exponent both
    are computed in float64."""
    base, exponent = _inputs(node, 2)
    dtype = value_dtype(base)
    _check_kind(node, dtype, _NUMERIC)
    exp_dtype = value_dtype(exponent)
    _check_kind(node, exp_dtype, _NUMERIC)
    symbolic = _sym_pow if exp_dtype == dtype else None
    folded = _fold(node, [base, exponent], dtype, _np_pow, symbolic)
    if folded is not None:
        return folded
    x, y = node.tensor(0), node.tensor(1)
    if exp_dtype == dtype:
        return trace.apply("power", x, y)
    if _kind(dtype) == _FLOAT or _kind(exp_dtype) != _FLOAT:
        exp = node.known(1)
        if exp is not None and not exp.symbolic:
            y = trace.constant(exp.array.astype(dtype), dtype)
        else:
            y = trace.apply("cast", y, dtype=dtype)
        return trace.apply("power", x, y)
    wide = trace.apply(
        "power",
        trace.apply("cast", x, dtype="float64"),
        trace.apply("cast", y, dtype="float64"),
    )
    return trace.apply("cast", wide, dtype=dtype)


# ---- variadic ------------------------------------------------------------------------------


def _variadic(
    node: Node,
    kinds: str,
    op_name: str,
    numeric: Callable[[Any, Any], Any],
    symbolic: Callable[[Elem, Elem], Elem] | None,
) -> tuple[Any, str, list[Any]]:
    values = _inputs(node)
    dtype = _one_dtype(node, values, kinds)
    if len(values) == 1:
        return values[0], dtype, values
    result = _elementwise(
        node,
        values,
        dtype,
        lambda *arrays: functools.reduce(numeric, arrays),
        lambda *tensors: _chain(op_name, tensors),
        _sym_reduce(symbolic) if symbolic is not None else None,
    )
    return result, dtype, values


@converter("Sum")
def sum_(node: Node) -> Any:
    return _variadic(node, _NUMERIC, "add", np.add, lambda a, b: a + b)[0]


@converter("Mean")
def mean(node: Node) -> Any:
    total, dtype, values = _variadic(node, _FLOAT, "add", np.add, None)
    if len(values) == 1:
        return total
    if isinstance(total, Known):
        assert total.numeric() is not None
        return Known((total.array / len(values)).astype(dtype), dtype)
    return trace.apply("divide", total, _const(len(values), dtype))


@converter("Max")
def max_(node: Node) -> Any:
    return _variadic(node, _NUMERIC, "maximum", np.maximum, ir.dim_max)[0]


@converter("Min")
def min_(node: Node) -> Any:
    return _variadic(node, _NUMERIC, "minimum", np.minimum, ir.dim_min)[0]


# ---- bitwise ------------------------------------------------------------------------------

_BITWISE: dict[str, tuple[str, Callable[..., Any]]] = {
    "BitwiseAnd": ("bitwise_and", np.bitwise_and),
    "BitwiseOr": ("bitwise_or", np.bitwise_or),
    "BitwiseXor": ("bitwise_xor", np.bitwise_xor),
}


@converter(*_BITWISE)
def bitwise(node: Node) -> Any:
    """Of integers only (ONNX's types; bool is ``And``/``Or``/``Xor``)."""
    op_name, numeric = _BITWISE[node.op_type]
    values = _inputs(node, 2)
    dtype = _one_dtype(node, values, _INTEGER)
    return _elementwise(node, values, dtype, numeric, _apply(op_name))


_SHIFTS = {"LEFT": ("left_shift", np.left_shift), "RIGHT": ("right_shift", np.right_shift)}


@converter("BitShift")
def bit_shift(node: Node) -> Any:
    """``direction`` LEFT or RIGHT; a shift count that is negative or at least the bit width
    gives 0 (-1 for a negative value shifted right), as opset 28 specifies; numpy's shifts
    (folding) and the kernels give exactly that. Before opset 28 only unsigned types are
    ONNX's, which this rule covers too."""
    direction = node.attr("direction")
    if isinstance(direction, bytes):
        direction = direction.decode()
    if direction not in _SHIFTS:
        raise NodeError(f"BitShift's direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    op_name, numeric = _SHIFTS[direction]
    values = _inputs(node, 2)
    dtype = _one_dtype(node, values, _INTEGER)
    return _elementwise(node, values, dtype, numeric, _apply(op_name))


#: The element types ``BitCast`` takes: numpy's own, whose bytes are their bits.
_BITCAST_DTYPES = frozenset(
    (
        "bool",
        "float16",
        "float32",
        "float64",
        *(f"{u}int{b}" for u in ("", "u") for b in (8, 16, 32, 64)),
    )
)


@converter("BitCast")
def bit_cast(node: Node) -> Any:
    """The input's bits as the element type ``to``, of the same width (ONNX requires it; a bool
    is one byte). A byte other than 0 or 1 cast to bool is True."""
    to = node.attr("to")
    if to not in DTYPES:
        raise Unsupported(f"BitCast to element type {to} is not supported")
    target = DTYPES[to]
    values = _inputs(node, 1)
    source = value_dtype(values[0])
    for dt in (source, target):
        if dt not in _BITCAST_DTYPES:  # ml_dtypes' narrow types: sub-byte ones store a byte
            raise Unsupported(f"BitCast of element type {dt} is not supported")
    if np.dtype(source).itemsize != np.dtype(target).itemsize:
        raise NodeError(
            f"BitCast needs element types of one width, got {source} "
            f"({np.dtype(source).itemsize * 8} bits) and {target} "
            f"({np.dtype(target).itemsize * 8} bits)"
        )

    def numeric(x: np.ndarray) -> np.ndarray:
        raw = np.ascontiguousarray(x).view(np.uint8 if target == "bool" else target)
        return raw != 0 if target == "bool" else raw

    return _elementwise(node, values, target, numeric, _apply("bitcast", dtype=target))


# ---- comparisons, logic, Where -------------------------------------------------------------

_COMPARISONS: dict[str, tuple[str, str, Callable[..., Any], str]] = {
    "Equal": ("equal", "==", np.equal, _ANY),
    "Less": ("less", "<", np.less, _NUMERIC),
    "LessOrEqual": ("less_equal", "<=", np.less_equal, _NUMERIC),
    "Greater": ("greater", ">", np.greater, _NUMERIC),
    "GreaterOrEqual": ("greater_equal", ">=", np.greater_equal, _NUMERIC),
}


@converter(*_COMPARISONS)
def comparison(node: Node) -> Any:
    """A bool tensor; of symbolic dims, folded only where ``ir.compare`` decides each."""
    op_name, op, numeric, kinds = _COMPARISONS[node.op_type]
    values = _inputs(node, 2)
    _one_dtype(node, values, kinds)
    return _elementwise(node, values, "bool", numeric, _apply(op_name), _sym_compare(op))


_LOGIC: dict[str, tuple[str, Callable[..., Any]]] = {
    "And": ("logical_and", np.logical_and),
    "Or": ("logical_or", np.logical_or),
    "Xor": ("not_equal", np.logical_xor),  # xor of bools is !=
}


@converter(*_LOGIC)
def logic(node: Node) -> Any:
    op_name, numeric = _LOGIC[node.op_type]
    values = _inputs(node, 2)
    _one_dtype(node, values, _BOOL)
    return _elementwise(node, values, "bool", numeric, _apply(op_name))


@converter("Not")
def not_(node: Node) -> Any:
    values = _inputs(node, 1)
    _one_dtype(node, values, _BOOL)
    return _elementwise(node, values, "bool", np.logical_not, _apply("logical_not"))


@converter("Where")
def where(node: Node) -> Any:
    values = _inputs(node, 3)
    cond = value_dtype(values[0])
    if cond != "bool":
        raise NodeError(f"Where's condition must be bool, got {cond}")
    dtype = _one_dtype(node, values[1:], _ANY)
    return _elementwise(node, values, dtype, np.where, _apply("where"), _sym_where)


# ---- unary ---------------------------------------------------------------------------------


def _unary(
    node: Node,
    kinds: str,
    numeric: Callable[[np.ndarray], Any],
    build: Callable[[Any], Any],
    symbolic: SymbolicFn | None = None,
    result: str | None = None,
) -> Any:
    values = _inputs(node, 1)
    dtype = _one_dtype(node, values, kinds)
    return _elementwise(node, values, result or dtype, numeric, build, symbolic)


#: Unary ops that are one catalogue op: ONNX name -> (op, numpy, input kinds, symbolic).
_SIMPLE_UNARY: dict[str, tuple[str, Callable[..., Any], str, SymbolicFn | None]] = {
    "Abs": ("abs", np.abs, _NUMERIC, _sym_abs),
    "Neg": ("negative", np.negative, _SIGNED + _FLOAT, lambda a: -a),
    "Exp": ("exp", np.exp, _FLOAT, None),
    "Log": ("log", np.log, _FLOAT, None),
    "Sqrt": ("sqrt", np.sqrt, _FLOAT, None),
    "Floor": ("floor", np.floor, _FLOAT, None),
    "Ceil": ("ceil", np.ceil, _FLOAT, None),
    "Round": ("round", np.rint, _FLOAT, None),  # half to even, as ONNX
    "Sin": ("sin", np.sin, _FLOAT, None),
    "Cos": ("cos", np.cos, _FLOAT, None),
    "Tan": ("tan", np.tan, _FLOAT, None),
    "Asin": ("asin", np.arcsin, _FLOAT, None),
    "Acos": ("acos", np.arccos, _FLOAT, None),
    "Atan": ("atan", np.arctan, _FLOAT, None),
    "Sinh": ("sinh", np.sinh, _FLOAT, None),
    "Cosh": ("cosh", np.cosh, _FLOAT, None),
    "Tanh": ("tanh", np.tanh, _FLOAT, None),
    "Asinh": ("asinh", np.arcsinh, _FLOAT, None),
    "Acosh": ("acosh", np.arccosh, _FLOAT, None),
    "Atanh": ("atanh", np.arctanh, _FLOAT, None),
    "BitwiseNot": ("bitwise_not", np.invert, _INTEGER, None),
    "Sigmoid": ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), _FLOAT, None),
    "Erf": ("erf", _np_erf, _FLOAT, None),
    "Relu": ("nn.relu", lambda x: np.maximum(x, 0), _SIGNED + _FLOAT, None),
}


@converter(*_SIMPLE_UNARY)
def simple_unary(node: Node) -> Any:
    op_name, numeric, kinds, symbolic = _SIMPLE_UNARY[node.op_type]
    return _unary(node, kinds, numeric, _apply(op_name), symbolic)


@converter("Reciprocal")
def reciprocal(node: Node) -> Any:
    return _unary(node, _FLOAT, lambda x: 1 / x, lambda x: trace.apply("divide", 1, x))


@converter("Sign")
def sign(node: Node) -> Any:
    """1 where ``x > 0``, -1 where ``x < 0``, else ``x`` itself: 0 (or -0.0), NaN stays NaN."""

    def build(x: Any) -> Any:
        dt = x.dtype
        zero = _const(0, dt)
        rest = x
        if _kind(dt) != _UNSIGNED:
            rest = trace.apply("where", trace.apply("less", x, zero), _const(-1, dt), x)
        return trace.apply("where", trace.apply("greater", x, zero), _const(1, dt), rest)

    return _unary(node, _NUMERIC, np.sign, build)


@converter("IsNaN")
def is_nan(node: Node) -> Any:
    return _unary(node, _FLOAT, np.isnan, lambda x: trace.apply("not_equal", x, x), result="bool")


@converter("IsInf")
def is_inf(node: Node) -> Any:
    positive = bool(node.attr("detect_positive", 1))
    negative = bool(node.attr("detect_negative", 1))

    def numeric(x: np.ndarray) -> np.ndarray:
        return (np.isposinf(x) & positive) | (np.isneginf(x) & negative)

    def build(x: Any) -> Any:
        tests = []
        if positive:
            tests.append(trace.apply("equal", x, _const(np.inf, x.dtype)))
        if negative:
            tests.append(trace.apply("equal", x, _const(-np.inf, x.dtype)))
        if not tests:  # neither: all false (``x < -inf`` is false, NaN included)
            return trace.apply("less", x, _const(-np.inf, x.dtype))
        return _chain("logical_or", tests)

    return _unary(node, _FLOAT, numeric, build, result="bool")


# ---- activations ---------------------------------------------------------------------------


@converter("LeakyRelu")
def leaky_relu(node: Node) -> Any:
    alpha = float(node.attr("alpha", 0.01))
    return _unary(
        node,
        _FLOAT,
        lambda x: np.where(x < 0, x * np.asarray(alpha, x.dtype), x),
        _apply("nn.leaky_relu", alpha=alpha),
    )


def _build_elu(x: Any, alpha: float) -> Any:
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)``; ``exp`` of ``min(x, 0)``, so the
    branch not taken never overflows."""
    dt = x.dtype
    em1 = trace.apply(
        "subtract",
        trace.apply("exp", trace.apply("minimum", x, _const(0, dt))),
        _const(1, dt),
    )
    neg = trace.apply("multiply", em1, _const(alpha, dt))
    return trace.apply("where", trace.apply("greater", x, _const(0, dt)), x, neg)


def _np_elu(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.where(x > 0, x, alpha * (np.exp(np.minimum(x, 0)) - 1))


@converter("Elu")
def elu(node: Node) -> Any:
    alpha = float(node.attr("alpha", 1.0))
    return _unary(node, _FLOAT, lambda x: _np_elu(x, alpha), lambda x: _build_elu(x, alpha))


@converter("Selu")
def selu(node: Node) -> Any:
    alpha = float(node.attr("alpha", 1.67326319217681884765625))
    gamma = float(node.attr("gamma", 1.05070102214813232421875))
    return _unary(
        node,
        _FLOAT,
        lambda x: gamma * _np_elu(x, alpha),
        lambda x: trace.apply("multiply", _build_elu(x, alpha), _const(gamma, x.dtype)),
    )


def _build_hard_sigmoid(x: Any, alpha: float, beta: float) -> Any:
    """``clip(alpha * x + beta, 0, 1)``."""
    dt = x.dtype
    y = trace.apply("add", trace.apply("multiply", x, _const(alpha, dt)), _const(beta, dt))
    return trace.apply("clip", y, a_min=0.0, a_max=1.0)


@converter("HardSigmoid")
def hard_sigmoid(node: Node) -> Any:
    alpha = float(node.attr("alpha", 0.2))
    beta = float(node.attr("beta", 0.5))
    return _unary(
        node,
        _FLOAT,
        lambda x: np.clip(x * np.asarray(alpha, x.dtype) + np.asarray(beta, x.dtype), 0, 1),
        lambda x: _build_hard_sigmoid(x, alpha, beta),
    )


@converter("HardSwish")
def hard_swish(node: Node) -> Any:
    """``x * hard_sigmoid(x)`` with ``alpha = 1/6``, ``beta = 0.5``."""
    alpha, beta = 1 / 6, 0.5
    return _unary(
        node,
        _FLOAT,
        lambda x: x * np.clip(x * np.asarray(alpha, x.dtype) + np.asarray(beta, x.dtype), 0, 1),
        lambda x: trace.apply("multiply", x, _build_hard_sigmoid(x, alpha, beta)),
    )


@converter("Softplus")
def softplus(node: Node) -> Any:
    """``log(1 + exp(x))``, computed as ``max(x, 0) + log(1 + exp(-|x|))``: no overflow."""

    def build(x: Any) -> Any:
        dt = x.dtype
        tail = trace.apply(
            "log",
            trace.apply(
                "add",
                _const(1, dt),
                trace.apply("exp", trace.apply("negative", trace.apply("abs", x))),
            ),
        )
        return trace.apply("add", trace.apply("maximum", x, _const(0, dt)), tail)

    return _unary(
        node,
        _FLOAT,
        lambda x: np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x))),
        build,
    )


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


@converter("Gelu")
def gelu(node: Node) -> Any:
    """``approximate="none"``: ``x/2 * (1 + erf(x / sqrt 2))``; ``"tanh"``: ``x/2 * (1 +
    tanh(sqrt(2/pi) * (x + 0.044715 x**3)))`` (opset 20)."""
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise NodeError(f"Gelu's approximate must be 'none' or 'tanh', got {approximate!r}")

    def numeric(x: np.ndarray) -> np.ndarray:
        if approximate == "tanh":
            inner = np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3))
        else:
            inner = _np_erf(x / math.sqrt(2))
        out: np.ndarray = 0.5 * x * (1 + inner)
        return out

    def build(x: Any) -> Any:
        dt = x.dtype
        if approximate == "tanh":
            cube = trace.apply("multiply", trace.apply("multiply", x, x), x)
            arg = trace.apply(
                "multiply",
                trace.apply("add", x, trace.apply("multiply", cube, _const(0.044715, dt))),
                _const(_SQRT_2_OVER_PI, dt),
            )
            inner = trace.apply("tanh", arg)
        else:
            inner = trace.apply("erf", trace.apply("multiply", x, _const(math.sqrt(0.5), dt)))
        half_x = trace.apply("multiply", x, _const(0.5, dt))
        return trace.apply("multiply", half_x, trace.apply("add", inner, _const(1, dt)))

    return _unary(node, _FLOAT, numeric, build)


@converter("Clip")
def clip(node: Node) -> Any:
    """``x`` limited to ``[min, max]`` (optional inputs; before opset 11, attributes). Known
    scalar bounds of a float tensor become ``clip``'s attributes; other bounds (tensors, or
    integers, which a float attribute may not hold exactly) are ``maximum``/``minimum``, which
    is ONNX's rule also when ``min > max`` (the result is ``max``)."""
    x = node.input(0)
    if x is None:
        raise NodeError("input 0 is required")
    dtype = value_dtype(x)
    _check_kind(node, dtype, _NUMERIC)
    if node.opset < 11:
        lo = node.attr("min")
        hi = node.attr("max")
        bounds: list[Any] = [
            None if v is None else Known(np.array(v, dtype=dtype), dtype) for v in (lo, hi)
        ]
    else:
        bounds = [node.input(1), node.input(2)]
    for b in bounds:
        if b is not None and value_dtype(b) != dtype:
            raise NodeError(
                f"Clip needs bounds of the input's dtype (ONNX does not promote types), "
                f"got {dtype} and {value_dtype(b)}"
            )
    given = [b for b in bounds if b is not None]
    if not given:
        return x

    def numeric(v: np.ndarray, *bs: np.ndarray) -> np.ndarray:
        it = iter(bs)
        lo_ = next(it) if bounds[0] is not None else None
        hi_ = next(it) if bounds[1] is not None else None
        if lo_ is not None:
            v = np.maximum(v, lo_)
        return np.minimum(v, hi_) if hi_ is not None else v

    folded = _fold(node, [x, *given], dtype, numeric)
    if folded is not None:
        return folded
    value = node.materialize(x) if isinstance(x, Known) else x
    scalars = [_scalar_bound(b) for b in bounds]
    if _kind(dtype) == _FLOAT and all(
        b is None or s is not None for b, s in zip(bounds, scalars, strict=True)
    ):
        lo_f = -math.inf if scalars[0] is None else scalars[0]
        hi_f = math.inf if scalars[1] is None else scalars[1]
        return trace.apply("clip", value, a_min=lo_f, a_max=hi_f)
    for b, op_name in zip(bounds, ("maximum", "minimum"), strict=True):
        if b is not None:
            value = trace.apply(op_name, value, node.materialize(b) if isinstance(b, Known) else b)
    return value


def _scalar_bound(bound: Any) -> float | None:
    """A bound known to be one number, as a float; else None."""
    if not isinstance(bound, Known):
        return None
    array = bound.numeric()
    if array is None or array.size != 1:
        return None
    return float(array.reshape(-1)[0])
