"""The executable: listing, signatures, save/load round trip, validation, and a fuzzed loader."""

from __future__ import annotations

import contextlib
import json
import random
import struct
import zlib
from functools import cache

import numpy as np
import pytest
from vm_testlib import elementwise_program

from tests.counting import python_calls
from vm import (
    Assembler,
    Executable,
    FormatError,
    FusedKernel,
    FusedStep,
    Instruction,
    Op,
    Ref,
    Reg,
    Scratch,
    ShapeProgramBuilder,
    VirtualMachine,
    tensor,
    tuple_type,
)
from vm.serialize import HEADER


def rich_program() -> Executable:
    """A program using most tables: constants of several dtypes, a fused kernel with scratch,
    a shape program, tuples, a call, a branch."""
    asm = Assembler()
    c_f = asm.const(np.linspace(-1, 1, 4, dtype=np.float32))
    c_b = asm.const(np.array([True, False, True, False]))
    c_i = asm.const(np.arange(6, dtype=np.int16).reshape(2, 3))
    asm.const(np.zeros((0, 3), np.float64))
    asm.const(np.array(3.5, np.float16))
    where = asm.kernel("where", num_inputs=3)
    fused = asm.fused(
        FusedKernel(
            "fused_mul_exp",
            2,
            1,
            (
                FusedStep("multiply", {}, (Ref("in", 0), Ref("const", c_f)), (Ref("tmp", 0),)),
                FusedStep("exp", {}, (Ref("tmp", 0),), (Ref("out", 0),)),
                FusedStep("add", {}, (Ref("out", 0), Ref("in", 1)), (Ref("out", 0),)),
            ),
            (Scratch("float32", ("like", Ref("in", 0))),),
        )
    )
    b = ShapeProgramBuilder(["n"])
    (n,) = b.inputs
    prog = asm.shape_program(b.build([n * 16, (n, 4), b.max(n - 1, 0) // 2 % 3]))
    helper = asm.function(
        "helper", [("x", tensor("float32", ("n", 4)))], tensor("float32", ("n", 4))
    )
    (x,) = helper.params
    (size, shape, _) = helper.shape_program(prog, [helper.dim(x, 0)])
    out = helper.alloc_tensor(helper.alloc_storage(size), 0, shape, "float32")
    helper.invoke(fused, [x, x], [out])
    helper.ret(out)
    main = asm.function(
        "main",
        [("x", tensor("float32", ("n", 4))), ("p", tuple_type(tensor("int64", ())))],
        tuple_type(tensor("float32", ("n", 4)), tensor("int16", (2, 3))),
    )
    x, p = main.params
    y = main.call("helper", [x])
    sel = main.empty((4,), "float32")
    main.invoke(where, [main.load_const(c_b), main.load_const(c_f), main.load_const(c_f)], [sel])
    main.ret(main.tuple([y, main.load_const(c_i), sel, main.get_item(p, 0)]))
    return asm.build()


def _check_rich(m: VirtualMachine) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    y, ints, sel, p = m.run(x, (np.array(4),))
    w = np.linspace(-1, 1, 4, dtype=np.float32)
    np.testing.assert_allclose(y, np.exp(x * w) + x, rtol=1e-6)
    np.testing.assert_array_equal(ints, np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(sel, w)
    assert p == 4


def test_round_trip_save_load_run(tmp_path):
    exe = rich_program()
    _check_rich(VirtualMachine(exe))
    path = tmp_path / "model.dsvm"
    exe.save(path)
    loaded = Executable.load(path)
    _check_rich(VirtualMachine(loaded))
    assert loaded.bytecode == exe.bytecode
    assert loaded.to_bytes() == exe.to_bytes()
    for a, b in zip(loaded.constants, exe.constants, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        # numpy's own dtype object, not an equal "<" one: kernels' fast paths compare by
        # identity (a loaded float32 weight missed the 1x1 convolution's and the panels')
        assert a.dtype is np.dtype(a.dtype.name)
        np.testing.assert_array_equal(a, b)


def test_file_starts_with_magic_and_version():
    data = rich_program().to_bytes()
    magic, version = struct.unpack_from("<8sI", data)
    assert magic == b"DSHVMEXE" and version == 1
    blob_at = -(-(64 + struct.unpack_from("<Q", data, 16)[0]) // 64) * 64
    assert blob_at % 64 == 0 and len(data) == blob_at + struct.unpack_from("<Q", data, 24)[0]


def test_listing_and_signatures():
    exe = rich_program()
    text = exe.bytecode
    assert "k1 = fused fused_mul_exp:" in text
    assert "p0 = shape_program (n) -> [n * 16, (n, 4), (max(n - 1, 0) // 2) % 3]" in text
    assert "call %2, f0<helper>, (%0)" in text
    assert (
        exe.signature("helper") == "helper(x: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32]"
    )
    assert exe.signature().startswith("main(x: Tensor[(n, 4), float32], p: (Tensor[(), int64],))")


def _with_meta(data: bytes, edit) -> bytes:
    """The file with its JSON metadata edited and the header (lengths, CRC) made consistent."""
    _, _version, _flags, meta_len, _blob_len, _, _zero = HEADER.unpack_from(data)
    meta = json.loads(data[64 : 64 + meta_len])
    blob_at = -(-(64 + meta_len) // 64) * 64
    blob = data[blob_at:]
    edit(meta)
    return _assemble(json.dumps(meta).encode(), blob)


def _assemble(meta_bytes: bytes, blob: bytes) -> bytes:
    pad = b"\0" * (-(-(64 + len(meta_bytes)) // 64) * 64 - 64 - len(meta_bytes))
    crc = zlib.crc32(blob, zlib.crc32(meta_bytes))
    return (
        HEADER.pack(b"DSHVMEXE", 1, 0, len(meta_bytes), len(blob), crc, b"\0" * 28)
        + meta_bytes
        + pad
        + blob
    )


def _set(path):
    def edit(meta):
        *keys, last = path[:-1]
        node = meta
        for k in keys:
            node = node[k]
        node[last] = path[-1]

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_set(["kernels", 0, "op", "no.such_op"]), "op 'no.such_op' has no registered kernel"),
        (_set(["functions", 1, "code", 0, 0, 99]), "unknown opcode 99"),
        (_set(["functions", 1, "num_registers", 2]), "register below %2"),
        (_set(["functions", 1, "code", 0, 2, 7]), "func index 7 out of range"),
        (_set(["constants", 0, "dtype", "complex64"]), "unknown dtype 'complex64'"),
        (_set(["constants", 0, "shape", [4, 100]]), "do not fit in the"),
        (_set(["functions", 0, "params", 0, "type", {"tensor": ["float32", [-1]]}]), "bad dim -1"),
        (_set(["kernels", 1, "steps", 0, "inputs", 0, ["tmp", 0]]), "reads tmp0 before any step"),
        (_set(["shape_programs", 0, "nodes", 0, ["pow", 0, 0]]), "unknown op 'pow'"),
        (_set(["functions", 0, "code", 5, [12, 99]]), "jump target 99 outside the function"),
        (_set(["functions", 0, "code", 5, [0, {"r": 0}, {"r": 0}]]), "last instruction must be"),
    ],
)
def test_load_names_what_is_wrong(edit, message):
    data = _with_meta(rich_program().to_bytes(), edit)
    with pytest.raises(FormatError, match=message):
        Executable.from_bytes(data)


def test_validation_of_arities():
    asm = Assembler()
    k = asm.kernel("add", num_inputs=2)
    f = asm.function("main", [("x", tensor("float32", (1,)))])
    (x,) = f.params
    f.invoke(k, [x], [x])
    f.ret(x)
    with pytest.raises(FormatError, match="passes 1 inputs and 1 outputs to kernel 'add'"):
        asm.build()
    asm = Assembler()
    g = asm.function("g", [("a", tensor("float32", (1,)))])
    g.ret(g.params[0])
    f = asm.function("main", [])
    f.ret(f.call("g", []))
    with pytest.raises(FormatError, match="passes 0 arguments to 'g', which takes 1"):
        asm.build()
    asm = Assembler()
    g = asm.function("g", [("a", tensor("float32", (1,)))])
    g.ret(g.params[0])
    f = asm.function("main", [])
    f.tail_call("g", [])  # a tail call may end a function; its arity is checked like a call's
    with pytest.raises(FormatError, match=r"\(tail_call\): passes 0 arguments to 'g'"):
        asm.build()


def test_validation_of_hand_made_instructions():
    from vm import Function

    bad = Function(
        "main", (), None, 1, (Instruction(Op.MOVE, (Reg(0),)), Instruction(Op.RET, (Reg(0),)))
    )
    with pytest.raises(FormatError, match="expected 2 operands"):
        Executable([bad]).validate()


# Fuzzing ---------------------------------------------------------------------------------


@cache
def _valid_load_calls() -> int:
    data = rich_program().to_bytes()
    return python_calls(lambda: Executable.from_bytes(data))


def _load_only_format_errors(data: bytes) -> None:
    def load() -> None:
        with contextlib.suppress(FormatError):
            Executable.from_bytes(data)

    # Counted, not timed: a corrupt file costs at most 4 loads of the valid one (Python calls).
    assert python_calls(load) <= 4 * _valid_load_calls(), "load did too much work"


def test_fuzz_truncated_files():
    data = rich_program().to_bytes()
    for cut in list(range(0, 200)) + list(range(200, len(data), 7)):
        with pytest.raises(FormatError):
            Executable.from_bytes(data[:cut])


def test_fuzz_flipped_bytes_and_random_bytes():
    data = rich_program().to_bytes()
    rng = random.Random(1)
    for _ in range(300):
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        _load_only_format_errors(bytes(b))
    for n in (0, 1, 63, 64, 65, 500, 5000):
        _load_only_format_errors(bytes(rng.randrange(256) for _ in range(n)))
        _load_only_format_errors(b"DSHVMEXE" + bytes(rng.randrange(256) for _ in range(n)))


def _mutate(value, rng, depth=0):
    """Replace one random node of a JSON value with junk (keeps the rest intact)."""
    junk = [
        None,
        True,
        -1,
        0,
        1,
        2**63,
        1.5,
        "x",
        "float32",
        [],
        {},
        [0],
        {"r": -1},
        {"r": 10**9},
        [[]],
        ["in", 99],
        {"tensor": ["float32", [1]]},
    ]
    if isinstance(value, (list, dict)) and value and rng.random() < 0.8 and depth < 12:
        keys = list(range(len(value))) if isinstance(value, list) else list(value)
        k = rng.choice(keys)
        value[k] = _mutate(value[k], rng, depth + 1)
        return value
    return rng.choice(junk)


def test_fuzz_structured_metadata_with_valid_checksums():
    """Corruptions that pass the checksum reach the validator: still only FormatError."""
    data = rich_program().to_bytes()
    _, _, _, meta_len, _, _, _ = HEADER.unpack_from(data)
    meta = json.loads(data[64 : 64 + meta_len])
    blob = data[-(HEADER.unpack_from(data)[4]) :]
    rng = random.Random(2)
    for _ in range(400):
        m = json.loads(json.dumps(meta))
        for _ in range(rng.randint(1, 3)):
            m = _mutate(m, rng)
        _load_only_format_errors(_assemble(json.dumps(m).encode(), blob))
    for text in (b"[]", b"{}", b"[" * 100000, b"\xff\xfe", b'{"constants": 1}', b"1e999"):
        _load_only_format_errors(_assemble(text, b""))


def test_absurd_header_lengths_are_rejected_without_allocating():
    header = HEADER.pack(b"DSHVMEXE", 1, 0, 2**62, 2**62, 0, b"\0" * 28)
    with pytest.raises(FormatError, match="exceeds the limit"):
        Executable.from_bytes(header)
    header = HEADER.pack(b"DSHVMEXE", 2, 0, 0, 0, 0, b"\0" * 28)
    with pytest.raises(FormatError, match="version 2 is not supported"):
        Executable.from_bytes(header)


def test_elementwise_program_round_trips():
    exe = elementwise_program("subtract")
    loaded = Executable.from_bytes(exe.to_bytes())
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(VirtualMachine(loaded).run(x, x), x - 2 * x)


def test_every_byte_is_checksummed_or_checked():
    """The padding between metadata and constants is outside the checksum, so it must be zero."""
    data = rich_program().to_bytes()
    meta_len = HEADER.unpack_from(data)[3]
    end = HEADER.size + meta_len
    pad = -end % 64
    assert pad > 0, "the program must leave padding to test"
    Executable.from_bytes(data)  # as saved: loads
    for at in (end, end + pad - 1):
        bad = data[:at] + b"\x01" + data[at + 1 :]
        with pytest.raises(FormatError, match="padding between the metadata and the constants"):
            Executable.from_bytes(bad)
