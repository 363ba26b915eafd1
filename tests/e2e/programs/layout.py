"""Layout ops: reshape (0 copies a dim, -1), transpose, expand_dims/squeeze, concatenate,
stack, split (sections and indices), strided_slice (negative indices and strides, clamping),
take (axis None, scalar and tensor indices), scatter_nd and scatter_elements (repeated and
negative indices, reductions), dynamic_update_slice (clamped starts, in place over a dying
operand and copied from a live one), tile, repeat, broadcast_to, batch_flatten, pad."""

from __future__ import annotations

import numpy as np
from harness import Case, index_into, ints


def _split_parts(x: np.ndarray, spec: int | list[int], axis: int) -> tuple[np.ndarray, ...]:
    return tuple(np.split(x, spec, axis=axis))


def _scatter_rows(x: np.ndarray, rows: np.ndarray, new: np.ndarray, add: bool) -> np.ndarray:
    """Row ``rows[j, 0]`` of a copy of ``x`` set to (or increased by) ``new[j]``, j in order."""
    out = x.copy()
    for j in range(len(rows)):
        r = int(rows[j, 0])
        out[r] = out[r] + new[j] if add else new[j]
    return out


def _update_block(x: np.ndarray, u: np.ndarray, starts: list[int]) -> np.ndarray:
    """A copy of ``x`` with ``u`` at ``starts``, each clamped so that ``u`` fits (XLA)."""
    out = x.copy()
    at = [min(max(int(s), 0), d - e) for s, d, e in zip(starts, x.shape, u.shape, strict=True)]
    out[tuple(slice(a, a + e) for a, e in zip(at, u.shape, strict=True))] = u
    return out


def _scatter_cols(x: np.ndarray, cols: np.ndarray, vals: np.ndarray, top: bool) -> np.ndarray:
    """``out[i, cols[i, j]]`` of a copy of ``x`` set to (or the max with) ``vals[i, j]``."""
    out = x.copy()
    for i, j in np.ndindex(*cols.shape):
        c = int(cols[i, j])
        out[i, c] = max(out[i, c], vals[i, j]) if top else vals[i, j]
    return out


