"""The opcode table: one entry per opcode, naming everything the VM's parts know about it.

Each part that treats opcodes differently finds its rule here instead of keeping its own
dispatch: the operand kinds (``isa.SIGNATURES``, the file format; listings print them), the
closure a decoder makes (``decode.py``), what the instruction reads and writes in register kinds
(``kind_rules.py``, run by ``register_kinds.py``), the checks validation makes beyond the operand
kinds (``instruction_checks.py``), the memory sanitizer's checks around its step
(``sanitize_rules.py``), the source line a straight-line function gets (``straight_lines.py``),
and the facts of control flow, calls, kernels and the profiler's grouping.

Adding an opcode is one entry here and one rule in each of those modules (a test checks that
every opcode has an entry and every entry its rules); the number is appended to ``isa.Op``.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import decode as dec
from . import instruction_checks as chk
from . import kind_rules as kinds
from . import sanitize_rules as san
from . import straight_lines as lines
from .decode import Decoder
from .instruction_checks import InstructionCheck
from .isa import SIGNATURES, Kind, Op
from .kind_rules import KindRule
from .sanitize_rules import SanitizeRule
from .straight_lines import LineRule


@dataclass(frozen=True, slots=True)
class Opcode:
    """What the VM's parts need to know about one opcode."""

    op: Op
    """The opcode."""
    decode: Decoder
    """Makes the instruction's closure ``step(regs) -> next pc`` (``decode.py``)."""
    kinds: KindRule
    """Checks the register kinds it reads and sets the ones it writes (``kind_rules.py``)."""
    sanitize: SanitizeRule
    """Wraps its step in the memory sanitizer's checks (``sanitize_rules.py``)."""
    line: LineRule | None = None
    """Its lines in a straight-line function; None: the line calls its closure."""
    check: InstructionCheck | None = None
    """What validation checks beyond the operand kinds (arities against the tables, ranges)."""
    target: int | None = None
    """The operand that is a jump target, if it jumps."""
    callee: int | None = None
    """The operand naming the function it calls (its arguments are the next operand)."""
    ends: bool = False
    """True if execution never goes on to the next instruction (a block ends here)."""
    shape_work: bool = False
    """Counted by the profiler as shape computation."""

    @property
    def operands(self) -> tuple[Kind, ...]:
        """The kind of each operand, in order (the file format's, ``isa.SIGNATURES``)."""
        return SIGNATURES[self.op]

    @property
    def mnemonic(self) -> str:
        """The name listings and reports use (``alloc_tensor``)."""
        return self.op.name.lower()


_ENTRIES = (
    Opcode(Op.MOVE, dec.move, kinds.move, san.not_killed, line=lines.move),
    Opcode(Op.LOAD_CONST, dec.load_const, kinds.load_const, san.not_killed, line=lines.load_const),
    Opcode(Op.LOAD_INT, dec.load_int, kinds.load_int, san.not_killed, line=lines.load_int),
    Opcode(Op.CALL, dec.call, kinds.call, san.call, callee=1, check=chk.call),
    Opcode(Op.INVOKE, dec.invoke, kinds.invoke, san.invoke, line=lines.invoke, check=chk.invoke),
    Opcode(
        Op.ALLOC_STORAGE,
        dec.alloc_storage,
        kinds.alloc_storage,
        san.alloc_storage,
        check=chk.alloc_storage,
    ),
    Opcode(Op.ALLOC_TENSOR, dec.alloc_tensor, kinds.alloc_tensor, san.alloc_tensor),
    Opcode(Op.SHAPE_OF, dec.shape_of, kinds.shape_of, san.not_killed, shape_work=True),
    Opcode(
        Op.DIM, dec.dim, kinds.dim, san.not_killed, line=lines.dim, check=chk.dim, shape_work=True
    ),
    Opcode(Op.RESHAPE, dec.reshape, kinds.reshape, san.reshape),
    Opcode(Op.TUPLE, dec.make_tuple, kinds.make_tuple, san.alive, line=lines.make_tuple),
    Opcode(Op.GET_ITEM, dec.get_item, kinds.get_item, san.get_item, line=lines.get_item),
    Opcode(Op.JUMP, dec.jump, kinds.jump, san.not_killed, target=0, ends=True),
    Opcode(Op.JUMP_IF_NOT, dec.jump_if_not, kinds.jump_if_not, san.alive, target=1),
    Opcode(Op.RET, dec.ret, kinds.ret, san.alive, line=lines.ret, ends=True),
    Opcode(Op.KILL, dec.kill, kinds.kill, san.kill),
    Opcode(
        Op.SHAPE_PROGRAM,
        dec.shape_program,
        kinds.shape_program,
        san.not_killed,
        check=chk.shape_program,
        shape_work=True,
    ),
    Opcode(Op.SHAPE_FUNC, dec.shape_func, kinds.shape_func, san.alive, shape_work=True),
    Opcode(Op.CHECK, dec.check, kinds.check, san.not_killed, shape_work=True),
    Opcode(
        Op.CHECK_DIM,
        dec.check_dim,
        kinds.check_dim,
        san.not_killed,
        line=lines.check_dim,
        check=chk.check_dim,
        shape_work=True,
    ),
    Opcode(
        Op.TAIL_CALL,
        dec.tail_call,
        kinds.tail_call,
        san.tail_call,
        callee=0,
        ends=True,
        check=chk.tail_call,
    ),
    # Not counted as shape computation: the profile never has, and reports stay comparable.
    Opcode(
        Op.CHECK_VALUES,
        dec.check_values,
        kinds.check_values,
        san.not_killed,
        line=lines.check_values,
    ),
    Opcode(Op.APPEND, dec.append, kinds.append, san.alive, check=chk.append),
)

#: The entry of each opcode.
OPCODES: dict[Op, Opcode] = {entry.op: entry for entry in _ENTRIES}
