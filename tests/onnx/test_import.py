"""The importer's core: input dims and dims=, weights, shape subgraphs folded at import (the
printed program keeps symbolic shapes), output names, and every error a user can hit."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from model_builder import model, run  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402
from dynshape import ModelImportError  # noqa: E402
from vm import RunTimeShapeError  # noqa: E402


def _i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


#: The attention head split of exported transformers: Shape -> Gather -> Unsqueeze -> Concat.
HEADS = model(
    [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "one"], ["q"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax"], ["bu"]),
        helper.make_node("Unsqueeze", ["q", "ax"], ["qu"]),
        helper.make_node("Concat", ["bu", "qu", "four", "minus"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["heads"]),
        helper.make_node("Transpose", ["heads"], ["y"], perm=[0, 2, 1, 3]),
    ],
    [("x", "float32", ["batch", "seq", 64])],
    ["y"],
    {
        "zero": np.array(0, np.int64),
        "one": np.array(1, np.int64),
        "ax": _i64(0),
        "four": _i64(4),
        "minus": _i64(-1),
    },
)


def test_a_shape_subgraph_folds_to_a_symbolic_reshape() -> None:
    program = dynshape.onnx.load(HEADS)
    text = str(program)
    assert "reshape(%x, newshape=[batch, seq, 4, -1])" in text, text
    assert "shape_of" not in text and "take" not in text
    assert program.inputs == ("x",) and program.outputs == ("y",)
    typed = dynshape.stages(program)["types"]
    assert "Tensor[(batch, 4, seq, 16), float32]" in str(typed["main"])
    for b, s in [(1, 1), (2, 7), (3, 16)]:
        x = np.random.default_rng(b).standard_normal((b, s, 64)).astype(np.float32)
        got = run(HEADS, x)
        np.testing.assert_array_equal(got, x.reshape(b, s, 4, 16).transpose(0, 2, 1, 3))


def test_dim_params_are_shared_symbols_and_unnamed_dims_are_fresh() -> None:
    m = model(
        [helper.make_node("Add", ["a", "b"], ["c"])]
        if "Add" in dynshape.onnx.CONVERTERS
        else [helper.make_node("Concat", ["a", "b"], ["c"], axis=1)],
        [("a", "float32", ["n", 3]), ("b", "float32", ["n", None])],
        ["c"],
    )
    text = str(dynshape.onnx.load(m))
    assert "%a: Tensor[(n, 3), float32], %b: Tensor[(n, ?), float32]" in text, text


def test_dims_fix_bound_and_rename() -> None:
    m = model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [("x", "float32", ["batch", "seq"])],
        ["y"],
    )
    text = str(dynshape.onnx.load(m, dims={"batch": 1, "seq": (1, 512)}))
    assert "%x: Tensor[(1, seq), float32]" in text and "where seq in [1, 512]" in text, text
    text = str(dynshape.onnx.load(m, dims={"batch": "b"}))
    assert "Tensor[(b, seq), float32]" in text
    with pytest.raises(
        ModelImportError,
        match=r"dims= names time, which no input of the model uses \(its dim names: batch, seq\)",
    ):
        dynshape.onnx.load(m, dims={"time": 3})
    with pytest.raises(ModelImportError, match=r"a range is \(lo, hi\)"):
        dynshape.onnx.load(m, dims={"seq": (5, 2)})
    with pytest.raises(ModelImportError, match="a size must be >= 0"):
        dynshape.onnx.load(m, dims={"seq": -1})


def test_an_odd_dim_name_becomes_an_identifier() -> None:
    m = model(
        [helper.make_node("Identity", ["x"], ["y"])], [("x", "float32", ["batch-size"])], ["y"]
    )
    assert "Tensor[(batch_size,), float32]" in str(dynshape.onnx.load(m))


def test_weights_and_constants_are_constants_and_identity_vanishes() -> None:
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    m = model(
        [
            helper.make_node(
                "Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.INT64, [2], [3, 2])
            ),
            helper.make_node("Identity", ["w"], ["w2"]),
            helper.make_node("Reshape", ["w2", "c"], ["y"]),
        ],
        [("x", "float32", ["n"])],
        ["y"],
        {"w": w},
    )
    program = dynshape.onnx.load(m)
    assert program.inputs == ("x",)
    got = dynshape.VirtualMachine(dynshape.compile(program)).run(np.zeros(2, np.float32))
    np.testing.assert_array_equal(got, w.reshape(3, 2))


def test_range_over_a_dim_keeps_its_length() -> None:
    m = model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "one"], ["seq"], axis=0),
            helper.make_node("Range", ["zero", "seq", "step"], ["y"]),
        ],
        [("x", "float32", ["batch", "seq"])],
        ["y"],
        {
            "zero": np.array(0, np.int64),
            "one": np.array(1, np.int64),
            "step": np.array(1, np.int64),
        },
    )
    program = dynshape.onnx.load(m)
    assert "Tensor[(seq,), int64]" in str(dynshape.stages(program)["types"]["main"])
    got = dynshape.VirtualMachine(dynshape.compile(program)).run(np.zeros((2, 5), np.float32))
    np.testing.assert_array_equal(got, np.arange(5))


@pytest.mark.parametrize("step", [1, 2, 3, -1, -2])
def test_integer_range_over_dims_has_no_data_dependent_size(step: int) -> None:
    """Range(start, limit, step) with start and limit from shapes (position ids of a decoder
    step: past_seq .. past_seq + seq): counted from a tensor of the symbolic length, so no
    ``?`` size reaches the memory planner; the values are onnxruntime's at every size."""
    m = model(
        [
            helper.make_node("Shape", ["past"], ["ps"]),
            helper.make_node("Gather", ["ps", "one"], ["p"], axis=0),
            helper.make_node("Shape", ["x"], ["xs"]),
            helper.make_node("Gather", ["xs", "one"], ["s"], axis=0),
            helper.make_node("Add", ["p", "s"], ["total"]),
            helper.make_node(
                "Range", ["p", "total", "step"] if step > 0 else ["total", "p", "step"], ["y"]
            ),
        ],
        [("x", "float32", ["batch", "seq"]), ("past", "float32", ["batch", "past_seq"])],
        ["y"],
        {"one": np.array(1, np.int64), "step": np.array(step, np.int64)},
    )
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.INT64, None))
    ort = pytest.importorskip("onnxruntime")
    program = dynshape.onnx.load(m)
    assert "?" not in str(dynshape.stages(program)["types"]["main"])
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    sess = ort.InferenceSession(m.SerializeToString())
    for seq, past in [(1, 0), (1, 7), (5, 3), (0, 4), (0, 0)]:
        feeds = {"x": np.zeros((2, seq), np.float32), "past": np.zeros((2, past), np.float32)}
        np.testing.assert_array_equal(vm.run(**feeds), sess.run(None, feeds)[0])


