"""Shape programs: integer arithmetic over symbol values, stored as data and run without sympy.

A program is a small SSA list. Values ``0 .. num_inputs-1`` are its inputs (bound symbols such as
``n``); each node appends one value computed from earlier ones; ``outputs`` lists what the
``shape_program`` instruction writes: an int (one value index) or a shape (a tuple of indices).

Division and modulo have floor semantics (Python's ``//`` and ``%``), as in the IR. Comparisons
yield 0 or 1, so a program can also compute branch conditions.

``compile`` turns a program into one Python function, once, at decode time: constants are folded
into the initial value list and each node becomes a ``(function, a, b)`` triple run by a tight
loop, so evaluating ``n * 4 * 16`` costs a few hundred nanoseconds.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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

#: A node: ``("const", value)``, ``("neg", a)`` or ``(binary_op, a, b)``.
Node = tuple[Any, ...]
#: An output: one value index (an int result) or a tuple of them (a shape result).
Output = int | tuple[int, ...]

#: Limits that keep a corrupt file from making the loader or the VM do unbounded work.
MAX_NODES = 1 << 16
MAX_INT = 1 << 62


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

    def compile(self) -> Callable[[Sequence[int]], list[Any]]:
        """A function from the input values to the list of outputs (ints and shape tuples)."""
        n_in = self.num_inputs
        # Constants become extra initial values, so the loop only runs arithmetic.
        consts = [n[1] for n in self.nodes if n[0] == "const"]
        remap: list[int] = list(range(n_in))
        slot = n_in + len(consts)
        c = n_in
        steps: list[tuple[Callable[[Any, Any], Any], int, int]] = []
        for node in self.nodes:
            if node[0] == "const":
                remap.append(c)
                c += 1
                continue
            if node[0] == "neg":
                a = remap[node[1]]
                steps.append((_neg2, a, a))
            else:
                steps.append((BINARY[node[0]], remap[node[1]], remap[node[2]]))
            remap.append(slot)
            slot += 1
        init = tuple(consts)
        outs = [
            tuple(remap[i] for i in o) if isinstance(o, tuple) else remap[o] for o in self.outputs
        ]
        listing = self.format()

        def run(inputs: Sequence[int]) -> list[Any]:
            v = [*inputs, *init]
            append = v.append
            try:
                for f, a, b in steps:
                    append(f(v[a], v[b]))
            except ZeroDivisionError:
                raise RunTimeShapeError(
                    f"division by zero in shape program {listing} with inputs {tuple(inputs)}"
                ) from None
            return [tuple([v[i] for i in o]) if isinstance(o, tuple) else v[o] for o in outs]

        return run

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


def _neg2(a: int, _b: int) -> int:
    return -a


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
