"""KillAfterLastUse: text in / text out; views, tuples, ifs and returned values."""

from __future__ import annotations

import textwrap

from pass_helpers import check_pass, parse_typed

import dynshape
import ir
from dynshape.analysis.memory_check import check_no_overlap
from dynshape.passes.base import ModulePass
from dynshape.passes.infer_types import InferTypes
from dynshape.passes.kill import KillAfterLastUse

#: A storage viewed by a reshape, a reduction into a second one, a result in a third.
VIEW_CHAIN = """
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
    negative(%p2)
  };
  let %i3 = memory.invoke(%2, (%b,), (%c,));
  %c
}"""


class Typed(ModulePass):
    """A pass followed by type inference (the pipeline re-infers after every pass)."""

    def __init__(self, inner: ModulePass) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]

    def run(self, module: ir.Module) -> ir.Module:
        return InferTypes().run(self.inner.run(module))


def test_kill_waits_for_the_view_and_skips_the_returned_storage() -> None:
    expected = VIEW_CHAIN.replace(
        "  let %i2 = memory.invoke(%1, (%v,), (%b,));\n",
        "  let %i2 = memory.invoke(%1, (%v,), (%b,));\n  let %_ = memory.kill(%s1);\n",
    ).replace(
        "  let %i3 = memory.invoke(%2, (%b,), (%c,));\n",
        "  let %i3 = memory.invoke(%2, (%b,), (%c,));\n  let %_1 = memory.kill(%s2);\n",
    )
    check_pass(Typed(KillAfterLastUse()), VIEW_CHAIN, expected)


def test_kill_is_idempotent() -> None:
    once = KillAfterLastUse().run(parse_typed(VIEW_CHAIN)[0])
    twice = KillAfterLastUse().run(once)
    assert ir.structurally_equal(once, twice)


def _kills(module: ir.Module, fn: str = "main") -> list[str]:
    return [line.strip() for line in str(module[fn]).splitlines() if "memory.kill" in line]


def test_tuple_keeps_its_fields_alive_until_the_tuple_dies() -> None:
    source = """
    def @main(%x: Tensor[(n,), float32]) -> Tensor[(n,), float32] {
      %a = negative(%x);
      %b = exp(%x);
      %t = (%a, %b);
      add(%t.0, %t.1)
    }
    """
    killed = dynshape.stages(textwrap.dedent(source))["kill"]
    text = str(killed["main"])
    # Both storages die after the add that reads the tuple's fields, not after the tuple.
    last_invoke = text.rindex("memory.invoke")
    assert all(text.index(k) > last_invoke for k in _kills(killed)), text
    assert len(_kills(killed)) == 2


def test_value_live_out_of_an_if_is_not_killed_in_a_branch() -> None:
    source = """
    def @main(%x: Tensor[(n,), float32], %c: bool) -> Tensor[(n,), float32] {
      %a = negative(%x);
      %r = if (%c) { exp(%a) } else { %a };
      add(%r, %a)
    }
    """
    killed = dynshape.stages(textwrap.dedent(source))["kill"]
    main = killed["main"]
    let = main.body
    while not (isinstance(let, ir.Let) and isinstance(let.value, ir.If)):
        assert isinstance(let, ir.Let)
        let = let.body
    value = let.value
    for branch in (value.then_branch, value.else_branch):
        assert "memory.kill" not in str(branch)  # %a is used after the if; exp's escapes
    assert check_no_overlap(killed, {"n": 5}) >= 0


def test_returned_values_and_call_results_are_not_killed() -> None:
    source = """
    def @f(%y: Tensor[(n,), float32]) -> Tensor[(n,), float32] { %y }
    def @main(%x: Tensor[(n,), float32]) -> Tensor[(n,), float32] {
      %a = negative(%x);
      %b = @f(%a);
      exp(%b)
    }
    """
    killed = dynshape.stages(textwrap.dedent(source))["kill"]
    text = str(killed["main"])
    # %a's storage may come back from @f: it lives until %b's last use (the exp).
    assert text.index("memory.kill") > text.rindex("memory.invoke")
    check_no_overlap(killed, {"n": 4})
