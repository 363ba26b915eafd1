"""Adding an op from outside the project: one call registers all three parts.

    import numpy as np
    import dynshape

    scale = dynshape.register_op(
        "my.scale",
        inputs=["x"],
        attrs={"factor": 1.0},              # name -> default (its kind follows the default)
        pattern="elementwise",              # fuses with its neighbours
        kernel=lambda x, out, factor: np.multiply(x, factor, out=out),
    )
    y = scale(x, factor=2.0)                # in the builder; ``my.scale(%x, factor=2f)`` in text

It builds the op's declaration (``shape_funcs.declarations.OpDecl``: operands, attributes with
kinds and defaults, fusion pattern, dtype rule), the same type the built-in ops are declared
with, and fills three registries with it, each keyed by the op's name:

- ``ir.register_op``: the IR's definition, made from the declaration (and the dtype rule), so
  the text format and the builder know the op;
- ``shape_funcs.register_shape_func``: the shape function, run symbolically at compile time
  and on ints at run time (see ``shape_funcs/registry.py`` for the calling convention); an
  elementwise or broadcast op may omit it (inputs broadcast as numpy does);
- ``vm.register_kernel``: the numpy kernel. ``kernel(*inputs, *outputs, **attrs)`` writes the
  outputs in place, or returns the result, which is then copied into the single output; the VM
  checks a loaded file's attributes for it against the declaration (``register_declaration``).

Everything is checked before anything is registered, so a failed call leaves no half-op;
``dynshape.unregister_op(name)`` removes all of it again (to run a registering notebook cell a
second time, or to clean up after a test). An
executable that uses the op can be saved; loading it needs the op's kernel (and shape
function, if data-dependent) registered in the loading process, and names the op otherwise.
"""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

import ir
import vm
from ir import OpPattern
from ir.attrs import BOOL, DTYPE, FLOAT, INT, INT_LIST, STR, AttrDef, AttrKind
from ir.op import PATTERN_OF
from ir.ops import _declare as rules
from shape_funcs import has_shape_func, register_shape_func, unregister_shape_func
from shape_funcs.declarations import REQUIRED, AttrDecl, DeclarationError, OpDecl
from shape_funcs.ops._common import broadcast_many
from shape_funcs.registry import input_names_of
from vm.kernels.attr_schema import has_schema, register_declaration, unregister_attr_schema

from .errors import BuildError

_PATTERNS = PATTERN_OF
_KINDS: dict[str, AttrKind] = {
    "int": INT,
    "float": FLOAT,
    "bool": BOOL,
    "str": STR,
    "dtype": DTYPE,
    "list[int]": INT_LIST,
}
#: The dtype rules a custom op may name (``rules.NAMED_RULES`` has their code); any dtype name
#: (``"int64"``) means "always that dtype".
_DTYPE_RULES = ("same", "float", "numeric", "bool")


