"""Types stay in the IR: passes build typed nodes and keep the types of what they copy, so the
pipeline infers once; ``debug=True`` checks every stage against a full inference."""

from __future__ import annotations

import dataclasses

import pytest
from harness import all_cases

import dynshape
import ir
from dynshape import pipeline
from dynshape.passes import infer_types
from dynshape.passes.infer_types import CompleteTypes, InferTypes

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_completed_types_are_what_a_full_inference_gives(case):
    # debug=True runs InferTypes after every pass and compares it with the kept types.
    dynshape.compile(case.source, debug=True)


def _count_runs(monkeypatch, cls):
    """A list that gets one entry per call of ``cls.run`` from now on."""
    runs = []
    original = cls.run

    def counted(self, module):
        runs.append(1)
        return original(self, module)

    monkeypatch.setattr(cls, "run", counted)
    return runs


def test_compile_infers_types_once(monkeypatch):
    runs = _count_runs(monkeypatch, infer_types.InferTypes)
    dynshape.compile(CASES[0].source)
    # Once, for the types stage: the deferred checks travel on the nodes (``facts``) to
    # manifest_alloc, which re-inferred for them before; it was seven times in all.
    assert len(runs) == 1


def test_compile_never_completes_types_between_passes(monkeypatch):
    runs = _count_runs(monkeypatch, infer_types.CompleteTypes)
    for case in CASES[:20]:
        dynshape.compile(case.source)
    assert runs == []


def test_completing_a_typed_module_keeps_every_node():
    typed = InferTypes().run(ir.parse(CASES[0].source))
    again = CompleteTypes().run(typed)
    for name in typed:
        assert again[name] is typed[name]


def test_a_pass_that_keeps_a_stale_type_is_named_under_debug():
    module = dynshape.stages("def @main(%x: Tensor[(n,), float32]) { add(%x, %x) }")["types"]
    main = module["main"]
    body = main.body
    assert isinstance(body, ir.Call) and str(body.ty) == "Tensor[(n,), float32]"
    # Swap the call's operands for float64 constants, keeping the float32 type it had.
    one = ir.const(1.0, "float64")
    one = dataclasses.replace(one, ty=one.tensor_type)
    stale = dataclasses.replace(body, args=(one, one))
    broken = ir.Module({"main": dataclasses.replace(main, body=stale)})
    with pytest.raises(
        dynshape.CompileError,
        match=r"after fused: a type the pass kept differs .*: add\(1f64, 1f64\) .* kept "
        r"Tensor\[\(n,\), float32\], inference gives float64",
    ):
        pipeline._verify("fused", broken)


def test_a_pass_that_drops_a_deferred_check_is_named_under_debug():
    text = "def @main(%x: Tensor[(n,), float32], %y: Tensor[(m,), float32]) { add(%x, %y) }"
    main = dynshape.stages(text)["types"]["main"]
    body = main.body
    assert isinstance(body, ir.Call) and [f.kind for f in body.facts] == ["broadcast"]
    dropped = dataclasses.replace(body, facts=())  # the n-vs-m check would be lost
    broken = ir.Module({"main": dataclasses.replace(main, body=dropped)})
    with pytest.raises(
        dynshape.CompileError,
        match=r"after fused: .*add\(%x, %y\) .*its deferred checks differ \(0 kept\)",
    ):
        pipeline._verify("fused", broken)


def test_a_pass_that_builds_an_untyped_node_is_named_under_debug():
    module = dynshape.stages("def @main(%x: Tensor[(n,), float32]) { add(%x, %x) }")["types"]
    main = module["main"]
    untyped = ir.call("add", main.params[0], main.params[0])  # no type: as a careless pass
    broken = ir.Module({"main": dataclasses.replace(main, body=untyped)})
    with pytest.raises(
        dynshape.CompileError,
        match=r"after fused: the pass built a node without its type \(passes build typed "
        r"nodes\): add\(%x, %x\) inference gives Tensor\[\(n,\), float32\]",
    ):
        pipeline._verify("fused", broken)
