"""Shape programs: integer arithmetic over symbol values, stored as data and run without sympy.

A program is a small SSA list. Values ``0 .. num_inputs-1`` are its inputs (bound symbols such as
``n``); each node appends one value computed from earlier ones; ``outputs`` lists what the
``shape_program`` instruction writes: an int (one value index) or a shape (a tuple of indices).

Division and modulo have floor semantics (Python's ``//`` and ``%``), as in the IR. Comparisons
yield 0 or 1, so a program can also compute branch conditions.

``compile`` turns a program into one Python function, once, at decode time, by generating its
source (``vm/codegen.py``): one statement per node, constants inlined as int literals. For
``(n) -> [4 * n, (n,)]``::

    def run(inputs):
        v0, = inputs
        v2 = 4 * v0
        return [v2, (v0,)]

A call costs ~110 ns (the loop over ``(function, a, b)`` triples it replaces: ~470 ns). The
source holds only generated names (``v0``, ``v1`` ...), ``repr`` of exact ints and the fixed text
of ``_TEMPLATES``; nothing of the program's own data is ever pasted in as text.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .codegen import UnsafeSourceError, int_literal, make_function
from .errors import FormatError, RunTimeShapeError


def _cmp(f: Callable[[Any, Any], bool]) -> Callable[[int, int], int]:
    return lambda a, b: int(f(a, b))


#: Binary node ops and their Python function (floor semantics for // and %).
BINARY: dict[str, Callable[[int, int], int]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "min": min,
    "max": max,
    "eq": _cmp(operator.eq),
    "ne": _cmp(operator.ne),
    "lt": _cmp(operator.lt),
    "le": _cmp(operator.le),
    "gt": _cmp(operator.gt),
    "ge": _cmp(operator.ge),
}
_INFIX = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "floordiv": "//",
    "mod": "%",
    "eq": "==",
    "ne": "!=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
}
_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")

#: A node: ``("const", value)``, ``("neg", a)`` or ``(binary_op, a, b)``.
Node = tuple[Any, ...]
#: An output: one value index (an int result) or a tuple of them (a shape result).
Output = int | tuple[int, ...]

#: Limits that keep a corrupt file from making the loader or the VM do unbounded work.
MAX_NODES = 1 << 16
MAX_INT = 1 << 62
#: Most bits any node may need, given inputs of ``INPUT_BITS`` bits (``value_bits``): Python
#: ints are unbounded, and a chain of squarings would otherwise grow to gigabytes.
MAX_BITS = 1 << 17
#: What an input may hold: a dim (numpy's are int64), an immediate int (below 2**62) or a
#: shape program's output (outputs that could reach 2**63 are checked at run time).
INPUT_BITS = 63
#: Outputs of at least this magnitude stop the run (they are never a size or a dim numpy takes).
OUTPUT_LIMIT = 1 << 63


def value_bits(prog: ShapeProgram) -> list[int]:
    """An upper bound on the bits of each value's magnitude, inputs of ``INPUT_BITS`` bits."""
    bits = [INPUT_BITS] * prog.num_inputs
    for node in prog.nodes:
        op = node[0]
        if op == "const":
            bits.append(abs(node[1]).bit_length() + 1)
        elif op == "neg":
            bits.append(bits[node[1]])
        else:
            a, b = bits[node[1]], bits[node[2]]
            if op in ("add", "sub"):
                bits.append(max(a, b) + 1)
            elif op == "mul":
                bits.append(a + b)
            elif op == "floordiv":
                bits.append(a)  # |a // b| <= ceil(|a / b|) <= |a| for an int b != 0
            elif op == "mod":
                bits.append(b)  # |a % b| < |b|
            elif op in ("min", "max"):
                bits.append(max(a, b))
            else:  # a comparison: 0 or 1
                bits.append(1)
    return bits


