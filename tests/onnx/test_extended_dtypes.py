"""The extended element types (BFLOAT16, FLOAT8*, FLOAT4E2M1, INT4, UINT4, INT2, UINT2) through
the importer: inputs, initializers and ``Constant`` tensors of them, ``Cast``/``CastLike`` to
and from them with ``saturate``, against the onnx package's reference implementation (the
evaluator the backend cases were generated with). They are storage types: arithmetic on them is
refused as unsupported."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from model_builder import ELEM, import_error
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import dynshape
import dynshape.onnx

FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
SMALL_INTS = ["int4", "uint4", "int2", "uint2"]


def _model(
    nodes: list[Any],
    inputs: list[tuple[str, str]],
    outputs: list[tuple[str, str]],
    initializers: list[Any] = (),
    opset: int = 23,
) -> Any:  # type: ignore[assignment]
    """A model whose inputs have a symbolic first dim ``n`` and a static second dim 5."""
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, ELEM[t], ["n", 5]) for n, t in inputs],
        [helper.make_tensor_value_info(n, ELEM[t], None) for n, t in outputs],
        list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal dtype, shape and bits, NaNs equal whatever their payload."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    if want.dtype.name.startswith(("float", "bfloat")):
        g, w = got.astype(np.float64), want.astype(np.float64)
        assert np.array_equal(np.isnan(g), np.isnan(w))
        ok = ~np.isnan(w)
        assert np.array_equal(g[ok], w[ok])
        assert np.array_equal(np.signbit(g[ok]), np.signbit(w[ok]))
    else:
        assert np.array_equal(got.astype(np.int64), want.astype(np.int64))


def _check(m: Any, *arrays: np.ndarray) -> None:
    """dynshape's results equal the reference evaluator's."""
    machine = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(m)))
    got = machine.run(*arrays)
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    names = [i.name for i in m.graph.input]
    with np.errstate(all="ignore"):
        want = ReferenceEvaluator(m).run(None, dict(zip(names, arrays, strict=True)))
    for g, w in zip(got, want, strict=True):
        _same(np.asarray(g), np.asarray(w))


def _floats(rows: int, seed: int) -> np.ndarray:
    """Values across every float8 range, with the out-of-range, tiny and non-finite ones."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, 5)) * 10.0 ** rng.integers(-8, 7, (rows, 5))
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, 448.0, 464.0, 500.0, 57344.0, 1e6, -1e6, 1e-9]
    flat = x.reshape(-1)
    flat[: min(len(special), flat.size)] = special[: flat.size]
    return x.astype(np.float32)


@pytest.mark.parametrize("to", FLOAT8)
@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("source", ["float32", "float16"])
def test_cast_to_float8_with_and_without_saturation(to: str, saturate: int, source: str) -> None:
    node = helper.make_node("Cast", ["x"], ["y"], to=ELEM[to], saturate=saturate)
    m = _model([node], [("x", source)], [("y", to)])
    for rows, seed in ((1, 0), (3, 1), (8, 2)):
        with np.errstate(over="ignore"):  # 1e6 is inf in float16
            x = _floats(rows, seed).astype(source)
        _check(m, x)


@pytest.mark.parametrize("to", ["bfloat16", "float4_e2m1fn", *SMALL_INTS])
def test_cast_to_the_other_extended_types(to: str) -> None:
    node = helper.make_node("Cast", ["x"], ["y"], to=ELEM[to])
    m = _model([node], [("x", "float32")], [("y", to)])
    rng = np.random.default_rng(3)
    for rows in (1, 4):
        x = rng.uniform(-10, 16, (rows, 5)).astype(np.float32)
        if to != "float4_e2m1fn" and to not in SMALL_INTS:
            x[0, :3] = [np.nan, np.inf, -np.inf]
        _check(m, np.round(x) if to in SMALL_INTS else x)


@pytest.mark.parametrize("source", ["bfloat16", *FLOAT8, "float8_e8m0fnu", "float4_e2m1fn"])
@pytest.mark.parametrize("to", ["float32", "float16"])
def test_cast_from_an_extended_float(source: str, to: str) -> None:
    node = helper.make_node("Cast", ["x"], ["y"], to=ELEM[to])
    m = _model([node], [("x", source)], [("y", to)])
    rng = np.random.default_rng(4)
    x = np.abs(rng.standard_normal((6, 5))) * 4 if source == "float8_e8m0fnu" else _floats(6, 4)
    with np.errstate(all="ignore"):
        _check(m, np.clip(x, -400, 400).astype(source))


@pytest.mark.parametrize("source", SMALL_INTS)
def test_cast_from_small_ints(source: str) -> None:
    wide = "int8" if source.startswith("int") else "uint8"
    info = ml_dtypes.iinfo(source)
    x = np.arange(info.min, info.max + 1).repeat(5)[: 5 * (info.max - info.min + 1)]
    x = x.reshape(-1, 5).astype(source)
    for to in ("float32", wide):
        node = helper.make_node("Cast", ["x"], ["y"], to=ELEM[to])
        _check(_model([node], [("x", source)], [("y", to)]), x)


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "bool", *FLOAT8, "bfloat16"])
def test_a_cast_to_the_same_type_is_the_value_itself(dtype: str, saturate: int) -> None:
    """No kernel for a cast to the value's own type (T5's ``float()`` of float32 scores),
    except a saturating float8_e5m2 one, which makes that type's infinities finite: the
    reference's values either way."""
    node = helper.make_node("Cast", ["x"], ["y"], to=ELEM[dtype], saturate=saturate)
    m = _model([node], [("x", dtype)], [("y", dtype)])
    with np.errstate(all="ignore"):
        x = (_floats(4, 6) if dtype != "bool" else _floats(4, 6) > 0).astype(dtype)
    _check(m, x)
    kernels = repr(dynshape.compile(dynshape.onnx.load(m)).kernels)
    kept = dtype == "float8_e5m2" and saturate
    assert ("'cast'" in kernels) == bool(kept), kernels


