"""Function attributes are typed fields (``ir.FunctionAttrs``) printed and parsed as before:
``Primitive=1``, ``Reshape=1``, ``Steps="..."`` and any other scalar, in the same text; a
``Steps`` string is read and checked once, by the parser, with errors at the step at fault."""

from __future__ import annotations

import textwrap

import pytest

import ir
from ir import Dest, FunctionAttrs, Step

FUSED = textwrap.dedent("""\
    def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] {
      %2 = fn (%p0: Tensor[(n, 4), float32], Primitive=1, Steps="0 exp -> t0; 1 add -> o0; 2 multiply -> o0") -> Tensor[(n, 4), float32] {
        %0 = exp(%p0);
        %1 = add(%0, %p0);
        multiply(%1, %0)
      };
      %2(%x)
    }""")

RESHAPE = textwrap.dedent("""\
    def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(4, n), float32] {
      %0 = fn (%p0: Tensor[(n, 4), float32], Primitive=1, Reshape=1) -> Tensor[(4, n), float32] {
        reshape(%p0, newshape=[4, n])
      };
      %0(%x)
    }""")


def _inner(module: ir.Module) -> ir.Function:
    """The function the main function calls."""
    body = module.main.body
    assert isinstance(body, ir.Call) and isinstance(body.callee, ir.Function)
    return body.callee


def _text(module: ir.Module) -> str:
    return ir.text.module_to_text(module, show_types=False)


def test_a_step_plan_parses_to_typed_steps_and_prints_back_the_same() -> None:
    module = ir.parse(FUSED)
    attrs = _inner(module).attrs
    assert attrs == FunctionAttrs(
        primitive=True,
        steps=(
            Step(0, "exp", (Dest("tmp", 0),)),
            Step(1, "add", (Dest("out", 0),)),
            Step(2, "multiply", (Dest("out", 0),)),
        ),
    )
    assert _text(module) == FUSED
    assert _inner(module).is_primitive


def test_reshape_and_other_attributes_parse_to_fields_and_print_back() -> None:
    module = ir.parse(RESHAPE)
    assert _inner(module).attrs == FunctionAttrs(primitive=True, reshape=True)
    assert _text(module) == RESHAPE
    text = 'def @main(%p, Primitive=1, Name="f", Scale=0.5, Flag=True) {\n  %p\n}'
    again = ir.parse(text)
    assert again.main.attrs.others == (("Name", "f"), ("Scale", 0.5), ("Flag", True))
    assert _text(again) == text


def test_a_step_of_several_results_and_an_empty_plan_round_trip() -> None:
    steps = (Step(0, "split", (Dest("tmp", 0), Dest("out", 1))), Step(3, "exp", (Dest("out", 0),)))
    assert ir.text.steps_text(steps) == "0 split -> t0,o1; 3 exp -> o0"
    assert ir.text.parse_steps("0 split -> t0,o1; 3 exp -> o0") == (list(steps), [0, 18])
    assert ir.text.parse_steps("") == ([], [])


def test_facts_built_in_code_print_as_attributes() -> None:
    p = ir.Var("p0", ir.TensorType((4,), "float32"))
    steps = (Step(0, "exp", (Dest("tmp", 0),)), Step(1, "negative", (Dest("out", 0),)))
    body = ir.call("negative", ir.call("exp", p))
    fn = ir.function([p], body, attrs=FunctionAttrs(primitive=True, steps=steps))
    assert ir.step_calls(fn.body, steps) == [body.args[0], body]
    text = _text(ir.Module({"main": fn}))
    assert 'Primitive=1, Steps="0 exp -> t0; 1 negative -> o0"' in text
    assert ir.structurally_equal(ir.parse(text).main, fn)
    # The mapping form of ir.function names the same fields.
    assert ir.function([p], body, attrs={"Primitive": 1, "Steps": steps}).attrs == fn.attrs


