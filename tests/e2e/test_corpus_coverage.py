"""The end-to-end corpus covers what it promises: every op of the catalogue, at least 80
programs, ``if``, recursion, tuples (nested, as arguments and results), globals called with
symbolic arguments, several dtypes and rank-0 parameters, and bindings with sizes 0 and 1."""

from __future__ import annotations

from typing import Any

from harness import Case, all_cases, features, parsed

import ir

CASES = all_cases()


def _with(predicate: str) -> list[str]:
    return [c.name for c in CASES if getattr(features(c), predicate)]


def test_at_least_85_programs_with_unique_names() -> None:
    names = [c.name for c in CASES]
    assert len(names) >= 85, f"only {len(names)} cases"
    assert len(set(names)) == len(names)


def catalogue() -> list[str]:
    """The ops that compute tensors: ``ir.all_ops()`` without the memory dialect (``memory.*``,
    which only the allocation pass writes)."""
    return [op.name for op in ir.tensor_ops(builtin_only=True)]


def test_every_op_of_the_catalogue_is_used() -> None:
    used: set[str] = set()
    for case in CASES:
        used |= features(case).ops
    missing = sorted(name for name in catalogue() if name not in used)
    assert not missing, f"ops used by no case: {missing}"
    assert len(catalogue()) >= 86


def test_every_case_runs_on_several_shapes() -> None:
    few = [c.name for c in CASES if len(c.bindings) < 3]
    assert not few, f"cases with fewer than 3 bindings: {few}"
    unbound = []
    for case in CASES:
        symbols = {s.name for p in case_params(case) for s in _symbols(p)}
        for binding in case.bindings:
            if symbols - set(binding):
                unbound.append((case.name, sorted(symbols - set(binding))))
    assert not unbound, f"bindings missing symbols of @main's parameters: {unbound}"
    compound = [
        (case.name, str(d))
        for case in CASES
        for ty in case_params(case)
        for d in _dims(ty)
        if not isinstance(d, int) and not d.is_Symbol
    ]
    assert not compound, f"@main parameter dims must be ints or plain symbols: {compound}"


def _dims(ty: ir.Type) -> list[Any]:
    if isinstance(ty, ir.TupleType):
        return [d for f in ty.fields for d in _dims(f)]
    return list(ty.shape) if isinstance(ty, ir.TensorType) else []


def case_params(case: Case) -> list[ir.Type]:
    return [p.type_annotation for p in parsed(case)["main"].params if p.type_annotation]


def _symbols(ty: ir.Type) -> set[Any]:
    if isinstance(ty, ir.TupleType):
        return set().union(*(_symbols(f) for f in ty.fields)) if ty.fields else set()
    if isinstance(ty, ir.TensorType):
        out: set[Any] = set()
        for d in ty.shape:
            out |= ir.free_symbols(d)
        return out
    return set()


def test_sizes_zero_and_one_are_common() -> None:
    """Most cases bind some symbol to 0 and some to 1 (those that cannot say so in their
    deferred checks, e.g. a max over an axis, or windows that must fit)."""
    zero = [c for c in CASES if any(0 in b.values() for b in c.bindings)]
    one = [c for c in CASES if any(1 in b.values() for b in c.bindings)]
    assert len(zero) >= 0.8 * len(CASES), f"only {len(zero)} of {len(CASES)} cases bind a 0"
    assert len(one) >= 0.9 * len(CASES), f"only {len(one)} of {len(CASES)} cases bind a 1"


def test_control_flow_and_recursion() -> None:
    assert len([c for c in CASES if features(c).ifs]) >= 8
    assert len(_with("recursive")) >= 4


def test_tuples_nested_as_arguments_and_results() -> None:
    assert _with("nested_tuple_params"), "no nested tuple parameter"
    assert _with("nested_tuple_results"), "no nested tuple result"
    assert _with("tuple_params"), "no tuple parameter"


def test_globals_called_with_symbolic_arguments() -> None:
    assert len(_with("symbolic_global_args")) >= 5


def test_dtypes_and_scalar_parameters() -> None:
    dtypes: set[str] = set()
    for case in CASES:
        dtypes |= features(case).dtypes
    want = {"bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"}
    assert want <= dtypes, f"dtypes never used: {sorted(want - dtypes)}"
    assert len(_with("rank0_params")) >= 5
