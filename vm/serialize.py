"""The executable file: a fixed header, JSON metadata, and the constants' raw bytes.

Layout (all integers little-endian)::

    offset  size  field
         0     8  magic b"DSHVMEXE"
         8     4  format version (u32), currently 1
        12     4  flags (u32), must be 0
        16     8  metadata length M (u64)
        24     8  constant blob length B (u64)
        32     4  CRC-32 of the metadata and the blob (u32)
        36    28  zero
        64     M  metadata: UTF-8 JSON (functions, tables, constant descriptors)
    64+M+pad   B  blob: each constant's bytes, C order, little-endian, at a 64-byte offset

The blob starts at the first multiple of 64 after the metadata; the file ends exactly at its
end. Nothing is pickled and no stored text is evaluated: the JSON is parsed into plain values,
then into the executable's dataclasses, which are validated (``validate.py``) before ``load``
returns. Every failure, whatever the corruption, is a FormatError that says what is wrong.
"""

from __future__ import annotations

import json
import math
import re
import struct
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import FormatError
from .executable import (
    Executable,
    Function,
    KernelEntry,
    OpKernel,
    Param,
    ShapeFuncEntry,
    TensorSpec,
    TupleSpec,
    TypeSpec,
)
from .fused import FusedKernel, FusedStep, Ref, Scratch
from .instruction_checks import MAX_RANK
from .isa import Instruction, Op, Reg
from .shape_program import ShapeProgram
from .validate import check_dtype, check_ranges, validate_executable

MAGIC = b"DSHVMEXE"
VERSION = 1
HEADER = struct.Struct("<8sIIQQI28s")
ALIGN = 64
#: The largest metadata accepted (a guard against absurd lengths in a corrupt header).
MAX_META = 1 << 26
#: The deepest JSON nesting accepted (a valid file nests about 7 levels).
MAX_DEPTH = 32
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_OPEN = np.frombuffer(b"[{", dtype=np.uint8)
_CLOSE = np.frombuffer(b"]}", dtype=np.uint8)


def _nesting_depth(text: bytes) -> int:
    """The deepest ``[``/``{`` nesting of a JSON text, outside string literals (vectorised)."""
    if not text:
        return 0
    stripped = _STRING.sub(b'""', text)
    arr = np.frombuffer(stripped, dtype=np.uint8)
    step = np.isin(arr, _OPEN).astype(np.int64) - np.isin(arr, _CLOSE).astype(np.int64)
    return int(np.cumsum(step).max(initial=0))


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


# Encoding --------------------------------------------------------------------------------


def _enc(v: Any) -> Any:
    """Operands and attributes to JSON values: registers as {"r": n}, tuples as lists."""
    if isinstance(v, Reg):
        return {"r": v.index}
    if isinstance(v, tuple):
        return [_enc(x) for x in v]
    if isinstance(v, Ref):
        return [v.kind, v.index]
    return v


def _enc_type(t: TypeSpec | None) -> Any:
    if t is None:
        return None
    if isinstance(t, TensorSpec):
        return {"tensor": [t.dtype, list(t.shape)]}
    return {"tuple": [_enc_type(f) for f in t.fields]}


def _enc_step(s: FusedStep) -> dict[str, Any]:
    out: dict[str, Any] = {
        "op": s.op,
        "attrs": {a: _enc(v) for a, v in s.attrs.items()},
        "inputs": [_enc(i) for i in s.inputs],
        "outputs": [_enc(o) for o in s.outputs],
    }
    if s.runtime_attrs:  # only when there are any, as an op kernel's
        out["runtime_attrs"] = [[a, i] for a, i in s.runtime_attrs]
    return out


def _enc_kernel(k: KernelEntry) -> dict[str, Any]:
    if isinstance(k, OpKernel):
        out: dict[str, Any] = {
            "kind": "op",
            "op": k.op,
            "attrs": {a: _enc(v) for a, v in k.attrs.items()},
            "num_inputs": k.num_inputs,
            "num_outputs": k.num_outputs,
        }
        if k.runtime_attrs:  # only when there are any: the usual entry is written as before
            out["runtime_attrs"] = [[a, i] for a, i in k.runtime_attrs]
        return out
    return {
        "kind": "fused",
        "name": k.name,
        "num_inputs": k.num_inputs,
        "num_outputs": k.num_outputs,
        "steps": [_enc_step(s) for s in k.steps],
        "scratch": [{"dtype": s.dtype, "shape": _enc(s.shape)} for s in k.scratch],
    }


