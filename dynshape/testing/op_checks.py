"""The checks of one example of ``check_op``: an op's shape function, dtype rule and kernel on
one list of concrete inputs and attributes.

``check_example`` returns quietly when they agree, raises ``Rejected`` when the inputs are not
valid for the op (the concrete shape function or the dtype rule refuses them: the inputs are at
fault, not the op), and raises ``OpCheckError`` naming the op, the inputs and what disagreed
otherwise:

- the shape function's result is not a shape (or list of shapes) of non-negative ints, or its
  number of results differs from the dtype rule's;
- the symbolic mode, run on symbols standing for the inputs' dims and evaluated at the concrete
  dims, gives another shape, or refuses the inputs (raises ShapeError, or records a run-time
  check that fails there) however general the symbols (``TIERS``);
- the kernel raises, leaves an element of an output unwritten, modifies an input, or (a custom
  op whose kernel returns its result) returns a result of another shape or dtype kind than
  declared;
- an op declared ``in_place`` whose output has its first input's type gives another result when
  its output is that input's very array (what the memory planner does when the input dies
  there: ``dynshape/analysis/in_place.py``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import sympy

import ir
from dynshape.inference.symbolic_context import SymbolicContext
from shape_funcs import ShapeError, concrete_shapes, get_shape_func
from shape_funcs.registry import ShapeFunc, shape_text
from vm.kernels import get_kernel_factory
from vm.unwritten import checkable, describe_unwritten, unwritten_elements


class OpCheckError(AssertionError):
    """``check_op`` found an op whose parts disagree: the message names the op, the inputs
    (dtype and shape of each, and the attributes) and what disagreed."""


class Rejected(Exception):
    """The inputs are not valid for the op (its shape function or dtype rule refuses them)."""


def describe_args(op: ir.OpDef, args: Sequence[Any], attrs: Mapping[str, Any]) -> str:
    """``x float32 (2, 3), y float32 (3,); attrs axis=1``: an example, for messages."""
    parts = []
    for operand, arg in zip(op.operands, args, strict=True):
        parts.append(f"{operand.name} {_describe_arg(arg)}")
    text = ", ".join(parts) or "no inputs"
    if attrs:
        text += "; attrs " + ", ".join(f"{k}={v!r}" for k, v in attrs.items())
    return text


def _describe_arg(arg: Any) -> str:
    if isinstance(arg, tuple):
        return "(" + ", ".join(_describe_arg(a) for a in arg) + ")"
    text = f"{arg.dtype} {shape_text(arg.shape)}"
    if arg.dtype.kind in "iu" and arg.size <= 8:
        text += f" = {arg.tolist()}"  # index and shape tensors: their values matter
    return text


def check_example(op: ir.OpDef, args: Sequence[Any], attrs: Mapping[str, Any]) -> None:
    """Check op ``op`` on the concrete ``args`` (arrays; a tuple of arrays for a tuple operand)
    with the normalised attributes ``attrs`` (every default filled in); see the module doc."""
    sf = get_shape_func(op.name)

    def fail(what: str) -> OpCheckError:
        inputs = describe_args(op, args, attrs)
        return OpCheckError(f"check_op {op.name}: {what}\n  inputs: {inputs}")

    shape_inputs = _shape_inputs(sf, args)
    try:
        result = concrete_shapes(op.name, shape_inputs, attrs)
    except ShapeError as e:
        raise Rejected(str(e)) from None
    try:
        dtypes = op.dtype_rule([_dtype_of(a) for a in args], ir.Attrs(attrs))
    except ir.IRError as e:
        raise Rejected(str(e)) from None
    shapes = _results(result, dtypes, fail)
    _check_symbolic(op.name, sf, shape_inputs, attrs, shapes, fail)
    names = [o.name for o in op.operands]
    outputs = _check_kernel(op.name, names, args, attrs, shapes, _as_tuple(dtypes), fail)
    if op.in_place:
        _check_in_place(op.name, args, attrs, outputs, fail)


def _shape_inputs(sf: ShapeFunc, args: Sequence[Any]) -> list[Any]:
    """What the shape function gets: a shape, a list of shapes (a tuple), or a value."""
    out: list[Any] = []
    for i, arg in enumerate(args):
        if isinstance(arg, tuple):
            out.append([tuple(a.shape) for a in arg])
        elif i < len(sf.data_dependent) and sf.data_dependent[i]:
            out.append(arg)
        else:
            out.append(tuple(arg.shape))
    return out


def _dtype_of(arg: Any) -> Any:
    if isinstance(arg, tuple):
        return tuple(str(a.dtype) for a in arg)
    return str(arg.dtype)


def _as_tuple(dtypes: str | tuple[str, ...]) -> tuple[str, ...]:
    return dtypes if isinstance(dtypes, tuple) else (dtypes,)


def _results(
    result: Any, dtypes: str | tuple[str, ...], fail: Callable[[str], OpCheckError]
) -> list[tuple[int, ...]]:
    """The result shapes, checked to be int shapes matching the dtype rule in number."""
    shapes = list(result) if isinstance(result, list) else [result]
    if isinstance(result, list) != isinstance(dtypes, tuple) or len(shapes) != len(
        _as_tuple(dtypes)
    ):
        raise fail(
            f"the shape function gives {'a list of ' if isinstance(result, list) else ''}"
            f"{len(shapes)} result(s) {result!r} but the dtype rule gives {dtypes!r}"
        )
    out = []
    for shape in shapes:
        if not isinstance(shape, tuple) or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise fail(f"the shape function's result {shape!r} is not a shape of ints >= 0")
        out.append(tuple(int(d) for d in shape))
    return out


# ---- the symbolic mode against the concrete one ----------------------------------------------

#: How the symbolic mode sees the inputs' dims, tried in order until it accepts the inputs:
#: a symbol per dim (the most general), a symbol per distinct dim value other than 0 and 1
#: (facts relating equal dims become provable), then the dims themselves as ints.
TIERS = ("a symbol per dim", "a symbol per distinct dim value", "the dims as ints")


def _check_symbolic(
    name: str,
    sf: ShapeFunc,
    shape_inputs: Sequence[Any],
    attrs: Mapping[str, Any],
    concrete: Sequence[tuple[int, ...]],
    fail: Callable[[str], OpCheckError],
) -> None:
    """The symbolic result, at the concrete dims, must be the concrete result (module doc)."""
    refusals = []
    for tier in TIERS:
        inputs, binding = _symbolic_inputs(sf, shape_inputs, tier)
        ctx = SymbolicContext()
        try:
            result = ctx.shapes(name, inputs, attrs)
        except ShapeError as e:
            refusals.append(f"with {tier}: {e}")
            continue
        for check in ctx.deferred:
            try:
                holds = check.holds(binding)
            except (ValueError, KeyError, TypeError):
                continue  # a fact about a `?` dim: only the run time can decide it
            if not holds:
                # The compiled program would stop with this check's error, not a wrong answer:
                # a refusal, as if the fact had been refuted; a less general tier may accept.
                refusals.append(
                    f"with {tier}: it records the run-time check {check.description}, which "
                    f"fails at {_binding_text(binding)}"
                )
                break
        else:
            _compare(tier, result, binding, concrete, fail)
            return
    raise fail(
        "the symbolic shape function refuses inputs the concrete one accepts: "
        + "; ".join(refusals)
    )


def _compare(
    tier: str,
    result: Any,
    binding: Mapping[sympy.Basic, int],
    concrete: Sequence[tuple[int, ...]],
    fail: Callable[[str], OpCheckError],
) -> None:
    """The symbolic ``result`` evaluated at ``binding`` must be ``concrete`` (``?`` dims, which
    only the run time knows, match anything)."""
    shapes = result if isinstance(result, list) else [result]
    got = [_evaluate(s, binding) for s in shapes]
    if len(got) != len(concrete) or any(
        len(g) != len(c) or any(x is not None and x != y for x, y in zip(g, c, strict=True))
        for g, c in zip(got, concrete, strict=False)
    ):
        raise fail(
            f"the symbolic shape function (with {tier}) gives {_shapes_text(shapes)}, which is "
            f"{_shapes_text(got)} at {_binding_text(binding) or 'these inputs'}, but the "
            f"concrete one gives {_shapes_text(concrete)}"
        )


def _symbolic_inputs(
    sf: ShapeFunc, shape_inputs: Sequence[Any], tier: str
) -> tuple[list[Any], dict[sympy.Basic, int]]:
    """The shape inputs with their dims replaced as ``tier`` says, and the binding back."""
    binding: dict[sympy.Basic, int] = {}
    by_value: dict[int, sympy.Symbol] = {}

    def dim(value: int, where: str) -> Any:
        if tier == TIERS[2] or (tier == TIERS[1] and value in (0, 1)):
            return value
        if tier == TIERS[1]:
            if value not in by_value:
                by_value[value] = ir.sym(f"v{len(by_value)}")
            s = by_value[value]
        else:
            s = ir.sym(where)
        binding[s] = value
        return s

    out: list[Any] = []
    for i, value in enumerate(shape_inputs):
        name = sf.input_names[i] if i < len(sf.input_names) else f"input{i}"
        if isinstance(value, tuple):
            out.append(tuple(dim(d, f"{name}_{a}") for a, d in enumerate(value)))
        elif isinstance(value, list):
            out.append(
                [
                    tuple(dim(d, f"{name}{k}_{a}") for a, d in enumerate(s))
                    for k, s in enumerate(value)
                ]
            )
        else:
            out.append(value)  # a data-dependent input: its value, a known constant
    return out, binding


def _evaluate(shape: Sequence[Any], binding: Mapping[sympy.Basic, int]) -> tuple[Any, ...]:
    """The dims of a symbolic shape at ``binding``; None for a dim with a ``?`` in it."""
    out: list[Any] = []
    for d in shape:
        if isinstance(d, (int, np.integer)):
            out.append(int(d))
            continue
        expr = sympy.sympify(d)
        if any(ir.is_anonymous(s) for s in expr.free_symbols):
            out.append(None)
            continue
        value = sympy.sympify(
            expr.xreplace({s: sympy.Integer(binding[s]) for s in expr.free_symbols if s in binding})
        )
        out.append(int(value) if value.is_Integer else value)
    return tuple(out)


def _shapes_text(shapes: Sequence[Sequence[Any]]) -> str:
    texts = [shape_text(tuple("?" if d is None else d for d in s)) for s in shapes]
    return texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"


def _binding_text(binding: Mapping[sympy.Basic, int]) -> str:
    return ", ".join(f"{s} = {v}" for s, v in binding.items())


# ---- the kernel against the declared outputs -------------------------------------------------


def _check_kernel(
    name: str,
    names: Sequence[str],
    args: Sequence[Any],
    attrs: Mapping[str, Any],
    shapes: Sequence[tuple[int, ...]],
    dtypes: Sequence[str],
    fail: Callable[[str], OpCheckError],
) -> list[np.ndarray]:
    """Run the kernel into poisoned outputs of the declared types; see the module doc. Returns
    the outputs."""
    outputs = [np.empty(s, d) for s, d in zip(shapes, dtypes, strict=True)]
    inputs = [_copy(a) for a in args]
    run = _runner(name, inputs, outputs, attrs, fail)

    declared = ", ".join(f"{d} {shape_text(s)}" for s, d in zip(shapes, dtypes, strict=True))
    checked = [k for k, o in enumerate(outputs) if checkable(o)]

    def call() -> None:
        try:
            # The values are random: overflow, division by zero, the mean of nothing are not
            # what is checked here.
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                run()
        except OpCheckError:
            raise
        except Exception as e:
            raise fail(
                f"the kernel raised {type(e).__name__}: {e} (declared outputs: {declared})"
            ) from e

    if checked:
        missing = unwritten_elements(call, [outputs[k] for k in checked])
    else:  # every output is empty: nothing to poison, but the kernel must still run
        call()
        missing = []
    for j, flat in missing:
        k = checked[j]
        raise fail(
            f"the kernel did not write {describe_unwritten(outputs[k], flat)} of output {k} "
            f"(declared {dtypes[k]} {shape_text(shapes[k])})"
        )
    for operand, before, after in zip(names, args, inputs, strict=True):
        if not _same_bytes(before, after):
            raise fail(f"the kernel modified its input {operand}")
    return outputs


def _runner(
    name: str,
    inputs: Sequence[Any],
    outputs: Sequence[np.ndarray],
    attrs: Mapping[str, Any],
    fail: Callable[[str], OpCheckError],
) -> Callable[[], None]:
    """The kernel of op ``name`` called on ``inputs`` and ``outputs`` as the VM calls it."""
    factory = get_kernel_factory(name)
    user = getattr(factory, "user_kernel", None)
    if user is not None:
        return _returning(user, inputs, outputs, attrs, fail)
    kernel = factory(dict(attrs))

    def run() -> None:
        kernel(*inputs, *outputs)

    return run


def _check_in_place(
    name: str,
    args: Sequence[Any],
    attrs: Mapping[str, Any],
    outputs: Sequence[np.ndarray],
    fail: Callable[[str], OpCheckError],
) -> None:
    """Run an ``in_place`` op's kernel with its output the very array of its first input (as
    the planner may place it) and compare with the result written elsewhere, bit for bit."""
    first = args[0] if args else None
    if len(outputs) != 1 or not isinstance(first, np.ndarray):
        return
    if first.shape != outputs[0].shape or first.dtype != outputs[0].dtype:
        return
    shared = first.copy()
    run = _runner(name, [shared, *(_copy(a) for a in args[1:])], [shared], attrs, fail)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        run()
    if not _same_bytes(shared, outputs[0]):
        raise fail(
            "the kernel, declared in_place, gives another result when its output is its first "
            "input's array"
        )


def _returning(
    user: Callable[..., Any],
    inputs: Sequence[Any],
    outputs: Sequence[np.ndarray],
    attrs: Mapping[str, Any],
    fail: Callable[[str], OpCheckError],
) -> Callable[[], None]:
    """A custom op's kernel as the VM calls it (``custom_op._kernel_factory``), checking the
    result it returns, if any, against the declared output before it is copied in."""

    def run() -> None:
        result = user(*inputs, *outputs, **attrs)
        if result is None:
            return
        out = outputs[-1]
        got = np.asarray(result)
        if got.shape != out.shape:
            raise fail(
                f"the kernel returned a result of shape {shape_text(got.shape)}, but the shape "
                f"function declares {shape_text(out.shape)}"
            )
        # float64 for a float32 output is cast as the VM casts it; another kind is a wrong
        # declaration (or kernel): the cast would truncate or reinterpret the values.
        if _kind(got.dtype) != _kind(out.dtype):
            raise fail(
                f"the kernel returned a result of dtype {got.dtype}, but the dtype rule "
                f"declares {out.dtype}"
            )
        np.copyto(out, got, casting="unsafe")

    return run


def _kind(dtype: np.dtype) -> str:
    return "i" if dtype.kind == "u" else dtype.kind


def _copy(arg: Any) -> Any:
    return tuple(a.copy() for a in arg) if isinstance(arg, tuple) else arg.copy()


def _same_bytes(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        return all(_same_bytes(x, y) for x, y in zip(a, b, strict=True))
    return bool(a.shape == b.shape and a.tobytes() == b.tobytes())