@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_like_reads_the_target_type_and_saturate(saturate: int) -> None:
    node = helper.make_node("CastLike", ["x", "like"], ["y"], saturate=saturate)
    like = numpy_helper.from_array(np.zeros(1, ml_dtypes.float8_e4m3fn), "like")
    m = _model([node], [("x", "float32")], [("y", "float8_e4m3fn")], [like])
    _check(m, _floats(4, 5))


def test_extended_initializers_and_constants_are_read_and_moved() -> None:
    """A packed INT4 initializer, a FLOAT8 Constant and a BFLOAT16 input, concatenated and
    reshaped (ops that move elements), then cast."""
    w = numpy_helper.from_array(np.array([[-8, -1, 0, 3, 7]], ml_dtypes.int4), "w")
    c = helper.make_node(
        "Constant",
        [],
        ["c"],
        value=numpy_helper.from_array(
            np.array([[0.5, -448, 3, 0, 1]], ml_dtypes.float8_e4m3fn), "cv"
        ),
    )
    nodes = [
        c,
        helper.make_node("Concat", ["x", "xb"], ["xx"], axis=0),
        helper.make_node("Cast", ["xx"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
        helper.make_node("Concat", ["xf", "wf", "cf"], ["y"], axis=0),
        helper.make_node("Transpose", ["w"], ["wt"]),
    ]
    m = _model(
        nodes,
        [("x", "bfloat16"), ("xb", "bfloat16")],
        [("y", "float32"), ("wt", "int4")],
        [w],
    )
    rng = np.random.default_rng(6)
    for rows in (1, 3):
        x = rng.standard_normal((rows, 5)).astype(ml_dtypes.bfloat16)
        _check(m, x, x[::-1].copy())


def test_a_cast_of_constants_folds_with_saturation() -> None:
    x = numpy_helper.from_array(np.array([1e6, -1e6, np.inf, 0.3, np.nan], np.float32), "k")
    nodes = [
        helper.make_node("Cast", ["k"], ["k8"], to=TensorProto.FLOAT8E5M2, saturate=1),
        helper.make_node("Cast", ["k"], ["n8"], to=TensorProto.FLOAT8E5M2, saturate=0),
        helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E5M2),
    ]
    m = _model(
        nodes,
        [("x", "float32")],
        [("k8", "float8_e5m2"), ("n8", "float8_e5m2"), ("y", "float8_e5m2")],
        [x],
    )
    assert "cast(" not in str(dynshape.onnx.load(m)).split("%x")[0]
    _check(m, _floats(2, 7))


def test_arithmetic_on_bfloat16_is_unsupported() -> None:
    node = helper.make_node("Add", ["x", "x"], ["y"])
    message = import_error(_model([node], [("x", "bfloat16")], [("y", "bfloat16")]))
    assert "unsupported" in message and "bfloat16" in message
    # an op whose converter does not check dtypes meets the IR's refusal
    node = helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)
    message = import_error(_model([node], [("x", "float8_e4m3fn")], [("y", "float8_e4m3fn")]))
    assert "unsupported" in message and "float8_e4m3fn: a storage dtype" in message


@pytest.mark.parametrize("mode", ["up", "nearest", "down"])
@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("source", ["float32", "float16"])
def test_cast_to_float8e8m0_rounds_the_exponent(mode: str, saturate: int, source: str) -> None:
    node = helper.make_node(
        "Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, saturate=saturate, round_mode=mode
    )
    m = _model([node], [("x", source)], [("y", "float8_e8m0fnu")], opset=24)
    for rows, seed in ((1, 8), (5, 9)):
        x = _floats(rows, seed)
        x.reshape(-1)[-3:] = [3e38, -3e38, 1.5]  # 2**127 with a fraction: saturate decides
        with np.errstate(over="ignore"):
            _check(m, x.astype(source))


def test_a_bad_round_mode_is_an_error() -> None:
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, round_mode="odd")
    message = import_error(_model([node], [("x", "float32")], [("y", "float8_e8m0fnu")], opset=24))
    assert "round_mode 'odd' is not up, nearest or down" in message


def test_the_session_spells_extended_types_as_onnxruntime() -> None:
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FN)
    m = _model([node], [("x", "bfloat16")], [("y", "float8_e4m3fn")])
    session = dynshape.InferenceSession(m.SerializeToString())
    assert session.get_inputs()[0].type == "tensor(bfloat16)"
    assert session.get_outputs()[0].type == "tensor(float8e4m3fn)"
    x = np.array([[1.0, 500.0, -3.0, 0.1, np.nan]], ml_dtypes.bfloat16)
    (got,) = session.run(None, {"x": x})
    assert got.dtype == ml_dtypes.float8_e4m3fn
    assert got.astype(np.float32)[0, :4].tolist() == [1.0, 448.0, -3.0, 0.1015625]
