"""The executable: functions of bytecode plus the tables they index.

An ``Executable`` is plain data: it can be built by the assembler, written to a file with
``save``, read back with ``load`` (see ``serialize.py``) and run by a ``VirtualMachine``, which
decodes it once. ``validate()`` (see ``validate.py``) checks everything an instruction or table
entry may refer to, so a decoded program can never index out of range.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shape_funcs.declarations.dtypes import DTYPE_NAMES, EXTENDED_DTYPES

from .fused import FusedKernel
from .isa import Instruction, Kind, format_instruction
from .shape_program import ShapeProgram

#: Element types the VM accepts: the dtype kind of the op declarations (the IR's set). The
#: extended ones (``bfloat16``, ``float8_*``, ``int4``, ...) are ml_dtypes', resolved when an
#: executable using one is validated (``shape_funcs/declarations/dtypes.py``).
DTYPES: tuple[str, ...] = DTYPE_NAMES
#: The dtypes numpy knows without ml_dtypes (what ``.npy`` files and the serving wire carry).
CORE_DTYPES: tuple[str, ...] = tuple(d for d in DTYPE_NAMES if d not in EXTENDED_DTYPES)


@dataclass(frozen=True)
class TensorSpec:
    """A parameter or result type: dtype and dims (ints are checked on entry; strings are
    symbolic dims such as ``n`` or ``2*n``, checked by the function's own bytecode)."""

    dtype: str
    """The element type."""
    shape: tuple[int | str, ...]
    """One entry per axis: a static int or the text of a symbolic dim (``?`` for unknown)."""

    def __str__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape) + ("," if len(self.shape) == 1 else "")
        return f"Tensor[({dims}), {self.dtype}]"


@dataclass(frozen=True)
class TupleSpec:
    """A tuple type."""

    fields: tuple[TypeSpec, ...]
    """The field types."""

    def __str__(self) -> str:
        return (
            "("
            + ", ".join(str(f) for f in self.fields)
            + ("," if len(self.fields) == 1 else "")
            + ")"
        )


TypeSpec = TensorSpec | TupleSpec


@dataclass(frozen=True)
class Param:
    """A parameter of a function's signature."""

    name: str
    """Its name, used in argument error messages."""
    type: TypeSpec
    """Its type."""

    def __str__(self) -> str:
        return f"{self.name}: {self.type}"


@dataclass(frozen=True)
class Function:
    """A function of bytecode. Its parameters arrive in registers ``0 .. len(params)-1``."""

    name: str
    """The name ``invoke`` looks it up by (``main`` is what ``run`` calls)."""
    params: tuple[Param, ...]
    """The signature's parameters."""
    ret: TypeSpec | None
    """The result type, for the signature text (None: not stated)."""
    num_registers: int
    """Size of its register file."""
    code: tuple[Instruction, ...]
    """The instructions; the last one is a ``ret`` or a ``jump``."""
    ranges: tuple[tuple[str, int, int | None], ...] = ()
    """Declared ranges of the signature's symbols, ``(name, lo, hi)`` (``hi`` None: no upper
    bound), for describing the function; the bytecode's own checks enforce them."""

    @property
    def signature(self) -> str:
        """The symbolic signature as text: ``main(x: Tensor[(n, 16), float32]) -> ...``."""
        params = ", ".join(f"{p.name}: {p.type}" for p in self.params)
        ret = f" -> {self.ret}" if self.ret is not None else ""
        where = ", ".join(
            f"{s} in [{lo}, {'inf' if hi is None else hi}]" for s, lo, hi in self.ranges
        )
        return f"{self.name}({params}){ret}" + (f" where {where}" if where else "")


@dataclass(frozen=True)
class OpKernel:
    """A kernel-table entry calling the registered kernel of one op."""

    op: str
    """The op's name (its kernel is looked up in the registry when the VM decodes)."""
    attrs: Mapping[str, Any]
    """Attributes, normalised as in the catalogue (defaults filled in)."""
    num_inputs: int
    """Inputs passed (a tuple operand counts as one), the values of ``runtime_attrs`` among
    them when there are any."""
    num_outputs: int
    """Outputs passed."""
    runtime_attrs: tuple[tuple[str, int], ...] = ()
    """Attribute entries filled at run time, ``(attribute, index)`` (each ``None`` in
    ``attrs``): their values come in the last input, a tuple of ints in this order
    (``attr_values.py``). Empty for the usual entry, whose attributes are all known."""

    @property
    def name(self) -> str:
        """The name shown in listings and the profiler."""
        return self.op

    @property
    def num_destinations(self) -> int:
        """Arrays an ``invoke`` passes after the inputs (the outputs)."""
        return self.num_outputs


KernelEntry = OpKernel | FusedKernel


@dataclass(frozen=True)
class ShapeFuncEntry:
    """A shape-function-table entry: which op's shape function, with which attributes."""

    op: str
    """The op whose (data-dependent) shape function is called."""
    attrs: Mapping[str, Any]
    """The attributes it is called with."""


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _frozen(c: np.ndarray) -> np.ndarray:
    if not isinstance(c, np.ndarray) or not c.flags.writeable:
        return c
    view: np.ndarray = c.view()
    view.flags.writeable = False
    return view


