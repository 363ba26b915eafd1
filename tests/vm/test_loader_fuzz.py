"""Issue 12: no crafted executable file can break the VM (structured loader fuzzing).

A bounded run of ``loader_fuzz.py`` (see its module doc): mutants of programs compiled by the
real compiler - bit flips, truncations, and JSON edits of opcodes, registers, operand kinds,
offsets, shapes, alignments, dtypes, kernel attributes, shape-program nodes, fused steps and
scratch specs, function signatures, jump targets and constants, with the CRC recomputed - are
loaded and, when they load, run unchecked and with the memory sanitizer, in a worker subprocess
watched with a per-mutation timeout. Every outcome must be a project error or a clean run: no
foreign exception, no crash, no hang, no view outside its storage. The run must also reach deep:
most mutants pass the checksum and JSON stages and are refused by the decoders, the validator or
the register-kind analysis, and a good share load and run.

The VM's timeout is 0.25 s here instead of the script's 2 s: a mutant that loops is stopped by
``max_steps``/``timeout`` either way (what is tested), and the shorter bound keeps the test's
time for mutants rather than for loops. ``python tests/vm/loader_fuzz.py --count 100000`` is the
long run.
"""

from __future__ import annotations

import os

import pytest
from loader_fuzz import Report, build_corpus, format_finding, run_fuzz

COUNT = 1500
SEED = 20240612


@pytest.fixture(scope="module")
def corpus():
    return build_corpus()


def _failures(report: Report) -> str:
    return "\n\n".join(format_finding(f) for f in report.findings)


def test_crafted_files_only_raise_project_errors(corpus):
    report = run_fuzz(corpus, COUNT, seed=SEED, timeout=10.0, run_timeout=0.25)
    print(report.table())
    assert report.count == COUNT
    o = report.outcomes
    assert not report.findings, _failures(report)
    assert o["FOREIGN"] == o["OOB"] == o["CRASH"] == o["HANG"] == o["MEMORY"] == 0
    # Deep enough: the mutants get past the checksum and the JSON parser ...
    shallow = sum(report.stages[s] for s in ("header", "crc", "json"))
    deep = sum(report.stages[s] for s in ("decode", "validate", "kinds"))
    assert shallow < 0.15 * COUNT, report.table()
    assert deep > 0.5 * COUNT, report.table()
    # ... every checking layer refuses some of them ...
    for stage in ("decode", "validate", "kinds"):
        assert report.stages[stage] > 0.05 * COUNT, report.table()
    # ... and many load: they run cleanly, or fail at run time with a located project error.
    assert o["ok"] > 0.05 * COUNT, report.table()
    assert o["run_error"] > 0.05 * COUNT, report.table()
    # Every program of the corpus and every mutation kind took part.
    assert len(report.by_seed) == len(corpus)
    assert len(report.by_kind) >= 25, sorted(report.by_kind)


def test_the_watch_reports_crashes_hangs_and_views_outside_storages(corpus, monkeypatch):
    """The parent's side: a worker that aborts, goes silent or makes a view past a storage's
    end is reported as CRASH / HANG / OOB for that mutation, and the run goes on."""
    monkeypatch.setenv("LOADER_FUZZ_SELFTEST", "crash:2,hang:4,oob:6")
    report = run_fuzz(corpus[:2], 8, seed=1, timeout=3.0, run_timeout=0.25)
    assert report.count == 8
    got = {f["index"]: f["outcome"] for f in report.findings}
    assert got == {2: "CRASH", 4: "HANG", 6: "OOB"}, _failures(report)
    assert report.restarts == 2
    crash = next(f for f in report.findings if f["outcome"] == "CRASH")
    assert crash["message"] == f"worker exit code {-6 if os.name == 'posix' else 3}"
    assert "past" in _failures(report) or "storage holds 16" in _failures(report)