def test_slices_with_constant_and_symbolic_bounds() -> None:
    big = np.iinfo(np.int64).max
    m = model(
        [
            helper.make_node("Slice", ["x", "b", "e", "ax"], ["y"]),
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
            helper.make_node("Unsqueeze", ["n", "ax0"], ["nu"]),
            helper.make_node("Slice", ["x", "ax0", "nu", "ax1"], ["z"]),
        ],
        [("x", "float32", ["n", "m"])],
        ["y", "z"],
        {
            "b": _i64(1),
            "e": _i64(big),
            "ax": _i64(1),
            "zero": np.array(0, np.int64),
            "ax0": _i64(0),
            "ax1": _i64(1),
        },
    )
    program = dynshape.onnx.load(m)
    types = str(dynshape.stages(program)["types"]["main"])
    assert "Tensor[(n, m - min(1, m)), float32]" in types, types  # x[:, 1:], m may be 0
    assert "Tensor[(n, min(m, n)), float32]" in types, types  # x[:, :n]
    for shape in [(2, 5), (4, 3), (1, 1)]:
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        y, z = dynshape.VirtualMachine(dynshape.compile(program)).run(x)
        np.testing.assert_array_equal(y, x[:, 1:])
        np.testing.assert_array_equal(z, x[:, : shape[0]])


