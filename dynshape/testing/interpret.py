"""The reference interpreter: any module of the text format, evaluated directly with numpy.

No fusion, no allocation pass, no planning and no VM: ops are the plain numpy definitions of
``numpy_ops``. At every step the value is checked against the type inference gave the node,
under the symbols bound so far in the running function: a symbol is bound at its first plain
occurrence (a whole dim, in a parameter or in any later value) and every other occurrence, plain
or inside an expression, is checked. A violated type is an ``InterpreterError`` naming the
function and the expression. The memory dialect is evaluated too (``memory_ops``), so the IR
after every stage of the pipeline can be interpreted.
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy

import ir
from dynshape_errors import DynShapeError
from ir import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Module,
    StorageType,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Type,
    Var,
)
from ir.attrs import has_symbolic_entries
from ir.nesting import RECURSION_LIMIT

from ..dialect.memory import MemoryOp, memory_op
from .numpy_ops import OPS

#: The evaluation of each memory-dialect op, by class: filled by ``memory_ops.py`` (which the
#: package imports), so that it may use this module without this module importing it back.
MEMORY_OPS: dict[type[MemoryOp], Callable[[Interpreter, Any, Frame], Any]] = {}

#: Calls of globals (and of function values) nested deeper than this raise InterpreterError.
MAX_CALL_DEPTH = 4000


class InterpreterError(DynShapeError):
    """The reference interpreter found a value that contradicts its type, a failed run-time
    check, a use of a killed value, or an op it cannot evaluate. The message names the
    function and the expression."""


Binding = dict[sympy.Basic, int]


@dataclass(eq=False)
class Storage:
    """A ``memory.alloc_storage``: an aligned byte buffer."""

    data: np.ndarray
    """The bytes (uint8)."""
    alignment: int


@dataclass(eq=False)
class Closure:
    """A function value: the function and the frame it was made in."""

    fn: Function
    frame: Frame | None


@dataclass(eq=False)
class Frame:
    """One activation: values of variables and of evaluated nodes, and the symbol binding."""

    function: str
    """The global running (for messages)."""
    binding: Binding
    parent: Frame | None = None
    values: dict[Expr, Any] = field(default_factory=dict)
    dead: set[Expr] = field(default_factory=set)
    """Variables passed to ``memory.kill``: reading one is an error."""

    def lookup(self, var: Var) -> Any:
        frame: Frame | None = self
        while frame is not None:
            if var in frame.dead:
                raise InterpreterError(f"@{self.function}: %{var.name_hint} is read after kill")
            if var in frame.values:
                return frame.values[var]
            frame = frame.parent
        raise InterpreterError(f"@{self.function}: %{var.name_hint} has no value here")


def describe(expr: Expr, limit: int = 160) -> str:
    """A one-line text of ``expr`` for error messages."""
    if isinstance(expr, Call) and expr.op is not None:
        head = f"{expr.op.name}(...)"
    elif isinstance(expr, Function):
        head = "fn (...)"
    else:
        head = type(expr).__name__
    try:
        text = " ".join(ir.text.printer.expr_to_text(expr, show_types=False).split())
    except Exception:  # pragma: no cover - printing is best effort in an error path
        return head
    return text if len(text) <= limit else f"{head}: {text[: limit - len(head) - 5]}..."


# ---- dims and types --------------------------------------------------------------------------
def eval_dim(dim: ir.Dim, binding: Binding) -> int | None:
    """The value of ``dim`` under ``binding``, or None when a symbol of it is not bound."""
    if isinstance(dim, int):
        return dim
    if isinstance(dim, sympy.Symbol):
        return binding.get(dim)
    if not dim.free_symbols <= binding.keys():
        return None
    value = dim.xreplace({s: sympy.Integer(binding[s]) for s in dim.free_symbols})
    return int(value) if isinstance(value, sympy.Integer) else None


class _Lazy:
    """Text for an error message, made only if the message is: printing a node is linear in its
    size, so describing every node eagerly would make evaluation quadratic in the depth."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], str]) -> None:
        self.make = make

    def __str__(self) -> str:
        return self.make()


