"""In-place updates: ``dynamic_update_slice``, ``scatter_nd`` and ``scatter_elements`` write
into their operand's storage when the planner proves the operand dead after them, and copy it
otherwise (design/memory.md, "Outputs written over dying inputs").

Each op is run both ways. Dying: the planned IR gives the output the operand's very block, the
kernel finds its output to be the operand's memory (counted), and the allocator is asked for
one tensor's bytes where kills alone ask for two. Live (used afterwards, returned, or the
caller's argument): the output has bytes of its own and the operand is unchanged. Results are
numpy's (``dynshape.testing.numpy_ops``) either way, with the memory checker on too.
"""

from __future__ import annotations

import functools
import re
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

import dynshape
import vm.kernels.update as update_kernels
from dynshape.analysis.in_place import in_place_pairs
from dynshape.analysis.memory_check import check_no_overlap
from dynshape.testing.numpy_ops import OPS
from vm import RunTimeShapeError
from vm.memory.allocator import NaiveAllocator

RNG = np.random.default_rng(30)

#: Per op: the program where the operand (%a, made by the multiply) dies at the update, the
#: arguments for n = 5, and the reference of the result.
DYING: dict[str, tuple[str, Callable[[int], list[np.ndarray]], Callable[..., np.ndarray]]] = {
    "dynamic_update_slice": (
        """
        def @main(%x: Tensor[(n, 4), float32], %u: Tensor[(2, 3), float32], %i: int64, %j: int32) {
          %a = multiply(%x, 2f);
          dynamic_update_slice(%a, %u, (%i, %j))
        }
        """,
        lambda n: [_floats(n, 4), _floats(2, 3), np.int64(n - 2), np.int32(7)],
        lambda x, u, i, j: OPS["dynamic_update_slice"]([2 * x, u, (i, j)], {}),
    ),
    "scatter_nd": (
        """
        def @main(%x: Tensor[(n, 4), float32], %rows: Tensor[(2, 1), int64], %new: Tensor[(2, 4), float32]) {
          %a = multiply(%x, 2f);
          scatter_nd(%a, %rows, %new, reduction="add")
        }
        """,
        lambda n: [_floats(n, 4), np.array([[1], [-1]]), _floats(2, 4)],
        lambda x, rows, new: OPS["scatter_nd"]([2 * x, rows, new], {"reduction": "add"}),
    ),
    "scatter_elements": (
        """
        def @main(%x: Tensor[(n, 4), float32], %cols: Tensor[(n, 2), int64], %new: Tensor[(n, 2), float32]) {
          %a = multiply(%x, 2f);
          scatter_elements(%a, %cols, %new, axis=1)
        }
        """,
        lambda n: [_floats(n, 4), RNG.integers(-4, 4, (n, 2)), _floats(n, 2)],
        lambda x, cols, new: OPS["scatter_elements"](
            [2 * x, cols, new], {"axis": 1, "reduction": "none"}
        ),
    ),
}