def test_unsupported_ops_are_listed_all_at_once() -> None:
    m = model(
        [
            helper.make_node("Frobnicate", ["x"], ["a"], name="f1"),
            helper.make_node("Frobnicate", ["a"], ["b"], name="f2"),
            helper.make_node("Zap", ["b"], ["y"], name="z"),
        ],
        [("x", "float32", ["n"])],
        ["y"],
    )
    with pytest.raises(ModelImportError) as info:
        dynshape.onnx.load(m)
    text = str(info.value)
    assert "2 problem(s)" in text
    assert "unsupported op Frobnicate (2 node(s): f1, f2)" in text
    assert "unsupported op Zap (1 node(s): z)" in text


def test_malformed_files_and_models_give_the_projects_error(tmp_path: object) -> None:
    with pytest.raises(ModelImportError, match="not a readable ONNX model"):
        dynshape.onnx.load(b"\x08\x07garbage\xff\xff")
    with pytest.raises(ModelImportError, match="no such model file"):
        dynshape.onnx.load("/nonexistent/model.onnx")
    with pytest.raises(
        ModelImportError, match=r"expected a path, bytes or an onnx\.ModelProto, got int"
    ):
        dynshape.onnx.load(3)
    old = model(
        [helper.make_node("Identity", ["x"], ["y"])], [("x", "float32", ["n"])], ["y"], opset=9
    )
    with pytest.raises(
        ModelImportError, match="opset 9 of the default domain; supported: 13 to 28"
    ):
        dynshape.onnx.load(old)
    m = model([helper.make_node("Identity", ["x"], ["y"])], [("x", "float32", ["n"])], ["y"])
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.STRING
    with pytest.raises(
        ModelImportError, match="input 'x' has element type STRING, which dynshape does not support"
    ):
        dynshape.onnx.load(m)
    m = model(
        [helper.make_node("Identity", ["nothing"], ["y"], name="id")],
        [("x", "float32", ["n"])],
        ["y"],
    )
    with pytest.raises(
        ModelImportError, match="node Identity 'id': input 'nothing' is computed by no earlier node"
    ):
        dynshape.onnx.load(m)


def test_a_node_that_does_not_type_is_named() -> None:
    m = model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="bad")],
        [("x", "float32", [2, 3])],
        ["y"],
        {"shape": _i64(4, 2)},
    )
    with pytest.raises(ModelImportError, match=r"node Reshape 'bad': .*element count"):
        dynshape.onnx.load(m)


def test_a_saved_model_file_imports(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "heads.onnx"
    onnx.save(HEADS, str(path))
    program = dynshape.onnx.load(path)
    assert program.outputs == ("y",)
    x = np.ones((1, 2, 64), np.float32)
    assert dynshape.VirtualMachine(dynshape.compile(program)).run(x).shape == (1, 4, 2, 16)


def _strided(recorded: str) -> object:
    """x[::2] along an axis of dim h, with the exporter's recorded dim of the result."""
    m = model(
        [helper.make_node("Slice", ["x", "b", "e", "ax", "st"], ["y"], name="half")],
        [("x", "float32", ["h"])],
        ["y"],
        {"b": _i64(0), "e": _i64(np.iinfo(np.int64).max), "ax": _i64(0), "st": _i64(2)},
    )
    m.graph.value_info.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [recorded]))
    return m


def test_recorded_shapes_that_agree_are_accepted() -> None:
    for recorded in ["((h - 1)//2) + 1", "Max(0, ((h - 1)//2) + 1)", "unk__0"]:
        program = dynshape.onnx.load(_strided(recorded))
        got = dynshape.VirtualMachine(dynshape.compile(program)).run(np.arange(5, dtype=np.float32))
        np.testing.assert_array_equal(got, np.arange(5, dtype=np.float32)[::2])


def test_a_recorded_shape_that_disagrees_names_the_node() -> None:
    with pytest.raises(
        ModelImportError,
        match=r"node Slice 'half': output 'y' has dim .* at axis 0, but the model records h \+ 1",
    ):
        dynshape.onnx.load(_strided("h + 1"))