def bind_and_check(value: Any, ty: Type | None, frame: Frame, what: str | _Lazy) -> None:
    """Bind the new plain symbols of ``ty`` from ``value``; check everything else. ``what``
    names the value in error messages."""
    if ty is None:
        return
    if isinstance(ty, TupleType):
        if not isinstance(value, tuple) or len(value) != len(ty.fields):
            raise InterpreterError(f"@{frame.function}: {what} is {_kind(value)}, type {ty}")
        for i, (v, t) in enumerate(zip(value, ty.fields, strict=True)):
            bind_and_check(v, t, frame, _Lazy(functools.partial("{}.{}".format, what, i)))
        return
    if isinstance(ty, StorageType):
        if not isinstance(value, Storage):
            raise InterpreterError(f"@{frame.function}: {what} is {_kind(value)}, not a storage")
        return
    if not isinstance(ty, TensorType):
        if not isinstance(value, Closure):
            raise InterpreterError(f"@{frame.function}: {what} is {_kind(value)}, type {ty}")
        return
    if not isinstance(value, np.ndarray):
        raise InterpreterError(f"@{frame.function}: {what} is {_kind(value)}, type {ty}")
    if value.dtype != np.dtype(ty.dtype) or value.ndim != ty.rank:
        raise InterpreterError(
            f"@{frame.function}: {what} is {value.dtype}{list(value.shape)}, its type is {ty}"
        )
    binding = frame.binding
    for axis, d in enumerate(ty.shape):
        if isinstance(d, sympy.Symbol) and d not in binding:
            binding[d] = value.shape[axis]
    for axis, d in enumerate(ty.shape):
        expected = eval_dim(d, binding)
        if expected is not None and expected != value.shape[axis]:
            raise InterpreterError(
                f"@{frame.function}: {what} has shape {list(value.shape)}, but its type {ty} "
                f"says axis {axis} is {d} = {expected} ({_show_binding(d, binding)})"
            )


def _show_binding(d: ir.Dim, binding: Binding) -> str:
    symbols = sorted(ir.free_symbols(d), key=str)
    return ", ".join(f"{'?' if ir.is_anonymous(s) else s} = {binding[s]}" for s in symbols)


