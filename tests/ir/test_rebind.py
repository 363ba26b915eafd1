"""``ir.fresh_binders``: a copy of a chain with new let variables, otherwise the same."""

from __future__ import annotations

import ir
from ir import Let, Var

SOURCE = """
def @main(%x: Tensor[(n,), float32], %c: bool) -> Tensor[(n,), float32] {
  let %a: Tensor[(n,), float32] = add(%x, %x);
  let %b: Tensor[(n,), float32] = if (%c) {
    let %d: Tensor[(n,), float32] = negative(%a);
    %d
  } else {
    %a
  };
  let %t = (%a, %b);
  %t.1
}
"""


def _bound(e: ir.Expr) -> list[Var]:
    out: list[Var] = []
    lets, _ = ir.let_chain(e)
    for let in lets:
        out.append(let.var)
        if isinstance(let.value, ir.If):
            out += _bound(let.value.then_branch) + _bound(let.value.else_branch)
    return out


def test_every_let_gets_a_new_variable_and_nothing_else_changes() -> None:
    fn = ir.parse(SOURCE)["main"]
    copy = ir.fresh_binders(fn.body)
    old, new = _bound(fn.body), _bound(copy)
    assert [v.name_hint for v in old] == [v.name_hint for v in new] == ["a", "b", "d", "t"]
    assert not set(old) & set(new)
    again = ir.Function(fn.params, copy, fn.ret_type, fn.attrs, fn.ranges)
    assert ir.structurally_equal(again, fn)  # the same program, alpha-renamed
    assert isinstance(copy, Let) and copy.value.args[0] is fn.params[0]  # free ones are kept


def test_types_and_facts_are_kept() -> None:
    import dynshape

    typed = dynshape.stages(SOURCE)["types"]["main"]
    copy = ir.fresh_binders(typed.body)
    assert [v.ty for v in _bound(copy)] == [v.ty for v in _bound(typed.body)]
    assert copy.ty == typed.body.ty
