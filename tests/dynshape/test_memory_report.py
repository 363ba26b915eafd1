"""The memory report: its planned-peak formula against the VM's statistics, and ``explain``."""

from __future__ import annotations

import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

import dynshape
from dynshape.cli import main as cli_main
from dynshape.memory_report import memory_report
from vm.memory.allocator import NaiveAllocator

MLP = """
def @main(%x: Tensor[(n, 16), float32], %w1: Tensor[(64, 16), float32], %w2: Tensor[(64, 64), float32], %w3: Tensor[(8, 64), float32]) -> Tensor[(n, 8), float32] {
  %h1 = nn.relu(nn.dense(%x, %w1));
  %h2 = nn.relu(nn.dense(%h1, %w2));
  nn.dense(%h2, %w3)
}
"""

#: Three symbols, dense layers alone in their kernels (no scratch memory, which the VM counts).
ELEMENTWISE = """
def @main(%x: Tensor[(n, m), float32], %w: Tensor[(k, m), float32], %v: Tensor[(m, k), float32]) -> Tensor[(n, k), float32] {
  %a = nn.dense(%x, %w);
  %b = nn.dense(%a, %v);
  nn.dense(%b, %w)
}
"""


def _args(source: str, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


@pytest.mark.parametrize("n", [1, 7, 64, 300])
def test_planned_peak_formula_matches_vm_statistics_mlp(n: int) -> None:
    report = memory_report(textwrap.dedent(MLP), {"n": n})["main"]
    vm = dynshape.VirtualMachine(dynshape.compile(textwrap.dedent(MLP)), allocator=NaiveAllocator())
    vm.run(*_args(MLP, [(n, 16), (64, 16), (64, 64), (8, 64)]))
    figures = report.evaluate()
    assert vm.allocator.stats.peak_live_bytes == figures["planned_peak"]
    assert vm.allocator.stats.requests == report.allocations == 1
    assert figures["planned_peak"] == figures["lower_bound"]  # the MLP plan meets the bound


def test_results_apart_cost_a_second_allocation_and_the_dead_block() -> None:
    def run(never_worse: bool) -> tuple[int, int]:
        planner = dynshape.PlanMemory(returned_in_arena=False, never_worse=never_worse)
        exe = dynshape.compile(textwrap.dedent(MLP), plan_memory=planner)
        vm = dynshape.VirtualMachine(exe, allocator=NaiveAllocator())
        vm.run(*_args(MLP, [(10, 16), (64, 16), (64, 64), (8, 64)]))
        return vm.allocator.stats.requests, vm.allocator.stats.peak_live_bytes

    # The plan: one arena for the temporaries, one storage for the result; the arena keeps
    # h1's dead block while the result is written: 544*n bytes against 512*n with kills alone.
    assert run(never_worse=False) == (2, 544 * 10)
    # So the planner's guarantee keeps kills alone (three storages, 512*n at most).
    assert run(never_worse=True) == (3, 512 * 10)


@pytest.mark.parametrize(("n", "m", "k"), [(1, 1, 1), (3, 17, 2), (40, 5, 33)])
def test_planned_peak_formula_matches_vm_statistics_two_symbols(n: int, m: int, k: int) -> None:
    report = memory_report(textwrap.dedent(ELEMENTWISE), {"n": n, "m": m, "k": k})["main"]
    exe = dynshape.compile(textwrap.dedent(ELEMENTWISE))
    vm = dynshape.VirtualMachine(exe, allocator=NaiveAllocator())
    vm.run(*_args(ELEMENTWISE, [(n, m), (k, m), (m, k)]))
    figures = report.evaluate()
    assert vm.allocator.stats.peak_live_bytes == figures["planned_peak"]
    assert figures["lower_bound"] <= figures["planned_peak"]  # alignment may pad small ones
    off = dynshape.VirtualMachine(
        dynshape.compile(textwrap.dedent(ELEMENTWISE), plan_memory=False),
        allocator=NaiveAllocator(),
    )
    off.run(*_args(ELEMENTWISE, [(n, m), (k, m), (m, k)]))
    assert off.allocator.stats.peak_live_bytes == figures["unplanned_peak"]


def test_explain_prints_the_report_and_draws_an_svg(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = tmp_path / "mlp.txt"
    program.write_text(textwrap.dedent(MLP))
    svg = tmp_path / "layout.svg"
    assert cli_main(["explain", str(program), "--bind", "n=128", "--svg", str(svg)]) == 0
    out = capsys.readouterr().out
    assert "planned peak                512*n  = 65,536 bytes" in out
    assert "tensor bytes live (max)     512*n  = 65,536 bytes" in out
    assert "allocations per call        1 planned, 3 unplanned" in out
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    rects = [e for e in root.iter() if e.tag.endswith("rect")]
    boxes = [r for r in rects if r.get("fill-opacity") == "0.8"]  # tensors, not their legend
    assert len(boxes) == 3  # the arena's three tensors
    assert any(r.get("stroke") == "#999" for r in rects)  # the arena's band
    texts = " ".join(e.text or "" for e in root.iter() if e.tag.endswith("text"))
    assert "%arena" in texts


def test_explain_without_binding_prints_formulas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = tmp_path / "mlp.txt"
    program.write_text(textwrap.dedent(MLP))
    assert cli_main(["explain", str(program)]) == 0
    assert "512*n" in capsys.readouterr().out
    assert cli_main(["explain", str(program), "--bind", "n"]) == 1


CALLS = """
def @layer(%x: Tensor[(m, 16), float32], %w: Tensor[(16, 16), float32]) -> Tensor[(m, 16), float32] {
  nn.relu(nn.dense(nn.relu(nn.dense(%x, %w)), %w))
}
def @main(%x: Tensor[(n, 16), float32], %w: Tensor[(16, 16), float32]) -> Tensor[(2*n, 16), float32] {
  %a = @layer(%x, %w);
  %b = @layer(concatenate((%a, %a), axis=0), %w);
  nn.dense(%b, %w)
}
"""


@pytest.mark.parametrize("n", [1, 5, 40])
def test_the_peak_formula_includes_callees_in_the_callers_symbols(n: int) -> None:
    report = memory_report(textwrap.dedent(CALLS), {"n": n})
    main = report["main"]
    assert main.calls == []
    vm = dynshape.VirtualMachine(
        dynshape.compile(textwrap.dedent(CALLS)), allocator=NaiveAllocator()
    )
    vm.run(*_args(CALLS, [(n, 16), (16, 16)]))
    figures = main.evaluate()
    assert vm.allocator.stats.peak_live_bytes == figures["planned_peak"]
    assert vm.allocator.stats.requests == main.allocations
    # @layer runs on n rows, then on 2*n: its own peak appears with m = 2*n.
    assert "m" not in str(main.planned_peak) and "n" in str(main.planned_peak)
    assert figures["lower_bound"] <= figures["planned_peak"]


def test_a_recursive_callee_is_named_as_not_included() -> None:
    # Not a loop: the recursive call is not in tail position (each level keeps its frame).
    source = """
    def @count(%x: Tensor[(n,), float32], %k: int32) -> Tensor[(n,), float32] {
      if (greater(%k, 0)) { add(@count(exp(%x), subtract(%k, 1)), %x) } else { negative(%x) }
    }
    def @main(%x: Tensor[(n,), float32]) -> Tensor[(n,), float32] {
      @count(exp(%x), 3)
    }
    """
    report = memory_report(textwrap.dedent(source), {"n": 8})
    assert report["main"].calls == ["@count"] and report["count"].calls == ["@count"]
    assert "(not included: the memory of @count, which is recursive)" in report["main"].format()
    assert "its own recursive calls" in report["count"].format()


LOOP = """
def @count(%x: Tensor[(n,), float32], %k: int32) -> Tensor[(n,), float32] {
  if (greater(%k, 0)) { @count(exp(%x), subtract(%k, 1)) } else { negative(%x) }
}
def @main(%x: Tensor[(n,), float32], %k: int32) -> Tensor[(n,), float32] {
  @count(exp(%x), %k)
}
"""


def test_a_loop_s_memory_is_included_for_any_number_of_iterations() -> None:
    """A function that tail-calls itself with unchanged shapes (a while_loop) frees each
    iteration's frame: its peak is one iteration's on top of what it is passed, and the caller's
    figure bounds what the VM measures however many times it runs (naive allocator: exact
    byte counts)."""
    report = memory_report(LOOP, {"n": 8})
    main, loop = report["main"], report["count"]
    assert main.calls == [] and loop.loop and main.loops == ["@count"]
    assert str(main.planned_peak) == "12*n + 10" and str(loop.planned_peak) == "8*n + 10"
    assert "a loop: @count tail-calls itself" in loop.format()
    assert "(unplanned total: one iteration of @count)" in main.format()
    exe = dynshape.compile(LOOP)
    for n, k in ((8, 0), (8, 1), (8, 7), (3, 40), (100, 20)):
        vm = dynshape.VirtualMachine(exe, allocator=NaiveAllocator())
        vm.run(np.full(n, 0.1, np.float32), k)
        measured = vm.allocator.stats.peak_live_bytes
        bound = memory_report(LOOP, {"n": n})["main"].evaluate()["planned_peak"]
        assert measured <= bound, (n, k, measured, bound)
        if k >= 2:  # from the second iteration on, the figure is what runs (an int's bytes)
            assert bound <= measured + 8, (n, k, measured, bound)


def test_a_loop_whose_shapes_change_is_still_named_as_not_included() -> None:
    source = """
def @grow(%x: Tensor[(?,), float32], %k: int32) -> Tensor[(?,), float32] {
  if (greater(%k, 0)) { @grow(concatenate((%x, exp(%x))), subtract(%k, 1)) } else { %x }
}
def @main(%x: Tensor[(n,), float32], %k: int32) -> Tensor[(?,), float32] {
  @grow(exp(%x), %k)
}
"""
    report = memory_report(source, {"n": 8})
    assert not report["grow"].loop and report["main"].calls == ["@grow"]


def test_the_layout_names_variables_as_the_printed_ir_does() -> None:
    text = memory_report(textwrap.dedent(MLP), {"n": 2})["main"].format()
    assert "%x1 " in text and "%x2 " in text and "%x3 " in text


def _corpus_with_calls() -> list[object]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
    from harness import all_cases

    return [c for c in all_cases() if c.source.count("def @") > 1]


@pytest.mark.parametrize("case", _corpus_with_calls(), ids=lambda c: c.name)  # type: ignore[attr-defined]
def test_unplanned_total_counts_callees_and_is_never_below_the_peak(case: object) -> None:
    for binding in case.bindings:  # type: ignore[attr-defined]
        main = memory_report(case.source, binding)["main"]  # type: ignore[attr-defined]
        if main.calls or main.loops:
            continue  # a recursive callee is in neither figure, a loop one iteration in the total
        figures = main.evaluate()
        assert figures["unplanned_total"] >= figures["unplanned_peak"], (binding, figures)


def test_appended_tensors_are_reported_outside_the_peaks() -> None:
    """A KV cache's present is grown in place (design/memory.md, "Appends"): its bytes are a
    line of their own, in the step's symbols, and the room a declared bound gives is named."""
    source = """
def @main(%past: Tensor[(b, p, 4), float32], %x: Tensor[(b, 1, 4), float32]) {
  let %present = concatenate((%past, multiply(%x, 2f)), axis=1);
  (sum(%present, axis=[1]), %present)
}"""
    main = memory_report(source, {"b": 2, "p": 10})["main"]
    assert str(main.appended) == "16*b*p + 16*b"
    assert main.evaluate()["appended"] == 16 * 2 * 11
    assert main.capacities == [0]
    text = main.format()
    assert "appended (own buffers)      16*b*p + 16*b  = 352 bytes" in text
    assert "1 grown in place; room for twice each tensor" in text
    assert str(main.planned_peak) == "16*b"  # the cache is not a storage of the step


def test_a_function_without_appends_reports_none() -> None:
    main = memory_report("def @main(%x: Tensor[(n,), float32]) { exp(%x) }", {"n": 4})["main"]
    assert main.appended == 0 and main.capacities == []
    assert "appended" not in main.format()