def _kind(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"a tensor {value.dtype}{list(value.shape)}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    return f"a {type(value).__name__}"


def detach(value: Any) -> Any:
    """A copy of a result that aliases no storage of the interpreter."""
    if isinstance(value, tuple):
        return tuple(detach(v) for v in value)
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


# ---- the evaluator ---------------------------------------------------------------------------
class Interpreter:
    """Evaluates one typed module (see ``interpret``)."""

    def __init__(self, module: Module, max_depth: int = MAX_CALL_DEPTH) -> None:
        self.module = module
        self.max_depth = max_depth
        self.depth = 0

    def call_function(self, fn: Function, args: list[Any], name: str, outer: Frame | None) -> Any:
        """Run ``fn`` on ``args``: a global (``outer`` None: its own symbols) or a closure."""
        if len(args) != len(fn.params):
            raise InterpreterError(f"@{name} takes {len(fn.params)} arguments, got {len(args)}")
        self.depth += 1
        if self.depth > self.max_depth:
            self.depth = 0
            raise InterpreterError(
                f"@{name}: calls nested deeper than {self.max_depth} (the interpreter's depth "
                "limit; raise max_depth for deeper recursion)"
            )
        try:
            binding = dict(outer.binding) if outer is not None else {}
            frame = Frame(outer.function if outer is not None else name, binding, outer)
            for p, a in zip(fn.params, args, strict=True):
                bind_and_check(a, p.ty or p.type_annotation, frame, f"parameter %{p.name_hint}")
                frame.values[p] = a
            result = self.eval(fn.body, frame)
            bind_and_check(result, fn.ret_type, frame, f"the result of @{name}")
            return result
        finally:
            self.depth -= 1

    def eval(self, expr: Expr, frame: Frame) -> Any:
        """The value of ``expr`` in ``frame`` (each node once per frame; lets iterated)."""
        lets, node = ir.let_chain(expr)
        for let in lets:
            value = self.eval(let.value, frame)
            bind_and_check(
                value, let.var.ty or let.var.type_annotation, frame, f"let %{let.var.name_hint}"
            )
            frame.values[let.var] = value
        if isinstance(node, Var):
            return frame.lookup(node)
        if node in frame.values:
            return frame.values[node]
        value = self.eval_node(node, frame)
        if isinstance(value, np.ndarray) and isinstance(node.ty, TensorType):
            value = _as_dtype(value, node.ty.dtype)
        bind_and_check(value, node.ty, frame, _Lazy(lambda: describe(node)))
        frame.values[node] = value
        return value

    def eval_node(self, node: Expr, frame: Frame) -> Any:
        try:
            method = _DISPATCH[type(node)]
        except KeyError:
            raise InterpreterError(f"cannot evaluate {type(node).__name__}") from None
        return method(self, node, frame)

    def eval_constant(self, node: Constant, frame: Frame) -> Any:
        return node.value

    def eval_global(self, node: GlobalVar, frame: Frame) -> Any:
        if node.name not in self.module:
            raise InterpreterError(f"@{frame.function}: undefined global @{node.name}")
        return Closure(self.module[node.name], None)

    def eval_function(self, node: Function, frame: Frame) -> Any:
        return Closure(node, frame)

    def eval_tuple(self, node: Tuple, frame: Frame) -> Any:
        return tuple([self.eval(f, frame) for f in node.fields])

    def eval_getitem(self, node: TupleGetItem, frame: Frame) -> Any:
        value = self.eval(node.tuple_value, frame)
        if not isinstance(value, tuple) or node.index >= len(value):
            raise InterpreterError(
                f"@{frame.function}: {describe(node)}: cannot project {_kind(value)}"
            )
        return value[node.index]

    def eval_if(self, node: If, frame: Frame) -> Any:
        cond = self.eval(node.cond, frame)
        branch = node.then_branch if bool(np.asarray(cond)) else node.else_branch
        saved = frame.binding
        frame.binding = dict(saved)  # symbols bound in a branch stay in the branch
        try:
            return self.eval(branch, frame)
        finally:
            frame.binding = saved

    def eval_call(self, node: Call, frame: Frame) -> Any:
        op = node.op
        if op is None:
            callee = self.eval(node.callee, frame)  # type: ignore[arg-type]
            if not isinstance(callee, Closure):
                raise InterpreterError(f"@{frame.function}: {describe(node)} calls {_kind(callee)}")
            args = [self.eval(a, frame) for a in node.args]
            name = node.callee.name if isinstance(node.callee, GlobalVar) else "<fn>"
            return self.call_closure(callee, args, name)
        mem = memory_op(node)
        if mem is not None:
            return MEMORY_OPS[type(mem)](self, mem, frame)
        args = [self.eval(a, frame) for a in node.args]
        impl = OPS.get(op.name)
        if impl is None:
            raise InterpreterError(f"@{frame.function}: no reference definition of op {op.name}")
        attrs = _resolved_attrs(node, frame)
        try:
            with np.errstate(all="ignore"):
                out = impl(args, attrs)
        except (ValueError, IndexError, TypeError, ZeroDivisionError) as e:
            raise InterpreterError(f"@{frame.function}: {describe(node)} failed: {e}") from e
        return _result(out, node.ty)

    def call_closure(self, closure: Closure, args: list[Any], name: str) -> Any:
        if closure.frame is None:  # a global
            return self.call_function(closure.fn, args, name, None)
        return self.call_function(closure.fn, args, name, closure.frame)


def _resolved_attrs(node: Call, frame: Frame) -> Any:
    """``node``'s attributes with each dim entry (``newshape=[n, m]``) replaced by its value
    under the frame's binding (a primitive's frame starts from its caller's, so the symbols
    of the enclosing function are there even when the primitive's parameters do not bind them)."""
    attrs = node.attrs
    if not any(has_symbolic_entries(v) for v in attrs.values()):
        return attrs
    out = {}
    for key, value in attrs.items():
        if has_symbolic_entries(value):
            resolved = []
            for d in value:
                v = eval_dim(d, frame.binding) if isinstance(d, sympy.Expr) else d
                if v is None:
                    raise InterpreterError(
                        f"@{frame.function}: {describe(node)}: attribute {key} uses {d}, "
                        "which is not bound here"
                    )
                dims_as_values = node.op is not None and key in node.op.dim_values
                if v < 0 and isinstance(d, sympy.Expr) and dims_as_values:
                    # A dim index counts from the start (the shape function's run-time check,
                    # shape_funcs/ops/_common.py dim_index): numpy would count it from the end.
                    raise InterpreterError(
                        f"@{frame.function}: {describe(node)}: attribute {key} uses {d} = {v}, "
                        "but a dim index must be >= 0"
                    )
                resolved.append(v)
            value = tuple(resolved)
        out[key] = value
    return out


def _as_dtype(value: np.ndarray, dtype: str) -> np.ndarray:
    return value if value.dtype == np.dtype(dtype) else value.astype(dtype)


def _result(out: Any, ty: Type | None) -> Any:
    if isinstance(out, tuple):
        fields = ty.fields if isinstance(ty, TupleType) else (None,) * len(out)
        return tuple(_result(o, t) for o, t in zip(out, fields, strict=True))
    value = np.asarray(out)
    if isinstance(ty, TensorType):
        value = _as_dtype(value, ty.dtype)
    return value


_DISPATCH: dict[type, Callable[[Interpreter, Any, Frame], Any]] = {
    Constant: Interpreter.eval_constant,
    GlobalVar: Interpreter.eval_global,
    Function: Interpreter.eval_function,
    Tuple: Interpreter.eval_tuple,
    TupleGetItem: Interpreter.eval_getitem,
    If: Interpreter.eval_if,
    Call: Interpreter.eval_call,
}


def typed_module(module: Module | str) -> Module:
    """``module`` (or program text) with types inferred, unless every global already has them."""
    from dynshape.passes.infer_types import InferTypes
    from dynshape.pipeline import as_module

    module = as_module(module)
    if all(fn.body.ty is not None for fn in module.values()):
        return module
    return InferTypes().run(module)


def interpret(
    module: Module | str,
    *arrays: Any,
    entry: str = "main",
    max_depth: int = MAX_CALL_DEPTH,
) -> Any:
    """Evaluate ``@entry`` of ``module`` (a module at any stage, or program text) on ``arrays``.

    Returns an array, or a (nested) tuple of arrays, that aliases nothing. Raises
    InterpreterError naming the function and the expression when a value contradicts its type,
    a run-time check fails, a killed value is read, or recursion exceeds ``max_depth`` calls.
    """
    if isinstance(module, Module):  # program text is checked by the parser
        too_deep = ir.find_too_deep(module)
        if too_deep is not None:
            name, node = too_deep
            where = f"{node.span}: " if node.span else ""
            raise InterpreterError(f"{where}{ir.too_deep_message(f'@{name}')}")
    typed = typed_module(module)
    if entry not in typed:
        raise InterpreterError(f"the module has no @{entry}")
    fn = typed[entry]
    if len(arrays) != len(fn.params):
        raise InterpreterError(f"@{entry} takes {len(fn.params)} arguments, got {len(arrays)}")
    params = fn.params
    args = [_as_input(a, p.ty or p.type_annotation) for a, p in zip(arrays, params, strict=True)]
    interp = Interpreter(typed, max_depth)
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(max(saved, RECURSION_LIMIT))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy's, e.g. a mean of nothing
            result = interp.call_function(fn, args, entry, None)
    finally:
        sys.setrecursionlimit(saved)
    return detach(result)


def _as_input(value: Any, ty: Type | None) -> Any:
    """An argument as the interpreter holds it: a Python or numpy scalar becomes a rank-0 array
    of the parameter's dtype (as the VM converts it); arrays are taken as they are."""
    if isinstance(value, tuple):
        fields = ty.fields if isinstance(ty, TupleType) else (None,) * len(value)
        return tuple(_as_input(v, t) for v, t in zip(value, fields, strict=True))
    if isinstance(value, (bool, int, float, np.generic)) and isinstance(ty, TensorType):
        return np.array(value, dtype=ty.dtype)
    return value