def register_op(
    name: str,
    *,
    inputs: Sequence[str] = ("x",),
    attrs: Mapping[str, Any] | None = None,
    pattern: str | OpPattern = "opaque",
    dtype: str | Callable[..., Any] | None = None,
    shape_func: Callable[..., Any] | None = None,
    data_dependent: Sequence[str] = (),
    kernel: Callable[..., Any],
    doc: str = "",
    in_place: bool = False,
) -> Callable[..., Any]:
    """Register op ``name`` in the IR, the shape-function and the kernel registries.

    - ``inputs``: operand names (``"*xs"`` is a tuple of tensors).
    - ``attrs``: ``{name: default}`` (the kind follows the default: bool, int, float, str,
      list of ints), or ``{name: "int"}`` (a kind name: required), or ``{name: (kind, default)}``.
      Kinds: int, float, bool, str, dtype, list[int].
    - ``pattern``: elementwise, broadcast, injective, reduction, out_elementwise_fusable or
      opaque (the default: never fused). A data-dependent op must be opaque.
    - ``dtype``: the result dtype: None (that of the first input), ``"same"`` (all inputs
      share it), ``"float"``/``"numeric"`` (checked), ``"bool"`` (a comparison), a dtype name
      (always that), or a rule ``fn(input_dtypes, attrs) -> dtype``.
    - ``shape_func``: ``fn(ctx, *inputs, **attrs) -> shape``; optional for elementwise and
      broadcast ops. ``data_dependent`` names the inputs it reads by value.
    - ``kernel``: ``fn(*inputs, *outputs, **attrs)``, filling the outputs or returning the
      result.
    - ``in_place``: the kernel stays correct when its (single) output is its first input (same
      shape and dtype), so the memory planner may write the output over an input that dies
      there. Elementwise and broadcast kernels must allow it anyway (fused chains run in place).

    Returns the builder function of the op (``f(*inputs, **attrs) -> Value``). Raises
    BuildError if the name is taken in any registry or the parts do not fit together.
    """
    if not isinstance(name, str) or not all(p.isidentifier() for p in name.split(".")):
        raise BuildError(f"register_op: bad op name {name!r} (a dotted identifier)")
    taken = [
        what
        for what, has in (
            ("an IR op", ir.has_op),
            ("a shape function", has_shape_func),
            ("a kernel", vm.has_kernel),
        )
        if has(name)
    ]
    if taken:
        raise BuildError(
            f"register_op: {name!r} is already registered ({', '.join(taken)}); "
            f"dynshape.unregister_op({name!r}) removes it"
        )
    operands = [i.lstrip("*") if isinstance(i, str) else i for i in inputs]
    names_used = [*operands, *(attrs or {})]
    for n in names_used:
        if not isinstance(n, str) or not n.isidentifier() or keyword.iskeyword(n) or n == "ctx":
            raise BuildError(
                f"register_op {name!r}: input and attribute names are Python identifiers "
                f"(not a keyword, not 'ctx': the shape function's first argument), got {n!r}"
            )
    if len(set(names_used)) != len(names_used):
        raise BuildError(f"register_op {name!r}: inputs and attributes need distinct names")
    attr_defs = [_attr_def(name, k, v) for k, v in (attrs or {}).items()]
    op_pattern = _pattern(name, pattern)
    flags = _data_dependent(name, operands, data_dependent)
    if any(flags) and op_pattern != OpPattern.OPAQUE:
        raise BuildError(f"register_op {name!r}: a data-dependent op must be opaque")
    sf = shape_func or _default_shape_func(name, op_pattern, operands)
    names = input_names_of(sf)
    if len(names) != len(operands):
        raise BuildError(
            f"register_op {name!r}: the shape function takes {len(names)} inputs "
            f"({', '.join(names) or 'none'}) but the op has {len(operands)} "
            f"({', '.join(operands) or 'none'})"
        )
    if not callable(kernel):
        raise BuildError(f"register_op {name!r}: kernel must be a function")
    rule_name, rule = _dtype_rule(name, dtype)
    decl = _declaration(
        name, inputs, attr_defs, op_pattern, rule_name, doc=doc, in_place=bool(in_place)
    )
    ir.register_op(ir.OpDef.from_declaration(decl, rule))
    register_shape_func(name, data_dependent=flags)(sf)
    vm.register_kernel(name)(_kernel_factory(kernel))
    register_declaration(decl)
    from .builder.ops import op_function

    return op_function(name)


def unregister_op(name: str) -> None:
    """Undo ``register_op(name, ...)``: remove the op from the IR, shape-function and kernel
    registries, and its kernel's attribute schema, so that the name is free again (a notebook
    cell that registers an op can then be run a second time; a test can clean up).

    Whatever of the op is registered goes, so an op added piece by piece is removed too. IR and
    builder functions made before keep the declaration they hold, but a new builder call, the
    parser and the compiler look the op up by name: they fail naming it until it is registered
    again, and then use the new registration; so does a VM made afterwards from an executable
    that calls the op. Raises BuildError for a built-in op and for a name nothing registered.
    """
    if ir.is_builtin_op(name):
        raise BuildError(
            f"unregister_op: {name!r} is a built-in op; only ops added with register_op can be "
            "removed"
        )
    parts = [
        ("an IR op", ir.has_op, ir.unregister_op),
        ("a shape function", has_shape_func, unregister_shape_func),
        ("a kernel", vm.has_kernel, vm.unregister_kernel),
        ("a kernel attribute schema", has_schema, unregister_attr_schema),
    ]
    present = [(has, remove) for _, has, remove in parts if has(name)]
    if not present:
        kinds = ", ".join(what for what, _, _ in parts)
        raise BuildError(f"unregister_op: no op {name!r} is registered (as {kinds})")
    # Checked above, so none of these raises: a failed call removes nothing.
    for _, remove in present:
        remove(name)


def _attr_def(op: str, key: str, spec: Any) -> AttrDef:
    """An attribute declaration from a default, a kind name, or ``(kind, default)``."""
    try:
        if isinstance(spec, tuple) and len(spec) == 2 and spec[0] in _KINDS:
            return ir.attrs.attr(key, _KINDS[spec[0]], spec[1])
        if isinstance(spec, str) and spec in _KINDS:
            return ir.attrs.attr(key, _KINDS[spec])
        for kind_type, kind in ((bool, BOOL), (int, INT), (float, FLOAT), (str, STR)):
            if isinstance(spec, kind_type):
                return ir.attrs.attr(key, kind, spec)
        if isinstance(spec, (list, tuple)):
            return ir.attrs.attr(key, INT_LIST, spec)
    except TypeError as e:
        raise BuildError(f"register_op {op!r}: attribute {key!r}: {e}") from None
    raise BuildError(
        f"register_op {op!r}: attribute {key!r}: give a default value, a kind "
        f"({', '.join(_KINDS)}) or (kind, default), got {spec!r}"
    )


