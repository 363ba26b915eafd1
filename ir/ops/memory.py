"""The memory dialect: explicit storage, tensor views, kernel invocation and run-time shapes.

These ops appear only after the allocation pass (``manifest_alloc``). Their sizes, offsets and
shapes are *dims*: expressions over the symbols the function has bound (at entry, or by a
``memory.shape_func``), which the lowering turns into compiled shape programs. Their types follow
dialect rules (``result_type`` in ``dynshape/dialect/memory.py``), not a dtype rule and a shape
function.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..attrs import DIM, DIM_LIST, DIM_LISTS, DTYPE, INT, INT_LIST, STR, Attrs, attr, choice
from ..errors import IRError
from ..op import OpPattern
from ._declare import declare


def _dialect_typed(dtypes: Sequence[Any], attrs: Attrs) -> str:
    raise IRError("memory ops are typed by the memory dialect's rules, not by a dtype rule")


declare(
    "memory.alloc_storage",
    [],
    OpPattern.OPAQUE,
    _dialect_typed,
    [attr("size", DIM), attr("alignment", INT, 64), attr("dtype_hint", DTYPE, "float32")],
    doc="a new storage of size bytes (a dim over bound symbols)",
)
declare(
    "memory.alloc_tensor",
    ["storage"],
    OpPattern.OPAQUE,
    _dialect_typed,
    [attr("offset", DIM, 0), attr("shape", DIM_LIST), attr("dtype", DTYPE, "float32")],
    doc="a tensor view of a storage at a byte offset",
)
declare(
    "memory.invoke",
    ["fn", "*inputs", "*outputs"],
    OpPattern.OPAQUE,
    _dialect_typed,
    doc="run a primitive function on inputs, writing into pre-allocated outputs",
)
declare(
    "memory.shape_of",
    ["x"],
    OpPattern.OPAQUE,
    _dialect_typed,
    doc="the run-time shape of x as a 1-d int64 tensor",
)
declare(
    "memory.shape_func",
    ["fn", "*inputs"],
    OpPattern.OPAQUE,
    _dialect_typed,
    [attr("data_dependent", INT_LIST, []), attr("out_shapes", DIM_LISTS)],
    doc="run a primitive's shape function at run time (inputs: shapes, or values where "
    "data_dependent) and bind the new symbols of out_shapes",
)
declare(
    "memory.reshape_tensor",
    ["x"],
    OpPattern.OPAQUE,
    _dialect_typed,
    [attr("shape", DIM_LIST)],
    doc="a view of x with another shape (allocates nothing)",
)
declare(
    "memory.kill",
    ["x"],
    OpPattern.OPAQUE,
    _dialect_typed,
    doc="x is dead from here: its storage may be reused",
)
declare(
    "memory.check",
    [],
    OpPattern.OPAQUE,
    _dialect_typed,
    [
        attr("kind", choice("==", "!=", "<", "<=", ">", ">=", "divides", "broadcast")),
        attr("lhs", DIM),
        attr("rhs", DIM),
        attr("message", STR),
    ],
    doc="a shape fact deferred to run time by type inference",
)
declare(
    "memory.holds",
    [],
    OpPattern.OPAQUE,
    _dialect_typed,
    [attr("kind", choice("==", "!=", "<", "<=", ">", ">=")), attr("lhs", DIM), attr("rhs", DIM)],
    doc="whether lhs kind rhs holds for the bound symbols: a bool computed at run time "
    "(plan_memory's choice between a planned and a kills-only body)",
)
