"""Parse errors: each names the thing that is wrong and points at its line and column."""

from __future__ import annotations

import pytest

import ir

# (source, line, column, message). Columns are 1-based; the source starts on line 1.
CASES = [
    pytest.param(
        "def @main(%x: float32) {\n  foo(%x)\n}", 2, 3, "unknown op 'foo'", id="unknown-op"
    ),
    pytest.param(
        "def @main(%x: float32) {\n  sum(%x, axes=1)\n}",
        2,
        11,
        "op sum has no attribute 'axes' (did you mean 'axis'? its attributes: axis, keepdims, exclude)",
        id="unknown-attribute",
    ),
    pytest.param(
        "def @main(%x: float32) {\n  sum(%x, keepdims=1)\n}",
        2,
        20,
        "op sum: attribute keepdims=1 is ill-typed: expected True or False",
        id="ill-typed-attribute",
    ),
    pytest.param(
        'def @main(%x: float32) {\n  reshape(%x, newshape=["a"])\n}',
        2,
        24,
        "op reshape: attribute newshape=['a'] is ill-typed: expected an int or a dim (an "
        "expression of symbols)",
        id="ill-typed-list-attribute",
    ),
    pytest.param(
        # A dim in an attribute may use only the symbols the parameters bind.
        "def @main(%x: Tensor[(m, 4), float32], %y: Tensor[(n,), float32]) {\n"
        "  split(%x, indices_or_sections=[n, k // 2])\n}",
        2,
        33,
        "op split: attribute indices_or_sections uses k, which no parameter of the function "
        "binds (a dim in an attribute may use only the symbols of the parameter types)",
        id="unbound-symbol-in-attribute",
    ),
    pytest.param(
        "def @main(%x: float32) {\n  reshape(%x)\n}",
        2,
        3,
        "op reshape: missing required attribute 'newshape'",
        id="missing-attribute",
    ),
    pytest.param(
        "def @main(%x: float32) {\n  add(%x)\n}",
        2,
        3,
        "op add takes 2 arguments (a, b), got 1",
        id="wrong-arity",
    ),
    pytest.param(
        "def @main(%x: float32) {\n  exp(%x, %x, %x)\n}",
        2,
        3,
        "op exp takes 1 argument (x), got 3",
        id="wrong-arity-many",
    ),
    pytest.param(
        "def @main(%x: float32) {\n  add(%x, %foo)\n}",
        2,
        11,
        "undefined variable %foo",
        id="undefined-variable",
    ),
    pytest.param(
        "def @main(%x: float32) {\n  %0 = exp(%x);\n  %1\n}",
        3,
        3,
        "undefined variable %1",
        id="undefined-binding",
    ),
    pytest.param(
        "def @main(%x: float32) {\n  let %y = %y;\n  %y\n}",
        2,
        12,
        "undefined variable %y",
        id="let-not-in-scope-of-its-value",
    ),
    pytest.param(
        "def @main(%c: bool) {\n  %0 = if (%c) { %a = exp(%c); %a } else { %c };\n  %a\n}",
        3,
        3,
        "undefined variable %a",
        id="branch-binding-out-of-scope",
    ),
    pytest.param(
        "def @main(%x: float32) {\n  @foo(%x)\n}",
        2,
        3,
        "undefined global @foo",
        id="undefined-global",
    ),
    pytest.param(
        "def @f(%x: float32) { %x }\n\ndef @f(%y: float32) { %y }",
        3,
        5,
        "duplicate global @f (first defined at line 1:5)",
        id="duplicate-global",
    ),
    pytest.param(
        "def @main(%x: Tensor[(n, 2), flaot32]) { %x }",
        1,
        30,
        "bad dtype 'flaot32': expected one of bool, float16, float32, float64, int16, int32, "
        "int64, int8, uint16, uint32, uint64, uint8",
        id="bad-dtype",
    ),
    pytest.param(
        "def @main(%x: int33) { %x }",
        1,
        15,
        "bad dtype 'int33'",
        id="bad-bare-dtype",
    ),
    pytest.param(
        "def @main() { const([1, 2], float31) }",
        1,
        29,
        "bad dtype 'float31'",
        id="bad-const-dtype",
    ),
    pytest.param(
        "def @main(%x: Tensor[(n +), float32]) { %x }",
        1,
        26,
        "malformed dim expression 'n +': expected a dim, found ')'",
        id="dim-dangling-plus",
    ),
    pytest.param(
        "def @main(%x: Tensor[(n - n - 1, 2), float32]) { %x }",
        1,
        23,
        "malformed dim expression 'n - n - 1': dims are non-negative",
        id="dim-negative",
    ),
    pytest.param(
        "def @main(%x: Tensor[(2, 1.5), float32]) { %x }",
        1,
        26,
        "malformed dim expression '1.5': a dim must be an integer",
        id="dim-float",
    ),
    pytest.param(
        "def @main(%x: Tensor[(n / 2,), float32]) { %x }",
        1,
        23,
        "malformed dim expression 'n / 2': not an integer expression",
        id="dim-not-integer",
    ),
    pytest.param(
        "def @main(%x: Tensor[(n // 0,), float32]) { %x }",
        1,
        25,
        "malformed dim expression 'n // 0': division by zero",
        id="dim-division-by-zero",
    ),
    pytest.param(
        "def @main(%x: Tensor[(max(n),), float32]) { %x }",
        1,
        23,
        "malformed dim expression 'max(n)': max needs at least 2 arguments",
        id="dim-max-arity",
    ),
    pytest.param(
        "def @main(%x: Tensor[(sqrt(n),), float32]) { %x }",
        1,
        23,
        "malformed dim expression 'sqrt(n)': unknown dim function 'sqrt'",
        id="dim-function",
    ),
    pytest.param(
        "def @main(%x: Tensor[((n + 1, 2), float32]) { %x }",
        1,
        29,
        "malformed dim expression '(n + 1': expected ')', found ','",
        id="dim-unclosed-paren",
    ),
    pytest.param(
        "def @main(%x: float32) {\n  /* never closed\n  %x\n}",
        2,
        3,
        "unterminated comment: '/*' has no matching '*/'",
        id="unterminated-comment",
    ),
    pytest.param(
        "def @main(%x: float32) {\n  add(%x, %x)",
        2,
        14,
        "expected '}' closing the block (a block ends with one result expression), found end "
        "of input",
        id="unexpected-end",
    ),
    pytest.param(
        "def @main(%x: float32) {\n  add(%x, %x);\n}",
        2,
        14,
        "expected '}' closing the block (a block ends with one result expression), found ';'",
        id="unexpected-token",
    ),
    pytest.param(
        "def @main(%x: float32) {\n  add(%x %x)\n}",
        2,
        10,
        "expected ',' or ')' in the arguments of add, found '%x'",
        id="missing-comma",
    ),
    pytest.param(
        "def @main(%x: float32) { %x }\nfn () { 1f }",
        2,
        1,
        "expected 'def @name(...)' or end of input, found 'fn'",
        id="bare-fn-after-def",
    ),
    pytest.param(
        "def @main(%x: float32, %x: float32) { %x }",
        1,
        24,
        "duplicate parameter %x",
        id="duplicate-parameter",
    ),
    pytest.param(
        "def @main(%x: float32) {\n  %0 = exp(%x);\n  %0 = exp(%0);\n  %0\n}",
        3,
        3,
        "%0 is already defined in this block",
        id="duplicate-binding",
    ),
    pytest.param(
        "def @main(%x: float32) { sum(%x, axis=1, axis=2) }",
        1,
        42,
        "duplicate attribute axis",
        id="duplicate-attribute",
    ),
    pytest.param(
        "def @main(%x: float32) { sum(axis=1, %x) }",
        1,
        38,
        "positional argument after an attribute",
        id="positional-after-attribute",
    ),
    pytest.param(
        "def @main(%f: fn (float32) -> float32) { %f(1f, axis=1) }",
        1,
        49,
        "only op calls take attributes",
        id="attribute-on-function-call",
    ),
    pytest.param(
        "def @main(%x: float32) { add(%x, 1.5) }",
        1,
        34,
        "a float literal needs a dtype suffix: write 1.5f (float32) or 1.5f64",
        id="float-without-suffix",
    ),
    pytest.param(
        "def @main() { 256u8 }",
        1,
        15,
        "integer literal 256 is out of range for uint8",
        id="int-out-of-range",
    ),
    pytest.param(
        "def @main() { 1e39f }",
        1,
        15,
        "float literal 1e+39 is out of range for float32",
        id="float-out-of-range",
    ),
    pytest.param(
        "def @main() { 12abc }",
        1,
        15,
        "malformed number '12abc'",
        id="malformed-number",
    ),
    pytest.param(
        "def @main() { clip(1f, a_min=0f, a_max=1) }",
        1,
        30,
        "attribute values are plain numbers: write 0, not 0f",
        id="suffix-in-attribute",
    ),
    pytest.param(
        "def @main(Primitive=[1]) { 1f }",
        1,
        21,
        "function attribute Primitive=[1] must be a scalar",
        id="function-attribute-list",
    ),
    pytest.param(
        "def @main(%x: (float32)) { %x }",
        1,
        15,
        "a tuple type of one field needs a trailing comma: (T,)",
        id="one-tuple-type",
    ),
    pytest.param(
        "def @main(%c: bool) { if (%c) { 1f } }",
        1,
        38,
        "expected 'else' and a block: an if needs both branches, found '}'",
        id="if-no-else",
    ),
    pytest.param(
        "def @main() { let %x = 1f }",
        1,
        27,
        "expected ';' after the value of %x, found '}'",
        id="let-without-body",
    ),
    pytest.param(
        "def @main() { %0 = let %x = 1f; %x; %0 }",
        1,
        20,
        "a let is a statement: to use it as a value write { let %v = ...; result }",
        id="let-as-expression",
    ),
    pytest.param(
        'def @main() { "abc }',
        1,
        15,
        "unterminated string",
        id="unterminated-string",
    ),
    pytest.param(
        "def @main() { $ }",
        1,
        15,
        "unexpected character '$'",
        id="unexpected-character",
    ),
    pytest.param(
        "def @main() { const([[1, 2], [3]], int32) }",
        1,
        21,
        "bad const data for int32",
        id="ragged-const",
    ),
    pytest.param(
        "def @main() { const([1, 2], int32, shape=(3,)) }",
        1,
        21,
        "const data has shape (2,), not the stated shape (3,)",
        id="const-shape-mismatch",
    ),
    pytest.param(
        'def @main() { const("AACAPw==", float32) }',
        1,
        21,
        "const data given as base64 bytes needs its shape=(...)",
        id="bytes-const-without-shape",
    ),
    pytest.param(
        'def @main() { const("AACAP!==", float32, shape=(1,)) }',
        1,
        21,
        "const data is not valid base64",
        id="bytes-const-bad-base64",
    ),
    pytest.param(
        'def @main() { const("AACAPw==", float32, shape=(2,)) }',
        1,
        21,
        "const data holds 4 bytes; shape (2,) of float32 needs 8",
        id="bytes-const-wrong-length",
    ),
    pytest.param(
        'def @main() { const("AQI=", bool, shape=(2,)) }',
        1,
        21,
        "const data of bool holds bytes other than 0 and 1",
        id="bytes-const-bad-bool",
    ),
]


