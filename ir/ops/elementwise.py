"""The dtype rule of ``where`` (the elementwise ops are declared in
``shape_funcs/declarations/catalogue/elementwise.py``; the others use shared rules)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..attrs import Attrs
from ..errors import IRError
from ._declare import all_same, own_rule


@own_rule("where")
def _where(dtypes: Sequence[Any], attrs: Attrs) -> str:
    if dtypes[0] != "bool":
        raise IRError(f"where's condition must be bool, got {dtypes[0]}")
    return all_same(dtypes[1:], attrs)