def to_bytes(exe: Executable) -> bytes:
    """Serialise ``exe`` (validated first, so a file is only ever written from a valid one)."""
    validate_executable(exe)
    blob = bytearray()
    consts = []
    for c in exe.constants:
        data = np.ascontiguousarray(c).astype(c.dtype.newbyteorder("<"), copy=False).tobytes()
        blob += b"\0" * (_align(len(blob)) - len(blob))
        consts.append({"dtype": c.dtype.name, "shape": list(c.shape), "offset": len(blob)})
        blob += data
    meta = {
        "constants": consts,
        "kernels": [_enc_kernel(k) for k in exe.kernels],
        "shape_programs": [
            {
                "num_inputs": p.num_inputs,
                "nodes": [list(n) for n in p.nodes],
                "outputs": [_enc(o) for o in p.outputs],
                "input_names": list(p.input_names),
            }
            for p in exe.shape_programs
        ],
        **({"output_names": list(exe.output_names)} if exe.output_names else {}),
        "shape_funcs": [
            {"op": s.op, "attrs": {a: _enc(v) for a, v in s.attrs.items()}} for s in exe.shape_funcs
        ],
        "functions": [
            {
                "name": f.name,
                "params": [{"name": p.name, "type": _enc_type(p.type)} for p in f.params],
                "ret": _enc_type(f.ret),
                "num_registers": f.num_registers,
                "code": [[int(i.op), *(_enc(o) for o in i.operands)] for i in f.code],
                **({"ranges": [list(r) for r in f.ranges]} if f.ranges else {}),
            }
            for f in exe.functions
        ],
    }
    meta_bytes = json.dumps(meta, separators=(",", ":")).encode()
    pad = b"\0" * (_align(HEADER.size + len(meta_bytes)) - HEADER.size - len(meta_bytes))
    crc = zlib.crc32(blob, zlib.crc32(meta_bytes))
    header = HEADER.pack(MAGIC, VERSION, 0, len(meta_bytes), len(blob), crc, b"\0" * 28)
    return header + meta_bytes + pad + bytes(blob)


# Decoding --------------------------------------------------------------------------------