def _floats(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _source(op: str, tail: str = "") -> str:
    """The dying program of ``op``; with ``tail``, its result ``%r`` followed by ``tail``."""
    src = textwrap.dedent(DYING[op][0])
    if not tail:
        return src
    lines = src.strip().splitlines()
    return "\n".join([*lines[:-2], f"  %r = {lines[-2].strip()};", f"  {tail}", "}"])


@pytest.fixture
def in_place_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Whether each update kernel found its output to be its operand's memory, in call order
    (the kernels ask ``same_array`` once each, before copying)."""
    seen: list[bool] = []
    real = update_kernels.same_array

    def counting(a: np.ndarray, b: np.ndarray) -> bool:
        seen.append(real(a, b))
        return seen[-1]

    monkeypatch.setattr(update_kernels, "same_array", counting)
    yield seen


def _blocks(planned: dynshape.Module) -> list[str]:
    """``storage, offset`` of each ``(n, 4)`` tensor allocated in ``@main``, in order."""
    out = []
    for line in str(planned["main"]).splitlines():
        m = re.search(r"alloc_tensor\((%\w+)(, offset=[^,]+)?, shape=\[n, 4\]", line)
        if m:
            out.append(f"{m.group(1)}{m.group(2) or ''}")
    return out


def _run(exe: dynshape.Executable, args: list[Any]) -> tuple[Any, int, int]:
    """The result, the bytes asked of the allocator and its peak of live bytes, for one call."""
    machine = dynshape.VirtualMachine(exe, allocator=NaiveAllocator())
    result = machine.run(*args)
    stats = machine.allocator.stats
    return result, stats.bytes_requested, stats.peak_live_bytes


# ---- (a) the operand dies at the update: written in place ------------------------------------


@pytest.mark.parametrize("op", sorted(DYING))
def test_an_update_of_a_dying_operand_writes_into_its_storage(
    op: str, in_place_calls: list[bool]
) -> None:
    src, make_args, reference = DYING[op]
    src = textwrap.dedent(src)
    planned = dynshape.stages(src)["planned"]
    # the planner pairs the update's output with %a, and places both in one block
    [(out, operand)] = in_place_pairs(planned["main"]).items()
    assert out is not operand
    blocks = _blocks(planned)
    assert len(blocks) == 2 and blocks[0] == blocks[1], blocks
    for n in (0, 1, 5):
        check_no_overlap(planned, {"n": n})

    args = make_args(5)
    want = reference(*args)
    got, requested, peak = _run(dynshape.compile(src), args)
    np.testing.assert_array_equal(got, want)
    assert in_place_calls == [True]  # the kernel skipped the copy of its operand
    _, kill_requested, kill_peak = _run(dynshape.compile(src, plan_memory=False), args)
    tensor = 5 * 4 * 4  # one (5, 4) float32 tensor
    assert (requested, peak) == (tensor, tensor)
    assert (kill_requested, kill_peak) == (2 * tensor, 2 * tensor)
    assert in_place_calls == [True, False]  # kills alone: a fresh output, the operand copied
    checked = dynshape.VirtualMachine(dynshape.compile(src), check_memory=True)
    np.testing.assert_array_equal(checked.run(*args), want)


def test_a_chain_of_updates_stays_in_one_block(in_place_calls: list[bool]) -> None:
    src = textwrap.dedent(
        """
        def @main(%x: Tensor[(n, 4), float32], %u: Tensor[(1, 4), float32], %p: int64, %rows: Tensor[(1, 1), int64]) {
          %a = multiply(%x, 2f);
          %b = dynamic_update_slice(%a, %u, (%p, 0i64));
          %c = scatter_nd(%b, %rows, %u, reduction="add");
          dynamic_update_slice(%c, %u, (0i64, 0i64))
        }
        """
    )
    planned = dynshape.stages(src)["planned"]
    assert len(in_place_pairs(planned["main"])) == 3
    assert len(set(_blocks(planned))) == 1
    x, u = _floats(6, 4), _floats(1, 4)
    got, requested, _ = _run(dynshape.compile(src), [x, u, np.int64(-3), np.array([[5]])])
    want = 2 * x
    want[0] = u[0]
    want[5] += u[0]
    want[0] = u[0]
    np.testing.assert_array_equal(got, want)
    assert in_place_calls == [True, True, True] and requested == x.nbytes


# ---- (b) the operand is used afterwards: copied ----------------------------------------------


@pytest.mark.parametrize("op", sorted(DYING))
@pytest.mark.parametrize("tail", ["(%r, %a)", "add(%r, %a)"])
def test_an_update_of_a_live_operand_copies_it(
    op: str, tail: str, in_place_calls: list[bool]
) -> None:
    src = _source(op, tail)
    planned = dynshape.stages(src)["planned"]
    # %a's block, then the update's own; the add may write over whichever dies at it
    blocks = _blocks(planned)
    assert len(blocks) == (2 if tail.startswith("(") else 3) and blocks[0] != blocks[1], blocks
    assert len(in_place_pairs(planned["main"])) == (0 if tail.startswith("(") else 1)
    args = DYING[op][1](5)
    want = DYING[op][2](*args)
    got, requested, _ = _run(dynshape.compile(src), args)
    if tail == "(%r, %a)":
        np.testing.assert_array_equal(got[0], want)
        np.testing.assert_array_equal(got[1], 2 * args[0])  # the operand, unchanged
    else:  # written in place, this would add the updated tensor to itself
        np.testing.assert_array_equal(got, want + 2 * args[0])
    assert in_place_calls == [False]
    assert requested >= 2 * 5 * 4 * 4


@pytest.mark.parametrize("op", sorted(DYING))
def test_the_callers_array_is_never_written(op: str, in_place_calls: list[bool]) -> None:
    # the operand is the parameter itself: the caller's array, not the VM's to reuse
    src = _source(op).replace("  %a = multiply(%x, 2f);\n", "").replace("(%a, ", "(%x, ")
    args = DYING[op][1](4)
    before = [np.array(a, copy=True) for a in args]
    got, _, _ = _run(dynshape.compile(src), args)
    np.testing.assert_array_equal(got, DYING[op][2](args[0] / 2, *args[1:]))
    for a, b in zip(args, before, strict=True):
        np.testing.assert_array_equal(a, b)
    assert in_place_calls == [False]


# ---- (c) random shapes and starts against numpy ----------------------------------------------

#: The dtypes of the scalar starts, axis by axis (mixed: the op takes any integer dtypes).
START_DTYPES = ("int64", "int8", "uint64")


@functools.cache
def _program(rank: int, dtype: str, vector: bool) -> dynshape.Executable:
    """Two updates of one operand: of its negation, which dies there (in place), and of the
    parameter itself (copied)."""
    dims = ", ".join(f"d{i}" for i in range(rank)) + ("," if rank == 1 else "")
    upd = ", ".join(f"e{i}" for i in range(rank)) + ("," if rank == 1 else "")
    if vector:
        params = f"%s: Tensor[({rank},), int32]"
        starts = "(%s,)"
    else:
        params = ", ".join(f"%s{i}: {START_DTYPES[i % 3]}" for i in range(rank))
        starts = "(" + ", ".join(f"%s{i}" for i in range(rank)) + ("," if rank == 1 else "") + ")"
    params = f", {params}" if params else ""
    src = f"""
def @main(%x: Tensor[({dims}), {dtype}], %u: Tensor[({upd}), {dtype}]{params}) {{
  %a = negative(%x);
  (dynamic_update_slice(%a, %u, {starts}), dynamic_update_slice(%x, %u, {starts}))
}}
"""
    assert len(in_place_pairs(dynshape.stages(src)["planned"]["main"])) == 1
    return dynshape.compile(src)


def _start(draw: st.DrawFn, dtype: str, dim: int) -> int:
    """In range, past either end, or an extreme of the dtype."""
    info = np.iinfo(dtype)
    return draw(
        st.one_of(
            st.integers(max(-dim - 3, int(info.min)), dim + 3),
            st.sampled_from([int(info.min), int(info.max)]),
        )
    )


@st.composite
def _examples(draw: st.DrawFn) -> tuple[int, str, bool, list[Any]]:
    rank = draw(st.integers(0, 3))
    dtype = draw(st.sampled_from(["float32", "int32"]))
    vector = draw(st.booleans())
    shape = [draw(st.integers(0, 5)) for _ in range(rank)]
    upd = [draw(st.integers(0, d)) for d in shape]  # 0-size and whole-axis updates included
    x = RNG.integers(-50, 50, shape).astype(dtype)
    u = RNG.integers(100, 150, upd).astype(dtype)
    if vector:
        starts: list[Any] = [np.array([_start(draw, "int32", d) for d in shape], np.int32)]
    else:
        starts = [
            np.array(_start(draw, START_DTYPES[i % 3], d), START_DTYPES[i % 3])
            for i, d in enumerate(shape)
        ]
    return rank, dtype, vector, [x, u, *starts]


@settings(max_examples=60, deadline=None)
@given(_examples())
def test_random_shapes_and_starts_match_numpy(example: tuple[int, str, bool, list[Any]]) -> None:
    rank, dtype, vector, args = example
    x, u, *starts = args
    got_in_place, got_copy = dynshape.VirtualMachine(_program(rank, dtype, vector)).run(*args)
    oracle = OPS["dynamic_update_slice"]
    np.testing.assert_array_equal(got_in_place, oracle([-x, u, tuple(starts)], {}))
    np.testing.assert_array_equal(got_copy, oracle([x, u, tuple(starts)], {}))
    # the clamping, said once more with plain slices
    flat = [int(v) for s in starts for v in np.reshape(s, -1).tolist()]
    at = [min(max(s, 0), d - e) for s, d, e in zip(flat, x.shape, u.shape, strict=True)]
    want = x.copy()
    want[tuple(slice(a, a + e) for a, e in zip(at, u.shape, strict=True))] = u
    np.testing.assert_array_equal(got_copy, want)
    np.testing.assert_array_equal(args[0], x)  # the argument is untouched


# ---- (d) every user error, with its message --------------------------------------------------

COMPILE_ERRORS = [
    (
        "%x: Tensor[(n, 4), float32], %u: Tensor[(2,), float32], %i: int64",
        "(%i,)",
        "update must have the operand's rank 2, got rank 1",
    ),
    (
        "%x: Tensor[(n, 4), float32], %u: Tensor[(2, 5), float32], %i: int64",
        "(%i, %i)",
        "expected update.shape[1] <= operand.shape[1], got 5 > 4",
    ),
    (
        "%x: Tensor[(n, 4), float32], %u: Tensor[(2, 3), float32], %i: float32",
        "(%i, 0i64)",
        "start_indices[0] must be an integer tensor, got float32",
    ),
    (
        "%x: Tensor[(n, 4), float32], %u: Tensor[(2, 3), float32], %i: Tensor[(2,), bool]",
        "(%i,)",
        "start_indices[0] must be an integer tensor, got bool",
    ),
    (
        "%x: Tensor[(n, 4), float32], %u: Tensor[(2, 3), float32], %i: int64",
        "(%i,)",
        "1 start indices for an operand of rank 2 (one scalar per axis)",
    ),
    (
        "%x: Tensor[(n, 4), float32], %u: Tensor[(2, 3), float32], %i: int64",
        "(%i, %i, %i)",
        "3 start indices for an operand of rank 2 (one scalar per axis)",
    ),
    (
        "%x: Tensor[(n, 4), float32], %u: Tensor[(2, 3), float32], %i: Tensor[(3,), int64]",
        "(%i,)",
        "expected start_indices[0].shape[0] == rank(operand), got 3 != 2",
    ),
    (
        "%x: Tensor[(n, 4), float32], %u: Tensor[(2, 3), float32], %i: Tensor[(2,), int64]",
        "(%i, %i)",
        "start_indices must be 2 scalars (one per axis of the operand) or one 1-d tensor of 2 "
        "elements, got tensors of ranks [1, 1]",
    ),
    (
        "%x: Tensor[(n, 4), float32], %u: Tensor[(2, 3), int32], %i: int64",
        "(%i, %i)",
        "the update must have the operand's dtype float32, got int32",
    ),
]


@pytest.mark.parametrize(("params", "starts", "message"), COMPILE_ERRORS)
def test_user_errors_are_refused_at_compile_time(params: str, starts: str, message: str) -> None:
    src = f"def @main({params}) {{\n  dynamic_update_slice(%x, %u, {starts})\n}}\n"
    with pytest.raises(dynshape.CompileError) as info:
        dynshape.compile(src)
    assert f"in @main: dynamic_update_slice: {message}" in str(info.value)
    assert "  dynamic_update_slice(%x, %u, " in str(info.value)  # the call, marked


def test_an_update_larger_than_a_symbolic_operand_fails_at_run_time() -> None:
    src = textwrap.dedent(
        """
        def @main(%x: Tensor[(n, 4), float32], %u: Tensor[(k, 4), float32], %s: Tensor[(m,), int64]) {
          dynamic_update_slice(%x, %u, (%s,))
        }
        """
    )
    machine = dynshape.VirtualMachine(dynshape.compile(src))
    x, u = np.zeros((3, 4), np.float32), np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(machine.run(x, u, np.array([9, 0]))[1:], u)
    with pytest.raises(RunTimeShapeError) as info:
        machine.run(x, np.ones((5, 4), np.float32), np.array([0, 0]))
    assert str(info.value).startswith(
        "dynamic_update_slice: expected update.shape[0] <= operand.shape[0], got 5 > 3 "
        "(inputs: operand (n, 4), update (k, 4), start_indices [(m,)]; where k <= n must hold; "
        "k = 5, n = 3)"
    )
    with pytest.raises(RunTimeShapeError) as info:
        machine.run(x, u, np.array([0, 0, 0]))
    assert str(info.value).startswith(
        "dynamic_update_slice: expected start_indices[0].shape[0] == rank(operand), got 3 != 2"
    )


def test_the_builder_takes_ints_values_and_a_vector() -> None:
    import dynshape.builder as ds

    x, u = ds.tensor("x", ("n", 4)), ds.tensor("u", (2, 2))
    i = ds.tensor("i", (), "int32")
    outs = (
        ds.dynamic_update_slice(x * 2, u, [i, 1]),  # 1: an int64 constant, not a float32 one
        ds.dynamic_update_slice(x, u, np.array([1, 9])),
    )
    exe = dynshape.compile(ds.build(outs, [x, u, i]))
    xv, uv = _floats(3, 4), _floats(2, 2)
    a, b = dynshape.VirtualMachine(exe).run(xv, uv, np.int32(5))
    np.testing.assert_array_equal(a, OPS["dynamic_update_slice"]([2 * xv, uv, (5, 1)], {}))
    np.testing.assert_array_equal(b, OPS["dynamic_update_slice"]([xv, uv, (1, 9)], {}))
    with pytest.raises(dynshape.BuildError, match="start_indices must be a list of scalars"):
        ds.dynamic_update_slice(x, u, 3)
    with pytest.raises(dynshape.BuildError, match=r"start_indices\[1\] must be an integer"):
        ds.dynamic_update_slice(x, u, [0, x.sum()])
