"""PlanMemory: text in / text out, proofs with ranges, and the overlap checker on every corpus
program (planned and unplanned runs of the VM give identical results)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import sympy
from pass_helpers import check_pass, parse_typed
from test_kill import Typed

import dynshape
import ir
from dynshape.analysis.dim_bounds import dims_le
from dynshape.analysis.memory_check import MemoryPlanError, check_no_overlap
from dynshape.passes.infer_types import InferTypes
from dynshape.passes.kill import KillAfterLastUse
from dynshape.passes.plan_memory import PlanMemory, _grown, align

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from harness import all_cases, make_inputs

from vm import RunTimeShapeError
from vm.memory.allocator import NaiveAllocator

n, m = ir.sym("n"), ir.sym("m")

#: After kill: an 8*n storage (viewed by a reshape), a 4*n one, and a returned 4*n one (made
#: by a transpose, which cannot write over its input: the 8*n block is the one to take).
KILLED = """
def @main(%x: Tensor[(2, n), float32]) -> Tensor[(n,), float32] {
  let %s1 = memory.alloc_storage(size=8*n);
  let %a = memory.alloc_tensor(%s1, shape=[2, n]);
  %0 = fn (%p0: Tensor[(2, n), float32], Primitive=1) -> Tensor[(2, n), float32] {
    negative(%p0)
  };
  let %i1 = memory.invoke(%0, (%x,), (%a,));
  let %v = memory.reshape_tensor(%a, shape=[2, n]);
  let %s2 = memory.alloc_storage(size=4*n);
  let %b = memory.alloc_tensor(%s2, shape=[n]);
  %1 = fn (%p1: Tensor[(2, n), float32], Primitive=1) -> Tensor[(n,), float32] {
    sum(%p1, axis=[0])
  };
  let %i2 = memory.invoke(%1, (%v,), (%b,));
  let %s3 = memory.alloc_storage(size=4*n);
  let %c = memory.alloc_tensor(%s3, shape=[n]);
  %2 = fn (%p2: Tensor[(n,), float32], Primitive=1) -> Tensor[(n,), float32] {
    transpose(%p2, axes=[0])
  };
  let %i3 = memory.invoke(%2, (%b,), (%c,));
  %c
}"""

PLANNED = """
def @main(%x: Tensor[(2, n), float32]) -> Tensor[(n,), float32] {
  let %arena = memory.alloc_storage(size=12*n, dtype_hint="uint8");
  let %a = memory.alloc_tensor(%arena, shape=[2, n]);
  %0 = fn (%p0: Tensor[(2, n), float32], Primitive=1) -> Tensor[(2, n), float32] {
    negative(%p0)
  };
  let %i1 = memory.invoke(%0, (%x,), (%a,));
  let %v = memory.reshape_tensor(%a, shape=[2, n]);
  let %b = memory.alloc_tensor(%arena, offset=8*n, shape=[n]);
  %1 = fn (%p1: Tensor[(2, n), float32], Primitive=1) -> Tensor[(n,), float32] {
    sum(%p1, axis=[0])
  };
  let %i2 = memory.invoke(%1, (%v,), (%b,));
  let %c = memory.alloc_tensor(%arena, shape=[n]);
  %2 = fn (%p2: Tensor[(n,), float32], Primitive=1) -> Tensor[(n,), float32] {
    transpose(%p2, axes=[0])
  };
  let %i3 = memory.invoke(%2, (%b,), (%c,));
  %c
}
"""


def _killed_text() -> str:
    return ir.text.module_to_text(
        InferTypes().run(KillAfterLastUse().run(parse_typed(KILLED)[0])), show_types=False
    )


def test_freed_8n_block_hosts_a_4n_tensor_in_one_arena() -> None:
    out = check_pass(Typed(PlanMemory()), _killed_text(), PLANNED)
    for k in (0, 1, 7, 100):
        check_no_overlap(out, {"n": k})


def test_an_elementwise_output_is_written_over_the_input_dying_at_it() -> None:
    killed = _killed_text().replace("transpose(%p2, axes=[0])", "negative(%p2)")
    out = PlanMemory().run(parse_typed(killed)[0])
    text = str(out["main"])
    # %c = negative(%b), and %b dies there: %c takes %b's bytes, not the freed 8*n block.
    assert "let %c = memory.alloc_tensor(%arena, offset=8*n, shape=[n])" in text
    for k in (0, 1, 7, 100):
        check_no_overlap(InferTypes().run(out), {"n": k})


def test_the_checker_accepts_only_the_overlap_a_kernel_allows() -> None:
    # The same bytes for a transpose's output and its dying input: not allowed.
    bad = PLANNED.replace(
        "let %c = memory.alloc_tensor(%arena, shape=[n]);",
        "let %c = memory.alloc_tensor(%arena, offset=8*n, shape=[n]);",
    )
    with pytest.raises(MemoryPlanError, match="overlap"):
        check_no_overlap(parse_typed(bad)[0], {"n": 4})
    allowed = bad.replace("transpose(%p2, axes=[0])", "negative(%p2)")
    assert check_no_overlap(parse_typed(allowed)[0], {"n": 4}) >= 1


def test_returned_tensor_keeps_its_own_storage_when_asked() -> None:
    apart = PlanMemory(returned_in_arena=False, never_worse=False)
    out = apart.run(parse_typed(_killed_text())[0])
    text = str(out["main"])
    assert "let %s3 = memory.alloc_storage(size=4*n)" in text
    assert text.count("memory.kill(%arena)") == 1
    check_no_overlap(InferTypes().run(out), {"n": 9})
    # That plan needs 16*n bytes once %c is written, where kills alone need 12*n at most:
    # by default the planner keeps kills alone.
    default = str(PlanMemory(returned_in_arena=False).run(parse_typed(_killed_text())[0]))
    assert "%arena" not in default


def _planned(source: str, **options: object) -> ir.Module:
    killed = dynshape.stages(textwrap.dedent(source), plan_memory=False)["kill"]
    return InferTypes().run(PlanMemory(**options).run(killed))  # type: ignore[arg-type]


def _arena_sizes(module: ir.Module, fn: str = "main") -> list[str]:
    return [
        line.split("size=")[1].split(",")[0].split(")")[0]
        for line in str(module[fn]).splitlines()
        if "%arena" in line and "alloc_storage" in line
    ]


MAX_SIZED = """
def @main(%x: Tensor[(n,), float32], %y: Tensor[(m,), float32]) -> (Tensor[(n,), float32], Tensor[(m,), float32]) {
  %a = exp(negative(%x));
  %b = sum(%a, axis=[0], keepdims=True);
  %c = exp(negative(%y));
  %d = sum(%c, axis=[0], keepdims=True);
  (add(%a, %b), add(%c, %d))
}
"""


def test_block_sized_as_the_max_of_its_tenants() -> None:
    planned = _planned(MAX_SIZED)
    # The freed 4*n block of %a hosts the 4*m tensor of %c: neither size is provably larger.
    assert "max(4*m, 4*n)" in str(planned["main"]), str(planned)
    for b in ({"n": 3, "m": 9}, {"n": 9, "m": 3}, {"n": 0, "m": 0}):
        check_no_overlap(planned, b)


def test_ranges_prove_reuse_and_give_a_static_arena() -> None:
    assert not dims_le(4 * m, 4 * n)
    assert dims_le(4 * m, 4 * n, {m: (0, 8), n: (8, None)})
    assert dims_le(4 * n, sympy.Max(4 * n, 3 * m))
    planned = _planned(MAX_SIZED, ranges={n: (1, 16), m: (1, 16)}, static_arena=True)
    sizes = _arena_sizes(planned)
    assert sizes and all(s.isdigit() for s in sizes), sizes
    check_no_overlap(planned, {"n": 16, "m": 16})


def test_align_rounds_up_to_64_unless_provable() -> None:
    assert align(1) == 64 and align(128) == 128 and align(256 * n) == 256 * n
    assert str(align(4 * n)) == "64*ceiling(n/16)"


IF_AND_RECURSION = """
def @count(%x: Tensor[(n,), float32], %k: int32) -> Tensor[(n,), float32] {
  if (greater(%k, 0)) {
    %t = exp(negative(%x));
    @count(add(%t, 1f), subtract(%k, 1))
  } else {
    negative(%x)
  }
}
def @main(%x: Tensor[(n,), float32], %c: bool) -> Tensor[(n,), float32] {
  %a = exp(%x);
  %b = if (%c) { negative(exp(%a)) } else { exp(negative(%a)) };
  @count(add(%a, %b), 3)
}
"""


def test_if_and_recursive_function_plan_safely() -> None:
    planned = _planned(IF_AND_RECURSION)
    for k in (0, 1, 5):
        check_no_overlap(planned, {"n": k})
    exe_on = dynshape.compile(textwrap.dedent(IF_AND_RECURSION))
    exe_off = dynshape.compile(textwrap.dedent(IF_AND_RECURSION), plan_memory=False)
    x = np.linspace(-1, 1, 7, dtype=np.float32)
    for c in (True, False):
        a = dynshape.VirtualMachine(exe_on).run(x, c)
        b = dynshape.VirtualMachine(exe_off).run(x, c)
        np.testing.assert_array_equal(a, b)


DATA_DEPENDENT = """
def @main(%x: Tensor[(n,), float32]) -> Tensor[(?,), float32] {
  %a = exp(negative(%x));
  %idx = argwhere(greater(%a, 0.5f));
  %s = squeeze(%idx, axis=[1]);
  %g = take(%a, %s, axis=0);
  %h = exp(negative(%g));
  add(%h, %g)
}
"""


def _planned_without_select(source: str, **options: object) -> ir.Module:
    """``_planned`` with the pipeline minus its select pass (which would make the argwhere and
    take one compress: this tests the planner around an index tensor of a data-dependent size)."""
    from dynshape.pipeline import default_passes
    from dynshape.testing.differential import run_stages

    passes = [(stage, p) for stage, p in default_passes() if stage not in ("selected", "planned")]
    killed = run_stages(textwrap.dedent(source), passes)["kill"]
    return InferTypes().run(PlanMemory(**options).run(killed))  # type: ignore[arg-type]


def test_data_dependent_op_in_the_middle_gets_a_second_arena() -> None:
    planned = _planned_without_select(DATA_DEPENDENT)
    text = str(planned["main"])
    # Allocations sized by the argwhere count are planned after its shape function, in an
    # arena opened after the mask dies (one opened before would hold its bytes over the mask).
    assert text.count("let %arena") == 1, text
    assert text.index("memory.kill(%storage1)") < text.index("let %arena")
    assert "let %arena = memory.alloc_storage(size=16*?" in text, text
    # Kept on all tenants, the first plan would need n bytes more than kills alone.
    unchecked = str(_planned_without_select(DATA_DEPENDENT, never_worse=False)["main"])
    assert unchecked.count("let %arena") == 2, unchecked
    for k in (0, 1, 8):
        check_no_overlap(planned, {"n": k}, default=k)
    exe_on = dynshape.compile(textwrap.dedent(DATA_DEPENDENT))
    exe_off = dynshape.compile(textwrap.dedent(DATA_DEPENDENT), plan_memory=False)
    x = np.linspace(-2, 2, 9, dtype=np.float32)
    np.testing.assert_array_equal(
        dynshape.VirtualMachine(exe_on).run(x), dynshape.VirtualMachine(exe_off).run(x)
    )


def test_checker_finds_an_overlap() -> None:
    bad = PLANNED.replace("offset=8*n, ", "")
    module = parse_typed(bad)[0]
    with pytest.raises(MemoryPlanError, match="overlap"):
        check_no_overlap(module, {"n": 4})
    early = (
        _killed_text()
        .replace("let %_ = memory.kill(%s1);\n", "")
        .replace("  let %v = memory", "  let %_ = memory.kill(%s1);\n  let %v = memory")
    )
    with pytest.raises(MemoryPlanError, match="killed"):
        check_no_overlap(parse_typed(early)[0], {"n": 4})


CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_planned_without_overlap_same_results_and_never_more_memory(case: object) -> None:
    """The planner's guarantee as a property over the corpus: at every binding, the planned
    program's peak (measured by the VM, exact bytes) is at most that of kills alone."""
    out = dynshape.stages(case.source)  # type: ignore[attr-defined]
    exe_on = dynshape.lower.lower(out["planned"])
    exe_off = dynshape.lower.lower(out["kill"])
    for binding in case.bindings:  # type: ignore[attr-defined]
        check_no_overlap(out["planned"], binding)
        check_no_overlap(out["kill"], binding)
        args = make_inputs(case, binding)
        vm_on = dynshape.VirtualMachine(exe_on, allocator=NaiveAllocator())
        vm_off = dynshape.VirtualMachine(exe_off, allocator=NaiveAllocator())
        _same(vm_on.run(*_copy(args)), vm_off.run(*_copy(args)))
        planned, killed = (vm.allocator.stats.peak_live_bytes for vm in (vm_on, vm_off))
        assert planned <= killed, (binding, planned, killed)


