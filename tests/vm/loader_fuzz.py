"""A structured fuzzer of the executable loader and the VM (issue 12).

Claim under test: after ``Executable.from_bytes``, nothing a file says can make the VM read or
write outside a storage, crash, hang past its ``max_steps``/``timeout`` bounds, or raise anything
but the project's errors (``DynShapeError`` and subclasses).

How it works:

- **Corpus.** Seed programs are compiled by the real compiler (``dynshape.compile``) at run time:
  an elementwise chain, an MLP, tail-recursive and non-tail recursive programs, a loop with tuple
  state, data-dependent programs (argwhere/take, arange, dyn.reshape), fused kernels with
  scratch, a CNN (pooling windows are ``as_strided`` views), attention, and the README seed
  ``(x + x) - y`` with a symbolic ``n``; each with inputs at one binding.
- **Mutations.** Mutation ``i`` of run ``seed`` is a pure function of ``(seed, i)`` and the
  corpus: a seed program and a *kind* (see ``KINDS``) are drawn, and the kind's generator returns
  a list of edits: JSON edits of the metadata (``set``/``delete``/``insert``/``swap`` at a path),
  after which the header's lengths and CRC-32 are recomputed so that the mutation reaches
  validation, and byte edits of the file (bit flips, truncations, header fields, blob bytes),
  with or without the CRC fixed.
- **Worker.** A subprocess (``--worker``) runs many mutations in a loop: load; if it loads, run
  ``main`` on the seed's inputs with ``VirtualMachine(exe, max_steps=100_000, timeout=2.0,
  memory_limit=256 MiB)`` and again with ``check_memory=True``. It prints one JSON line per
  mutation (flushed). In the worker only, ``np.ndarray`` as seen by ``vm/decode.py`` and
  ``vm/memory/storage.py`` and ``as_strided`` as seen by ``vm/kernels/nn.py`` are wrapped by
  bounds checks (every tensor view must lie within its storage's ``nbytes``; every window view
  within its array's memory: ``np.ndarray`` over a contiguous input's buffer checks that itself,
  and is wrapped too), and every array the VM returns is checked to lie within its base.
- **Parent.** Watches the worker with a per-mutation timeout; a worker that dies without
  reporting (signal, abort, segfault) is a CRASH of the mutation it was on, one that goes silent
  is a HANG; both are recorded with their seed and index, and the worker is restarted at the
  next mutation.

Outcomes: ``ok`` (loaded and ran), ``refused`` (a project error at load; its *stage* says how
deep the mutant got: header, crc, json, decode, validate, kinds), ``run_error`` (a project error
while building the VM or running), ``FOREIGN`` (any other exception), ``OOB`` (a view outside
its storage was made or returned), ``CRASH``, ``HANG`` (no report within the timeout, a load
taking more than 2 s + 2 us per byte of CPU time, or a run over its 2 s timeout by more than a
second of CPU time), ``MEMORY`` (the worker's peak RSS grew past ``memory_limit`` + 512 MiB: memory the VM's limit
does not bound; the worker is restarted after it). Three *crafted* kinds go beyond mutation: ``deep_tuple`` (``main`` nests a
tuple thousands deep in straight-line code), ``tuple_growth`` (``main`` grows a tuple by sharing
it, in a loop or in a few steps: exponentially many values as a tree) and ``frame_blowup``
(``main`` recursing with a register file of up to 2^20 slots).

Script: ``python tests/vm/loader_fuzz.py --count 100000 --seed 1`` prints a table by outcome and
by kind and each FOREIGN/OOB/CRASH/HANG with a reproducer; ``--replay SEED:INDEX`` runs one
mutation in this process and prints its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import pickle
import random
import selectors
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
HEADER = struct.Struct("<8sIIQQI28s")
MEMORY_LIMIT = 256 << 20
MAX_STEPS = 100_000
RUN_TIMEOUT = 2.0
#: A load slower than SLOW_LOAD seconds plus SLOW_LOAD_PER_BYTE per byte of the file is a HANG:
#: loading is linear in the file (about 0.2 us per metadata byte measured; design/vm.md), and
#: the slack is for a loaded machine.
SLOW_LOAD = 2.0
SLOW_LOAD_PER_BYTE = 2e-6
#: Address space of a worker: a runaway allocation fails with MemoryError instead of the OOM killer.
WORKER_ADDRESS_SPACE = 4 << 30
#: Memory a mutant may make the worker take beyond ``MEMORY_LIMIT`` (peak RSS) before MEMORY.
MEMORY_SLACK = 512 << 20

# ---- corpus ------------------------------------------------------------------------------------

SOURCES: dict[str, str] = {
    "readme_seed": """
def @main(%x: Tensor[(n,), float32], %y: Tensor[(n,), float32]) -> Tensor[(n,), float32] {
  %0 = add(%x, %x);
  subtract(%0, %y)
}
""",
    "unary_float_chain": """
def @main(%x: Tensor[(n, 4), float32]) -> (Tensor[(n, 4), float32], Tensor[(n, 4), float32], Tensor[(n, 4), float32]) {
  %e = exp(%x);
  %s = add(sin(%x), cos(%x));
  %t = multiply(tanh(%x), sigmoid(%x));
  (%e, %s, %t)
}
""",
    "mlp": """
def @main(%x: Tensor[(n, 6), float32], %w1: Tensor[(8, 6), float32], %b1: Tensor[(8,), float32], %w2: Tensor[(3, 8), float32], %b2: Tensor[(3,), float32]) -> Tensor[(n, 3), float32] {
  %h = nn.relu(nn.bias_add(nn.dense(%x, %w1), %b1));
  %o = nn.bias_add(nn.dense(%h, %w2), %b2, axis=1);
  nn.softmax(%o)
}
""",
    "tail_recursion_concat": """
def @loop(%i: int32, %n: int32, %acc: Tensor[(?, 1), int32]) -> Tensor[(?, 1), int32] {
  if (less(%i, %n)) {
    %row = reshape(%i, newshape=[1, 1]);
    @loop(add(%i, 1), %n, concatenate((%acc, %row)))
  } else {
    %acc
  }
}

def @main(%x: Tensor[(n, 1), int32]) -> Tensor[(?, 1), int32] {
  %count = cast(take(shape_of(%x), 0), dtype="int32");
  %rows = @loop(0, %count, zeros(shape=[0, 1], dtype="int32"));
  add(%rows, %x)
}
""",
    "fibonacci": """
def @fib(%k: int64) -> int64 {
  if (less(%k, 2i64)) {
    %k
  } else {
    add(@fib(subtract(%k, 1i64)), @fib(subtract(%k, 2i64)))
  }
}

def @main(%x: Tensor[(n,), int64]) -> Tensor[(n,), int64] {
  add(%x, @fib(take(shape_of(%x), 0)))
}
""",
    "loop_tuple_state": """
def @loop(%i: int32, %state: (Tensor[(n,), float32], float32)) -> (Tensor[(n,), float32], float32) {
  if (less(%i, 3)) {
    %v = multiply(%state.0, 2f);
    @loop(add(%i, 1), (%v, add(%state.1, sum(%v))))
  } else {
    %state
  }
}

def @main(%x: Tensor[(n,), float32], %s: float32) -> (Tensor[(n,), float32], float32) {
  @loop(0, (%x, %s))
}
""",
    "argwhere_take": """
def @main(%x: Tensor[(n,), float32], %y: Tensor[(n, m), int32]) {
  %pos = argwhere(greater(%x, 0f));
  %picked = take(%x, squeeze(%pos, axis=[1]), axis=0);
  (%picked, argwhere(greater(%y, 0)), %pos)
}
""",
    "arange_shape_of": """
def @main(%x: Tensor[(n, m), float32]) -> (Tensor[(?,), int64], Tensor[(2,), int32], Tensor[(2,), int64]) {
  %s = shape_of(%x);
  %rows = take(%s, 0);
  (arange(0i64, %rows, 1i64, dtype="int64"), shape_of(%x, dtype="int32"), multiply(%s, 2i64))
}
""",
    "dyn_reshape": """
def @main(%x: Tensor[(n, m, 4), float32]) {
  %s = shape_of(%x);
  %rows = take(%s, const([0], int32));
  %cols = multiply(take(%s, const([1], int32)), take(%s, const([2], int32)));
  %shape = concatenate((%rows, %cols));
  (dyn.reshape(%x, %shape), dyn.reshape(%x, const([-1, 4], int64)), dyn.reshape(%x, const([0, 0, 2, 2], int64)))
}
""",
    "recursive_filter": """
def @shrink(%x: Tensor[(?,), float32], %i: int32) -> Tensor[(?,), float32] {
  if (less(%i, 3)) {
    %lower = subtract(%x, 0.5f);
    %keep = squeeze(argwhere(greater(%lower, 0f)), axis=[1]);
    @shrink(take(%lower, %keep, axis=0), add(%i, 1))
  } else {
    %x
  }
}

def @main(%x: Tensor[(n,), float32]) -> Tensor[(?,), float32] {
  @shrink(%x, 0)
}
""",
    "normalize_rows": """
def @main(%x: Tensor[(n, m), float32]) -> Tensor[(n, m), float32] {
  %centered = subtract(%x, mean(%x, axis=1, keepdims=True));
  %scale = max(abs(%centered), axis=-1, keepdims=True);
  divide(%centered, add(%scale, 1f))
}
""",
    "cnn": """
def @main(%x: Tensor[(n, 1, 8, 8), float32], %k: Tensor[(4, 1, 3, 3), float32], %w: Tensor[(10, 64), float32]) -> Tensor[(n, 10), float32] {
  %h = nn.relu(nn.conv2d(%x, %k, padding=[1, 1, 1, 1]));
  %p = nn.max_pool2d(%h, pool_size=[2, 2], strides=[2, 2]);
  nn.softmax(nn.dense(nn.batch_flatten(%p), %w), axis=1)
}
""",
    "attention": """
def @main(%x: Tensor[(b, s, 8), float32], %wq: Tensor[(8, 8), float32], %wk: Tensor[(8, 8), float32], %wv: Tensor[(8, 8), float32]) -> Tensor[(b, s, 8), float32] {
  %shape = shape_of(%x);
  %flat = reshape(%x, newshape=[-1, 8]);
  %q = dyn.reshape(nn.dense(%flat, %wq), %shape);
  %k = dyn.reshape(nn.dense(%flat, %wk), %shape);
  %v = dyn.reshape(nn.dense(%flat, %wv), %shape);
  %scores = multiply(nn.batch_matmul(%q, %k), 0.35355339f);
  %out = nn.batch_matmul(nn.softmax(%scores, axis=-1), %v, transpose_b=False);
  reshape(%out, newshape=[0, 0, 8])
}
""",
    "symbolic_slice": """
