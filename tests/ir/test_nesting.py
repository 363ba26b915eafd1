"""The nesting limit (ir.MAX_NESTING): deep programs work below it and fail fast above it."""

from __future__ import annotations

import subprocess
import sys

import pytest

import ir
from ir import MAX_NESTING, IRError, ParseError, call, function, nesting_depth
from ir.text.printer import expr_to_text, module_to_text
from tests.counting import assert_linear, python_calls

HEAD = "def @main(%x: Tensor[(n,), float32]) -> Tensor[(n,), float32] {"
TOO_DEEP = f"nested too deeply.*more than {MAX_NESTING} levels.*MAX_NESTING.*let"


def _x() -> ir.Var:
    return ir.Var("x", ir.TensorType((ir.sym("n"),), "float32"))


def nested_text(levels: int) -> str:
    """``add(add(...add(%x, 1f)..., 1f), 1f)``: ``levels`` calls written inside each other."""
    return f"{HEAD}\n  " + "add(" * levels + "%x" + ", 1f)" * levels + "\n}"


def chain_text(levels: int) -> str:
    """``levels`` graph bindings, each using the one before: no brackets nest, the IR does."""
    lines = [HEAD, "  %0 = add(%x, 1f);"]
    lines += [f"  %{i} = add(%{i - 1}, 1f);" for i in range(1, levels)]
    return "\n".join([*lines, f"  %{levels - 1}", "}"])


def api_chain(levels: int) -> tuple[ir.Var, ir.Expr]:
    x = _x()
    e: ir.Expr = x
    for _ in range(levels):
        e = call("negative", e)
    return x, e


#: The Python calls per level of nesting that a fast error may make: the walks make 3 to 11; a
#: walk quadratic in the depth makes thousands. Counted, not timed: no bound on seconds.
CALLS_PER_LEVEL = 50


def bounded(f, *args):  # type: ignore[no-untyped-def]
    """``f(*args)`` (its result, or what it raised), after at most ``CALLS_PER_LEVEL`` Python
    calls per level of ``MAX_NESTING``."""
    outcome: list = []  # type: ignore[type-arg]

    def run() -> None:
        try:
            outcome.append((f(*args), None))
        except Exception as e:
            outcome.append((None, e))

    calls = python_calls(run)
    assert calls <= CALLS_PER_LEVEL * MAX_NESTING, f"{calls} Python calls"
    result, error = outcome[0]
    if error is not None:
        raise error
    return result


def test_nesting_counts_levels_and_not_let_bodies() -> None:
    x, e = api_chain(5)
    assert nesting_depth(x) == 1
    assert nesting_depth(e) == 6
    c = ir.Var("c", ir.scalar("bool"))
    assert nesting_depth(ir.If(c, e, x)) == 7
    body: ir.Expr = x
    for i in range(1000):  # a let chain is one level, however long
        body = ir.Let(ir.Var(f"v{i}"), call("exp", x), body)
    assert nesting_depth(body) == 3
    assert nesting_depth(function([x], ir.Let(ir.Var("v"), e, x))) == 8


def test_text_nested_just_below_the_limit_parses_and_prints() -> None:
    m = ir.parse(nested_text(MAX_NESTING - 2))  # the function is nested 10,000 levels: the limit
    assert nesting_depth(m.main) == MAX_NESTING
    assert ir.structurally_equal(ir.parse(module_to_text(m)), m)


def test_text_nested_above_the_limit_is_a_fast_parse_error_at_the_bracket() -> None:
    text = nested_text(MAX_NESTING + 1)
    with pytest.raises(ParseError, match=TOO_DEEP) as info:
        bounded(ir.parse, text)
    # The body's '{' and 9,999 'add(' are open: the 10,000th 'add(' opens one too many.
    assert (info.value.line, info.value.column) == (2, 3 + 4 * (MAX_NESTING - 1) + 3)
    assert "brackets" in info.value.message


def test_graph_bindings_nested_above_the_limit_are_a_parse_error_at_the_binding() -> None:
    text = chain_text(MAX_NESTING - 2)
    assert nesting_depth(ir.parse(text).main) == MAX_NESTING
    below = python_calls(lambda: ir.parse(text))
    text = chain_text(MAX_NESTING + 5)
    with pytest.raises(ParseError, match=TOO_DEEP) as info:
        ir.parse(text)

    def failing() -> None:
        with pytest.raises(ParseError, match=TOO_DEEP):
            ir.parse(text)

    # Reading 10,000 lines is most of it (about 135 Python calls a line); the check adds little.
    assert python_calls(failing) < 1.1 * below
    assert "in @main" in info.value.message
    # %k is nested k + 2 levels (%x and 1f are one level): %9999 is the first beyond.
    assert info.value.line == 2 + MAX_NESTING - 1
    assert info.value.source_line == f"  %{MAX_NESTING - 1} = add(%{MAX_NESTING - 2}, 1f);"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("(" * (MAX_NESTING + 1) + "%x" + ",)" * (MAX_NESTING + 1), id="tuples"),
        pytest.param("{ " * (MAX_NESTING + 1) + "%x" + " }" * (MAX_NESTING + 1), id="blocks"),
        pytest.param(
            "if (True) { " * (MAX_NESTING + 1) + "%x" + " } else { %x }" * (MAX_NESTING + 1),
            id="ifs",
        ),
    ],
)
def test_other_nestings_above_the_limit_are_fast_parse_errors(text: str) -> None:
    with pytest.raises(ParseError, match=TOO_DEEP):
        bounded(ir.parse, f"{HEAD}\n  {text}\n}}")


