"""The extended dtypes (ml_dtypes' bfloat16, float8, int4...) in executables: compiled, saved,
loaded and run; a corrupted dtype name in a file is a FormatError; without ml_dtypes the core
imports, and a program using one says which package it needs."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import dynshape as ds
import ir
from shape_funcs.declarations.dtypes import EXTENDED_DTYPES, ITEMSIZE, require
from vm import Executable, FormatError
from vm.serialize import HEADER

ROOT = Path(__file__).resolve().parents[2]


def _program() -> ds.Program:
    """A bfloat16 input reshaped and concatenated with a bfloat16 constant, cast to float32 and
    to int4."""
    x = ds.tensor("x", ("n", 4), "bfloat16")
    c = np.array([[1.5, -2, 3, 0.25]], dtype=ml_dtypes.bfloat16)
    y = ds.concatenate([ds.reshape(ds.transpose(x), (-1, 4)), c], axis=0)
    return ds.build([y, ds.cast(y, "float32"), ds.cast(y, "int4")], inputs=[x])


def _want(x: np.ndarray) -> list[np.ndarray]:
    c = np.array([[1.5, -2, 3, 0.25]], dtype=ml_dtypes.bfloat16)
    y = np.concatenate([x.T.reshape(-1, 4), c])
    return [y, y.astype(np.float32), y.astype(ml_dtypes.int4)]


@pytest.mark.parametrize("n", [1, 3, 8])
def test_bfloat16_executable_saves_loads_and_runs(tmp_path: Path, n: int) -> None:
    exe = ds.compile(_program())
    path = tmp_path / "bf16.dse"
    exe.save(path)
    loaded = Executable.load(path)
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, 4)).astype(ml_dtypes.bfloat16)
    for machine in (ds.VirtualMachine(exe), ds.VirtualMachine(loaded)):
        got = machine.run(x)
        for g, w in zip(got, _want(x), strict=True):
            assert g.dtype == w.dtype
            assert g.tobytes() == w.tobytes()
    assert str(loaded.inputs[0]) == str(exe.inputs[0])


def test_every_extended_dtype_round_trips_through_a_file() -> None:
    for dtype in EXTENDED_DTYPES:
        x = ds.tensor("x", ("n",), "float32")
        y = ds.cast(x, dtype)
        exe = Executable.from_bytes(ds.compile(ds.build(y, inputs=[x])).to_bytes())
        values = np.array([1.0, 0.5, 1.0, 0.25, 3.0], np.float32)  # e8m0: positive
        with np.errstate(invalid="ignore"):  # 3.0 is out of int2's and uint2's range
            got = ds.VirtualMachine(exe).run(values)
            want = values.astype(dtype)
        assert got.dtype == np.dtype(require(dtype))
        assert got.dtype.itemsize == ITEMSIZE[dtype]
        assert got.tobytes() == want.tobytes()


def test_text_of_a_program_with_extended_constants_reads_back() -> None:
    program = _program()
    text = str(program)
    assert "bfloat16, shape=(1, 4))" in text  # extended constants are written as their bytes
    module = ir.parse(text)
    assert str(module) == str(ir.parse(str(module)))


def _edited(data: bytes, edit) -> bytes:  # type: ignore[no-untyped-def]
    """The file with its JSON metadata edited and its header made consistent again."""
    _, _version, _flags, meta_len, _blob_len, _, _zero = HEADER.unpack_from(data)
    meta = json.loads(data[64 : 64 + meta_len])
    blob = data[-(-(64 + meta_len) // 64) * 64 :]
    edit(meta)
    meta_bytes = json.dumps(meta).encode()
    pad = b"\0" * (-(-(64 + len(meta_bytes)) // 64) * 64 - 64 - len(meta_bytes))
    crc = zlib.crc32(blob, zlib.crc32(meta_bytes))
    header = HEADER.pack(b"DSHVMEXE", 1, 0, len(meta_bytes), len(blob), crc, b"\0" * 28)
    return header + meta_bytes + pad + blob


@pytest.mark.parametrize("bad", ["bfloat17", "float8", "float6_e2m3fn", "void16", 7])
def test_corrupted_dtype_names_are_format_errors(bad: object) -> None:
    data = ds.compile(_program()).to_bytes()

    def constant(meta):  # type: ignore[no-untyped-def]
        meta["constants"][0]["dtype"] = bad

    def param(meta):  # type: ignore[no-untyped-def]
        meta["functions"][0]["params"][0]["type"]["tensor"][0] = bad

    for edit in (constant, param):
        with pytest.raises(FormatError):
            Executable.from_bytes(_edited(data, edit))


_WITHOUT_ML_DTYPES = """
import sys
sys.modules["ml_dtypes"] = None  # import ml_dtypes now raises ImportError
import numpy as np
import dynshape as ds, ir, vm
from shape_funcs.declarations.dtypes import DTypeUnavailable
assert "ml_dtypes" not in [m for m in sys.modules if sys.modules[m] is not None]
x = ds.tensor("x", ("n",), "float32")
ds.VirtualMachine(ds.compile(ds.build(ds.exp(x), inputs=[x]))).run(np.ones(2, np.float32))
try:
    ds.compile(ds.build(ds.cast(x, "bfloat16"), inputs=[x]))
except DTypeUnavailable as e:
    print("REFUSED", e)
"""


def test_without_ml_dtypes_the_core_runs_and_an_extended_dtype_names_the_package() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_ML_DTYPES],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    assert "REFUSED dtype bfloat16 needs the ml_dtypes package" in out


def test_importing_the_vm_and_the_ir_loads_no_ml_dtypes() -> None:
    code = "import sys, vm, ir, dynshape; print('ml_dtypes' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "int4"])
def test_arithmetic_on_an_extended_dtype_is_refused(dtype: str) -> None:
    x = ds.tensor("x", (3,), dtype)
    with pytest.raises(ds.BuildError, match=f"{dtype}: a storage dtype"):
        ds.add(x, x)
    with pytest.raises(ds.BuildError, match=f"{dtype}: a storage dtype"):
        ds.sum(x)
    f = ds.tensor("f", (3,), "float32")
    with pytest.raises(ds.BuildError, match=f"{dtype}: a storage dtype"):
        ds.arange(0, 3, 1, dtype=dtype)
    assert ds.cast(f, dtype).dtype == dtype  # moving and converting are fine
    assert ds.reshape(x, (1, 3)).dtype == dtype