def @main(%x: Tensor[(n, m), float32], %c: Tensor[(16, 4), float32]) {
  (strided_slice(%x, begin=[(n // 2), 0], end=[n, m], strides=[1, m]),
   multiply(strided_slice(const([1, 2, 3, 4, 5, 6], float32), begin=[0], end=[n]), 2f),
   strided_slice(%c, begin=[m], end=[-4611686018427387904], strides=[-1]))
}
""",
}


def _inputs(name: str) -> list[Any]:
    rng = np.random.default_rng(zlib.crc32(name.encode()))

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    return {
        "readme_seed": lambda: [f32(10), f32(10)],
        "unary_float_chain": lambda: [f32(5, 4)],
        "mlp": lambda: [f32(7, 6), f32(8, 6), f32(8), f32(3, 8), f32(3)],
        "tail_recursion_concat": lambda: [rng.integers(-5, 6, (4, 1)).astype(np.int32)],
        "fibonacci": lambda: [rng.integers(-5, 6, (8,)).astype(np.int64)],
        "loop_tuple_state": lambda: [f32(4), np.float32(1.5)],
        "argwhere_take": lambda: [f32(6), rng.integers(-5, 6, (6, 4)).astype(np.int32)],
        "arange_shape_of": lambda: [f32(5, 3)],
        "dyn_reshape": lambda: [f32(5, 6, 4)],
        "recursive_filter": lambda: [rng.uniform(-1, 3, 6).astype(np.float32)],
        "normalize_rows": lambda: [f32(5, 8)],
        "cnn": lambda: [f32(2, 1, 8, 8), f32(4, 1, 3, 3), f32(10, 64)],
        "attention": lambda: [f32(2, 5, 8), f32(8, 8), f32(8, 8), f32(8, 8)],
        "symbolic_slice": lambda: [f32(5, 3), f32(16, 4)],
    }[name]()


@dataclass
class Seed:
    """One corpus entry: the saved executable and ``main``'s inputs."""

    name: str
    data: bytes
    inputs: list[Any]
    meta: Any = field(default=None, repr=False)
    """The parsed metadata (for the generators)."""


def build_corpus(names: list[str] | None = None) -> list[Seed]:
    """Compile the seed programs (the real compiler) and check that each runs on its inputs."""
    import dynshape as ds
    from vm import Executable, VirtualMachine

    seeds = []
    for name in names or list(SOURCES):
        exe = ds.compile(SOURCES[name])
        data = exe.to_bytes()
        inputs = _inputs(name)
        VirtualMachine(Executable.from_bytes(data)).run(*_copy(inputs))  # a good seed runs
        seeds.append(Seed(name, data, inputs))
    return seeds


def _attach_meta(seeds: list[Seed]) -> list[Seed]:
    for s in seeds:
        s.meta = json.loads(split_file(s.data)[0])
    return seeds


def _copy(args: Any) -> Any:
    if isinstance(args, list):
        return [_copy(a) for a in args]
    if isinstance(args, tuple):
        return tuple(_copy(a) for a in args)
    return args.copy() if isinstance(args, np.ndarray) else args


# ---- the file ----------------------------------------------------------------------------------


def _align(n: int) -> int:
    return -(-n // 64) * 64


def split_file(data: bytes) -> tuple[bytes, bytes]:
    """(metadata, blob) of a well-formed file."""
    meta_len, blob_len = HEADER.unpack_from(data)[3:5]
    blob_at = _align(64 + meta_len)
    return data[64 : 64 + meta_len], data[blob_at : blob_at + blob_len]


def assemble(meta: bytes, blob: bytes) -> bytes:
    """A file of ``meta`` and ``blob`` with consistent lengths and CRC (serialize.py's layout)."""
    crc = zlib.crc32(blob, zlib.crc32(meta))
    head = HEADER.pack(b"DSHVMEXE", 1, 0, len(meta), len(blob), crc, b"\0" * 28)
    return head + meta + b"\0" * (_align(64 + len(meta)) - 64 - len(meta)) + blob


def fix_crc(data: bytes) -> bytes:
    """Recompute the header's CRC over whatever metadata and blob the header's lengths name."""
    b = bytearray(data)
    if len(b) < 64:
        return data
    meta_len, blob_len = struct.unpack_from("<QQ", b, 16)
    if meta_len > len(b) or blob_len > len(b):
        return data
    meta = bytes(b[64 : 64 + meta_len])
    blob_at = _align(64 + meta_len)
    blob = bytes(b[blob_at : blob_at + blob_len])
    struct.pack_into("<I", b, 32, zlib.crc32(blob, zlib.crc32(meta)))
    return bytes(b)


# ---- applying a mutation -----------------------------------------------------------------------

Path_ = list[Any]


def _resolve(root: Any, path: Path_) -> tuple[Any, Any]:
    node = root
    for k in path[:-1]:
        node = node[k]
    return node, path[-1]


def _json_edit(meta: Any, edit: list[Any]) -> None:
    op = edit[0]
    if op == "set":
        parent, key = _resolve(meta, edit[1])
        if isinstance(parent, list) and not -len(parent) <= key < len(parent):
            return
        parent[key] = copy.deepcopy(edit[2])
    elif op == "delete":
        parent, key = _resolve(meta, edit[1])
        del parent[key]
    elif op == "insert":
        parent, key = _resolve(meta, edit[1])
        parent.insert(key, copy.deepcopy(edit[2]))
    elif op == "swap":
        pa, ka = _resolve(meta, edit[1])
        pb, kb = _resolve(meta, edit[2])
        pa[ka], pb[kb] = pb[kb], pa[ka]
    elif op == "copy":  # edit[2] <- a copy of edit[1]
        src_parent, src_key = _resolve(meta, edit[1])
        dst_parent, dst_key = _resolve(meta, edit[2])
        dst_parent[dst_key] = copy.deepcopy(src_parent[src_key])
    else:
        raise ValueError(f"unknown JSON edit {op!r}")


def _byte_edit(data: bytes, edit: list[Any]) -> bytes:
    op = edit[0]
    b = bytearray(data)
    if op == "flip":
        for at, bit in edit[1]:
            if at < len(b):
                b[at] ^= 1 << bit
    elif op == "truncate":
        del b[edit[1] :]
    elif op == "header":  # (struct offset, format, value)
        struct.pack_into(edit[2], b, edit[1], edit[3])
    elif op == "write":  # (offset, hex bytes)
        raw = bytes.fromhex(edit[2])
        b[edit[1] : edit[1] + len(raw)] = raw[: max(0, len(b) - edit[1])]
    elif op == "append":
        b += bytes.fromhex(edit[1])
    elif op == "crc":
        return fix_crc(bytes(b))
    else:
        raise ValueError(f"unknown byte edit {op!r}")
    return bytes(b)


def apply_mutation(data: bytes, edits: list[list[Any]]) -> bytes:
    """The mutant of ``data``: JSON edits first (then lengths and CRC recomputed), then byte
    edits in order. An edit whose path no longer exists (an earlier edit moved it) is skipped."""
    json_edits = [e for e in edits if e[0] in ("set", "delete", "insert", "swap", "copy")]
    if json_edits:
        meta_bytes, blob = split_file(data)
        meta = json.loads(meta_bytes)
        for e in json_edits:
            with contextlib.suppress(KeyError, IndexError, TypeError):
                _json_edit(meta, e)
        data = assemble(json.dumps(meta, separators=(",", ":")).encode(), blob)
    for e in edits:
        if e[0] not in ("set", "delete", "insert", "swap", "copy"):
            data = _byte_edit(data, e)
    return data


# ---- generating mutations ----------------------------------------------------------------------

INT_JUNK: list[Any] = [
    -1, 0, 1, 2, 3, 7, 63, 64, 65, 255, 4096, 4097, 65536, 2**20, 2**20 + 1, 2**31 - 1, 2**31,
    2**32, 2**40, 2**40 + 1, 2**61, 2**62 - 1, 2**62, 2**63 - 1, 2**63, 2**64, -(2**31), -(2**62),
    -(2**63), -(2**64), 10**30, -(10**30),
]  # fmt: skip
SCALAR_JUNK: list[Any] = [
    None, True, False, 0.5, -0.0, 1.0, 3.0, 1e308, -1e308, float("inf"), float("-inf"),
    float("nan"), "", "x", "r", "0", "float32", "int64", "bool", "main", "\x00", "%1", "in",
    "tmp", "like", "arg", "x" * 70000,
]  # fmt: skip
STRUCT_JUNK: list[Any] = [
    [], [0], [-1], [1, 2], [2**62], [[0]], [[[[]]]], ["in", 0], ["tmp", 0], ["out", 0],
    ["const", 0], ["in", 99], {}, {"r": 0}, {"r": -1}, {"r": 2**40}, {"r": True}, {"r": 1.0},
    {"r": "0"}, {"r": 0, "x": 1}, {"r": [0]}, {"tensor": ["float32", [1]]}, {"tuple": []},
    [{"r": 0}], [{"r": 0}, {"r": 1}], list(range(5000)), [0] * 65,
    json.loads("[" * 20 + "]" * 20), json.loads("[" * 40 + "]" * 40),
]  # fmt: skip
ANY_JUNK = INT_JUNK + SCALAR_JUNK + STRUCT_JUNK
SHAPE_JUNK: list[Any] = [
    [-1], [-1, 4], [4, -1], [-4, -4], [2**31, 2**31], [2**62], [2**62, 2**62], [2**63], [0],
    [], [1] * 64, [1] * 65, [3, 4, 5, 6, 7], [1.5], ["n"], [None], [True], [[1]], [0, 2**62],
    [2**20, 2**20], [-(2**62), -4], [2**40], [10**30], 5, "x", None, {"r": 0},
]  # fmt: skip
DTYPE_JUNK: list[Any] = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64",
    "complex64", "float128", "uint64", "object", "V8", "<f4", "", 1, None, ["float32"],
]  # fmt: skip
OFFSET_JUNK: list[Any] = [
    -1, -4, -64, -(2**62), 1, 2, 3, 63, 64, 65, 128, 4096, 2**31, 2**40, 2**62, 2**63, 2**64,
    10**30, 0.5, "0", None, [0], {"r": 0},
]  # fmt: skip
ALIGN_JUNK: list[Any] = [0, 1, 2, 3, 16, 63, 64, 65, 128, 4096, 4095, 8192, -64, 2**62, 2**63, 1.0]
ATTR_NAMES = [
    "axis", "axes", "keepdims", "exclude", "dtype", "newshape", "shape", "padding", "strides",
    "pool_size", "dilation", "groups", "k", "ret_type", "is_ascend", "begin", "end", "slice_mode",
    "indices_or_sections", "reps", "repeats", "fill_value", "a_min", "a_max", "transpose_a",
    "transpose_b", "epsilon", "center", "scale", "alpha", "pad_width", "pad_value", "layout",
    "ceil_mode", "count_include_pad", "mode", "units", "out_dtype", "bogus_attribute",
]  # fmt: skip
ATTR_JUNK: list[Any] = INT_JUNK + SCALAR_JUNK[:12] + [
    [], [0], [-1], [1, 1], [2**62, 2**62], [0, 0, 0, 0], [-1, -1, -1, -1], [1, 1, 1, 1],
    [2**31, 1], [100, 100], [1000000, 1000000], [[1, 2]], ["x"], [None], list(range(5000)),
    [0] * 65, [1.5, 2.5], "float32", "int64", "bool", "all", "indices", "values", "both",
]  # fmt: skip
SHAPE_PROGRAM_OPS = [
    "add", "sub", "mul", "floordiv", "mod", "min", "max", "eq", "ne", "lt", "le", "gt", "ge",
    "neg", "const", "pow", "", "ADD",
]  # fmt: skip
REF_KINDS = ["in", "out", "tmp", "const", "arg", "bogus", "", None, 1]


def _ops() -> list[str]:
    from vm.kernels.registry import registered_kernels

    return sorted(registered_kernels())


OPS: list[str] = []


def _instructions(meta: Any) -> list[tuple[int, int]]:
    return [(fi, pc) for fi, f in enumerate(meta["functions"]) for pc in range(len(f["code"]))]


def _ins_path(fi: int, pc: int) -> Path_:
    return ["functions", fi, "code", pc]


def _walk(value: Any, path: Path_) -> Iterator[tuple[Path_, Any]]:
    yield path, value
    if isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, [*path, i])
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, [*path, k])


def _reg_paths(meta: Any) -> list[Path_]:
    """Paths to every register operand ``{"r": n}`` of every instruction."""
    out = []
    for fi, pc in _instructions(meta):
        ins = meta["functions"][fi]["code"][pc]
        for k, v in enumerate(ins[1:], 1):
            for p, x in _walk(v, [*_ins_path(fi, pc), k]):
                if isinstance(x, dict) and "r" in x:
                    out.append(p)
    return out


def _imm_int_paths(meta: Any) -> list[Path_]:
    """Paths to every immediate int operand (not registers, not the opcode)."""
    out = []
    for fi, pc in _instructions(meta):
        ins = meta["functions"][fi]["code"][pc]
        for k, v in enumerate(ins[1:], 1):
            for p, x in _walk(v, [*_ins_path(fi, pc), k]):
                if isinstance(x, int) and not isinstance(x, bool) and p[-1] != "r":
                    out.append(p)
    return out


def _by_opcode(meta: Any, opcodes: tuple[int, ...]) -> list[tuple[int, int, list[Any]]]:
    return [
        (fi, pc, meta["functions"][fi]["code"][pc])
        for fi, pc in _instructions(meta)
        if meta["functions"][fi]["code"][pc][0] in opcodes
    ]


def _nregs(meta: Any, path: Path_) -> int:
    return meta["functions"][path[1]]["num_registers"]


def _reg_value(rng: random.Random, n: int) -> Any:
    if rng.random() < 0.6 and n:
        return rng.randrange(n)
    return rng.choice([-1, n, n + 1, 2**20, 2**31, 2**62, 2**63, 2**64, -(2**63)])


def _junk(rng: random.Random, pool: list[Any] | None = None) -> Any:
    return rng.choice(pool if pool is not None else ANY_JUNK)


def _int_tweak(rng: random.Random, v: int) -> int:
    return rng.choice([v + 1, v - 1, -v, v * 2, v + 64, v - 64, -1, 0, 1, 2**62, 2**63, 2**40])


class NoTarget(Exception):
    """The seed has nothing this kind could mutate (the generic kind is used instead)."""


Gen = Callable[[random.Random, Any, Seed], list[list[Any]]]


def g_opcode(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    fi, pc = rng.choice(_instructions(meta))
    ins = meta["functions"][fi]["code"][pc]
    if rng.random() < 0.6:  # an opcode of the same arity: gets past the operand count
        from vm.isa import SIGNATURES

        same = [int(op) for op, kinds in SIGNATURES.items() if len(kinds) == len(ins) - 1]
        value: Any = rng.choice(same)
    else:
        value = rng.choice([*range(21), -1, 21, 99, 2**63, "3", 1.0, True, None, [0]])
    return [["set", [*_ins_path(fi, pc), 0], value]]


def g_reg_index(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    paths = _reg_paths(meta)
    if not paths:
        raise NoTarget
    p = rng.choice(paths)
    return [["set", [*p, "r"], _reg_value(rng, _nregs(meta, p))]]


def g_reg_kind(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    paths = _reg_paths(meta)
    if not paths:
        raise NoTarget
    p = rng.choice(paths)
    parent, key = _resolve(meta, p)
    n = parent[key]["r"]
    value = rng.choice(
        [
            n,
            [n],
            str(n),
            f"%{n}",
            None,
            1.5,
            True,
            {"r": str(n)},
            {"r": n, "x": 0},
            {},
            [{"r": n}],
            {"r": [n]},
            {"r": float(n)},
            {"R": n},
            [[n]],
            {"r": None},
            _junk(rng),
        ]
    )
    return [["set", p, value]]


def g_reg_swap(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    paths = _reg_paths(meta)
    if len(paths) < 2:
        raise NoTarget
    a, b = rng.sample(paths, 2)
    if rng.random() < 0.5:
        return [["swap", a, b]]
    return [["copy", a, b]]


def g_operand(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    """Replace an operand by junk, by another instruction's operand, or swap two operands."""
    ins_list = [
        (fi, pc) for fi, pc in _instructions(meta) if len(meta["functions"][fi]["code"][pc]) > 1
    ]
    fi, pc = rng.choice(ins_list)
    ins = meta["functions"][fi]["code"][pc]
    k = rng.randrange(1, len(ins))
    r = rng.random()
    if r < 0.4:
        return [["set", [*_ins_path(fi, pc), k], _junk(rng)]]
    if r < 0.7:
        fj, pj = rng.choice(ins_list)
        other = meta["functions"][fj]["code"][pj]
        return [
            ["copy", [*_ins_path(fj, pj), rng.randrange(1, len(other))], [*_ins_path(fi, pc), k]]
        ]
    if len(ins) > 2:
        a, b = rng.sample(range(1, len(ins)), 2)
        return [["swap", [*_ins_path(fi, pc), a], [*_ins_path(fi, pc), b]]]
    return [["insert", [*_ins_path(fi, pc), len(ins)], _junk(rng)]]


def g_instructions(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    """Delete, duplicate, move or swap instructions (jump targets now point elsewhere)."""
    fi, pc = rng.choice(_instructions(meta))
    code = meta["functions"][fi]["code"]
    r = rng.random()
    if r < 0.3:
        return [["delete", _ins_path(fi, pc)]]
    if r < 0.55:
        return [["insert", _ins_path(fi, rng.randrange(len(code) + 1)), code[pc]]]
    if r < 0.8 and len(code) > 1:
        other = rng.randrange(len(code))
        return [["swap", _ins_path(fi, pc), _ins_path(fi, other)]]
    fj, pj = rng.choice(_instructions(meta))  # an instruction of another function
    return [["insert", _ins_path(fi, pc), meta["functions"][fj]["code"][pj]]]


def g_int_imm(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    paths = _imm_int_paths(meta)
    if not paths:
        raise NoTarget
    p = rng.choice(paths)
    parent, key = _resolve(meta, p)
    v = parent[key]
    value = _int_tweak(rng, v) if rng.random() < 0.5 else _junk(rng, INT_JUNK)
    return [["set", p, value]]


def g_alloc_storage(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    sites = _by_opcode(meta, (5,))
    if not sites:
        raise NoTarget
    fi, pc, ins = rng.choice(sites)
    p = _ins_path(fi, pc)
    which = rng.choice(["size", "size", "align", "dtype"])
    if which == "size":
        size = ins[2]
        if isinstance(size, int) and rng.random() < 0.5:
            value: Any = rng.choice([0, 1, size // 2, size - 1, size - 4, size - 64, -size, -1])
        else:
            value = _junk(rng, [*INT_JUNK, 1.5, "64", None, [64], {"r": 0}])
        return [["set", [*p, 2], value]]
    if which == "align":
        return [["set", [*p, 3], _junk(rng, ALIGN_JUNK)]]
    return [["set", [*p, 4], _junk(rng, DTYPE_JUNK)]]


def g_alloc_tensor(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    sites = _by_opcode(meta, (6,))
    if not sites:
        raise NoTarget
    fi, pc, ins = rng.choice(sites)
    p = _ins_path(fi, pc)
    which = rng.choice(["offset", "offset", "shape", "shape", "shape", "dtype"])
    if which == "offset":
        off = ins[3]
        if isinstance(off, int) and rng.random() < 0.5:
            value: Any = rng.choice([off + 1, off + 4, off + 64, off - 1, off - 64, -off - 1])
        else:
            value = _junk(rng, OFFSET_JUNK)
        return [["set", [*p, 3], value]]
    if which == "shape":
        shape = ins[4]
        if isinstance(shape, list) and shape and rng.random() < 0.5:
            i = rng.randrange(len(shape))
            return [
                ["set", [*p, 4, i], _junk(rng, [-1, 0, 2, 3, 1000, 2**31, 2**62, 2**63, -(2**62)])]
            ]
        if isinstance(shape, list) and rng.random() < 0.3:  # wrong rank
            return [
                [
                    "set",
                    [*p, 4],
                    [*shape, rng.choice([1, 2, 0])] if rng.random() < 0.5 else shape[:-1],
                ]
            ]
        return [["set", [*p, 4], _junk(rng, SHAPE_JUNK)]]
    return [["set", [*p, 5], _junk(rng, DTYPE_JUNK)]]


def g_reshape(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    sites = _by_opcode(meta, (9,))
    if not sites:
        raise NoTarget
    fi, pc, _ins = rng.choice(sites)
    return [["set", [*_ins_path(fi, pc), 3], _junk(rng, [*SHAPE_JUNK, [1, 2, 3], [0, 0]])]]


def g_jump(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    sites = _by_opcode(meta, (12, 13))
    if not sites:  # make one: a jump somewhere, at some pc
        fi, pc = rng.choice(_instructions(meta))
        n = len(meta["functions"][fi]["code"])
        return [["insert", _ins_path(fi, pc), [12, rng.randrange(n + 1)]]]
    fi, pc, ins = rng.choice(sites)
    n = len(meta["functions"][fi]["code"])
    value = rng.choice([-1, n, n - 1, 0, pc, pc + 1, rng.randrange(n), 2**63, "x", None, 1.5])
    return [["set", [*_ins_path(fi, pc), len(ins) - 1], value]]


def _attr_paths(meta: Any) -> list[Path_]:
    out: list[Path_] = []
    for ki, k in enumerate(meta["kernels"]):
        if k.get("kind") == "op":
            out.append(["kernels", ki, "attrs"])
        else:
            out += [["kernels", ki, "steps", j, "attrs"] for j in range(len(k.get("steps", [])))]
    out += [["shape_funcs", i, "attrs"] for i in range(len(meta["shape_funcs"]))]
    return out


def g_attrs(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    paths = _attr_paths(meta)
    if not paths:
        raise NoTarget
    p = rng.choice(paths)
    parent, key = _resolve(meta, p)
    attrs = parent[key]
    names = list(attrs)
    r = rng.random()
    if names and r < 0.55:
        name = rng.choice(names)
        v = attrs[name]
        if isinstance(v, list) and v and rng.random() < 0.4:
            return [["set", [*p, name, rng.randrange(len(v))], _junk(rng, ATTR_JUNK)]]
        if isinstance(v, int) and not isinstance(v, bool) and rng.random() < 0.4:
            return [["set", [*p, name], _int_tweak(rng, v)]]
        return [["set", [*p, name], _junk(rng, ATTR_JUNK)]]
    if names and r < 0.7:
        return [["delete", [*p, rng.choice(names)]]]
    if r < 0.8:
        return [["set", p, _junk(rng, [[], None, 1, "x", [["axis", 0]]])]]
    return [["set", [*p, rng.choice(ATTR_NAMES)], _junk(rng, ATTR_JUNK)]]


def g_kernel_entry(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    if not meta["kernels"]:
        raise NoTarget
    ki = rng.randrange(len(meta["kernels"]))
    k = meta["kernels"][ki]
    p = ["kernels", ki]
    r = rng.random()
    if r < 0.4:
        field_ = "op" if k.get("kind") == "op" else "name"
        return [["set", [*p, field_], rng.choice(OPS) if rng.random() < 0.85 else _junk(rng)]]
    if r < 0.7:
        f = rng.choice(["num_inputs", "num_outputs"])
        v = k[f]
        return [["set", [*p, f], rng.choice([v + 1, v - 1, 0, -1, 4097, 2**62, True, 1.0, None])]]
    if r < 0.8:
        return [["set", [*p, "kind"], rng.choice(["op", "fused", "", None, 1])]]
    if r < 0.9 and len(meta["kernels"]) > 1:
        kj = rng.randrange(len(meta["kernels"]))
        return [["swap", ["kernels", ki], ["kernels", kj]]]
    return [["delete", p] if rng.random() < 0.5 else ["insert", p, copy.deepcopy(k)]]


def _fused(meta: Any) -> list[int]:
    return [i for i, k in enumerate(meta["kernels"]) if k.get("kind") == "fused"]


def _ref(rng: random.Random) -> Any:
    if rng.random() < 0.1:
        return _junk(rng)
    return [rng.choice(REF_KINDS), rng.choice([-1, 0, 0, 1, 1, 2, 3, 99, 2**62, 2**63, True, 1.0])]


def g_fused_step(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    fused = [i for i in _fused(meta) if meta["kernels"][i]["steps"]]
    if not fused:
        raise NoTarget
    ki = rng.choice(fused)
    steps = meta["kernels"][ki]["steps"]
    j = rng.randrange(len(steps))
    p = ["kernels", ki, "steps", j]
    step = steps[j]
    r = rng.random()
    if r < 0.2:
        return [["set", [*p, "op"], rng.choice(OPS) if rng.random() < 0.9 else _junk(rng)]]
    if r < 0.5 and step["inputs"]:
        i = rng.randrange(len(step["inputs"]))
        inp = step["inputs"][i]
        if isinstance(inp, list) and inp and isinstance(inp[0], list) and rng.random() < 0.5:
            return [["set", [*p, "inputs", i, rng.randrange(len(inp))], _ref(rng)]]
        if rng.random() < 0.3:
            return [["set", [*p, "inputs", i, 1], _int_tweak(rng, 0)]]
        return [
            ["set", [*p, "inputs", i], _ref(rng) if rng.random() < 0.8 else [_ref(rng), _ref(rng)]]
        ]
    if r < 0.65:
        return [["set", [*p, "outputs", 0], _ref(rng)]]
    if r < 0.75:
        return [
            ["insert", [*p, "inputs", 0], _ref(rng)]
            if rng.random() < 0.5
            else ["delete", [*p, "inputs", 0]]
        ]
    if r < 0.85 and len(steps) > 1:
        return [["swap", p, ["kernels", ki, "steps", rng.randrange(len(steps))]]]
    if r < 0.93:
        return [["delete", p]]
    return [["insert", p, copy.deepcopy(step)]]


def g_runtime_attrs(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    """The attribute entries an op kernel or a fused step fills at run time (issue 30): a
    wrong name, index or count, junk, or the input of their values moved or dropped."""
    sites = [["kernels", i] for i, k in enumerate(meta["kernels"]) if "runtime_attrs" in k]
    sites += [
        ["kernels", i, "steps", j]
        for i, k in enumerate(meta["kernels"])
        for j, st in enumerate(k.get("steps", []))
        if "runtime_attrs" in st
    ]
    if not sites:
        raise NoTarget
    p = rng.choice(sites)
    node: Any = meta
    for key in p:
        node = node[key]
    slots = node["runtime_attrs"]
    r = rng.random()
    if r < 0.2:
        return [["set", [*p, "runtime_attrs", 0, 0], rng.choice(["begin", "end", "strides", "x"])]]
    if r < 0.4:
        return [["set", [*p, "runtime_attrs", 0, 1], rng.choice([-1, 0, 1, 2, 99, True, 1.5])]]
    if r < 0.55:
        return [["insert", [*p, "runtime_attrs", 0], copy.deepcopy(rng.choice(slots))]]
    if r < 0.65:
        return [["delete", [*p, "runtime_attrs", 0]]]
    if r < 0.75:
        return [["set", [*p, "runtime_attrs"], _junk(rng)]]
    if r < 0.85:
        return [["delete", [*p, "runtime_attrs"]]]
    if len(p) == 2:
        v = node["num_inputs"]
        return [["set", [*p, "num_inputs"], rng.choice([v - 1, v + 1, 0])]]
    return [["set", [*p, "inputs", len(node["inputs"]) - 1], _ref(rng)]]


def g_scratch(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    fused = _fused(meta)
    if not fused:
        raise NoTarget
    ki = rng.choice(fused)
    scratch = meta["kernels"][ki]["scratch"]
    p = ["kernels", ki, "scratch"]
    shapes = [
        ["like", ["in", 0]], ["like", ["out", 0]], ["like", ["tmp", 0]], ["like", ["const", 0]],
        ["like", ["in", 5]], ["like", ["tmp", 7]], ["arg", 0], ["arg", 1], ["arg", -1], ["arg", True],
        ["arg", 2**62], ["input", 0], ["input", 1], ["input", -1], ["input", 2**62],
        ["static", [4]], ["static", [-1]], ["static", [2**40]], ["static", [2**62, 2**62]],
        ["static", []], ["static", [0]], ["shape_func", 0, 0], ["shape_func", 0, 1],
        ["shape_func", 99, 0], ["shape_func", 0, -1], ["like"], ["arg"], [], ["bogus", 0],
        ["like", ["in", 0], 1], "like", None, ["like", "in"],
    ]  # fmt: skip
    if not scratch or rng.random() < 0.25:
        spec = {"dtype": rng.choice(DTYPE_JUNK[:9]), "shape": rng.choice(shapes)}
        return [["insert", [*p, len(scratch) if rng.random() < 0.7 else 0], spec]]
    t = rng.randrange(len(scratch))
    r = rng.random()
    if r < 0.3:
        return [["set", [*p, t, "dtype"], _junk(rng, DTYPE_JUNK)]]
    if r < 0.85:
        return [["set", [*p, t, "shape"], rng.choice(shapes)]]
    return [["delete", [*p, t]]]


def g_shape_program(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    progs = meta["shape_programs"]
    if not progs:
        raise NoTarget
    pi = rng.randrange(len(progs))
    prog = progs[pi]
    p = ["shape_programs", pi]
    nodes = prog["nodes"]
    base = prog["num_inputs"]
    r = rng.random()
    if r < 0.5 and nodes:
        j = rng.randrange(len(nodes))
        node = nodes[j]
        me = base + j
        k = rng.randrange(len(node))
        if k == 0:
            value: Any = rng.choice(SHAPE_PROGRAM_OPS)
        elif node[0] == "const":
            value = rng.choice(
                [0, -1, 1, 2**61, 2**62, 2**63, 10**30, -(10**30), 1.5, "1", True, None]
            )
        else:
            value = rng.choice([me, me + 1, -1, 0, 2**62, 1.5, True, None, max(me - 1, 0)])
        return [["set", [*p, "nodes", j, k], value]]
    if r < 0.6:  # a division by zero, or modulo by zero, or a huge value
        node = rng.choice(
            [["floordiv", 0, base + len(nodes)], ["mod", 0, base + len(nodes)], ["mul", 0, 0]]
        )
        edits = [["insert", [*p, "nodes", len(nodes)], ["const", rng.choice([0, 2**61, -1])]]]
        edits.append(["insert", [*p, "nodes", len(nodes) + 1], node])
        if prog["outputs"]:
            o = rng.randrange(len(prog["outputs"]))
            edits.append(["set", [*p, "outputs", o], base + len(nodes) + 1])
        return edits
    if r < 0.68:  # repeated squaring: a number with astronomically many digits
        edits = [["insert", [*p, "nodes", len(nodes)], ["const", rng.choice([3, 2**61, 10**18])]]]
        for i in range(rng.choice([20, 40, 64])):
            v = base + len(nodes) + i
            edits.append(["insert", [*p, "nodes", len(nodes) + 1 + i], ["mul", v, v]])
        if prog["outputs"]:
            o = rng.randrange(len(prog["outputs"]))
            last = base + len(nodes) + len(edits) - 1
            out = prog["outputs"][o]
            value = [last] * len(out) if isinstance(out, list) else last
            edits.append(["set", [*p, "outputs", o], value])
        return edits
    if r < 0.85 and prog["outputs"]:
        o = rng.randrange(len(prog["outputs"]))
        out = prog["outputs"][o]
        top = base + len(nodes)
        if isinstance(out, list) and out and rng.random() < 0.5:
            value = rng.choice([top, -1, 0, 2**62, [0], 1.5])
            return [["set", [*p, "outputs", o, rng.randrange(len(out))], value]]
        value = rng.choice([top, top - 1, -1, 0, [0, 0], [], [top], [[0]], None, 1.5, "0"])
        return [["set", [*p, "outputs", o], value]]
    if r < 0.93:
        v = prog["num_inputs"]
        return [["set", [*p, "num_inputs"], rng.choice([v + 1, v - 1, 0, -1, 2**62, 4097, True])]]
    return [["set", [*p, "input_names"], rng.choice([[], [1], ["n"] * 5000, None, "n"])]]


def g_shape_func(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    sfs = meta["shape_funcs"]
    if not sfs:
        raise NoTarget
    i = rng.randrange(len(sfs))
    from shape_funcs.registry import registered_ops

    if rng.random() < 0.6:
        return [
            ["set", ["shape_funcs", i, "op"], rng.choice([*sorted(registered_ops()), "nope", 1])]
        ]
    return g_attrs(rng, {"kernels": [], "shape_funcs": sfs}, seed)


def g_function(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    funcs = meta["functions"]
    fi = rng.randrange(len(funcs))
    f = funcs[fi]
    p = ["functions", fi]
    r = rng.random()
    if r < 0.25:
        n, k = f["num_registers"], len(f["params"])
        value = rng.choice(
            [n - 1, n + 1, k, k - 1, 0, -1, 2**20, 2**20 + 1, 2**62, n * 2, "5", 5.0, None]
        )
        return [["set", [*p, "num_registers"], value]]
    if r < 0.5 and f["params"]:
        j = rng.randrange(len(f["params"]))
        t = f["params"][j]["type"]
        q = [*p, "params", j, "type"]
        s = rng.random()
        if s < 0.3 and "tensor" in t:
            return [["set", [*q, "tensor", 0], _junk(rng, DTYPE_JUNK)]]
        if s < 0.6 and "tensor" in t:
            dims = t["tensor"][1]
            if dims and rng.random() < 0.6:
                value = rng.choice(
                    [-1, 0, 1, 2**62, 2**63, "n", "m", "?", "", 1.5, None, [1], "x" * 70000]
                )
                return [["set", [*q, "tensor", 1, rng.randrange(len(dims))], value]]
            return [
                [
                    "set",
                    [*q, "tensor", 1],
                    rng.choice([[], ["n"], [1, 1], ["n", "n", "n"], [0] * 65, None, "n"]),
                ]
            ]
        value = rng.choice([
            {"tuple": []}, {"tuple": [t]}, {"tuple": [t, t]}, {"tensor": ["float32", []]},
            {"tensor": ["float32", ["n"]]}, {"tensor": ["int64", []]}, None, {}, [], {"tensor": []},
            json.loads('{"tuple": [' * 15 + "]}" * 15),
        ])  # fmt: skip
        return [["set", q, value]]
    if r < 0.6 and f["params"]:
        j = rng.randrange(len(f["params"]))
        if rng.random() < 0.5:
            return [["delete", [*p, "params", j]]]
        return [["insert", [*p, "params", j], copy.deepcopy(f["params"][j])]]
    if r < 0.7:
        names = [g["name"] for g in funcs]
        return [["set", [*p, "name"], rng.choice([*names, "", "main2", None, 1])]]
    if r < 0.78:
        return [
            ["set", [*p, "ret"], _junk(rng, [None, {}, {"tuple": []}, {"tensor": ["bool", []]}, 1])]
        ]
    if r < 0.85:
        code = f["code"]
        return [
            [
                "set",
                [*p, "code"],
                rng.choice([[], code[:-1], code[: len(code) // 2], [[14, {"r": 0}]]]),
            ]
        ]
    if r < 0.93 and len(funcs) > 1:
        return [["swap", p, ["functions", rng.randrange(len(funcs))]]]
    if rng.random() < 0.5:
        return [["delete", p]]
    return [["insert", ["functions", len(funcs)], copy.deepcopy(f)]]


def g_constant(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    consts = meta["constants"]
    if not consts:
        raise NoTarget
    ci = rng.randrange(len(consts))
    c = consts[ci]
    p = ["constants", ci]
    _, blob = split_file(seed.data)
    which = rng.choice(["dtype", "shape", "shape", "offset", "offset", "swap"])
    if which == "dtype":
        return [["set", [*p, "dtype"], _junk(rng, DTYPE_JUNK)]]
    if which == "shape":
        s = c["shape"]
        value = rng.choice(
            [
                [],
                [1],
                [2],
                [len(blob)],
                [len(blob) + 1],
                [-1],
                [2**62],
                [0, 2**62],
                [2**31, 2**31],
                [1] * 65,
                [1] * 64,
                None,
                [1.0],
            ]
        )
        if s and rng.random() < 0.4:
            return [["set", [*p, "shape", rng.randrange(len(s))], rng.choice([0, 2, 3, -1, 2**62])]]
        return [["set", [*p, "shape"], value]]
    if which == "offset":
        o = c["offset"]
        value = rng.choice(
            [o + 1, o - 1, o + 64, -1, len(blob), len(blob) - 1, 2**63, 2**64, 10**30, 0, "0", None]
        )
        return [["set", [*p, "offset"], value]]
    if len(consts) > 1:
        return [["swap", p, ["constants", rng.randrange(len(consts))]]]
    return [["insert", p, copy.deepcopy(c)]]


def g_check(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    sites = _by_opcode(meta, (18, 19, 8, 11, 2))
    if not sites:
        raise NoTarget
    fi, pc, ins = rng.choice(sites)
    p = _ins_path(fi, pc)
    op = ins[0]
    if op == 18:
        k = rng.choice([1, 2, 3, 4])
        pools = {
            1: INT_JUNK,
            2: ["==", "!=", "<", "<=", ">", ">=", "=", "", None],
            3: INT_JUNK,
            4: ["{a}{b}" * 3000, "{", "%s", 1, None, "x" * 70000],
        }
        return [["set", [*p, k], _junk(rng, pools[k])]]
    if op == 19:
        k = rng.choice([2, 4, 5, 6])
        return [["set", [*p, k], _junk(rng, INT_JUNK + SCALAR_JUNK)]]
    if op == 8:
        return [["set", [*p, 3], _junk(rng, [-1, -2, 1, 2, 3, 63, 64, -64, -65, 2**62])]]
    if op == 11:
        return [["set", [*p, 3], _junk(rng, [-1, -2, 1, 2, 3, 5, 99, 2**62, -(2**62)])]]
    return [["set", [*p, 2], _junk(rng, INT_JUNK)]]


def _plausible_operand(rng: random.Random, kind: Any, nregs: int, meta: Any, n_code: int) -> Any:
    from vm.isa import Kind

    def reg() -> dict[str, int]:
        return {"r": rng.randrange(max(nregs, 1))}

    tables = {
        Kind.CONST: "constants",
        Kind.FUNC: "functions",
        Kind.KERNEL: "kernels",
        Kind.PROGRAM: "shape_programs",
        Kind.SHAPE_FUNC: "shape_funcs",
    }
    if kind in (Kind.DST, Kind.SRC):
        return reg()
    if kind in (Kind.SRCS, Kind.DSTS):
        return [reg() for _ in range(rng.randrange(4))]
    if kind == Kind.INT:
        return rng.choice([0, 1, 2, -1, 64, 4, 2**62])
    if kind == Kind.VAL:
        return reg() if rng.random() < 0.5 else rng.choice([0, 1, 4, 64, 2**40, 2**62])
    if kind == Kind.SHAPE:
        return (
            reg() if rng.random() < 0.4 else rng.choice([[], [1], [4], [2, 3], [2**31, 2**31], [0]])
        )
    if kind in tables:
        return rng.randrange(max(len(meta[tables[kind]]), 1))
    if kind == Kind.TARGET:
        return rng.randrange(n_code + 1)
    if kind == Kind.DTYPE:
        return rng.choice(DTYPE_JUNK[:9])
    if kind == Kind.STR:
        return rng.choice(["x", "{a} {b}", ""])
    if kind == Kind.CMP:
        return rng.choice(["==", "!=", "<", "<=", ">", ">="])
    return 0


def g_splice(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    """Insert a well-formed instruction (plausible operands of its opcode's kinds), so that the
    mutant passes the structural checks and tests what the register-kind analysis allows."""
    from vm.isa import SIGNATURES

    fi, pc = rng.choice(_instructions(meta))
    f = meta["functions"][fi]
    op = rng.choice(list(SIGNATURES))
    kinds = SIGNATURES[op]
    ins = [int(op)] + [
        _plausible_operand(rng, k, f["num_registers"], meta, len(f["code"])) for k in kinds
    ]
    if rng.random() < 0.5:
        return [["insert", _ins_path(fi, pc), ins]]
    return [["set", _ins_path(fi, pc), ins]]


def g_junk_node(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    """Any node of the metadata replaced by junk."""
    nodes = [p for p, _ in _walk(meta, []) if p]
    p = rng.choice(nodes)
    return [["set", p, _junk(rng)] if rng.random() < 0.85 else ["delete", p]]


def g_combo(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    edits: list[list[Any]] = []
    for _ in range(rng.randint(2, 3)):
        gen = rng.choice(JSON_GENERATORS)
        with contextlib.suppress(NoTarget):
            edits += gen(rng, meta, seed)
    return edits


# Byte-level kinds ----------------------------------------------------------------------------


def g_bitflip(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    n = len(seed.data)
    return [["flip", [[rng.randrange(n), rng.randrange(8)] for _ in range(rng.randint(1, 4))]]]


def g_bitflip_crc(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    meta_len, blob_len = HEADER.unpack_from(seed.data)[3:5]
    blob_at = _align(64 + meta_len)
    flips = []
    for _ in range(rng.randint(1, 3)):
        if blob_len and rng.random() < 0.3:
            flips.append([blob_at + rng.randrange(blob_len), rng.randrange(8)])
        else:
            flips.append([64 + rng.randrange(meta_len), rng.randrange(7)])
    return [["flip", flips], ["crc"]]


def g_digit(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    """A digit of the metadata text changed (usually still valid JSON), CRC fixed."""
    text, _ = split_file(seed.data)
    digits = [i for i, c in enumerate(text) if 48 <= c <= 57]
    edits: list[list[Any]] = []
    for _ in range(rng.randint(1, 2)):
        i = rng.choice(digits)
        new = rng.choice(b"0123456789-" if text[i - 1 : i] in (b",", b"[", b":") else b"0123456789")
        edits.append(["write", 64 + i, bytes([new]).hex()])
    return [*edits, ["crc"]]


def g_truncate(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    n = len(seed.data)
    return [["truncate", rng.choice([rng.randrange(n), rng.randrange(min(n, 200)), n - 1])]]


def g_truncate_fixed(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    """The metadata or the blob cut short, with the header's lengths and CRC made consistent."""
    text, blob = split_file(seed.data)
    if rng.random() < 0.6 or not blob:
        cut = rng.randrange(len(text))
        data = assemble(text[:cut], blob)
    else:
        data = assemble(text, blob[: rng.randrange(len(blob))])
    # Expressed as a truncation of the file and header edits, so that it replays from the seed.
    return [["truncate", 0], ["append", data.hex()]]


def g_header(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    meta_len, blob_len = HEADER.unpack_from(seed.data)[3:5]
    field_ = rng.choice(["version", "flags", "meta", "blob", "zero", "magic"])
    if field_ == "version":
        return [["header", 8, "<I", rng.choice([0, 2, 2**32 - 1])]]
    if field_ == "flags":
        return [["header", 12, "<I", rng.choice([1, 2**31])]]
    if field_ == "meta":
        v = rng.choice([meta_len + 1, meta_len - 1, 0, 2**28, 2**28 + 1, 2**64 - 1, meta_len + 64])
        return [["header", 16, "<Q", max(v, 0)], *([["crc"]] if rng.random() < 0.5 else [])]
    if field_ == "blob":
        v = rng.choice([blob_len + 1, max(blob_len - 1, 0), 0, 2**63, 2**64 - 1])
        return [["header", 24, "<Q", v], *([["crc"]] if rng.random() < 0.5 else [])]
    if field_ == "zero":
        return [["header", 36 + rng.randrange(28), "<B", rng.randrange(1, 256)]]
    return [["header", rng.randrange(8), "<B", rng.randrange(256)]]


def _main_index(meta: Any) -> int:
    names = [f["name"] for f in meta["functions"]]
    return names.index("main") if "main" in names else 0


def g_deep_tuple(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    """Crafted: ``main`` nests a tuple N deep in straight-line code and returns it."""
    fi = _main_index(meta)
    n = rng.choice([500, 3000, 20000, 60000])
    code = [[10, {"r": 0}, [{"r": 0}]]] * n + [[14, {"r": 0}]]
    return [["set", ["functions", fi, "code"], code]]


def g_tuple_growth(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    """Crafted: ``main`` grows a tuple by sharing: ``%0 = tuple(%0 x w)`` in a loop that jumps
    back forever, or in ``levels`` straight-line steps (w**levels values as a tree)."""
    fi = _main_index(meta)
    w = rng.choice([1, 2, 10, 100])
    grow = [10, {"r": 0}, [{"r": 0}] * w]
    if rng.random() < 0.5:
        code = [grow, [12, 0]]
    else:
        code = [grow] * rng.choice([2, 3, 8, 40]) + [[14, {"r": 0}]]
    return [["set", ["functions", fi, "code"], code]]


def g_frame_blowup(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    """Crafted: ``main`` calls itself (a branch that never runs returns), with a large register
    file: every frame is ``num_registers`` slots, whatever the code uses."""
    fi = _main_index(meta)
    f = meta["functions"][fi]
    k = len(f["params"])
    args = [{"r": i} for i in range(k)]
    code = [
        [2, {"r": k}, 1],
        [13, {"r": k}, 4],
        [3, {"r": k + 1}, fi, args],
        [14, {"r": k + 1}],
        [14, {"r": 0}],
    ]
    nregs = rng.choice([2**12, 2**16, 2**18, 2**20])
    return [
        ["set", ["functions", fi, "code"], code],
        ["set", ["functions", fi, "num_registers"], nregs],
    ]


def g_blob_values(rng: random.Random, meta: Any, seed: Seed) -> list[list[Any]]:
    """Constants' bytes overwritten with extreme values (CRC fixed): they load, then run."""
    consts = meta["constants"]
    if not consts:
        raise NoTarget
    c = rng.choice(consts)
    dt = np.dtype(c["dtype"]).newbyteorder("<")
    count = math.prod(c["shape"])
    if not count:
        raise NoTarget
    if dt.kind == "f":
        pool = [np.nan, np.inf, -np.inf, 1e38, -1e38, 0.0, -0.0, 1e-45]
    elif dt.kind == "b":
        pool = [0, 1]
    else:
        info = np.iinfo(dt)
        pool = [info.min, info.max, -1, 0, 1, 2, info.max // 2, 7, 100, -100]
    values = np.array([rng.choice(pool) for _ in range(count)]).astype(dt)
    meta_len = HEADER.unpack_from(seed.data)[3]
    at = _align(64 + meta_len) + c["offset"]
    return [["write", at, values.tobytes().hex()], ["crc"]]


JSON_GENERATORS: list[Gen] = [
    g_opcode, g_reg_index, g_reg_kind, g_reg_swap, g_operand, g_instructions, g_int_imm,
    g_alloc_storage, g_alloc_tensor, g_reshape, g_jump, g_attrs, g_kernel_entry, g_fused_step,
    g_scratch, g_shape_program, g_shape_func, g_function, g_constant, g_check, g_splice,
    g_junk_node, g_runtime_attrs,
]  # fmt: skip

#: kind -> (generator, weight)
KINDS: dict[str, tuple[Gen, float]] = {
    "opcode": (g_opcode, 4),
    "reg_index": (g_reg_index, 5),
    "reg_kind": (g_reg_kind, 4),
    "reg_swap": (g_reg_swap, 5),
    "operand": (g_operand, 5),
    "instructions": (g_instructions, 4),
    "int_imm": (g_int_imm, 4),
    "alloc_storage": (g_alloc_storage, 5),
    "alloc_tensor": (g_alloc_tensor, 6),
    "reshape": (g_reshape, 2),
    "jump": (g_jump, 3),
    "attrs": (g_attrs, 8),
    "kernel_entry": (g_kernel_entry, 4),
    "fused_step": (g_fused_step, 5),
    "scratch": (g_scratch, 4),
    "runtime_attrs": (g_runtime_attrs, 3),
    "shape_program": (g_shape_program, 6),
    "shape_func": (g_shape_func, 2),
    "function": (g_function, 4),
    "constant": (g_constant, 4),
    "check": (g_check, 3),
    "splice": (g_splice, 5),
    "junk_node": (g_junk_node, 3),
    "combo": (g_combo, 5),
    "bitflip": (g_bitflip, 2),
    "bitflip_crc": (g_bitflip_crc, 3),
    "digit": (g_digit, 4),
    "truncate": (g_truncate, 1),
    "truncate_fixed": (g_truncate_fixed, 1),
    "header": (g_header, 1),
    "blob_values": (g_blob_values, 3),
    "deep_tuple": (g_deep_tuple, 0.5),
    "tuple_growth": (g_tuple_growth, 0.5),
    "frame_blowup": (g_frame_blowup, 0.5),
}


def make_mutation(seeds: list[Seed], seed: int, index: int) -> dict[str, Any]:
    """Mutation ``index`` of run ``seed``: a pure function of both (and the corpus)."""
    if not OPS:
        OPS.extend(_ops())
    rng = random.Random(f"loader-fuzz:{seed}:{index}")
    s = seeds[rng.randrange(len(seeds))]
    names = list(KINDS)
    kind = rng.choices(names, weights=[KINDS[k][1] for k in names])[0]
    try:
        edits = KINDS[kind][0](rng, s.meta, s)
    except NoTarget:
        kind = "junk_node"
        edits = g_junk_node(rng, s.meta, s)
    return {"seed": s.name, "kind": kind, "edits": edits}


def describe(edits: list[list[Any]], limit: int = 300) -> str:
    parts = []
    for e in edits:
        if e[0] == "append":
            parts.append(f"append {len(e[1]) // 2} bytes")
            continue
        text = json.dumps(e)
        parts.append(text if len(text) <= limit else text[:limit] + "...")
    return "; ".join(parts)


# ---- the worker: bounds checks and one mutant's run --------------------------------------------


class _Checks:
    """In the worker: a record of every view made outside its storage (or buffer)."""

    def __init__(self) -> None:
        self.violations: list[str] = []
        self.storages: Any = None

    def install(self) -> None:
        import weakref

        import vm.decode
        import vm.kernels.conv
        import vm.kernels.nn
        import vm.memory.allocator
        import vm.memory.storage
        from vm.memory.storage import Storage

        checks = self
        self.storages = weakref.WeakValueDictionary()
        storages = self.storages

        class TrackedStorage(Storage):
            """A storage whose ``buf`` is known, so a view of it is checked against ``nbytes``."""

            def __init__(self, capacity: int, alignment: int = 64) -> None:
                super().__init__(capacity, alignment)
                storages[id(self.buf)] = self

        vm.memory.allocator.Storage = TrackedStorage  # type: ignore[misc]
        real_ndarray = np.ndarray

        def checked_ndarray(
            shape: Any,
            dtype: Any = float,
            buffer: Any = None,
            offset: Any = 0,
            *rest: Any,
            **kw: Any,
        ) -> Any:
            if buffer is not None and isinstance(offset, int) and offset < 0:
                checks.violations.append(f"np.ndarray with negative offset {offset}, shape {shape}")
                raise IndexError("negative offset (loader_fuzz check)")
            arr = real_ndarray(shape, dtype, buffer, offset, *rest, **kw)
            if buffer is not None:
                st = storages.get(id(buffer))
                limit = st.nbytes if st is not None else _extent(buffer)
                end = int(offset) + arr.nbytes
                if end > limit:
                    checks.violations.append(
                        f"view {arr.dtype}{arr.shape} at offset {offset} ends at byte {end}, "
                        f"but its {'storage holds' if st is not None else 'buffer has'} {limit}"
                    )
                    raise IndexError("view outside its storage (loader_fuzz check)")
            return arr

        vm.decode.np = _numpy_with_ndarray(checked_ndarray)  # type: ignore[assignment]
        vm.memory.storage.np = _numpy_with_ndarray(checked_ndarray)  # type: ignore[assignment]
        real_as_strided = vm.kernels.nn.as_strided

        def checked_as_strided(x: Any, *a: Any, **k: Any) -> Any:
            out = real_as_strided(x, *a, **k)
            if not within_owner(out):
                checks.violations.append(
                    f"as_strided view {out.shape} strides {out.strides} of {x.shape} "
                    f"strides {x.strides} leaves the array's memory"
                )
                raise IndexError("as_strided outside its array (loader_fuzz check)")
            return out

        vm.kernels.nn.as_strided = checked_as_strided

        def checked_window(shape: Any, dtype: Any, buffer: Any, *rest: Any) -> Any:
            # ``windows`` over a contiguous input: numpy's constructor checks the extent itself;
            # checked again here as every other view is
            out = real_ndarray(shape, dtype, buffer, *rest)
            if not within_owner(out):
                checks.violations.append(f"window view {out.shape} leaves its array's memory")
                raise IndexError("window view outside its array (loader_fuzz check)")
            return out

        vm.kernels.nn.np = _numpy_with_ndarray(checked_window)  # type: ignore[assignment]
        # the channels-last depthwise path builds its tap views the same way
        vm.kernels.conv.np = _numpy_with_ndarray(checked_window)  # type: ignore[assignment]


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _selftest_oob() -> None:
    """Make a view past a storage's end through the checked path (the check must see it)."""
    import contextlib

    import vm.decode
    from vm.memory.allocator import NaiveAllocator

    st = NaiveAllocator().alloc(64)
    st.nbytes = 16  # as the pool does: a 64-byte buffer lent for 16 bytes
    with contextlib.suppress(IndexError):
        vm.decode.np.ndarray((8,), np.float32, st.buf, 0)  # 32 bytes of a 16-byte storage


def _extent(buffer: Any) -> int:
    return memoryview(buffer).nbytes


def _owner_bounds(a: np.ndarray) -> tuple[int, int] | None:
    base: Any = a
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, np.ndarray):
        lo = base.__array_interface__["data"][0]
        return lo, lo + base.nbytes
    try:
        view = np.frombuffer(base, dtype=np.uint8)
    except (TypeError, ValueError, BufferError):
        return None
    lo = view.__array_interface__["data"][0]
    return lo, lo + view.nbytes


def _numpy_with_ndarray(ndarray: Any) -> Any:
    """numpy as a module sees it, but for ``np.ndarray``, which is ``ndarray`` (a checking
    constructor: the bounds checks of the worker)."""

    class NumpyProxy:
        def __getattr__(self, name: str) -> Any:
            return ndarray if name == "ndarray" else getattr(np, name)

    return NumpyProxy()


def within_owner(a: np.ndarray) -> bool:
    """True if every byte ``a`` can address lies inside the memory of its ultimate base."""
    if a.size == 0:
        return True
    bounds = _owner_bounds(a)
    if bounds is None:
        return True
    from numpy.lib.array_utils import byte_bounds

    lo, hi = byte_bounds(a)
    return bounds[0] <= lo and hi <= bounds[1]


def _outputs_outside(value: Any) -> list[str]:
    bad, stack, seen = [], [value], 0
    while stack and seen < 100_000:
        v = stack.pop()
        seen += 1
        if isinstance(v, tuple):
            stack.extend(v)
        elif isinstance(v, np.ndarray) and not within_owner(v):
            bad.append(f"returned array {v.dtype}{v.shape} strides {v.strides} leaves its base")
    return bad


def _stage(e: BaseException) -> str:
    """How deep a refused mutant got: the innermost vm/ file of the traceback, and the message."""
    msg = str(e)
    files = []
    tb = e.__traceback__
    while tb is not None:
        files.append(Path(tb.tb_frame.f_code.co_filename).name)
        tb = tb.tb_next
    cause = e.__cause__
    while cause is not None and cause.__traceback__ is not None:
        tb = cause.__traceback__
        while tb is not None:
            files.append(Path(tb.tb_frame.f_code.co_filename).name)
            tb = tb.tb_next
        cause = cause.__cause__
    if "register_kinds.py" in files:
        return "kinds"
    if any(f in files for f in ("validate.py", "fused.py", "shape_program.py")):
        return "validate"
    if "checksum mismatch" in msg:
        return "crc"
    if "JSON" in msg or "nests" in msg or "nested too deeply" in msg:
        return "json"
    if any(
        w in msg
        for w in (
            "header",
            "magic",
            "version",
            "reserved",
            "padding",
            "exceeds the limit",
            "too short",
        )
    ):
        return "header"
    return "decode"


def _foreign(phase: str, e: BaseException) -> dict[str, Any]:
    tb = "".join(traceback.format_exception(e))
    return {
        "outcome": "FOREIGN",
        "phase": phase,
        "type": f"{type(e).__module__}.{type(e).__qualname__}",
        "message": str(e)[:2000],
        "traceback": tb[-6000:],
    }


def run_mutant(
    data: bytes,
    inputs: list[Any],
    checks: _Checks | None = None,
    run_timeout: float = RUN_TIMEOUT,
) -> dict[str, Any]:
    """Load ``data``; if it loads, run ``main`` unchecked, then sanitized (unless the unchecked
    run was stopped by its step or time bound: the sanitized run would only take as long again).
    One outcome dict."""
    from dynshape_errors import DynShapeError
    from vm import Executable, StepLimitError, VirtualMachine

    if checks is not None:
        checks.violations.clear()
    slow = SLOW_LOAD + SLOW_LOAD_PER_BYTE * len(data)
    # CPU time, not wall time: the bound is on the loader's work, and a worker sharing the
    # machine with other jobs (or niced) would otherwise be flagged for waiting its turn.
    # Wall-clock hangs are the parent's per-mutation timeout.
    t0 = time.process_time()
    try:
        exe = Executable.from_bytes(data)
    except DynShapeError as e:
        res = {
            "outcome": "refused",
            "stage": _stage(e),
            "type": type(e).__name__,
            "message": str(e)[:300],
        }
        dt = time.process_time() - t0
        if dt > slow:
            res = {
                "outcome": "HANG",
                "phase": "load",
                "message": f"load took {dt:.1f} s ({res['message']})",
            }
        return res
    except Exception as e:
        return _foreign("load", e)
    dt = time.process_time() - t0
    if dt > slow:
        return {"outcome": "HANG", "phase": "load", "message": f"load took {dt:.1f} s of CPU"}
    result: dict[str, Any] = {"outcome": "ok", "runs": []}
    for check_memory in (False, True):
        phase = "run(check_memory)" if check_memory else "run"
        t1 = time.process_time()  # CPU time, as for the load: not the machine's load
        try:
            m = VirtualMachine(
                exe,
                max_steps=MAX_STEPS,
                timeout=run_timeout,
                memory_limit=MEMORY_LIMIT,
                check_memory=check_memory,
            )
            stopped = False
            out = m.run(*_copy(inputs))
            bad = _outputs_outside(out)
            del out
            result["runs"].append("ok")
        except DynShapeError as e:
            bad = []
            stopped = isinstance(e, StepLimitError)
            result["runs"].append(type(e).__name__)
            if result["outcome"] == "ok":
                cause = type(e.__cause__).__name__ if e.__cause__ is not None else None
                result.update(
                    outcome="run_error", type=type(e).__name__, cause=cause, message=str(e)[:300]
                )
        except Exception as e:
            return _foreign(phase, e)
        dt = time.process_time() - t1
        if checks is not None and checks.violations:
            bad = bad + checks.violations[:5]
        if bad:
            return {"outcome": "OOB", "phase": phase, "message": "; ".join(bad)[:2000]}
        if dt > run_timeout + 1.0:
            return {
                "outcome": "HANG",
                "phase": phase,
                "message": f"{phase} took {dt:.1f} s of CPU (timeout {run_timeout})",
            }
        if stopped:
            break
    return result


def worker_main(
    corpus_path: str, seed: int, start: int, end: int, run_timeout: float = RUN_TIMEOUT
) -> None:
    """Run mutations ``start .. end-1``, one JSON line each on stdout."""
    import resource
    import warnings

    resource.setrlimit(resource.RLIMIT_AS, (WORKER_ADDRESS_SPACE, WORKER_ADDRESS_SPACE))
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    sys.setrecursionlimit(10_000)
    with open(corpus_path, "rb") as fh:
        seeds = _attach_meta([Seed(*t) for t in pickle.load(fh)])
    checks = _Checks()
    checks.install()
    out = sys.stdout
    # Self-test of the parent's watch (tests only): "crash:I,hang:J,oob:K" makes mutation I
    # abort the worker, J go silent, and K make a view outside its storage.
    selftest = dict(
        tuple(x.split(":")) for x in os.environ.get("LOADER_FUZZ_SELFTEST", "").split(",") if x
    )
    peak_limit = _peak_rss() + MEMORY_LIMIT + MEMORY_SLACK
    for i in range(start, end):
        if selftest.get("crash") == str(i):
            os.abort()
        if selftest.get("hang") == str(i):
            time.sleep(3600)
        mut = make_mutation(seeds, seed, i)
        s = next(x for x in seeds if x.name == mut["seed"])
        t0 = time.perf_counter()
        try:
            data = apply_mutation(s.data, mut["edits"])
            res = run_mutant(data, s.inputs, checks, run_timeout)
            if selftest.get("oob") == str(i):
                checks.violations.clear()
                _selftest_oob()
                res = {"outcome": "OOB", "phase": "selftest", "message": str(checks.violations)}
        except MemoryError as e:  # the worker's own address-space limit
            res = _foreign("worker", e)
        res.update(index=i, seed=mut["seed"], kind=mut["kind"], time=time.perf_counter() - t0)
        peak = _peak_rss()
        if peak > peak_limit and res["outcome"] not in ("FOREIGN", "OOB", "HANG"):
            # The process's peak is what the OS measures: start a fresh worker after this one.
            res = {
                **res,
                "outcome": "MEMORY",
                "message": f"peak RSS {peak >> 20} MiB, beyond memory_limit "
                f"({MEMORY_LIMIT >> 20} MiB) + {MEMORY_SLACK >> 20} MiB: "
                f"{res['outcome']} {res.get('type', '')} {res.get('message', '')[:200]}",
                "restart": True,
            }
        if res["outcome"] in ("FOREIGN", "OOB", "HANG", "MEMORY"):
            res["edits"] = describe(mut["edits"])
        out.write(json.dumps(res) + "\n")
        out.flush()
        if res.get("restart"):
            return


# ---- the parent --------------------------------------------------------------------------------


@dataclass
class Report:
    seed: int
    count: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    stages: Counter[str] = field(default_factory=Counter)
    by_kind: dict[str, Counter[str]] = field(default_factory=dict)
    by_seed: dict[str, Counter[str]] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)
    run_errors: Counter[str] = field(default_factory=Counter)
    elapsed: float = 0.0
    restarts: int = 0
    slowest: float = 0.0

    def add(self, res: dict[str, Any]) -> None:
        self.count += 1
        o = res["outcome"]
        self.outcomes[o] += 1
        if o == "refused":
            self.stages[res["stage"]] += 1
        if o == "run_error":
            cause = res.get("cause")
            self.run_errors[res.get("type", "?") + (f"({cause})" if cause else "")] += 1
        self.by_kind.setdefault(res.get("kind", "?"), Counter())[o] += 1
        self.by_seed.setdefault(res.get("seed", "?"), Counter())[o] += 1
        self.slowest = max(self.slowest, res.get("time", 0.0))
        if o in ("FOREIGN", "OOB", "CRASH", "HANG", "MEMORY"):
            self.findings.append(res)

    def table(self) -> str:
        cols = ["ok", "refused", "run_error", "FOREIGN", "OOB", "CRASH", "HANG", "MEMORY"]
        rate = self.count / self.elapsed if self.elapsed else 0.0
        lines = [
            f"{self.count} mutations (seed {self.seed}) in {self.elapsed:.1f} s "
            f"({rate:.0f}/s), {self.restarts} worker restarts, slowest mutation {self.slowest:.2f} s",
            "",
            "outcome      count",
        ]
        lines += [f"  {c:<10} {self.outcomes.get(c, 0):>7}" for c in cols]
        lines += [
            "",
            "refused at stage: " + ", ".join(f"{k} {v}" for k, v in self.stages.most_common()),
        ]
        lines += ["run errors: " + ", ".join(f"{k} {v}" for k, v in self.run_errors.most_common())]
        for title, table in (("kind", self.by_kind), ("seed", self.by_seed)):
            lines += ["", f"{'by ' + title:<24}" + "".join(f"{c:>10}" for c in cols)]
            for k in sorted(table):
                lines.append(f"  {k:<22}" + "".join(f"{table[k].get(c, 0):>10}" for c in cols))
        if self.findings:
            lines += ["", f"{len(self.findings)} findings:"]
            for f in self.findings:
                lines += ["", format_finding(f)]
        return "\n".join(lines)


def format_finding(f: dict[str, Any]) -> str:
    lines = [
        f"[{f['outcome']}] seed {f['run_seed']} index {f['index']}: program {f.get('seed')}, "
        f"kind {f.get('kind')}, phase {f.get('phase', '?')}",
        f"  edits: {f.get('edits', '?')}",
    ]
    if f.get("type"):
        lines.append(f"  {f['type']}: {f.get('message', '')[:500]}")
    elif f.get("message"):
        lines.append(f"  {f['message'][:500]}")
    if f.get("traceback"):
        tail = f["traceback"].strip().splitlines()[-12:]
        lines += ["  traceback (tail):"] + ["    " + t for t in tail]
    if f.get("stderr"):
        lines += ["  worker stderr (tail):"] + ["    " + t for t in f["stderr"].splitlines()[-12:]]
    lines.append(
        f"  reproduce: python tests/vm/loader_fuzz.py --replay {f['run_seed']}:{f['index']}"
        + (f"  (mutant saved: {f['file']})" if f.get("file") else "")
    )
    return "\n".join(lines)


def save_corpus(seeds: list[Seed], path: str) -> None:
    with open(path, "wb") as fh:  # plain tuples: the worker runs this file as __main__
        pickle.dump([(s.name, s.data, s.inputs) for s in seeds], fh)


def run_fuzz(
    seeds: list[Seed],
    count: int,
    seed: int = 0,
    start: int = 0,
    timeout: float = 20.0,
    findings_dir: str | None = None,
    progress: Callable[[Report], None] | None = None,
    deadline: float | None = None,
    run_timeout: float = RUN_TIMEOUT,
) -> Report:
    """Run mutations ``start .. start+count-1`` in worker subprocesses (see the module doc).
    ``deadline`` (a ``time.monotonic()`` value) stops early; the report counts what ran."""
    report = Report(seed)
    seeds = _attach_meta(seeds)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="loader_fuzz_") as tmp:
        corpus = os.path.join(tmp, "corpus.pkl")
        save_corpus(seeds, corpus)
        nxt, end = start, start + count
        env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        while nxt < end and (deadline is None or time.monotonic() < deadline):
            err_path = os.path.join(tmp, f"stderr{report.restarts}.txt")
            with open(err_path, "wb") as err:
                proc = subprocess.Popen(
                    [sys.executable, str(Path(__file__).resolve()), "--worker", corpus,
                     "--seed", str(seed), "--start", str(nxt), "--end", str(end),
                     "--run-timeout", str(run_timeout)],
                    stdout=subprocess.PIPE, stderr=err, env=env, cwd=str(HERE.parent.parent),
                )  # fmt: skip
            assert proc.stdout is not None
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            buf = b""
            failure: str | None = None
            restart = False
            # The first mutation also waits for the worker's start-up (imports, corpus).
            limit = timeout + 30.0
            last = time.monotonic()
            while nxt < end:
                if deadline is not None and time.monotonic() > deadline:
                    failure = "deadline"
                    break
                if not sel.select(timeout=1.0):
                    if time.monotonic() - last > limit:
                        failure = "HANG"
                        break
                    continue
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    failure = "restart" if restart else "CRASH"
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    res = json.loads(line)
                    assert res["index"] == nxt, (res["index"], nxt)
                    res["run_seed"] = seed
                    restart = bool(res.pop("restart", False))
                    if res["outcome"] in ("FOREIGN", "OOB", "HANG", "MEMORY"):
                        _save(res, seeds, findings_dir)
                    report.add(res)
                    nxt += 1
                    last = time.monotonic()
                    limit = timeout
                    if progress is not None:
                        report.elapsed = time.monotonic() - t0
                        progress(report)
            sel.close()
            if failure is not None and proc.poll() is None:
                proc.kill()  # the worker this loop started
            rc = proc.wait()
            proc.stdout.close()
            if failure in ("HANG", "CRASH") and nxt < end:
                mut = make_mutation(seeds, seed, nxt)
                stderr = Path(err_path).read_text(errors="replace")[-3000:]
                res = {
                    "outcome": failure,
                    "index": nxt,
                    "run_seed": seed,
                    "seed": mut["seed"],
                    "kind": mut["kind"],
                    "edits": describe(mut["edits"]),
                    "phase": "worker",
                    "message": (
                        f"no report within {timeout} s"
                        if failure == "HANG"
                        else f"worker exit code {rc}"
                    ),
                    "stderr": stderr,
                    "time": time.monotonic() - last,
                }
                _save(res, seeds, findings_dir)
                report.add(res)
                nxt += 1
                report.restarts += 1
            elif failure == "restart":
                report.restarts += 1
            elif failure == "deadline":
                break
    report.elapsed = time.monotonic() - t0
    return report


def _save(res: dict[str, Any], seeds: list[Seed], findings_dir: str | None) -> None:
    if findings_dir is None:
        return
    os.makedirs(findings_dir, exist_ok=True)
    mut = make_mutation(seeds, res["run_seed"], res["index"])
    s = next(x for x in seeds if x.name == mut["seed"])
    path = os.path.join(findings_dir, f"mutant_{res['run_seed']}_{res['index']}.dsvm")
    Path(path).write_bytes(apply_mutation(s.data, mut["edits"]))
    res["file"] = path


def mutant(
    seed: int, index: int, seeds: list[Seed] | None = None
) -> tuple[bytes, list[Any], dict[str, Any]]:
    """(bytes, inputs, mutation) of mutation ``index`` of run ``seed``: for reproducers."""
    seeds = _attach_meta(seeds or build_corpus())
    mut = make_mutation(seeds, seed, index)
    s = next(x for x in seeds if x.name == mut["seed"])
    return apply_mutation(s.data, mut["edits"]), s.inputs, mut


def replay(seed: int, index: int) -> None:
    """Run one mutation in this process, unchecked then sanitized, and show what escapes."""
    from vm import Executable, VirtualMachine

    data, inputs, mut = mutant(seed, index)
    print(f"program {mut['seed']}, kind {mut['kind']}\nedits: {describe(mut['edits'], 2000)}")
    exe = Executable.from_bytes(data)
    print(exe.bytecode)
    for check_memory in (False, True):
        m = VirtualMachine(
            exe, max_steps=MAX_STEPS, timeout=RUN_TIMEOUT, memory_limit=MEMORY_LIMIT,
            check_memory=check_memory,
        )  # fmt: skip
        try:
            print("result:", m.run(*_copy(inputs)))
        except Exception as e:
            from dynshape_errors import DynShapeError

            if not isinstance(e, DynShapeError):
                raise
            print(f"project error: {type(e).__name__}: {e}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--end", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per mutation")
    ap.add_argument(
        "--run-timeout", type=float, default=RUN_TIMEOUT, help="the VM's timeout per run"
    )
    ap.add_argument("--minutes", type=float, default=None, help="stop after this long")
    ap.add_argument("--findings", default=None, help="folder for mutants that fail")
    ap.add_argument("--worker", default=None, metavar="CORPUS")
    ap.add_argument("--replay", default=None, metavar="SEED:INDEX")
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args.worker, args.seed, args.start, args.end, args.run_timeout)
        return 0
    if args.replay:
        s, i = args.replay.split(":")
        replay(int(s), int(i))
        return 0
    seeds = build_corpus()
    deadline = time.monotonic() + args.minutes * 60 if args.minutes else None
    every = max(args.count // 20, 1)

    def progress(r: Report) -> None:
        if r.count % every == 0:
            print(
                f"  {r.count} done, {r.elapsed:.0f} s, {dict(r.outcomes)}",
                file=sys.stderr,
                flush=True,
            )

    report = run_fuzz(
        seeds,
        args.count,
        args.seed,
        args.start,
        args.timeout,
        args.findings,
        progress,
        deadline,
        args.run_timeout,
    )
    print(report.table())
    bad = sum(report.outcomes[o] for o in ("FOREIGN", "OOB", "CRASH", "HANG", "MEMORY"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent.parent))
    raise SystemExit(main())