@dataclass(frozen=True)
class ShapeProgram:
    """A compiled integer program over symbol values."""

    num_inputs: int
    """How many input values (symbols) it reads."""
    nodes: tuple[Node, ...]
    """The SSA nodes; node ``i`` defines value ``num_inputs + i``."""
    outputs: tuple[Output, ...]
    """What it returns, in order: an int per index, a tuple of ints per tuple of indices."""
    input_names: tuple[str, ...] = ()
    """Names of the inputs for the listing (``n``, ``m``); optional."""

    def validate(self, where: str = "shape program") -> None:
        """Raise FormatError naming the node or output that is malformed."""
        _check_int(self.num_inputs, f"{where}: num_inputs", 0, MAX_NODES)
        if len(self.nodes) > MAX_NODES:
            raise FormatError(f"{where}: {len(self.nodes)} nodes is more than {MAX_NODES}")
        count = self.num_inputs
        for i, node in enumerate(self.nodes):
            what = f"{where}: node {i} {node!r}"
            if not isinstance(node, tuple) or not node or not isinstance(node[0], str):
                raise FormatError(f"{what} is not (op, operands...)")
            op = node[0]
            if op == "const":
                if len(node) != 2:
                    raise FormatError(f"{what}: const takes one value")
                _check_int(node[1], what, -MAX_INT, MAX_INT)
            elif op == "neg" or op in BINARY:
                arity = 1 if op == "neg" else 2
                if len(node) != arity + 1:
                    raise FormatError(f"{what}: {op} takes {arity} operand(s)")
                for a in node[1:]:
                    _check_int(a, f"{what}: operand", 0, count - 1)
            else:
                raise FormatError(f"{what}: unknown op {op!r}")
            count += 1
        if len(self.input_names) not in (0, self.num_inputs):
            raise FormatError(
                f"{where}: {len(self.input_names)} input names for {self.num_inputs} inputs"
            )
        for out in self.outputs:
            for idx in out if isinstance(out, tuple) else (out,):
                _check_int(idx, f"{where}: output", 0, count - 1)
        bits = value_bits(self)
        worst = max(bits, default=0)
        if worst > MAX_BITS:
            first = bits.index(worst) - self.num_inputs
            raise FormatError(
                f"{where}: node {first} may compute an integer of {worst} bits "
                f"(the limit is {MAX_BITS})"
            )

    def compile(self) -> Callable[[Sequence[int]], list[Any]]:
        """A function from the input values to the list of outputs (ints and shape tuples).

        The program becomes generated Python, one statement per node (see the module doc);
        the program must be valid (``validate``), and the generator refuses anything else with
        an ``UnsafeSourceError``.
        """
        source = generate_source(self)
        return make_function(source, self._namespace(), "run", ("inputs",))

    def compile_step(self, ins: Sequence[int], outs: Sequence[int], nxt: int) -> Callable[..., int]:
        """The ``shape_program`` instruction over registers (``generate_step_source``): reads
        ``r[i]`` for ``ins``, writes ``r[o]`` for ``outs``, returns ``nxt``."""
        source = generate_step_source(self, ins, outs, nxt)
        return make_function(source, self._namespace(), "step", ("r",))

    def _namespace(self) -> dict[str, Any]:
        return {
            "ZeroDivisionError": ZeroDivisionError,
            "fail": self._division_error,
            "huge": self._overflow_error,
        }

    def _overflow_error(self, inputs: Sequence[int]) -> RunTimeShapeError:
        return RunTimeShapeError(
            f"shape program {self.format()} computed an integer of 2**63 or more in magnitude "
            f"with inputs {tuple(inputs)}"
        )

    def _division_error(self, inputs: Sequence[int]) -> RunTimeShapeError:
        # The listing is built only on error: it is text, and long for a large program.
        return RunTimeShapeError(
            f"division by zero in shape program {self.format()} with inputs {tuple(inputs)}"
        )

    def format(self) -> str:
        """The program as text, ``(n, m) -> [n * 4, (n, m + 1)]``."""
        names = list(self.input_names) or [f"s{i}" for i in range(self.num_inputs)]
        text: list[str] = list(names)
        for node in self.nodes:
            op = node[0]
            if op == "const":
                text.append(str(node[1]))
            elif op == "neg":
                text.append(f"-({text[node[1]]})")
            elif op in _INFIX:
                text.append(f"({text[node[1]]} {_INFIX[op]} {text[node[2]]})")
            else:
                text.append(f"{op}({_strip(text[node[1]])}, {_strip(text[node[2]])})")

        def out(o: Output) -> str:
            if isinstance(o, tuple):
                return (
                    "(" + ", ".join(_strip(text[i]) for i in o) + ("," if len(o) == 1 else "") + ")"
                )
            return _strip(text[o])

        return f"({', '.join(names)}) -> [{', '.join(out(o) for o in self.outputs)}]"


