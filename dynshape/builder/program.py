"""Inputs and the built program: ``ds.tensor`` declares an input, ``ds.build`` makes the module.

    x = ds.tensor("x", ("batch", 512), "float32")
    w = ds.tensor("w", (512, 10), "float32")
    program = ds.build(ds.relu(x @ w), inputs=[x, w], ranges={"batch": (1, 4096)})
    print(program)                        # the IR text; program is an ir.Module
    exe = dynshape.compile(program)

Dims are ints, names (``"batch"``: the symbol ``batch``, the same everywhere), ``"?"`` (a fresh
unknown), expressions in the text format's dim syntax (``"2*n"``, ``"n + 1"``) or sympy
expressions (``ir.sym("n") + 1``).

Symbol ranges (``ranges={"batch": (1, 4096)}``, inclusive; ``None`` as the upper bound for
none) are declared on ``main`` (``Function.ranges``, printed ``where batch in [1, 4096]``), where
the compiler uses them; ``program.ranges`` shows them by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import sympy

import ir
from ir import Expr, Function, GlobalVar, Module, TensorType, Var

from ..errors import CompileError
from ..pipeline import infer_types
from .control import loop_self
from .location import build_error, errors_at, fail, user_span
from .trace import made, wrap
from .value import Value


class Program(Module):
    """A built module (``main`` and the loop functions it calls) with its symbol ranges."""

    __slots__ = ("inputs", "outputs", "ranges")

    def __init__(
        self,
        functions: Mapping[str, Function],
        ranges: Mapping[str, tuple[int, int | None]],
        inputs: Sequence[str],
        outputs: Sequence[str] = (),
    ) -> None:
        super().__init__(functions)
        self.ranges: dict[str, tuple[int, int | None]] = dict(ranges)
        """Declared ranges of symbols, ``{"batch": (1, 4096)}`` (inclusive bounds), as on
        ``main``."""
        self.inputs: tuple[str, ...] = tuple(inputs)
        """The names of ``main``'s parameters, in order."""
        self.outputs: tuple[str, ...] = tuple(outputs)
        """The names of the results, in order, where they have names (an imported model's
        outputs); empty for a built program."""

    def compile(self, **options: Any) -> Any:
        """``dynshape.compile(self, **options)``: the VM executable."""
        from ..pipeline import compile

        return compile(self, **options)


def tensor(name: str, shape: Sequence[Any], dtype: Any = "float32") -> Value:
    """Declare an input of the program: a tensor with symbolic dims (see the module doc)."""
    span = user_span()
    if not isinstance(shape, (tuple, list)):
        raise fail(f"the shape of input {name!r} must be a tuple of dims, got {shape!r}")
    with errors_at(span):
        ty = TensorType(tuple(_dim(d) for d in shape), dtype)
        var = Var(name, ty, span=span)
    value: Value = wrap(made(var), ty)
    return value


def _dim(d: Any) -> ir.Dim:
    if isinstance(d, str):
        d = d.strip()
        if d == "?":
            return ir.fresh()
        if d.isidentifier():
            return ir.sym(d)
        ty = ir.parse_type(f"Tensor[({d},), int32]", source_name="<dim>")
        assert isinstance(ty, TensorType)
        return ty.shape[0]
    if isinstance(d, np.integer) and not isinstance(d, np.bool_):
        d = int(d)  # numpy's own shapes hold numpy ints
    if isinstance(d, bool) or not isinstance(d, (int, sympy.Expr)):
        raise fail(f"bad dim {d!r}: an int, a name, '?', or an expression such as '2*n'")
    return ir.check_dim(d)


