"""Layout ops: reshape, transpose, slicing, joining and splitting, gathering, scattering,
padding."""

from __future__ import annotations

from ..decl import OpDecl, attr, declare
from ..kinds import choice, optional

#: How a scatter combines an update with the element it lands on (ONNX's ``reduction``).
_REDUCTION = attr("reduction", choice("none", "add", "mul", "max", "min"), "none")

DECLARATIONS: tuple[OpDecl, ...] = (
    declare(
        "reshape",
        ["x"],
        "injective",
        "first",
        [attr("newshape", "list[int | dim]")],
        "x with a new shape (ints or dims); 0 copies the input dim, -1 is inferred",
        reshape_like=True,
    ),
    declare(
        "transpose",
        ["x"],
        "injective",
        "first",
        [attr("axes", optional("list[int]"), None)],
        "permute axes (reverse when axes=None)",
    ),
    declare(
        "expand_dims",
        ["x"],
        "injective",
        "first",
        [attr("axis", "int"), attr("num_newaxis", "int", 1)],
        "insert 1-dims at axis",
        reshape_like=True,
    ),
    declare(
        "squeeze",
        ["x"],
        "injective",
        "first",
        [attr("axis", optional("list[int]"), None)],
        "remove 1-dims (all when axis=None)",
        reshape_like=True,
    ),
    declare(
        "concatenate",
        ["*data"],
        "injective",
        "same",
        [attr("axis", "int", 0)],
        "join a tuple of tensors along axis",
    ),
    declare(
        "append",
        ["x", "y"],
        "opaque",
        "same",
        [attr("axis", "int", 0)],
        "concatenate((x, y), axis), grown in place in x's storage where it has room "
        "(the compiler writes it for a concatenation onto a parameter that is returned)",
    ),
    declare(
        "stack",
        ["*data"],
        "injective",
        "same",
        [attr("axis", "int", 0)],
        "join a tuple of tensors along a new axis",
    ),
    declare(
        "split",
        ["x"],
        "injective",
        "own",
        [attr("indices_or_sections", "int or list[int | dim]"), attr("axis", "int", 0)],
        "a tuple of parts: equal sections, or cut at indices (ints or dims)",
    ),
    declare(
        "strided_slice",
        ["x"],
        "injective",
        "first",
        [
            attr("begin", "list[int | dim]"),
            attr("end", "list[int | dim]"),
            attr("strides", optional("list[int | dim]"), None),
        ],
        "x[begin:end:strides] per axis (numpy clamping, negative indices and strides)",
        dim_values=("begin", "end", "strides"),
    ),
    declare(
        "take",
        ["data", "indices"],
        "injective",
        "own",
        [attr("axis", optional("int"), None)],
        "gather along axis (from the flattened data when axis=None)",
    ),
    declare(
        "tile",
        ["x"],
        "injective",
        "first",
        [attr("reps", "list[int | dim]")],
        "repeat the whole tensor reps times per axis",
    ),
    declare(
        "repeat",
        ["x"],
        "injective",
        "first",
        [attr("repeats", "int"), attr("axis", optional("int"), None)],
        "repeat each element (of the flattened x when axis=None)",
    ),
    declare(
        "broadcast_to",
        ["x"],
        "broadcast",
        "first",
        [attr("shape", "list[int | dim]")],
        "x broadcast to shape",
    ),
    declare(
        "nn.batch_flatten",
        ["x"],
        "injective",
        "first",
        doc="reshape to (x.shape[0], -1)",
        reshape_like=True,
    ),
    declare(
        "nn.pad",
        ["x"],
        "injective",
        "first",
        [attr("pad_width", "list[[int, int]]"), attr("pad_value", "float", 0.0)],
        "constant padding, [before, after] per axis",
    ),
    declare(
        "scatter_nd",
        ["data", "indices", "updates"],
        "opaque",
        "own",
        [_REDUCTION],
        "a copy of data where each index tuple indices[..., :] (q = indices.shape[-1] leading "
        "coordinates, negative ones wrapped) receives its slice of updates "
        "(updates.shape == indices.shape[:-1] + data.shape[q:]); reduction='none' writes "
        "(the last of repeated indices wins), add/mul/max/min combine with what is there "
        "(repeated indices accumulate)",
        in_place=True,  # every index is read and checked before the first write
    ),
    declare(
        "scatter_elements",
        ["data", "indices", "updates"],
        "opaque",
        "own",
        [attr("axis", "int", 0), _REDUCTION],
        "a copy of data where updates[i0, .., ik] goes to data[i0, .., indices[i0, .., ik], "
        ".., ik] (the index replaces the coordinate along axis; indices and updates have one "
        "shape, of data's rank); reduction as scatter_nd's",
        in_place=True,  # every index is read and checked before the first write
    ),
    declare(
        "dynamic_update_slice",
        ["operand", "update", "*start_indices"],
        "opaque",
        "own",
        doc="a copy of operand whose block at start_indices is update (XLA's "
        "DynamicUpdateSlice): update has operand's rank, update.shape[i] <= operand.shape[i]; "
        "start_indices is one integer scalar per axis, or one 1-d integer tensor of rank(operand) "
        "elements; each start is clamped to [0, operand.shape[i] - update.shape[i]] so the "
        "update fits (a negative start is 0, not counted from the end)",
        in_place=True,  # the starts are read before the first write
    ),
)