def _strip(s: str) -> str:
    return s[1:-1] if s.startswith("(") and s.endswith(")") else s


#: Source templates of the node ops: the only operator text generated code contains. ``min``,
#: ``max`` and the comparisons (which yield the ints 0 and 1) are conditional expressions: no
#: name lookup and no call, ~15 ns where ``min(a, b)`` costs ~90 ns and ``int(a < b)`` ~55 ns.
_TEMPLATES: dict[str, str] = {
    "neg": "-{a}",
    **{op: f"{{a}} {sym} {{b}}" for op, sym in _INFIX.items() if op not in _COMPARISONS},
    **{op: f"1 if {{a}} {_INFIX[op]} {{b}} else 0" for op in _COMPARISONS},
    "min": "{a} if {a} <= {b} else {b}",
    "max": "{a} if {a} >= {b} else {b}",
}


def generate_source(prog: ShapeProgram) -> str:
    """The Python source of ``def run(inputs)`` computing ``prog``'s outputs (``_generate``)."""
    n_in, body, outs, divides = _generate(prog)
    names = [f"v{k}" for k in range(n_in)]
    lines = ["def run(inputs):"]
    if n_in:
        lines.append("    " + ", ".join(names) + ("," if n_in == 1 else "") + " = inputs")
    lines += _guarded(body, divides, "inputs")
    lines += _bounded(prog, "inputs")
    lines.append(f"    return [{', '.join(outs)}]")
    return "\n".join(lines) + "\n"


def generate_step_source(
    prog: ShapeProgram, ins: Sequence[int], outs: Sequence[int], nxt: int
) -> str:
    """The source of ``def step(r)``: the ``shape_program`` instruction itself, reading its
    inputs from registers ``ins`` and writing its outputs to registers ``outs``, then returning
    the next pc ``nxt``. No input list, no output list, no second call: ~0.3 us less per
    instruction than ``run`` called from a closure."""
    n_in, body, values, divides = _generate(prog)
    if len(ins) != n_in or len(outs) != len(values):
        raise UnsafeSourceError("registers do not match the program's inputs and outputs")
    reg = [int_literal(_int_in(k, "register", 0, MAX_INT)) for k in (*ins, *outs)]
    lines = ["def step(r):"]
    lines += [f"    v{k} = r[{reg[k]}]" for k in range(n_in)]
    inputs = "(" + "".join(f"v{k}, " for k in range(n_in)) + ")"
    lines += _guarded(body, divides, inputs)
    lines += _bounded(prog, inputs)
    lines += [f"    r[{reg[n_in + j]}] = {v}" for j, v in enumerate(values)]
    lines.append(f"    return {int_literal(_int_in(nxt, 'next pc', 0, MAX_INT))}")
    return "\n".join(lines) + "\n"