def _copy(args: object) -> list[object]:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]  # type: ignore[attr-defined]


def _same(a: object, b: object) -> None:
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
        return
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_tenant_that_fits_nowhere_grows_the_block_that_grows_least() -> None:
    from dynshape.passes.plan_memory import _Block, _Planner

    s = ir.sym("s")
    small = _Block(256 * s, 0)
    big = _Block(ir.dim_max(256 * s, 16 * s**2), 0)
    planner = _Planner({s: (1, 4096)}, static_arena=False, returned=True)
    # max(256*s, 16*s**2) already holds 1024*s for s >= 64; 256*s would grow fourfold always.
    assert planner.least_growth([small, big], 1024 * s) is big
    assert planner.least_growth([big, small], 1024 * s) is big
    # Within a range where the quadratic block is small, the linear one is as good: first wins.
    tiny = _Planner({s: (1, 8)}, static_arena=False, returned=True)
    assert tiny.least_growth([small, big], 1024 * s) is small


def test_compile_takes_a_planner_with_options_and_refuses_anything_else() -> None:
    exe = dynshape.compile(textwrap.dedent(MAX_SIZED), plan_memory=PlanMemory(static_arena=True))
    x, y = np.ones(3, np.float32), np.ones(5, np.float32)
    a, b = dynshape.VirtualMachine(exe).run(x, y)
    assert a.shape == (3,) and b.shape == (5,)
    with pytest.raises(dynshape.CompileError, match="plan_memory must be True, False or a Plan"):
        dynshape.compile(textwrap.dedent(MAX_SIZED), plan_memory="no")  # type: ignore[arg-type]


