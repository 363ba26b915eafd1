"""Op declarations: each op's data is declared once and every layer reads that declaration.

The IR's catalogue, the VM's kernel checks (``tests/vm/test_attr_schema.py``), the builder's
signatures, the blocked runner's elementwise ops and the resize kernel's modes are made from
``shape_funcs.declarations``; a bad declaration is refused when it is made, naming the op.
"""

from __future__ import annotations

import inspect

import pytest

import dynshape.builder as ds
import ir
from dynshape.builder.ops import builder_name
from ir.ops._declare import NAMED_RULES
from shape_funcs.declarations import (
    BUILTIN_OPS,
    DTYPE_RULES,
    PATTERNS,
    DeclarationError,
    attr,
    declare,
)
from vm import fused_blocked
from vm.kernels import image


@pytest.mark.parametrize("name", sorted(BUILTIN_OPS))
def test_the_ir_op_is_made_from_its_declaration(name: str) -> None:
    decl, op = BUILTIN_OPS[name], ir.get_op(name)
    assert ir.is_builtin_op(name)
    assert [("*" if o.is_tuple else "") + o.name for o in op.operands] == list(decl.operands)
    assert [(a.name, a.kind.name, a.required) for a in op.attrs] == [
        (a.name, a.kind, a.required) for a in decl.attrs
    ]
    assert [a.default for a in op.attrs if not a.required] == [
        a.default for a in decl.attrs if not a.required
    ]
    assert op.pattern is ir.op.PATTERN_OF[decl.pattern]
    assert (op.doc, op.in_place) == (decl.doc, decl.in_place)


def test_the_catalogue_is_exactly_the_declarations() -> None:
    assert set(ir.ops.BUILTIN_OP_NAMES) == set(BUILTIN_OPS)


def test_every_dtype_rule_name_has_its_code_in_the_ir() -> None:
    assert set(NAMED_RULES) == set(DTYPE_RULES) - {"own"}
    assert set(ir.op.PATTERN_OF) == set(PATTERNS)


@pytest.mark.parametrize(
    "name", sorted(n for n, d in BUILTIN_OPS.items() if d.computes_tensors and d.attrs)
)
def test_the_builders_signature_is_the_declarations(name: str) -> None:
    """Operands, then attributes in declared order with their defaults (the op functions the
    builder writes out for numpy's spelling are left out)."""
    fn = getattr(ds, builder_name(name), None)
    sig = getattr(fn, "__signature__", None)
    if sig is None:  # written out by hand: ds.sum(x, axis), ds.zeros(shape, dtype), ...
        return
    decl = BUILTIN_OPS[name]
    params = list(sig.parameters.values())
    assert [p.name for p in params] == [*decl.operand_names, *(a.name for a in decl.attrs)]
    defaults = [p.default for p in params[len(decl.operands) :]]
    assert defaults == [inspect.Parameter.empty if a.required else a.default for a in decl.attrs]


def test_the_compilers_reshape_like_ops_are_the_declarations() -> None:
    from dynshape.passes.fuse_ops import RESHAPE_LIKE

    assert {n for n, d in BUILTIN_OPS.items() if d.reshape_like} == RESHAPE_LIKE
    assert {"reshape", "expand_dims", "squeeze", "nn.batch_flatten"} == RESHAPE_LIKE


def test_the_vms_op_tables_are_read_from_the_declarations() -> None:
    assert {n for n, d in BUILTIN_OPS.items() if d.blockwise} == fused_blocked.ELEMENTWISE
    resize = BUILTIN_OPS["resize"]
    assert resize.choices("coordinate_transformation_mode") == image._COORDINATE_MODES
    assert resize.choices("nearest_mode") == image._NEAREST_MODES
    assert image._MODES == resize.choices("mode") == ("nearest", "linear", "cubic")


def test_a_declaration_is_plain_data() -> None:
    op = declare("t.pad", ["x"], "injective", "first", [attr("w", "list[int]", [1, 2])])
    assert op.attrs[0].default == (1, 2)  # lists are frozen into tuples
    assert op.schema == {"w": "list[int]"}
    assert hash(op.attrs[0]) == hash(attr("w", "list[int]", (1, 2)))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("t op", ["x"], "opaque", "first"), "bad op name 't op' (a dotted identifier)"),
        (("t.a", ["x y"], "opaque", "first"), "op t.a: bad operand 'x y'"),
        (("t.a", ["**x"], "opaque", "first"), "op t.a: bad operand '**x'"),
        (("t.a", ["x"], "fused", "first"), "op t.a: unknown pattern 'fused' (one of elementwise"),
        (("t.a", ["x"], "opaque", "widest"), "op t.a: unknown dtype rule 'widest' (one of first"),
        (
            ("t.a", ["x"], "opaque", "first", [attr("k", "integer")]),
            "op t.a: attribute 'k': unknown attribute kind 'integer' in 'integer'",
        ),
        (
            ("t.a", ["x"], "opaque", "first", [attr("k", "int", 1.5)]),
            "op t.a: attribute 'k': default 1.5 is not int",
        ),
        (
            ("t.a", ["x"], "opaque", "first", [attr("m", "'a' | 'b'", "c")]),
            "op t.a: attribute 'm': default 'c' is not 'a' | 'b'",
        ),
        (
            ("t.a", ["x"], "opaque", "first", [attr("k", "None or int")]),
            "op t.a: attribute 'k': None comes last in a kind, after another: 'None or int'",
        ),
        (
            ("t.a", ["x"], "opaque", "first", [attr("x", "int")]),
            "op t.a: operands and attributes share the name(s) ['x']",
        ),
        (
            ("t.a", ["x"], "opaque", "first", [attr("class", "int")]),
            "op t.a: bad attribute name 'class' (an identifier)",
        ),
        (
            ("t.a", ["x"], "opaque", "first", [("k", "int")]),
            "an attribute is declared with attr(name, kind), got ('k', 'int')",
        ),
    ],
)
def test_a_bad_declaration_is_refused_naming_the_op(args: tuple, message: str) -> None:
    with pytest.raises(DeclarationError) as info:
        declare(*args)
    assert str(info.value).startswith(message), str(info.value)


def test_declaring_an_op_twice_in_the_catalogue_is_refused() -> None:
    from shape_funcs.declarations.catalogue import _by_name

    op = declare("t.a", ["x"], "opaque", "first")
    with pytest.raises(DeclarationError, match=r"op 't\.a' is declared twice"):
        _by_name((op,), (op,))


def test_register_op_refuses_what_a_declaration_refuses_and_registers_nothing() -> None:
    import dynshape
    from dynshape.errors import BuildError

    with pytest.raises(BuildError) as info:
        dynshape.register_op(
            "t.big", attrs={"n": 1 << 63}, pattern="elementwise", kernel=lambda x, out, n: None
        )
    assert str(info.value) == (
        f"register_op 't.big': op t.big: attribute 'n': default {1 << 63} is not int"
    )
    assert not ir.has_op("t.big")