@pytest.mark.parametrize(("text", "line", "column", "message"), CASES)
def test_parse_error(text: str, line: int, column: int, message: str) -> None:
    with pytest.raises(ir.ParseError) as info:
        ir.parse(text, source_name="prog.txt")
    err = info.value
    assert (err.line, err.column) == (line, column), str(err)
    assert message in err.message
    # The text of the error: where, what, the offending line and a caret under the column.
    source_line = text.split("\n")[line - 1]
    assert str(err).startswith(f"prog.txt:{line}:{column}: {message}")
    assert str(err).endswith(f"\n  {source_line}\n  {' ' * (column - 1)}^")


def test_error_is_an_ir_error_with_a_span() -> None:
    with pytest.raises(ir.IRError) as info:
        ir.parse("def @main() {\n  nope(1f)\n}", source_name="m.txt")
    assert info.value.span == ir.Span(2, 3, "m.txt")


def test_parse_type_errors() -> None:
    with pytest.raises(ir.ParseError, match="bad dtype 'f32'"):
        ir.parse_type("Tensor[(1,), f32]")
    with pytest.raises(ir.ParseError, match="expected end of input after the type, found ','"):
        ir.parse_type("float32, float32")
    with pytest.raises(ir.ParseError, match="malformed dim expression 'n\\.m'"):
        ir.parse_type("Tensor[(n.m,), float32]")


def test_missing_main_is_fine() -> None:
    m = ir.parse("def @f(%x: float32) { %x }")
    assert list(m) == ["f"]
    assert "main" not in m