def test_facts_are_checked_when_built() -> None:
    with pytest.raises(ir.IRError, match=r"only a primitive function \(Primitive=1\) has"):
        FunctionAttrs(steps=(Step(0, "exp", (Dest("out", 0),)),))
    with pytest.raises(ir.IRError, match="'out' or 'tmp'"):
        Dest("scratch", 0)
    with pytest.raises(ir.IRError, match="Primitive=2 must be 1"):
        FunctionAttrs.of({"Primitive": 2})
    with pytest.raises(ir.IRError, match=r"ir\.parse reads the text form"):
        FunctionAttrs.of({"Primitive": 1, "Steps": "0 exp -> o0"})
    p = ir.Var("p0", ir.TensorType((4,), "float32"))
    with pytest.raises(ir.IRError, match="are not FunctionAttrs"):
        ir.Function((p,), p, None, {"Primitive": 1})  # type: ignore[arg-type]


def _steps_line(steps: str) -> str:
    return FUSED.replace("0 exp -> t0; 1 add -> o0; 2 multiply -> o0", steps)


# (the Steps string, the offset in it the caret points at, the message). None: at the string.
STEPS_ERRORS = [
    ("0 exp => t0", 0, "the Steps attribute has a malformed step '0 exp => t0': expected ' -> '"),
    ("0 exp -> t0; -1 add -> o0", 13, "expected the number of an op call of the body first"),
    ("0 exp -> t0;1 add", 12, "malformed step '1 add': expected ' -> ' after the op's name"),
    ("0 exp -> x0", 0, "expected a destination, found 'x0'"),
    ("0 exp -> t0; 7 add -> o0", 13, "the Steps attribute names call 7, but the body has 3 op"),
    ("0 exp -> t0; 2 add -> o0", 13, "says call 2 is add, but it is multiply"),
    ("0 exp -> t0; 0 exp -> t0", 13, "runs call 0 (exp) twice"),
    ("0 exp -> t1; 1 add -> o0; 2 multiply -> o0", 0, "uses scratch slot t1 before t0"),
    ("0 exp -> t0; 2 multiply -> o0", None, "never runs call 1 (add)"),
    ("1 add -> o0; 0 exp -> t0; 2 multiply -> o0", 0, "runs add (step 0) before exp (step 1)"),
]


@pytest.mark.parametrize(("steps", "offset", "message"), STEPS_ERRORS)
def test_a_wrong_steps_string_is_a_parse_error_at_the_step(
    steps: str, offset: int | None, message: str
) -> None:
    text = _steps_line(steps)
    with pytest.raises(ir.ParseError) as info:
        ir.parse(text)
    line = text.split("\n")[1]
    start = line.index('Steps="') + len("Steps=")  # the string's opening quote, 0-based
    column = start + 1 if offset is None else start + 2 + offset
    assert (info.value.line, info.value.column) == (2, column)
    assert message in info.value.message


@pytest.mark.parametrize(
    ("replace", "by", "column_of", "message"),
    [
        ("Primitive=1", "Primitive=2", "2,", "function attribute Primitive=2 must be 1 (or 0)"),
        ("Primitive=1", "Primitive=1.0", "1.0", "function attribute Primitive=1.0 must be 1"),
        ('Steps="0', 'Steps=3, X="0', "3,", "function attribute Steps=3 must be a string"),
        (
            "Primitive=1, ",
            "",
            "Steps",
            "Steps is a step plan, which only a primitive function (Primitive=1) has",
        ),
    ],
)
def test_a_wrong_primitive_or_steps_value_is_a_parse_error_at_it(
    replace: str, by: str, column_of: str, message: str
) -> None:
    text = FUSED.replace(replace, by)
    with pytest.raises(ir.ParseError) as info:
        ir.parse(text)
    line = text.split("\n")[1]
    assert (info.value.line, info.value.column) == (2, line.index(column_of) + 1)
    assert info.value.message == message or message in info.value.message


def test_a_steps_string_with_an_escape_is_located_at_the_string() -> None:
    text = _steps_line("0 exp -> t0; 1 a\\u0064d -> o0; 2 multiply -> t9")
    with pytest.raises(ir.ParseError, match="uses scratch slot t9 before t1") as info:
        ir.parse(text)
    assert info.value.column == text.split("\n")[1].index('"0 exp') + 1