def test_a_size_baked_in_at_export_is_caught() -> None:
    m = model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="baked")],
        [("x", "float32", ["seq", 4])],
        ["y"],
        {"shape": _i64(28)},
    )
    m.graph.value_info.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, ["4*seq"]))
    with pytest.raises(
        ModelImportError,
        match=r"node Reshape 'baked'.*has dim 28 at axis 0, but the model records 4\*seq \(a size fixed at export",
    ):
        dynshape.onnx.load(m)


def test_a_reshape_whose_zero_copies_a_size_computed_from_data() -> None:
    # a slice to an end computed at run time has a ? dim, which a reshape's 0 copied into
    # its attribute (TorchScript's ``pixel_unshuffle`` of ``h[:, :, : h.shape[2] // 2 * 2]``
    # after a convolution): the import failed with 'does not type'
    m = model(
        [
            helper.make_node("Slice", ["x", "start", "k", "axes"], ["y"]),
            helper.make_node("Reshape", ["y", "shape"], ["z"]),
        ],
        [("x", "float32", ["n", 4]), ("k", "int64", [1])],
        ["z"],
        {"start": _i64(0), "axes": _i64(0), "shape": _i64(0, -1, 2)},
    )
    vm = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(m)))
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    for k in (3, 1, 9):
        want = x[:k].reshape(min(k, 5), 2, 2)
        np.testing.assert_array_equal(vm.run(x, np.array([k])), want)
    with pytest.raises(RunTimeShapeError, match=r"dyn.reshape: .* != 0 \(to infer -1\)"):
        vm.run(x, np.array([0]))  # no rows: the -1 is ambiguous, as ONNX says


def test_a_constant_tiled_by_a_dim() -> None:
    # DETR's learned queries repeated over the batch: ``query.repeat(1, B, 1)``; folding a
    # constant by symbolic repeats failed with numpy's TypeError
    query = np.arange(6, dtype=np.float32).reshape(3, 1, 2)
    m = model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
            helper.make_node("Unsqueeze", ["n", "ax0"], ["nu"]),
            helper.make_node("Concat", ["one", "nu", "one"], ["reps"], axis=0),
            helper.make_node("Tile", ["query", "reps"], ["q"]),
            helper.make_node("Transpose", ["q"], ["y"], perm=[1, 0, 2]),
            helper.make_node("Add", ["y", "x"], ["z"]),
        ],
        [("x", "float32", ["n", 3, 2])],
        ["z"],
        {"zero": np.array(0, np.int64), "ax0": _i64(0), "one": _i64(1), "query": query},
    )
    vm = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(m)))
    for n in (1, 4, 0):
        x = np.ones((n, 3, 2), np.float32)
        np.testing.assert_array_equal(vm.run(x), np.tile(query, [1, n, 1]).transpose(1, 0, 2) + x)


def test_tile_by_a_count_of_data_is_refused_by_name() -> None:
    m = model(
        [
            helper.make_node("NonZero", ["mask"], ["nz"]),
            helper.make_node("Shape", ["nz"], ["s"]),
            helper.make_node("Tile", ["x", "s"], ["y"]),
        ],
        [("mask", "bool", ["n"]), ("x", "float32", [2, 3])],
        ["y"],
    )
    with pytest.raises(
        ModelImportError, match=r"node Tile .*Tile repeats that hold a size known at run time"
    ):
        dynshape.onnx.load(m)


def test_tile_with_repeats_computed_from_a_shape() -> None:
    m = model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
            helper.make_node("Unsqueeze", ["n", "ax0"], ["nu"]),
            helper.make_node("Concat", ["one", "nu"], ["reps"], axis=0),
            helper.make_node("Tile", ["x", "reps"], ["y"]),
        ],
        [("x", "float32", ["n", "m"])],
        ["y"],
        {"zero": np.array(0, np.int64), "ax0": _i64(0), "one": _i64(1)},
    )
    program = dynshape.onnx.load(m)
    assert "tile(%x, reps=[1, n])" in str(program)
    assert "Tensor[(n, m*n), float32]" in str(dynshape.stages(program)["types"]["main"])
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    for shape in [(2, 3), (0, 2), (3, 1)]:
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        np.testing.assert_array_equal(vm.run(x), np.tile(x, [1, shape[0]]))
