"""The opcode table (``vm/opcodes.py``): one entry per opcode, naming every part's rule, and no
part of the VM keeping a dispatch of its own."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import vm.decode
import vm.instruction_checks
import vm.kind_rules
import vm.sanitize_rules
import vm.straight_lines
from vm.isa import SIGNATURES, Kind, Op
from vm.opcodes import OPCODES

VM = Path(vm.decode.__file__).parent
#: The modules that act per opcode: each finds its rule in the table, none names an opcode.
TABLE_READERS = (
    "backend.py",
    "decode.py",
    "instruction_checks.py",
    "interpreter.py",
    "kind_rules.py",
    "profiler.py",
    "register_kinds.py",
    "sanitize_rules.py",
    "sanitizer.py",
    "straight_lines.py",
    "validate.py",
)


def test_every_opcode_has_one_entry() -> None:
    assert list(OPCODES) == list(Op)
    assert all(OPCODES[op].op is op for op in Op)


@pytest.mark.parametrize("op", list(Op), ids=lambda op: op.name.lower())
def test_an_entry_names_its_rules_in_their_modules(op: Op) -> None:
    spec = OPCODES[op]
    assert spec.operands == SIGNATURES[op]
    assert spec.mnemonic == op.name.lower()
    for rule, module, optional in (
        (spec.decode, vm.decode, False),
        (spec.kinds, vm.kind_rules, False),
        (spec.sanitize, vm.sanitize_rules, False),
        (spec.line, vm.straight_lines, True),
        (spec.check, vm.instruction_checks, True),
    ):
        if rule is None:
            assert optional, f"{op.name}: a rule is missing"
            continue
        assert inspect.getmodule(rule) is module, (op, rule)
        assert getattr(module, rule.__name__) is rule and not rule.__name__.startswith("_")


@pytest.mark.parametrize("op", list(Op), ids=lambda op: op.name.lower())
def test_the_control_flow_facts_match_the_operand_kinds(op: Op) -> None:
    spec = OPCODES[op]
    kinds = spec.operands
    assert (spec.target is not None) == (Kind.TARGET in kinds)
    if spec.target is not None:
        assert kinds[spec.target] is Kind.TARGET
    assert (spec.callee is not None) == (Kind.FUNC in kinds)
    if spec.callee is not None:
        assert kinds[spec.callee] is Kind.FUNC and kinds[spec.callee + 1] is Kind.SRCS
    # What ends a block is what may end a function (validation) and where paths stop.
    assert spec.ends == (op in (Op.JUMP, Op.RET, Op.TAIL_CALL))


@pytest.mark.parametrize("name", TABLE_READERS)
def test_no_part_dispatches_on_opcodes_itself(name: str) -> None:
    text = (VM / name).read_text()
    assert not re.findall(r"\bOp\.[A-Z_]+", text), f"{name} names opcodes: use vm/opcodes.py"


def test_the_profiler_groups_the_same_instructions_as_shape_work() -> None:
    from vm.profiler import SHAPE_KINDS

    assert {"shape_of", "dim", "shape_program", "shape_func", "check", "check_dim"} == SHAPE_KINDS


def _runtime_imports(name: str) -> set[str]:
    """The ``vm`` modules ``vm/<name>`` imports when it runs (``if TYPE_CHECKING:`` blocks,
    which only the type checker reads, left out)."""
    tree = ast.parse((VM / name).read_text())
    found: set[str] = set()

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test) == "TYPE_CHECKING":
                continue
            if isinstance(child, ast.ImportFrom) and child.level == 1:
                found.update([child.module] if child.module else [a.name for a in child.names])
            walk(child)

    walk(tree)
    return found


@pytest.mark.parametrize(
    "name",
    [
        "decode.py",
        "kind_rules.py",
        "instruction_checks.py",
        "sanitize_rules.py",
        "straight_lines.py",
    ],
)
def test_the_table_sits_above_its_rules(name: str) -> None:
    """A rule module imports neither the table nor the part that applies its rules (only its
    type, for the checker): the table can name the rules without an import cycle."""
    assert not _runtime_imports(name) & {"opcodes", "register_kinds", "sanitizer", "straight"}


def test_the_interpreter_knows_the_fast_paths_only_as_a_backend() -> None:
    assert not _runtime_imports("interpreter.py") & {"straight", "fresh_results", "opcodes"}
    assert "getrefcount" not in (VM / "interpreter.py").read_text()