def _bounded(prog: ShapeProgram, inputs: str) -> list[str]:
    """Checks that the outputs which could reach ``OUTPUT_LIMIT`` did not (``value_bits``):
    they feed later shape programs, whose own bounds assume inputs below it. The usual
    outputs (dims, sums of a few of them) need none; ``4 * n`` needs one comparison pair."""
    bits = value_bits(prog)
    limit = int_literal(OUTPUT_LIMIT)
    checked: list[str] = []
    for o in prog.outputs:
        indices: tuple[int, ...] = o if isinstance(o, tuple) else (o,)
        for k in indices:
            node = k - prog.num_inputs
            if bits[k] <= INPUT_BITS or (node >= 0 and prog.nodes[node][0] == "const"):
                continue  # below the limit by construction (a constant is an int literal)
            name = f"v{int_literal(_int_in(k, 'output', 0, MAX_NODES + MAX_NODES))}"
            if name not in checked:
                checked.append(name)
    return [
        line
        for v in checked
        for line in (f"    if {v} >= {limit} or {v} <= -{limit}:", f"        raise huge({inputs})")
    ]


def _guarded(body: list[str], divides: bool, inputs: str) -> list[str]:
    """``body`` as the statements of a function; inside ``try`` if it divides."""
    if not divides:
        return [f"    {s}" for s in body]
    # only // and % can raise; a try block costs nothing in Python >= 3.11 anyway
    return [
        "    try:",
        *(f"        {s}" for s in body),
        "    except ZeroDivisionError:",
        f"        raise fail({inputs}) from None",
    ]


def _generate(prog: ShapeProgram) -> tuple[int, list[str], list[str], bool]:
    """``(inputs, statements, output expressions, divides)`` of ``prog``: the parts both
    generated forms share.

    Every node is one flat statement ``v{k} = <template>``, whatever the program's depth, so
    Python's compiler copes with ``MAX_NODES`` nodes. Constants are inlined as int literals. Only
    generated names, ``repr`` of exact ints and ``_TEMPLATES`` text reach the source; anything
    else in the program (an unknown op, a non-int operand or constant, a forward reference) is
    refused with ``UnsafeSourceError``. Indices only select generated names, and a constant is
    written as ``repr(int(value))``, so not even an int subclass can choose any text.
    """
    n_in = int(_int_in(prog.num_inputs, "num_inputs", 0, MAX_NODES))
    if len(prog.nodes) > MAX_NODES:
        raise UnsafeSourceError(f"{len(prog.nodes)} nodes is more than {MAX_NODES}")
    # operand[k] is the source text of value k: a generated name, or a literal for a constant.
    operand = [f"v{k}" for k in range(n_in)]
    body: list[str] = []
    divides = False
    for i, node in enumerate(prog.nodes):
        if type(node) is not tuple or not node:
            raise UnsafeSourceError(f"node {i} is not a tuple")
        op, args = node[0], node[1:]
        if not isinstance(op, str):
            raise UnsafeSourceError(f"node {i}: the op is not a string")
        if op == "const" and len(args) == 1:
            lit = int_literal(_int_in(args[0], f"node {i} value", -MAX_INT, MAX_INT))
            # Parenthesised when negative, so that no template can bind it differently.
            operand.append(lit if not lit.startswith("-") else f"({lit})")
            continue
        # The template is looked up, never built from ``op``: a lookup miss is a refusal.
        template = _TEMPLATES.get(op)
        if template is None or len(args) != (1 if op == "neg" else 2):
            raise UnsafeSourceError(f"node {i}: not a known op with its operand count")
        refs = [operand[_int_in(x, f"node {i} operand", 0, len(operand) - 1)] for x in args]
        name = f"v{len(operand)}"
        body.append(f"{name} = {template.format(a=refs[0], b=refs[-1])}")
        operand.append(name)
        divides = divides or op in ("floordiv", "mod")
    outs: list[str] = []
    for o in prog.outputs:
        if type(o) is tuple:
            items = [operand[_int_in(k, "output", 0, len(operand) - 1)] for k in o]
            outs.append("(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")")
        else:
            outs.append(operand[_int_in(o, "output", 0, len(operand) - 1)])
    return n_in, body, outs, divides