SOFTMAX = """
def @main(%x: Tensor[(n, 8), float32], %w: Tensor[(16, 8), float32], %v: Tensor[(8, 16), float32]) -> Tensor[(n, 8), float32] {
  %s = nn.dense(%x, %w);
  %p = nn.softmax(%s);
  nn.dense(%p, %v)
}
"""


def test_softmax_is_written_over_its_dying_scores() -> None:
    planned = _planned(SOFTMAX)
    allocs = [line.strip() for line in str(planned["main"]).splitlines() if "alloc_tensor" in line]
    # %s and the softmax output share their bytes (softmax is declared in_place); the last
    # dense reads %p while writing its own output, so that one must not share.
    offsets = [line.split("%arena")[1].split("shape=")[0] for line in allocs]
    assert offsets[0] == offsets[1] and offsets[2] != offsets[1], allocs
    for k in (0, 1, 9):
        check_no_overlap(planned, {"n": k})
    exe = dynshape.compile(textwrap.dedent(SOFTMAX))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    v = rng.standard_normal((8, 16)).astype(np.float32)
    s = x @ w.T
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(dynshape.VirtualMachine(exe).run(x, w, v), p @ v.T, rtol=1e-5)
    checked = dynshape.VirtualMachine(exe, check_memory=True)
    np.testing.assert_allclose(checked.run(x, w, v), p @ v.T, rtol=1e-5)