def build(
    outputs: Any,
    inputs: Sequence[Value],
    *,
    ranges: Mapping[str, tuple[int, int | None]] | None = None,
) -> Program:
    """The program computing ``outputs`` (a Value, or a tuple of them) from ``inputs`` (the
    Values made by ``ds.tensor``, in parameter order). ``ranges`` bounds symbols.

    The whole module is type-checked once more (``infer_types``) before it is returned.
    """
    span = user_span()
    params = _params(inputs)
    if isinstance(outputs, Value):
        body: Expr = outputs.expr
    elif (
        isinstance(outputs, (tuple, list))
        and outputs
        and all(isinstance(v, Value) for v in outputs)
    ):
        body = ir.Tuple(tuple(v.expr for v in outputs), span=span)
    else:
        raise fail("ds.build's outputs must be a Value or a non-empty tuple of Values")
    too_deep = ir.find_too_deep(body)  # before any walk: the walks rely on the bound
    if too_deep is not None:
        raise build_error(ir.too_deep_message("the program ds.build builds"), too_deep[1].span)
    _check_closed(body, params)
    with errors_at(span):
        main = Function(tuple(params), body, span=span, ranges=ir.Ranges(ranges or {}))
    functions = _with_loops(main)
    names = {str(s): bounds for s, bounds in main.ranges.items()}
    program = Program(functions, names, [p.name_hint for p in params])
    try:
        infer_types(program)
    except CompileError as e:
        raise build_error(str(e), span) from None
    return program


def _params(inputs: Sequence[Value]) -> list[Var]:
    if isinstance(inputs, Value) or not isinstance(inputs, (tuple, list)):
        raise fail("ds.build's inputs must be a list of the Values made by ds.tensor")
    params: list[Var] = []
    for v in inputs:
        if not isinstance(v, Value) or not isinstance(v.expr, Var):
            raise fail(f"ds.build's inputs must be Values made by ds.tensor, got {v!r}")
        if v.expr in params:
            raise fail(f"input {v.expr.name_hint!r} is listed twice in ds.build's inputs")
        params.append(v.expr)
    return params


class _FreeVars(ir.ExprVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.vars: list[Var] = []

    def visit_var(self, var: Var) -> None:
        self.vars.append(var)

    def visit_function(self, fn: Function) -> None:
        pass  # a loop: closed, its captured values are the call's arguments (visited)


def _check_closed(body: Expr, params: list[Var]) -> None:
    """Every input the outputs use must be a parameter."""
    found = _FreeVars()
    found.visit(body)
    for var in found.vars:
        if var not in params:
            where = f" (declared at {var.span})" if var.span is not None else ""
            raise fail(
                f"the outputs use input {var.name_hint!r}{where}, which is not in ds.build's inputs"
            )


class _Loops(ir.ExprVisitor):
    """The loop functions reached from a function, in the order they are first reached (a
    loop's own body, with the loops nested in it, right after the loop)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[Function] = []

    def visit_function(self, fn: Function) -> None:
        if loop_self(fn) is None:
            raise fail("internal: the builder made a function that is not a loop")
        self.found.append(fn)  # once: the visitor memoises nodes
        super().visit_function(fn)


class _Rename(ir.ExprMutator):
    """Calls of loop functions become calls of their globals, as do the loops' calls of
    themselves."""

    def __init__(self, names: Mapping[Function, str]) -> None:
        super().__init__()
        self.names = names
        self.self_names = {loop_self(fn): name for fn, name in names.items()}

    def visit_function(self, fn: Function) -> Expr:
        return GlobalVar(self.names[fn], span=fn.span)

    def visit_global_var(self, gv: GlobalVar) -> Expr:
        name = self.self_names.get(gv)
        return gv if name is None else GlobalVar(name, span=gv.span)


def _with_loops(main: Function) -> dict[str, Function]:
    """``main`` and the loop functions it reaches, named ``loop``, ``loop1``, ... in order.

    The loops are found in this program's own graph (see ``control.py``), so a build sees its
    loops and no other's."""
    found = _Loops()
    found.visit(main.body)
    names = {fn: "loop" if i == 0 else f"loop{i}" for i, fn in enumerate(found.found)}
    rename = _Rename(names)
    functions: dict[str, Function] = {}
    for fn, name in names.items():
        functions[name] = dataclasses.replace(fn, body=rename.visit(fn.body))
    functions["main"] = dataclasses.replace(main, body=rename.visit(main.body))
    return functions
