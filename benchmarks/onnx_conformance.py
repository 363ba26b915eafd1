"""The ONNX backend node tests through dynshape and, when installed, onnxruntime: how many of
the cases the ``onnx`` package generates pass, fail or are unsupported, measured in one run.

    python benchmarks/onnx_conformance.py [--quick] [--only TEXT] [--failures] [--reasons]

A case is *unsupported* when the importer refuses it up front (an op without a converter, an
element type or opset it does not take), *failed* when it imports but gives a wrong value or an
error (``dynshape/onnx/conformance.py``). onnxruntime's column runs the same cases (the same
frozen inputs) with its CPU provider: passed, failed (wrong value) or refused (it raises).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dynshape.onnx import conformance


def ort_outcome(case: Any) -> str:
    """onnxruntime on one case: passed, failed or refused."""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)  # errors only: the generated models draw warnings
    model, data_sets = conformance._frozen(case)
    try:
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        names = [i.name for i in session.get_inputs()]
        for inputs, expected in data_sets:
            arrays = [conformance._array(a, None) for a in inputs]
            got = session.run(None, dict(zip(names, arrays, strict=False)))
            for g, w in zip(got, expected, strict=True):
                if conformance._compare(
                    np.asarray(g), conformance._array(w, None), case.rtol, case.atol
                ):
                    return "failed"
    except Exception:
        return "refused"
    return "passed"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every 20th case (CI smoke)")
    parser.add_argument("--only", help="the cases whose name contains this text")
    parser.add_argument("--failures", action="store_true", help="list dynshape's failures")
    parser.add_argument(
        "--reasons", action="store_true", help="the unsupported cases grouped by reason"
    )
    parser.add_argument("--no-ort", action="store_true", help="dynshape's column only")
    args = parser.parse_args()
    cases = conformance.cases()
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    if args.quick:
        cases = cases[::20]
    try:
        import onnxruntime  # noqa: F401

        with_ort = not args.no_ort
    except ImportError:
        with_ort = False
    start = time.perf_counter()
    ours = list(conformance.run_all(cases))
    took = time.perf_counter() - start
    counts = collections.Counter(o.status for o in ours)
    print(f"{len(cases)} backend node test cases (onnx.backend.test)")
    print(
        f"dynshape:    {counts['passed']:5} passed  {counts['failed']:5} failed  "
        f"{counts['unsupported']:5} unsupported   ({took:.0f} s)"
    )
    if with_ort:
        start = time.perf_counter()
        theirs = collections.Counter(ort_outcome(c) for c in cases)
        took = time.perf_counter() - start
        print(
            f"onnxruntime: {theirs['passed']:5} passed  {theirs['failed']:5} failed  "
            f"{theirs['refused']:5} refused       ({took:.0f} s)"
        )
    if args.failures:
        for o in ours:
            if o.status == "failed":
                print(f"  {o.name}: {o.detail.splitlines()[0][:160]}")
    if args.reasons:
        print_reasons(ours)


def print_reasons(outcomes: list[conformance.Outcome]) -> None:
    """The unsupported cases by reason, most cases first (a case counts once per reason)."""
    by_reason: dict[str, list[str]] = collections.defaultdict(list)
    for o in outcomes:
        if o.status == "unsupported":
            for reason in conformance.reasons(o.detail):
                by_reason[reason].append(o.name)
    for reason, names in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"{len(names):5}  {reason}  (e.g. {names[0]})")


if __name__ == "__main__":
    main()