def test_a_grown_block_keeps_no_term_another_plainly_holds() -> None:
    """``max(32, 8*n)`` grown by ``16*n`` is ``max(32, 16*n)``: the unevaluated Max printed
    with ``8*n`` in it parsed back (evaluated) without it, and debug mode's round trip
    failed. Terms neither plainly holds stay, unevaluated."""
    n, m = ir.sym("n"), ir.sym("m")
    grown = _grown(sympy.Max(32, 8 * n, evaluate=False), 16 * n)
    assert grown == sympy.Max(32, 16 * n)
    assert _grown(grown, 8 * n) is grown and _grown(grown, 16) is grown  # already held
    assert _grown(8 * n, 16 * n + 3) == 16 * n + 3
    assert set(_grown(grown, 4 * m).args) == {sympy.Integer(32), 16 * n, 4 * m}
    assert sympy.Max(*grown.args) == grown  # evaluated (as parsing does), it is the same


def test_checks_among_an_arena_s_tenants_run_before_it() -> None:
    """The arena's size sums ``h - 2`` rows of output: negative for ``h < 3``, where the
    convolution's check fails. Allocated first, a too small input failed as "a storage of
    -N bytes"; the checks move before the arena, and the input is refused by its message."""
    weight = "const([[[[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]]], float32)"
    program = f"def @main(%x: Tensor[(n, 1, h, w), float32]) {{ nn.conv2d(tanh(%x), {weight}) }}"
    planned = str(dynshape.stages(program)["planned"]["main"])
    assert planned.index("memory.check(") < planned.index("memory.alloc_storage(")
    assert planned.index("tanh(") < planned.index("nn.conv2d(")  # (the check moved past it)
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    for h in (1, 2):
        with pytest.raises(RunTimeShapeError, match=rf"padded height >= .* got {h} < 3 .* h = {h}"):
            vm.run(np.ones((2, 1, h, 4), np.float32))
    assert vm.run(np.ones((2, 1, 3, 4), np.float32)).shape == (2, 1, 1, 2)