CASES = [
    Case(
        name="reshape_zero_copies_minus_one_infers",
        source="""
def @main(%x: Tensor[(n, 4, 6), float32]) {
  (reshape(%x, newshape=[-1, 0, 3, 2]), reshape(%x, newshape=[0, 24]), reshape(%x, newshape=[0, 0, 2, 3]), reshape(%x, newshape=[-1]))
}
""",
        reference=lambda x: (
            x.reshape(-1, 4, 3, 2),
            x.reshape(x.shape[0], 24),
            x.reshape(x.shape[0], 4, 2, 3),
            x.reshape(-1),
        ),
        bindings=[{"n": 0}, {"n": 1}, {"n": 3}, {"n": 10}],
    ),
    Case(
        name="reshape_rank0_and_vectors",
        source="""
def @main(%s: float32, %x: Tensor[(n,), float32]) {
  %one = reshape(%s, newshape=[1]);
  (reshape(%s, newshape=[1, 1]), reshape(%one, newshape=[]), reshape(%x, newshape=[-1, 1]), reshape(%x, newshape=[1, -1]))
}
""",
        reference=lambda s, x: (
            np.reshape(s, (1, 1)),
            np.reshape(s, ()),
            x.reshape(-1, 1),
            x.reshape(1, -1),
        ),
        bindings=[{"n": 0}, {"n": 1}, {"n": 6}],
    ),
    Case(
        name="transpose_default_and_axes",
        source="""
def @main(%x: Tensor[(n, m, 2), float32]) {
  (transpose(%x), transpose(%x, axes=[1, -1, 0]), transpose(%x, axes=[0, 1, 2]))
}
""",
        reference=lambda x: (x.transpose(), x.transpose(1, 2, 0), x.copy()),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 4, "m": 5}],
    ),
    Case(
        name="expand_dims_and_squeeze",
        source="""
def @main(%x: Tensor[(n, 3), float32]) {
  %e = expand_dims(%x, axis=-1, num_newaxis=2);
  %f = expand_dims(%x, axis=0);
  %g = squeeze(%e, axis=[-1, 2]);
  %big = concatenate((%x, zeros(shape=[2, 3])));
  %h = squeeze(expand_dims(expand_dims(%big, axis=0), axis=2));
  (%e, %f, %g, %h, expand_dims(%x, axis=1, num_newaxis=0))
}
""",
        reference=lambda x: (
            x[:, :, None, None],
            x[None],
            x.copy(),
            np.concatenate([x, np.zeros((2, 3), np.float32)]),
            x.copy(),
        ),
        bindings=[{"n": 0}, {"n": 1}, {"n": 2}, {"n": 9}],
    ),
    Case(
        name="concatenate_along_axes",
        source="""
def @main(%a: Tensor[(n, 2), float32], %b: Tensor[(n, m), float32], %c: Tensor[(n, 1), float32]) -> (Tensor[(n, m + 3), float32], Tensor[(2*n, 2), float32], Tensor[(n, 1), float32]) {
  (concatenate((%a, %b, %c), axis=-1), concatenate((%a, %a)), concatenate((%c,), axis=1))
}
""",
        reference=lambda a, b, c: (
            np.concatenate([a, b, c], axis=-1),
            np.concatenate([a, a]),
            c.copy(),
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 5, "m": 0}, {"n": 3, "m": 6}],
    ),
    Case(
        name="append_onto_params_and_intermediates",
        source="""
def @main(%past: Tensor[(b, p, 3), float32], %new: Tensor[(b, 1, 3), float32], %w: Tensor[(k, 3), float32]) -> (Tensor[(b, p + 1, 3), float32], Tensor[(b, 3), float32], Tensor[(2*k, 3), float32]) {
  let %present = concatenate((%past, multiply(%new, 2f)), axis=-2);
  let %w2 = append(exp(%w), %w);
  (%present, sum(%present, axis=[1]), %w2)
}
""",
        reference=lambda past, new, w: (
            np.concatenate([past, new * 2], axis=1),
            np.concatenate([past, new * 2], axis=1).sum(1),
            np.concatenate([np.exp(w), w]),
        ),
        bindings=[{"b": 1, "p": 0, "k": 0}, {"b": 2, "p": 1, "k": 1}, {"b": 0, "p": 3, "k": 2}],
    ),
    Case(
        name="stack_along_axes",
        source="""
def @main(%x: Tensor[(n, m), int32], %y: Tensor[(n, m), int32]) {
  (stack((%x, %y), axis=1), stack((%x, %y, %x), axis=-1), stack((%x,)))
}
""",
        reference=lambda x, y: (
            np.stack([x, y], axis=1),
            np.stack([x, y, x], axis=-1),
            x[None],
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 4, "m": 7}],
    ),
    Case(
        name="split_sections_and_negative_indices",
        source="""
def @main(%x: Tensor[(n, 6), float32]) {
  %s = split(%x, indices_or_sections=3, axis=1);
  %t = split(%x, indices_or_sections=[1, -2]);
  (%s.0, %s.2, %t.0, %t.1, %t.2)
}
""",
        reference=lambda x: (
            _split_parts(x, 3, 1)[0],
            _split_parts(x, 3, 1)[2],
            *_split_parts(x, [1, -2], 0),
        ),
        bindings=[{"n": 0}, {"n": 1}, {"n": 2}, {"n": 7}],
    ),
    Case(
        name="split_clamped_decreasing_and_single",
        source="""
def @main(%x: Tensor[(m, n), int64]) {
  %a = split(%x, indices_or_sections=[2, 5, 100], axis=-1);
  %b = split(%x, indices_or_sections=[3, 1]);
  %c = split(%x, indices_or_sections=1);
  (%a, %b, %c.0)
}
""",
        reference=lambda x: (
            _split_parts(x, [2, 5, 100], -1),
            _split_parts(x, [3, 1], 0),
            x.copy(),
        ),
        bindings=[{"n": 0, "m": 4}, {"n": 1, "m": 1}, {"n": 6, "m": 0}, {"n": 9, "m": 5}],
    ),
    Case(
        name="strided_slice_negative_and_clamped",
        source="""
def @main(%x: Tensor[(n, 8), float32]) {
  %0 = strided_slice(%x, begin=[0, 1], end=[-1, 8], strides=[1, 2]);
  %1 = strided_slice(%x, begin=[1], end=[4]);
  %2 = strided_slice(%x, begin=[-1, 7], end=[-100, -9], strides=[-1, -3]);
  %3 = strided_slice(%x, begin=[2, -3], end=[100, 100], strides=[2, 1]);
  (%0, %1, %2, %3)
}
""",
        reference=lambda x: (x[0:-1, 1:8:2], x[1:4], x[-1:-100:-1, 7:-9:-3], x[2:100:2, -3:100]),
        bindings=[{"n": 0}, {"n": 1}, {"n": 3}, {"n": 11}],
    ),
    Case(
        name="take_axis_none_scalar_and_tensor_indices",
        source="""
def @main(%data: Tensor[(n, 4), float32], %idx: Tensor[(k,), int64], %cols: Tensor[(2, 3), int32]) {
  (take(%data, %idx), take(%data, %cols, axis=1), take(%data, 2, axis=1), take(%data, -1, axis=-1))
}
""",
        # A negative index counts from the end (numpy's take).
        reference=lambda data, idx, cols: (
            np.take(data, idx),
            np.take(data, cols, axis=1),
            data[:, 2],
            data[:, -1],
        ),
        bindings=[{"n": 0, "k": 0}, {"n": 1, "k": 1}, {"n": 3, "k": 5}, {"n": 8, "k": 2}],
        inputs={"idx": index_into(lambda b: 4 * b["n"]), "cols": index_into(lambda b: 4)},
    ),
    Case(
        name="take_negative_and_scalar_tensor_index",
        source="""
def @main(%x: Tensor[(n, 3), int32], %i: Tensor[(k,), int32], %j: int64) -> (Tensor[(k, 3), int32], Tensor[(3,), int32], Tensor[(n,), int32]) {
  (take(%x, %i, axis=0), take(%x, %j, axis=0), take(%x, %j, axis=1))
}
""",
        reference=lambda x, i, j: (x[i], x[j], x[:, j]),
        bindings=[{"n": 1, "k": 0}, {"n": 2, "k": 3}, {"n": 7, "k": 9}],
        inputs={
            "i": index_into(lambda b: b["n"], negative=True),
            "j": index_into(lambda b: min(b["n"], 3)),
        },
    ),
    Case(
        name="dynamic_update_slice_in_place_and_copied",
        source="""
def @main(%x: Tensor[(n, 4), float32], %u: Tensor[(k, 2), float32], %i: int64, %j: int32, %at: Tensor[(2,), int64], %rows: Tensor[(k, 1), int64], %new: Tensor[(k, 4), float32]) {
  %a = multiply(%x, 2f);
  %b = dynamic_update_slice(%a, %u, (%i, %j));
  %c = scatter_nd(%b, %rows, %new, reduction="add");
  (%c, dynamic_update_slice(%x, %u, (%at,)))
}
""",
        # %a dies at the update and %b at the scatter: both write in place. %x is the caller's:
        # the second update copies it. Starts drawn past both ends are clamped.
        reference=lambda x, u, i, j, at, rows, new: (
            _scatter_rows(_update_block(2 * x, u, [i, j]), rows % max(len(x), 1), new, add=True),
            _update_block(x, u, list(at)),
        ),
        bindings=[{"n": 0, "k": 0}, {"n": 1, "k": 1}, {"n": 5, "k": 3}, {"n": 6, "k": 6}],
        inputs={
            "i": ints(-8, 9),
            "j": ints(-5, 6),
            "at": ints(-8, 9),
            "rows": index_into(lambda b: b["n"], negative=True),
        },
    ),
    Case(
        name="scatter_nd_and_scatter_elements",
        source="""
def @main(%x: Tensor[(n, 3), float32], %rows: Tensor[(k, 1), int64], %new: Tensor[(k, 3), float32], %cols: Tensor[(n, 2), int32], %vals: Tensor[(n, 2), float32]) {
  (scatter_nd(%x, %rows, %new), scatter_nd(%x, %rows, %new, reduction="add"), scatter_elements(%x, %cols, %vals, axis=1), scatter_elements(%x, %cols, %vals, axis=-1, reduction="max"))
}
""",
        # Repeated indices: the last write wins, sums accumulate; negative ones count from the end.
        reference=lambda x, rows, new, cols, vals: (
            _scatter_rows(x, rows % max(len(x), 1), new, add=False),
            _scatter_rows(x, rows % max(len(x), 1), new, add=True),
            _scatter_cols(x, cols % 3, vals, top=False),
            _scatter_cols(x, cols % 3, vals, top=True),
        ),
        bindings=[{"n": 0, "k": 0}, {"n": 1, "k": 3}, {"n": 4, "k": 6}, {"n": 5, "k": 1}],
        inputs={
            "rows": index_into(lambda b: b["n"], negative=True),
            "cols": index_into(lambda b: 3, negative=True),
        },
    ),
    Case(
        name="tile_and_repeat",
        source="""
def @main(%x: Tensor[(n, m), int32]) -> (Tensor[(2, n, 3*m), int32], Tensor[(n, 2*m), int32], Tensor[(2*m*n,), int32], Tensor[(n, 3*m), int32], Tensor[(0, m), int32]) {
  (tile(%x, reps=[2, 1, 3]), tile(%x, reps=[2]), repeat(%x, repeats=2), repeat(%x, repeats=3, axis=-1), repeat(%x, repeats=0, axis=0))
}
""",
        reference=lambda x: (
            np.tile(x, (2, 1, 3)),
            np.tile(x, 2),
            np.repeat(x, 2),
            np.repeat(x, 3, axis=-1),
            np.repeat(x, 0, axis=0),
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 4, "m": 5}],
    ),
    Case(
        name="broadcast_to_from_reductions",
        source="""
def @main(%x: Tensor[(n, m), float32]) -> (Tensor[(2, 3), float32], Tensor[(3, 1, 4), float32], Tensor[(0, 4), float32]) {
  %s = sum(%x);
  %k = sum(%x, keepdims=True);
  (broadcast_to(%s, shape=[2, 3]), broadcast_to(%k, shape=[3, 1, 4]), broadcast_to(%k, shape=[0, 4]))
}
""",
        reference=lambda x: (
            np.broadcast_to(x.sum(), (2, 3)),
            np.broadcast_to(x.sum(keepdims=True), (3, 1, 4)),
            np.zeros((0, 4), np.float32),
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 4, "m": 6}],
    ),
    Case(
        name="batch_flatten_and_pad",
        source="""
def @main(%x: Tensor[(n, 2, m), float32], %y: Tensor[(n,), int32]) {
  %flat = nn.batch_flatten(%x);
  (%flat, nn.pad(%flat, pad_width=[[1, 0], [0, 2]], pad_value=-1.5), nn.pad(%y, pad_width=[[2, 3]], pad_value=7.0), nn.pad(%x, pad_width=[[0, 0], [1, 1], [0, 0]]))
}
""",
        reference=lambda x, y: (
            x.reshape(x.shape[0], 2 * x.shape[2]),
            np.pad(x.reshape(x.shape[0], 2 * x.shape[2]), [(1, 0), (0, 2)], constant_values=-1.5),
            np.pad(y, [(2, 3)], constant_values=7),
            np.pad(x, [(0, 0), (1, 1), (0, 0)]),
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 3, "m": 0}, {"n": 5, "m": 4}],
    ),
    Case(
        name="layout_chain_int64",
        source="""
def @main(%x: Tensor[(n, 6), int64]) -> Tensor[(?, ?), int64] {
  %t = transpose(%x);
  %r = reshape(%t, newshape=[3, -1]);
  %s = strided_slice(%r, begin=[0, 0], end=[3, -1], strides=[2, 1]);
  add(%s, 1i64)
}
""",
        reference=lambda x: x.T.reshape(3, -1)[0:3:2, 0:-1] + 1,
        bindings=[{"n": 0}, {"n": 1}, {"n": 4}, {"n": 7}],
        inputs={"x": ints(-100, 100)},
    ),
    Case(
        name="strided_slice_lists_of_different_lengths",
        source="""
def @main(%x: Tensor[(n, 4, 3), float32]) {
  (strided_slice(%x, begin=[1, 1], end=[3]), strided_slice(%x, begin=[0, 0], end=[6, 4], strides=[2]), strided_slice(%x, begin=[], end=[], strides=[1, -1]))
}
""",
        # design/shapes.md: the lists may be shorter than the rank and than each other; a
        # missing begin/end is an omitted bound, a missing stride is 1.
        reference=lambda x: (x[1:3, 1:], x[0:6:2, 0:4], x[:, ::-1]),
        bindings=[{"n": 0}, {"n": 1}, {"n": 4}, {"n": 9}],
    ),
]
