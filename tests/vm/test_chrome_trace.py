"""The profiler's Chrome trace (``VirtualMachine(exe, profile="trace")``,
``vm.write_chrome_trace``, ``dynshape run --profile-trace``): valid JSON in the trace event
format, one complete event per run, executed instruction and kernel call (kernels with their
operands' shapes and dtypes), properly nested, in start order per thread, one tid per thread,
and a bounded number of events. Counts only: nothing here asserts a duration."""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from vm_testlib import elementwise_program

from vm import Profiler, ProfilingBackend, VirtualMachine, VMError

EPS = 1e-6  # microseconds: ts + dur of a child may round differently from its parent's


def _trace(vm: VirtualMachine, tmp_path: Path, name: str = "trace.json") -> dict[str, Any]:
    path = tmp_path / name
    written = vm.write_chrome_trace(path)
    trace = json.loads(path.read_text())
    assert written == trace["otherData"]["events"]
    return trace


def _complete(trace: dict[str, Any]) -> list[dict[str, Any]]:
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    for e in events:
        assert set(e) >= {"name", "cat", "ph", "ts", "dur", "pid", "tid"}
        assert e["dur"] >= 0 and e["ts"] >= 0
    return events


def _inside(child: dict[str, Any], parent: dict[str, Any]) -> bool:
    return (
        child["tid"] == parent["tid"]
        and parent["ts"] <= child["ts"] + EPS
        and child["ts"] + child["dur"] <= parent["ts"] + parent["dur"] + EPS
    )


def _check_nesting_and_order(events: list[dict[str, Any]]) -> None:
    """Per tid: ts never decreases; every kernel lies inside one invoke naming it, and every
    instruction inside one run."""
    by_tid: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        by_tid.setdefault(e["tid"], []).append(e)
    for evs in by_tid.values():
        assert all(a["ts"] <= b["ts"] for a, b in itertools.pairwise(evs))
        runs = [e for e in evs if e["cat"] == "run"]
        invokes = [e for e in evs if e["cat"] == "instruction" and e["name"] == "invoke"]
        for e in evs:
            if e["cat"] == "kernel":
                parents = [i for i in invokes if _inside(e, i)]
                assert len(parents) == 1 and parents[0]["args"]["kernel"] == e["name"]
            if e["cat"] == "instruction":
                assert sum(_inside(e, r) for r in runs) == 1


def test_one_event_per_instruction_kernel_and_run(tmp_path: Path) -> None:
    vm = VirtualMachine(elementwise_program("add"), profile="trace")
    x = np.ones((3, 4), np.float32)
    runs = 3
    for _ in range(runs):
        vm.run(x, x)
    trace = _trace(vm, tmp_path)
    events = _complete(trace)
    cats = Counter(e["cat"] for e in events)
    p = vm.profiler
    assert p is not None
    # The counters and the trace agree, event for event.
    assert cats["run"] == runs == p.runs.count
    assert cats["instruction"] == sum(c.count for c in p.instructions.values())
    assert cats["kernel"] == sum(c.count for c in p.kernels.values()) == 2 * runs
    names = Counter(e["name"] for e in events if e["cat"] == "instruction")
    assert names == Counter({k: c.count for k, c in p.instructions.items() if c.count})
    for e in events:
        if e["cat"] == "kernel":
            assert e["name"] == "add"
            assert e["args"]["inputs"] == [{"shape": [3, 4], "dtype": "float32"}] * 2
            assert e["args"]["outputs"] == [{"shape": [3, 4], "dtype": "float32"}]
        if e["cat"] == "instruction":
            assert e["args"]["function"] == "main" and e["args"]["pc"] >= 0
    _check_nesting_and_order(events)
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    assert {e["name"] for e in meta} == {"process_name", "thread_name"}
    assert trace["otherData"]["dropped_events"] == 0
    assert trace["otherData"]["max_events"] == 1_000_000


def test_shapes_follow_the_call(tmp_path: Path) -> None:
    vm = VirtualMachine(elementwise_program("multiply", dtype="float64"), profile="trace")
    for n in (1, 5):
        vm.run(np.ones((n, 4)), np.ones((n, 4)))
    kernels = [e for e in _complete(_trace(vm, tmp_path)) if e["cat"] == "kernel"]
    assert [k["args"]["outputs"][0]["shape"][0] for k in kernels] == [1, 1, 5, 5]
    assert {k["args"]["outputs"][0]["dtype"] for k in kernels} == {"float64"}


