"""The memory dialect: explicit storage, tensor views, kernel invocation and run-time shapes.

These ops appear only after the allocation pass (``manifest_alloc``). Their sizes, offsets and
shapes are *dims*: expressions over the symbols the function has bound. Their types follow the
dialect's rules (``dtype="dialect"``), and they have no shape function and no kernel.
"""

from __future__ import annotations

from ..decl import OpDecl, attr, declare
from ..kinds import choice

_COMPARE = ("==", "!=", "<", "<=", ">", ">=")

DECLARATIONS: tuple[OpDecl, ...] = (
    declare(
        "memory.alloc_storage",
        [],
        "opaque",
        "dialect",
        [
            attr("size", "dim"),
            attr("alignment", "int", 64),
            attr("dtype_hint", "dtype", "float32"),
        ],
        "a new storage of size bytes (a dim over bound symbols)",
    ),
    declare(
        "memory.alloc_tensor",
        ["storage"],
        "opaque",
        "dialect",
        [attr("offset", "dim", 0), attr("shape", "list[dim]"), attr("dtype", "dtype", "float32")],
        "a tensor view of a storage at a byte offset",
    ),
    declare(
        "memory.invoke",
        ["fn", "*inputs", "*outputs"],
        "opaque",
        "dialect",
        doc="run a primitive function on inputs, writing into pre-allocated outputs",
    ),
    declare(
        "memory.shape_of",
        ["x"],
        "opaque",
        "dialect",
        doc="the run-time shape of x as a 1-d int64 tensor",
    ),
    declare(
        "memory.shape_func",
        ["fn", "*inputs"],
        "opaque",
        "dialect",
        [attr("data_dependent", "list[int]", ()), attr("out_shapes", "list[list[dim]]")],
        "run a primitive's shape function at run time (inputs: shapes, or values where "
        "data_dependent) and bind the new symbols of out_shapes",
    ),
    declare(
        "memory.reshape_tensor",
        ["x"],
        "opaque",
        "dialect",
        [attr("shape", "list[dim]")],
        "a view of x with another shape (allocates nothing)",
    ),
    declare(
        "memory.append",
        ["x", "y"],
        "opaque",
        "dialect",
        [attr("axis", "int"), attr("shape", "list[dim]"), attr("capacity", "int", 0)],
        "concatenate((x, y), axis) of the given result shape, written into x's storage past "
        "x's end when that storage has room there (a capacity the VM made for an earlier "
        "append), else into a new storage with room to grow: up to capacity elements on the "
        "axis when capacity > 0, else twice the result's length",
    ),
    declare(
        "memory.kill",
        ["x"],
        "opaque",
        "dialect",
        doc="x is dead from here: its storage may be reused",
    ),
    declare(
        "memory.check",
        [],
        "opaque",
        "dialect",
        [
            attr("kind", choice(*_COMPARE, "divides", "broadcast")),
            attr("lhs", "dim"),
            attr("rhs", "dim"),
            attr("message", "str"),
        ],
        "a shape fact deferred to run time by type inference",
    ),
    declare(
        "memory.holds",
        [],
        "opaque",
        "dialect",
        [attr("kind", choice(*_COMPARE)), attr("lhs", "dim"), attr("rhs", "dim")],
        "whether lhs kind rhs holds for the bound symbols: a bool computed at run time "
        "(plan_memory's choice between a planned and a kills-only body)",
    ),
)