def _pattern(op: str, pattern: str | OpPattern) -> OpPattern:
    if isinstance(pattern, OpPattern):
        return pattern
    if pattern not in _PATTERNS:
        raise BuildError(
            f"register_op {op!r}: unknown pattern {pattern!r} (one of {', '.join(_PATTERNS)})"
        )
    return _PATTERNS[pattern]


def _data_dependent(op: str, operands: list[str], names: Sequence[str]) -> tuple[bool, ...]:
    for n in names:
        if n not in operands:
            raise BuildError(
                f"register_op {op!r}: data_dependent names {n!r}, which is not an input "
                f"({', '.join(operands)})"
            )
    return tuple(o in names for o in operands)


def _declaration(
    op: str,
    inputs: Sequence[str],
    attr_defs: list[AttrDef],
    pattern: OpPattern,
    dtype: str,
    *,
    doc: str,
    in_place: bool,
) -> OpDecl:
    """The op's declaration, as the built-in ops are declared (its parts checked already)."""
    attrs = tuple(
        AttrDecl(a.name, a.kind.name, REQUIRED if a.required else a.default) for a in attr_defs
    )
    name_of = {p: n for n, p in _PATTERNS.items()}
    try:
        return OpDecl(op, tuple(inputs), attrs, name_of[pattern], dtype, doc, in_place)
    except DeclarationError as e:
        raise BuildError(f"register_op {op!r}: {e}") from None


def _dtype_rule(op: str, dtype: str | Callable[..., Any] | None) -> tuple[str, ir.op.DTypeRule]:
    """The declaration's name of the op's dtype rule, and the rule."""
    if dtype is None:
        return "first", rules.NAMED_RULES["first"]
    if callable(dtype):
        return "own", dtype
    if dtype in _DTYPE_RULES:
        return dtype, rules.NAMED_RULES[dtype]
    if dtype in ir.DTYPES:
        return dtype, rules.fixed(dtype)
    raise BuildError(
        f"register_op {op!r}: dtype must be None, a rule, {', '.join(_DTYPE_RULES)} or a "
        f"dtype name, got {dtype!r}"
    )


def _default_shape_func(op: str, pattern: OpPattern, operands: list[str]) -> Callable[..., Any]:
    """numpy broadcasting of the inputs, for elementwise and broadcast ops."""
    if pattern not in (OpPattern.ELEMWISE, OpPattern.BROADCAST) or not operands:
        raise BuildError(f"register_op {op!r}: a shape_func is needed for a {pattern.name} op")
    broadcast = _broadcast(tuple(operands))

    def shape_func(ctx: Any, *shapes: Any, **attrs: Any) -> Any:
        return broadcast(ctx, shapes)

    # The registry reads the inputs' names from the signature, for its messages.
    param = inspect.Parameter
    shape_func.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [param(n, param.POSITIONAL_OR_KEYWORD) for n in ("ctx", *operands)]
        + [param("attrs", param.VAR_KEYWORD)]
    )
    shape_func.__doc__ = "numpy broadcasting of the inputs (the default of an elementwise op)."
    return shape_func


def _broadcast(names: tuple[str, ...]) -> Callable[..., Any]:
    def broadcast(ctx: Any, shapes: tuple[Any, ...]) -> Any:
        return shapes[0] if len(shapes) == 1 else broadcast_many(ctx, shapes, names)

    return broadcast


def _kernel_factory(kernel: Callable[..., Any]) -> vm.kernels.KernelFactory:
    """The VM's convention (``factory(attrs) -> kernel(*inputs, *outputs)``) from a plain
    function taking the attributes as keywords and filling its outputs or returning one."""

    def factory(attrs: Mapping[str, Any]) -> vm.kernels.Kernel:
        bound = dict(attrs)

        def run(*arrays: np.ndarray) -> None:
            result = kernel(*arrays, **bound)
            if result is not None:
                np.copyto(arrays[-1], result, casting="unsafe")

        return run

    factory.__doc__ = kernel.__doc__
    # The function as the user wrote it: ``dynshape.testing.check_op`` calls it to see the
    # result a returning kernel gives, which ``run`` casts into the output without a check.
    factory.user_kernel = kernel  # type: ignore[attr-defined]
    return factory