def test_fused_kernels_and_tuple_operands(tmp_path: Path) -> None:
    import dynshape as ds  # a compiled program: fused kernels, a tuple operand (concatenate)

    x = ds.tensor("x", ("n", 4), "float32")
    program = ds.build(ds.concatenate([ds.relu(x + x), ds.exp(x)], 0), inputs=[x])
    vm = VirtualMachine(ds.compile(program), profile="trace")
    vm.run(np.ones((2, 4), np.float32))
    events = _complete(_trace(vm, tmp_path))
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert kernels and all("inputs" in k["args"] and "outputs" in k["args"] for k in kernels)
    # One fused kernel: its result first, then the scratch buffers the compiler planned.
    assert any(k["args"]["outputs"][0] == {"shape": [4, 4], "dtype": "float32"} for k in kernels)
    _check_nesting_and_order(events)
    # A tuple operand (concatenate's) is a list of its arrays.
    profiler = Profiler(trace=True)
    concat = profiler.traced_kernel(lambda parts, out: np.concatenate(parts, out=out), "cat", 1)
    concat((np.ones((1, 2)), np.ones((3, 2), np.float32)), np.empty((4, 2)))
    (event,) = [e for e in profiler.chrome_trace()["traceEvents"] if e["ph"] == "X"]
    assert event["args"]["inputs"] == [
        [{"shape": [1, 2], "dtype": "float64"}, {"shape": [3, 2], "dtype": "float32"}]
    ]


def test_two_threads_give_two_tids(tmp_path: Path) -> None:
    vm = VirtualMachine(elementwise_program("add"), profile="trace")
    x = np.ones((8, 4), np.float32)
    barrier = threading.Barrier(2)

    def work() -> None:
        barrier.wait()
        for _ in range(20):
            vm.run(x, x)

    threads = [threading.Thread(target=work, name=f"worker-{i}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    trace = _trace(vm, tmp_path)
    events = _complete(trace)
    runs = Counter(e["tid"] for e in events if e["cat"] == "run")
    assert len(runs) == 2 and set(runs.values()) == {20}
    kernels = Counter(e["tid"] for e in events if e["cat"] == "kernel")
    assert kernels == Counter({tid: 40 for tid in runs})
    _check_nesting_and_order(events)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"worker-0", "worker-1"}


def test_events_are_capped_and_the_trace_says_so(tmp_path: Path) -> None:
    profiler = Profiler(trace=True, max_events=7)
    vm = VirtualMachine(elementwise_program("add"), backend=ProfilingBackend(profiler=profiler))
    x = np.ones((3, 4), np.float32)
    for _ in range(4):
        vm.run(x, x)
    trace = _trace(vm, tmp_path)
    assert len(_complete(trace)) == 7
    other = trace["otherData"]
    assert other["max_events"] == 7 and other["dropped_events"] > 0
    assert "dropped" in other["note"]
    assert (
        other["events"] + other["dropped_events"]
        == sum(c.count for rows in (profiler.instructions, profiler.kernels) for c in rows.values())
        + profiler.runs.count
    )
    profiler.reset()
    assert not profiler.events and profiler.dropped == 0


def test_plain_profile_records_no_events_and_says_how() -> None:
    vm = VirtualMachine(elementwise_program("add"), profile=True)
    vm.run(np.ones((3, 4), np.float32), np.ones((3, 4), np.float32))
    assert vm.profiler is not None and not vm.profiler.events
    with pytest.raises(VMError, match='profile="trace"'):
        vm.write_chrome_trace("never.json")
    with pytest.raises(VMError, match="profile must be False, True or 'trace'"):
        VirtualMachine(elementwise_program("add"), profile="yes")


def test_cli_writes_the_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dynshape.cli import main

    program = tmp_path / "prog.txt"
    program.write_text(
        "def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(1, 4), float32]) {\n"
        "  exp(add(%x, %y))\n}\n"
    )
    out = tmp_path / "trace.json"
    argv = ["run", str(program), "--input", "x=3,4", "--input", "y=1,4"]
    assert main([*argv, "--profile-trace", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().err
    events = _complete(json.loads(out.read_text()))
    assert Counter(e["cat"] for e in events)["run"] == 1
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert kernels and kernels[0]["args"]["inputs"][0] == {"shape": [3, 4], "dtype": "float32"}
    _check_nesting_and_order(events)
    assert main([*argv, "--profile-trace", str(tmp_path / "no" / "dir.json")]) != 0
    assert "cannot write" in capsys.readouterr().err