@dataclass(repr=False)
class Executable:
    """Everything a VM needs to run a compiled program."""

    functions: list[Function] = field(default_factory=list)
    """The functions; names are unique."""
    constants: list[np.ndarray] = field(default_factory=list)
    """The constant pool (read-only arrays)."""
    kernels: list[KernelEntry] = field(default_factory=list)
    """The kernel table indexed by ``invoke``."""
    shape_programs: list[ShapeProgram] = field(default_factory=list)
    """Compiled shape programs indexed by ``shape_program``."""
    shape_funcs: list[ShapeFuncEntry] = field(default_factory=list)
    """Shape functions indexed by ``shape_func``."""
    output_names: tuple[str, ...] = ()
    """The names of ``main``'s results, in order (an imported model's output names, which
    ``compile`` keeps); empty when the program names none. See ``named_outputs``."""

    def __post_init__(self) -> None:
        # Read-only views: a kernel can never write into a constant (it fails instead), and the
        # caller's own arrays keep their flags.
        self.constants = [_frozen(c) for c in self.constants]

    def function_index(self, name: str) -> int:
        """The index of function ``name``; raises KeyError if there is none."""
        for i, f in enumerate(self.functions):
            if f.name == name:
                return i
        raise KeyError(name)

    def signature(self, name: str = "main") -> str:
        """The symbolic signature of function ``name`` as text."""
        return self.functions[self.function_index(name)].signature

    @property
    def inputs(self) -> tuple[Param, ...]:
        """``main``'s parameters (as ONNX Runtime's ``get_inputs()``): each has a ``name`` and a
        ``type`` whose ``dtype`` and ``shape`` (ints, and symbolic dims as text: ``"batch"``,
        ``"2*n"``) say what ``run`` accepts. Empty without a ``main``."""
        main = self._main()
        return main.params if main is not None else ()

    @property
    def outputs(self) -> tuple[TypeSpec, ...]:
        """The types of ``main``'s results: its result's, or the fields of a tuple result."""
        main = self._main()
        if main is None or main.ret is None:
            return ()
        return main.ret.fields if isinstance(main.ret, TupleSpec) else (main.ret,)

    @property
    def named_outputs(self) -> tuple[Param, ...]:
        """``main``'s results with their names and types (as ONNX Runtime's ``get_outputs()``):
        the names of ``output_names``, or ``output0``, ``output1``... where it has none."""
        names = self.output_names or tuple(f"output{i}" for i in range(len(self.outputs)))
        return tuple(Param(n, t) for n, t in zip(names, self.outputs, strict=True))

    @property
    def ranges(self) -> dict[str, tuple[int, int | None]]:
        """``main``'s declared symbol ranges by name (``{"batch": (1, 4096)}``)."""
        main = self._main()
        return {s: (lo, hi) for s, lo, hi in main.ranges} if main is not None else {}

    def _main(self) -> Function | None:
        return next((f for f in self.functions if f.name == "main"), None)

    def __repr__(self) -> str:
        main = self._main()
        head = main.signature if main is not None else "no main"
        bytes_ = sum(c.nbytes for c in self.constants)
        counts = ", ".join(
            _count(n, what)
            for n, what in (
                (len(self.functions), "function"),
                (len(self.kernels), "kernel"),
                (len(self.constants), "constant"),
            )
        )
        return f"<Executable {head}; {counts} ({bytes_:,} bytes of constants)>"

    def validate(self) -> None:
        """Raise FormatError naming the first thing that is malformed."""
        from .validate import validate_executable

        validate_executable(self)

    @property
    def bytecode(self) -> str:
        """A readable listing: the tables, then each function's signature and instructions."""
        names: dict[Kind, Any] = {
            Kind.KERNEL: [k.name for k in self.kernels],
            Kind.FUNC: [f.name for f in self.functions],
        }
        lines = []
        for i, c in enumerate(self.constants):
            lines.append(f"c{i} = const {c.dtype.name}{list(c.shape)}")
        for i, k in enumerate(self.kernels):
            if isinstance(k, OpKernel):
                attrs = ", ".join(f"{a}={v!r}" for a, v in k.attrs.items())
                filled = ", ".join(f"{a}[{j}]" for a, j in k.runtime_attrs)
                at = f"  # {filled} from input {k.num_inputs - 1}" if filled else ""
                lines.append(f"k{i} = kernel {k.op}({attrs}){at}")
            else:
                lines.append(f"k{i} = fused {k.name}:")
                for j, step in enumerate(k.steps):
                    args = ", ".join(str(a) for a in step.inputs)
                    outs = ", ".join(str(o) for o in step.outputs)
                    filled = ", ".join(f"{a}[{n}]" for a, n in step.runtime_attrs)
                    at = f"  # {filled} from {step.inputs[-1]}" if filled else ""
                    lines.append(f"    {j}: {step.op}({args}) -> ({outs}){at}")
                for j, t in enumerate(k.scratch):
                    lines.append(f"    tmp{j}: {t.dtype} {t.shape}")
        for i, p in enumerate(self.shape_programs):
            lines.append(f"p{i} = shape_program {p.format()}")
        for i, sf in enumerate(self.shape_funcs):
            lines.append(f"s{i} = shape_func {sf.op}({dict(sf.attrs)})")
        for f in self.functions:
            lines.append("")
            lines.append(f"fn {f.signature}  # {f.num_registers} registers")
            for pc, ins in enumerate(f.code):
                lines.append(f"  {pc:4}: {format_instruction(ins, names)}")
        return "\n".join(lines) + "\n"

    def save(self, path: str | Path) -> None:
        """Write the executable to one file (see design/vm.md for the layout)."""
        from .serialize import to_bytes

        Path(path).write_bytes(to_bytes(self))

    @classmethod
    def load(cls, path: str | Path) -> Executable:
        """Read and validate an executable file; a bad file raises FormatError."""
        from .serialize import from_bytes

        return from_bytes(Path(path).read_bytes())

    def to_bytes(self) -> bytes:
        """The file's bytes."""
        from .serialize import to_bytes

        return to_bytes(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> Executable:
        """Parse and validate the bytes of a file; bad bytes raise FormatError."""
        from .serialize import from_bytes

        return from_bytes(data)