def test_deep_dims_and_negations_do_not_recurse_out() -> None:
    depth = MAX_NESTING + 1
    with pytest.raises(ParseError, match=TOO_DEEP):
        bounded(ir.parse_type, "Tensor[(" + "(" * depth + "n" + ")" * depth + ",), float32]")
    ty = ir.parse_type("Tensor[(" + "(" * 1000 + "n + 1" + ")" * 1000 + ",), float32]")
    assert ty == ir.TensorType((ir.sym("n") + 1,), "float32")
    ty = ir.parse_type("Tensor[(n + " + "- " * 50_000 + "1,), float32]")  # even: + 1
    assert ty == ir.TensorType((ir.sym("n") + 1,), "float32")


def test_api_built_programs_at_and_above_the_limit() -> None:
    x, below = api_chain(MAX_NESTING - 1)
    ir.check_nesting(below)
    y, again = api_chain(MAX_NESTING - 2)  # the function adds a level
    x2, fewer = api_chain(MAX_NESTING - 3)
    assert ir.structurally_equal(function([x], below.args[0]), function([y], again))  # type: ignore[attr-defined]
    assert not ir.structurally_equal(function([y], again), function([x2], fewer))
    assert ir.ExprMutator().visit(function([x], below)).body is below  # type: ignore[attr-defined]
    assert expr_to_text(below).count("\n") == MAX_NESTING - 2
    _, above = api_chain(MAX_NESTING)
    for check in (
        lambda: ir.check_nesting(above, "the chain"),
        lambda: ir.structurally_equal(above, above),
        lambda: expr_to_text(above),
        lambda: module_to_text(ir.Module({"main": function([x], above)})),
    ):
        with pytest.raises(IRError, match=TOO_DEEP):
            bounded(check)
    with pytest.raises(IRError, match="nested too deeply in the chain"):
        ir.check_nesting(above, "the chain")


def test_a_100000_let_chain_is_one_level_and_is_walked_iteratively() -> None:
    x = _x()
    body: ir.Expr = x
    for i in range(100_000):
        body = ir.Let(ir.Var(f"v{i}"), call("exp", x), body)
    assert nesting_depth(body) == 3
    half = ir.let_chain(body)[0][50_000]  # the inner 50,000 lets
    assert_linear(lambda n: nesting_depth({50_000: half, 100_000: body}[n]), 50_000)  # counted
    fn = function([x], body)
    seen: list[ir.Let] = []

    class Lets(ir.ExprVisitor):
        pass

    class Count(ir.ExprVisitor):
        def visit_call(self, c: ir.Call) -> None:
            seen.append(c)  # type: ignore[arg-type]
            super().visit_call(c)

    Lets().visit(fn)
    Count().visit(fn)
    assert len(seen) == 100_000

    class Rename(ir.ExprMutator):
        def visit_var(self, var: ir.Var) -> ir.Expr:
            return ir.Var(var.name_hint + "_", var.type_annotation)

    renamed = Rename().visit(fn)
    assert ir.structurally_equal(renamed, fn)
    assert not ir.structurally_equal(renamed.body, fn.body)  # type: ignore[attr-defined]
    assert ir.ExprMutator().visit(fn) is fn


def test_nested_ifs_print_and_parse_back_past_the_default_recursion_limit() -> None:
    # Each if level takes several printer frames: 600 levels need more than Python's default
    # limit of 1,000 frames, which the printer raises as the other walks do (ir/nesting.py).
    script = (
        "import ir\n"
        "x = ir.Var('x', ir.TensorType((ir.sym('n'),), 'float32'))\n"
        "c = ir.Var('c', ir.TensorType((), 'bool'))\n"
        "e = x\n"
        "for _ in range(600):\n"
        "    e = ir.If(c, ir.call('add', e, ir.const(1.0, 'float32')), x)\n"
        "m = ir.Module({'main': ir.function([x, c], e)})\n"
        "text = str(m)\n"
        "assert ir.structurally_equal(ir.parse(text), m)\n"
        "print(text.count('if ('))\n"
    )
    # A fresh interpreter: this process's limit may already be raised by earlier tests.
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["600"]