def _get(d: Any, key: str, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise FormatError(f"{what}: missing field {key!r}")
    v = d[key]
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        raise FormatError(f"{what}: field {key!r} has the wrong type ({type(v).__name__})")
    return v


#: Registers are immutable: the low ones are shared rather than made once per operand.
_REGS = [Reg(i) for i in range(1 << 12)]


def _dec(v: Any) -> Any:
    """JSON operand back to Python: {"r": n} to Reg, lists to tuples."""
    t = type(v)
    if t is dict:
        r = v.get("r")
        if len(v) != 1 or type(r) is not int:
            raise FormatError(f"bad register operand {v!r}")
        return _REGS[r] if 0 <= r < len(_REGS) else Reg(r)
    if t is list:
        return tuple([_dec(x) for x in v])
    return v


def _dec_attrs(d: Any, what: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise FormatError(f"{what}: attributes must be an object")
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            raise FormatError(f"{what}: attribute {k!r} has an object value")
        out[k] = _dec(v)
    return out


def _dec_type(v: Any, what: str, depth: int = 0) -> TypeSpec:
    if depth > 16:
        raise FormatError(f"{what}: type nested too deeply")
    if isinstance(v, dict) and set(v) == {"tensor"}:
        t = v["tensor"]
        if not isinstance(t, list) or len(t) != 2 or not isinstance(t[1], list):
            raise FormatError(f"{what}: bad tensor type {t!r}")
        return TensorSpec(t[0], tuple(t[1]))
    if isinstance(v, dict) and set(v) == {"tuple"} and isinstance(v["tuple"], list):
        return TupleSpec(tuple(_dec_type(f, what, depth + 1) for f in v["tuple"]))
    raise FormatError(f"{what}: bad type {v!r}")


def _dec_ref(v: Any, what: str) -> Ref:
    if (
        not isinstance(v, list)
        or len(v) != 2
        or not isinstance(v[0], str)
        or not isinstance(v[1], int)
        or isinstance(v[1], bool)
    ):
        raise FormatError(f"{what}: bad ref {v!r}")
    return Ref(v[0], v[1])


def _dec_step_input(v: Any, what: str) -> Ref | tuple[Ref, ...]:
    if isinstance(v, list) and v and isinstance(v[0], list):
        return tuple(_dec_ref(r, what) for r in v)
    return _dec_ref(v, what)


def _dec_scratch(v: Any, what: str) -> Scratch:
    dtype = _get(v, "dtype", str, what)
    shape = _get(v, "shape", list, what)
    if not shape or not isinstance(shape[0], str):
        raise FormatError(f"{what}: bad scratch shape {shape!r}")
    if shape[0] == "like" and len(shape) == 2:
        return Scratch(dtype, ("like", _dec_ref(shape[1], what)))
    return Scratch(dtype, _dec(shape))


def _dec_runtime_attrs(d: dict[str, Any], what: str) -> Any:
    """An entry's optional ``runtime_attrs`` (validated with the entry: ``attr_values.py``)."""
    return _dec(_get(d, "runtime_attrs", list, what)) if "runtime_attrs" in d else ()


def _dec_kernel(d: Any, what: str) -> KernelEntry:
    kind = _get(d, "kind", str, what)
    n_in, n_out = _get(d, "num_inputs", int, what), _get(d, "num_outputs", int, what)
    if kind == "op":
        op = _get(d, "op", str, what)
        attrs = _dec_attrs(_get(d, "attrs", dict, what), f"{what} ({op})")
        return OpKernel(op, attrs, n_in, n_out, _dec_runtime_attrs(d, what))
    if kind != "fused":
        raise FormatError(f"{what}: unknown kernel kind {kind!r}")
    steps = []
    for j, s in enumerate(_get(d, "steps", list, what)):
        sw = f"{what} step {j}"
        steps.append(
            FusedStep(
                _get(s, "op", str, sw),
                _dec_attrs(_get(s, "attrs", dict, sw), sw),
                tuple(_dec_step_input(i, sw) for i in _get(s, "inputs", list, sw)),
                tuple(_dec_ref(o, sw) for o in _get(s, "outputs", list, sw)),
                _dec_runtime_attrs(s, sw),
            )
        )
    scratch = tuple(
        _dec_scratch(s, f"{what} scratch {j}") for j, s in enumerate(_get(d, "scratch", list, what))
    )
    return FusedKernel(_get(d, "name", str, what), n_in, n_out, tuple(steps), scratch)


def _dec_program(d: Any, what: str) -> ShapeProgram:
    nodes = tuple(tuple(n) if isinstance(n, list) else n for n in _get(d, "nodes", list, what))
    outputs = tuple(_dec(o) for o in _get(d, "outputs", list, what))
    names = _get(d, "input_names", list, what)
    if not all(isinstance(n, str) for n in names):
        raise FormatError(f"{what}: input names must be strings")
    return ShapeProgram(_get(d, "num_inputs", int, what), nodes, outputs, tuple(names))


_OPCODES = {op.value: op for op in Op}


def _dec_instruction(v: Any, function: str, pc: int) -> Instruction:
    # The location is formatted only on failure: this runs once per instruction loaded.
    op = _OPCODES.get(v[0]) if isinstance(v, list) and v and type(v[0]) is int else None
    if op is None:
        what = f"{function}, instruction {pc}"
        if not isinstance(v, list) or not v or type(v[0]) is not int:
            raise FormatError(f"{what}: an instruction is [opcode, operands...], got {v!r}")
        raise FormatError(f"{what}: unknown opcode {v[0]}")
    try:
        return Instruction(op, tuple(_dec(o) for o in v[1:]))
    except FormatError as e:
        raise FormatError(f"{function}, instruction {pc}: {e}") from None


def _dec_function(d: Any, what: str) -> Function:
    name = _get(d, "name", str, what)
    what = f"function {name!r}"
    params = []
    for p in _get(d, "params", list, what):
        pname = _get(p, "name", str, what)
        params.append(Param(pname, _dec_type(p.get("type"), f"{what}, parameter {pname!r}")))
    ret = d.get("ret")
    code = tuple(
        _dec_instruction(ins, what, pc) for pc, ins in enumerate(_get(d, "code", list, what))
    )
    return Function(
        name,
        tuple(params),
        None if ret is None else _dec_type(ret, what),
        _get(d, "num_registers", int, what),
        code,
        check_ranges(d.get("ranges", []), what),
    )


def _dec_constant(d: Any, blob: bytes, i: int) -> np.ndarray:
    what = f"constant {i}"
    dtype = _get(d, "dtype", str, what)
    check_dtype(dtype, what)  # an extended one imports ml_dtypes (np.dtype reads its name)
    shape = _get(d, "shape", list, what)
    if len(shape) > MAX_RANK or not all(
        isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= len(blob) for s in shape
    ):
        raise FormatError(f"{what}: bad shape {shape!r}")
    offset = _get(d, "offset", int, what)
    dt = np.dtype(dtype).newbyteorder("<")
    count = math.prod(shape)
    if offset < 0 or offset + count * dt.itemsize > len(blob):
        raise FormatError(
            f"{what}: {count * dt.itemsize} bytes at offset {offset} do not fit "
            f"in the {len(blob)}-byte constant blob"
        )
    arr = np.frombuffer(blob, dtype=dt, count=count, offset=offset).reshape(shape)
    if dtype == "bool" and arr.size and arr.view(np.uint8).max() > 1:
        raise FormatError(f"{what}: a bool constant holds bytes other than 0 and 1")
    canonical = np.dtype(dtype)
    typed: np.ndarray = arr.astype(canonical, copy=False)
    if typed.dtype is not canonical:
        # a little-endian machine's astype keeps the array, and its "<" dtype object, which is
        # equal to numpy's own but not it: kernels' fast paths compare dtypes by identity (a
        # loaded executable's constants missed the 1x1 convolution's and the panels' paths)
        typed = typed.view(canonical)
    return typed


_SECTIONS: dict[str, Callable[[Any, str], Any]] = {
    "kernels": _dec_kernel,
    "shape_programs": _dec_program,
    "functions": _dec_function,
}


def from_bytes(data: bytes) -> Executable:
    """Parse, check and validate an executable file's bytes; raise FormatError if bad."""
    data = bytes(data)
    if len(data) < HEADER.size:
        raise FormatError(f"file too short for the header ({len(data)} < {HEADER.size} bytes)")
    magic, version, flags, meta_len, blob_len, crc, zero = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise FormatError(f"not a dynshape VM executable (magic {magic!r}, expected {MAGIC!r})")
    if version != VERSION:
        raise FormatError(f"format version {version} is not supported (this VM reads {VERSION})")
    if flags or zero != b"\0" * 28:
        raise FormatError("reserved header fields are not zero")
    if meta_len > MAX_META:
        raise FormatError(f"metadata length {meta_len} exceeds the limit of {MAX_META} bytes")
    blob_at = _align(HEADER.size + meta_len)
    if blob_at + blob_len != len(data):
        raise FormatError(
            f"the header says {blob_at + blob_len} bytes (metadata {meta_len}, "
            f"constants {blob_len}) but the file has {len(data)} (truncated?)"
        )
    meta_bytes = data[HEADER.size : HEADER.size + meta_len]
    if data[HEADER.size + meta_len : blob_at].strip(b"\0"):
        # Not covered by the checksum, so checked: every byte of the file is one or the other.
        raise FormatError("the padding between the metadata and the constants is not zero")
    blob = data[blob_at:]
    if zlib.crc32(blob, zlib.crc32(meta_bytes)) != crc:
        raise FormatError("checksum mismatch: the file is corrupt")
    depth = _nesting_depth(meta_bytes)
    if depth > MAX_DEPTH:
        # json's C parser recurses per level; a deep enough file overflows the C stack (a
        # crash, not an exception) before Python's recursion limit trips, so bound it first.
        raise FormatError(f"metadata nests {depth} levels deep (the limit is {MAX_DEPTH})")
    try:
        meta = json.loads(meta_bytes.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise FormatError(f"metadata is not valid JSON: {e}") from None
    try:
        exe = _dec_executable(meta, blob)
        validate_executable(exe)
    except RecursionError:
        raise FormatError("metadata nested too deeply") from None
    except FormatError:
        raise
    except Exception as e:
        # A safety net: the decoders check each field they read, but a corrupt file must never
        # escape as anything but a FormatError, whatever shape its JSON takes.
        raise FormatError(f"malformed executable ({type(e).__name__}: {e})") from e
    return exe


#: Metadata fields a file may leave out: ``output_names`` (written only when the program names
#: its results, so files without names are as before).
OPTIONAL_FIELDS = frozenset({"output_names"})


def _dec_executable(meta: Any, blob: bytes) -> Executable:
    if not isinstance(meta, dict):
        raise FormatError("metadata must be a JSON object")
    expected = {"constants", "kernels", "shape_programs", "shape_funcs", "functions"}
    if set(meta) - OPTIONAL_FIELDS != expected:
        raise FormatError(f"metadata fields {sorted(meta)} differ from {sorted(expected)}")
    names = meta.get("output_names", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise FormatError("metadata field 'output_names' must be a list of strings")
    for key in expected:
        if not isinstance(meta[key], list):
            raise FormatError(f"metadata field {key!r} must be a list")
    sections = {
        key: [fn(d, f"{key[:-1].replace('_', ' ')} {i}") for i, d in enumerate(meta[key])]
        for key, fn in _SECTIONS.items()
    }
    shape_funcs = []
    for i, d in enumerate(meta["shape_funcs"]):
        what = f"shape function {i}"
        op = _get(d, "op", str, what)
        shape_funcs.append(ShapeFuncEntry(op, _dec_attrs(_get(d, "attrs", dict, what), what)))
    constants = [_dec_constant(d, blob, i) for i, d in enumerate(meta["constants"])]
    return Executable(
        sections["functions"],
        constants,
        sections["kernels"],
        sections["shape_programs"],
        shape_funcs,
        tuple(names),
    )