def _int_in(value: Any, what: str, lo: int, hi: int) -> int:
    """``value`` if it is an int in ``[lo, hi]`` (not a bool), else an UnsafeSourceError."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise UnsafeSourceError(f"{what}: expected an int in [{lo}, {hi}]")
    return value


def _check_int(value: Any, what: str, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise FormatError(f"{what}: expected an int in [{lo}, {hi}], got {value!r}")


class Value:
    """A value being built by a ``ShapeProgramBuilder``; supports ``+ - * // %`` and ``-x``."""

    __slots__ = ("builder", "index")

    def __init__(self, builder: ShapeProgramBuilder, index: int) -> None:
        self.builder = builder
        self.index = index

    def _bin(self, op: str, other: Value | int, swap: bool = False) -> Value:
        o = self.builder.lift(other)
        a, b = (o, self) if swap else (self, o)
        return self.builder.node(op, a, b)

    def __add__(self, o: Value | int) -> Value:
        return self._bin("add", o)

    def __radd__(self, o: int) -> Value:
        return self._bin("add", o, swap=True)

    def __sub__(self, o: Value | int) -> Value:
        return self._bin("sub", o)

    def __rsub__(self, o: int) -> Value:
        return self._bin("sub", o, swap=True)

    def __mul__(self, o: Value | int) -> Value:
        return self._bin("mul", o)

    def __rmul__(self, o: int) -> Value:
        return self._bin("mul", o, swap=True)

    def __floordiv__(self, o: Value | int) -> Value:
        return self._bin("floordiv", o)

    def __rfloordiv__(self, o: int) -> Value:
        return self._bin("floordiv", o, swap=True)

    def __mod__(self, o: Value | int) -> Value:
        return self._bin("mod", o)

    def __rmod__(self, o: int) -> Value:
        return self._bin("mod", o, swap=True)

    def __neg__(self) -> Value:
        return self.builder.node("neg", self)


class ShapeProgramBuilder:
    """Builds a ``ShapeProgram`` with Python operators (used by the lowering and by tests).

    >>> b = ShapeProgramBuilder(["n", "m"])
    >>> n, m = b.inputs
    >>> prog = b.build([n * 4, (n, m + 1)])
    """

    def __init__(self, input_names: Sequence[str]) -> None:
        self.input_names = tuple(input_names)
        self.nodes: list[Node] = []
        self.inputs = [Value(self, i) for i in range(len(self.input_names))]
        """One value per input, in order."""
        self._consts: dict[int, Value] = {}

    def lift(self, x: Value | int) -> Value:
        """``x`` as a value (an int becomes a shared constant node)."""
        if isinstance(x, Value):
            return x
        if x not in self._consts:
            self.nodes.append(("const", int(x)))
            self._consts[x] = Value(self, len(self.input_names) + len(self.nodes) - 1)
        return self._consts[x]

    def node(self, op: str, *args: Value | int) -> Value:
        """A new node ``op(args...)`` (``op`` is ``neg`` or a key of ``BINARY``)."""
        self.nodes.append((op, *(self.lift(a).index for a in args)))
        return Value(self, len(self.input_names) + len(self.nodes) - 1)

    def min(self, a: Value | int, b: Value | int) -> Value:
        """``min(a, b)``."""
        return self.node("min", a, b)

    def max(self, a: Value | int, b: Value | int) -> Value:
        """``max(a, b)``."""
        return self.node("max", a, b)

    def build(self, outputs: Sequence[Value | int | Sequence[Value | int]]) -> ShapeProgram:
        """The program returning ``outputs`` (values for ints, sequences of values for shapes)."""
        outs: list[Output] = []
        for o in outputs:
            if isinstance(o, (Value, int)):
                outs.append(self.lift(o).index)
            else:
                outs.append(tuple(self.lift(x).index for x in o))
        prog = ShapeProgram(len(self.input_names), tuple(self.nodes), tuple(outs), self.input_names)
        prog.validate()
        return prog
