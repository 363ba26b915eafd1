"""``check_op(name)``: a registered op's shape function, dtype rule and kernel, checked against
each other on Hypothesis-drawn inputs.

    from dynshape.testing import check_op
    check_op("my.scale")                                  # drawn shapes, dtypes, attributes
    check_op("nn.conv2d", shapes=[[(1, 2, 5, 5), (3, 2, 3, 3)]])
    check_op("take", inputs=st.just([np.ones((3, 4)), np.array([2, 0])]), attrs={"axis": 0})

Nothing about an op says which ranks or dtypes its operands take, so inputs are drawn broadly
and those the op refuses (its concrete shape function raises ShapeError, or its dtype rule
IRError) are rejected: only inputs the op accepts are checked. Each accepted example is checked
by ``op_checks.check_example``: the kernel's outputs have the declared shapes and dtypes and
every element is written (poisoned outputs), the symbolic shape function at the concrete dims
agrees with the concrete one, and the kernel leaves its inputs alone. A disagreement raises
``OpCheckError`` (an AssertionError) naming the op, the inputs and what disagreed; Hypothesis
shrinks the inputs first.

Hypothesis is a development dependency, as for ``strategies``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import ir
from shape_funcs import get_shape_func, has_shape_func
from vm.kernels import has_kernel

from .op_checks import OpCheckError, Rejected, check_example

if TYPE_CHECKING:
    import hypothesis.strategies as st

    from .op_strategies import ShapeExample

#: The dtypes inputs are drawn in by default: one per example, shared by every operand.
DTYPES = ("float32", "float64", "int64", "int32", "bool")


def check_op(
    name: str,
    *,
    attrs: Mapping[str, Any] | None = None,
    shapes: Sequence[ShapeExample] | st.SearchStrategy[ShapeExample] | None = None,
    inputs: Sequence[Sequence[Any]] | st.SearchStrategy[Sequence[Any]] | None = None,
    dtypes: Sequence[str] = DTYPES,
    max_rank: int = 3,
    max_dim: int = 4,
    max_examples: int = 40,
) -> int:
    """Check the registered op ``name`` on drawn inputs; returns how many were checked.

    - ``attrs``: attribute values, each fixed or a Hypothesis strategy. Attributes not given
      are drawn where that is meaningful (bools; an ``axis`` from -1, 0, 1 and the default)
      and take their defaults otherwise; a required attribute must be given.
    - ``shapes``: the operands' shapes, as a list of examples or a strategy of them. By default
      they are drawn related (each operand a variant of one base shape: equal, broadcast with
      some dims 1 and fewer axes, or independent) up to ``max_rank`` axes of ``max_dim``.
    - ``inputs``: the argument arrays themselves (a tuple of arrays for a tuple operand), as a
      list of examples or a strategy; needed when values matter (indices, shape tensors).
    - ``dtypes``: the dtypes arrays are drawn in when ``inputs`` is not given.

    Raises OpCheckError (an AssertionError) when the op's parts disagree, or when no drawn
    input is accepted by the op; ValueError for a call that cannot work (an unknown op, one
    without a shape function or kernel, a required attribute not given, a data-dependent input
    with no ``inputs``).
    """
    import hypothesis.strategies as st
    from hypothesis import HealthCheck, given, reject, settings
    from hypothesis.errors import Unsatisfiable

    from . import op_strategies

    op = _checkable_op(name)
    sf = get_shape_func(name)
    given_attrs = dict(attrs or {})
    unknown = sorted(set(given_attrs) - set(op.attr_index))
    if unknown:
        raise ValueError(
            f"check_op({name!r}): the op has no attribute(s) {', '.join(unknown)} (its "
            f"attributes: {', '.join(op.attr_index) or 'none'})"
        )
    missing = [a.name for a in op.attrs if a.required and a.name not in given_attrs]
    if missing:
        raise ValueError(
            f"check_op({name!r}): give the required attribute(s) {', '.join(missing)} "
            "(a value or a Hypothesis strategy) in attrs="
        )
    by_value = [op.operands[i].name for i, d in enumerate(sf.data_dependent) if d]
    if by_value and inputs is None:
        raise ValueError(
            f"check_op({name!r}): the shape function reads {', '.join(by_value)} by value; "
            "give inputs= (arrays whose values are valid for the op)"
        )
    # Inputs fixed by the caller (arrays, or shapes in a single dtype) that the op refuses are
    # the caller's mistake, unless drawn attributes may be what the op refuses.
    explicit = isinstance(inputs, Sequence) or (
        inputs is None and isinstance(shapes, Sequence) and len(dtypes) == 1
    )
    examples = op_strategies.arguments(op, shapes, inputs, dtypes, max_rank, max_dim)
    attr_strategy, attrs_vary = op_strategies.attrs(op, given_attrs)
    strict = explicit and not attrs_vary
    checked = [0]

    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def run(data: st.DataObject) -> None:
        args = data.draw(examples, label="inputs")
        drawn = data.draw(attr_strategy, label="attrs")
        try:
            normalised = dict(op.make_attrs(drawn))
        except ir.IRError as e:
            if not attrs_vary:  # the caller's values, on every example
                raise ValueError(f"check_op({name!r}): {e}") from None
            reject()  # a drawn value of the wrong kind for this attribute (None for an int)
        try:
            check_example(op, args, normalised)
        except Rejected as e:
            if strict:
                raise OpCheckError(
                    f"check_op {name}: a given example is not valid for the op: {e}"
                ) from None
            reject()
        checked[0] += 1

    with contextlib.suppress(Unsatisfiable):
        run()
    if not checked[0]:
        raise OpCheckError(
            f"check_op {name}: no drawn input was accepted by the op's shape function and dtype "
            "rule; give shapes=, inputs=, dtypes= or attrs= it accepts"
        )
    return checked[0]


def _checkable_op(name: str) -> ir.OpDef:
    if not ir.has_op(name):
        raise ValueError(f"check_op: no op {name!r} is registered")
    op = ir.get_op(name)
    if name.startswith(ir.op.MEMORY_DIALECT):
        raise ValueError(f"check_op: {name!r} is a memory-dialect op (it has no shape function)")
    for what, has in (("a shape function", has_shape_func), ("a kernel", has_kernel)):
        if not has(name):
            raise ValueError(f"check_op: op {name!r} has no registered {what}")
    return op
