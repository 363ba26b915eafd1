"""The elementwise ONNX converters (``dynshape/onnx/ops/elementwise.py``) against onnxruntime.

Each op is a one-node model with symbolic input dims (``["n", "m"]``), imported and compiled
once, then run at shapes Hypothesis draws (broadcasting ones included) next to onnxruntime.
Then: the symbolic types the importer keeps, shape subgraphs folded at import (and the ones
that cannot be, built as ops), constants folded with ONNX's integer semantics, and the errors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402
from model_builder import ELEM  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402
from dynshape.passes.infer_types import infer_types  # noqa: E402

Shape = Sequence[Any]
"""An input's dims: ints and names (``["n", "m"]``, ``[1, "m"]``, ``[]`` for a scalar)."""

SETTINGS = settings(max_examples=15, deadline=None)


# ---- models and running them -------------------------------------------------------------


def one_node_model(
    op: str,
    inputs: Sequence[tuple[str, str, Shape]],
    out_dtype: str,
    attrs: dict[str, Any] | None = None,
    opset: int = 17,
    node_inputs: Sequence[str] | None = None,
    initializers: Sequence[tuple[str, np.ndarray]] = (),
) -> Any:
    """A model of one ``op`` node named ``<op>_node``: graph inputs ``(name, dtype, dims)``,
    output ``out``; ``node_inputs`` overrides the node's input names (``""`` omits one)."""
    names = [name for name, _, _ in inputs] if node_inputs is None else list(node_inputs)
    node = helper.make_node(op, names, ["out"], name=f"{op.lower()}_node", **(attrs or {}))
    graph = helper.make_graph(
        [node],
        f"{op}_graph",
        [helper.make_tensor_value_info(name, ELEM[dt], list(dims)) for name, dt, dims in inputs],
        [helper.make_tensor_value_info("out", ELEM[out_dtype], None)],
        initializer=[numpy_helper.from_array(a, name) for name, a in initializers],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


class Compiled:
    """A model imported and compiled once, and its onnxruntime session."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.program = dynshape.onnx.load(model)
        self.vm = dynshape.VirtualMachine(dynshape.compile(self.program))
        try:
            self.session = ort.InferenceSession(
                model.SerializeToString(), providers=["CPUExecutionProvider"]
            )
        except Exception as e:  # a kernel onnxruntime lacks (a dtype it does not implement)
            if "NOT_IMPLEMENTED" in str(e) or "Could not find an implementation" in str(e):
                pytest.skip(f"onnxruntime has no kernel: {str(e).splitlines()[0][:200]}")
            raise

    def check(self, *arrays: np.ndarray, rtol: float | None = None, atol: float = 0.0) -> None:
        """Run both on ``arrays`` (the graph inputs in order) and compare."""
        names = [i.name for i in self.model.graph.input]
        (expected,) = self.session.run(None, dict(zip(names, arrays, strict=True)))
        ours = np.asarray(self.vm.run(*arrays))
        assert ours.dtype == expected.dtype, (ours.dtype, expected.dtype)
        assert ours.shape == expected.shape, (ours.shape, expected.shape)
        if expected.dtype.kind == "f":
            tol = rtol if rtol is not None else (1e-5 if expected.dtype == np.float32 else 1e-12)
            np.testing.assert_allclose(ours, expected, rtol=tol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(ours, expected)


_COMPILED: dict[bytes, Compiled] = {}


def compiled(model: Any) -> Compiled:
    """``Compiled(model)``, once per distinct model (the parametrized tests share them)."""
    key = model.SerializeToString()
    if key not in _COMPILED:
        _COMPILED[key] = Compiled(model)
    return _COMPILED[key]


def concrete(dims: Shape, sizes: dict[str, int]) -> tuple[int, ...]:
    return tuple(sizes[d] if isinstance(d, str) else d for d in dims)


# ---- value strategies --------------------------------------------------------------------


def floats(dtype: str, lo: float = -10, hi: float = 10) -> st.SearchStrategy[float]:
    if dtype == "float32":  # bounds Hypothesis can represent at this width
        lo, hi = float(np.float32(lo)), float(np.float32(hi))
    width = 32 if dtype == "float32" else 64
    return st.floats(lo, hi, width=width, allow_nan=False, allow_infinity=False)


def nonzero(dtype: str) -> st.SearchStrategy[Any]:
    """Divisors: away from zero, either sign."""
    if dtype.startswith("float"):
        return st.one_of(floats(dtype, 0.5, 10), floats(dtype, -10, -0.5))
    return st.one_of(st.integers(-7, -1), st.integers(1, 7))


def values(dtype: str) -> st.SearchStrategy[Any]:
    if dtype == "bool":
        return st.booleans()
    if dtype.startswith("float"):
        return floats(dtype)
    return st.integers(-20, 20)


def arrays(draw: Any, dtype: str, shape: tuple[int, ...], elements: Any = None) -> np.ndarray:
    return draw(
        hnp.arrays(np.dtype(dtype), shape, elements=values(dtype) if elements is None else elements)
    )


SIZES = st.fixed_dictionaries({"n": st.integers(1, 5), "m": st.integers(1, 5)})

#: Pairs of input dims that broadcast (ONNX's multidirectional rule is numpy's).
BROADCASTS: list[tuple[Shape, Shape]] = [
    (["n", "m"], ["n", "m"]),
    (["n", "m"], ["m"]),
    (["n", "m"], [1, "m"]),
    (["n", "m"], []),
    ([], ["n", "m"]),
    (["n", 1], [1, "m"]),
]
BROADCAST_IDS = ["same", "row", "1m", "scalar-b", "scalar-a", "outer"]


# ---- binary arithmetic -------------------------------------------------------------------

ARITH_DTYPES = ["float32", "float64", "int32", "int64"]


def _binary_elements(op: str, dtype: str, attrs: dict[str, Any]) -> tuple[Any, Any]:
    """The elements of a and b for ``op``: no division by zero, powers that stay finite."""
    if op in ("Div", "Mod"):
        return values(dtype), nonzero(dtype)
    if op == "Pow":
        if dtype.startswith("float"):
            return floats(dtype, 0.1, 4), floats(dtype, -2, 2)
        return st.integers(-4, 4), st.integers(0, 4)
    return values(dtype), values(dtype)


BINARY_CASES = [
    ("Add", {}),
    ("Sub", {}),
    ("Mul", {}),
    ("Div", {}),
    ("Pow", {}),
    ("Mod", {"fmod": 0}),
    ("Mod", {"fmod": 1}),
    ("Max", {}),
    ("Min", {}),
]


BINARY_PARAMS = [
    pytest.param(op, attrs, dtype, id=f"{op}{attrs.get('fmod', '')}-{dtype}")
    for op, attrs in BINARY_CASES
    for dtype in ARITH_DTYPES
    # ONNX's Mod of floats needs fmod=1 (else an import error: test_errors)
    if not (op == "Mod" and dtype.startswith("float") and not attrs["fmod"])
]


@pytest.mark.parametrize("shapes", BROADCASTS, ids=BROADCAST_IDS)
@pytest.mark.parametrize(("op", "attrs", "dtype"), BINARY_PARAMS)
def test_binary_arithmetic(op: str, attrs: dict[str, Any], dtype: str, shapes: Any) -> None:
    a_dims, b_dims = shapes
    model = one_node_model(op, [("a", dtype, a_dims), ("b", dtype, b_dims)], dtype, attrs)
    case = compiled(model)
    a_elems, b_elems = _binary_elements(op, dtype, attrs)

    @SETTINGS
    @given(st.data())
    def run(data: Any) -> None:
        sizes = data.draw(SIZES)
        a = arrays(data.draw, dtype, concrete(a_dims, sizes), a_elems)
        b = arrays(data.draw, dtype, concrete(b_dims, sizes), b_elems)
        case.check(a, b, rtol=1e-4 if op == "Pow" and dtype == "float32" else None)

    run()


def test_integer_div_truncates_and_mod_follows_onnx() -> None:
    """The cases numpy gets "wrong" for ONNX, written out: -7 / 2 is -3 (not -4); Mod -7 % 3
    is 2 with fmod=0 (the divisor's sign) and -1 with fmod=1 (the dividend's)."""
    a = np.array([7, -7, 7, -7, 6, -6, 0], np.int64)
    b = np.array([2, 2, -2, -2, 3, -3, 5], np.int64)
    for op, attrs in [("Div", {}), ("Mod", {"fmod": 0}), ("Mod", {"fmod": 1})]:
        model = one_node_model(op, [("a", "int64", ["n"]), ("b", "int64", ["n"])], "int64", attrs)
        compiled(model).check(a, b)
    div = compiled(one_node_model("Div", [("a", "int64", ["n"]), ("b", "int64", ["n"])], "int64"))
    np.testing.assert_array_equal(div.vm.run(a, b), [3, -3, -3, 3, 2, 2, 0])


@pytest.mark.parametrize(
    ("base", "exponent"), [("float32", "int64"), ("float32", "float64"), ("int64", "float32")]
)
def test_pow_exponent_of_another_dtype(base: str, exponent: str) -> None:
    """ONNX's Pow alone takes an exponent of another dtype; the result has the base's."""
    model = one_node_model("Pow", [("a", base, ["n"]), ("b", exponent, ["n"])], base)
    case = compiled(model)
    a = np.array([0.5, 2, 3, 1.5] if base.startswith("float") else [2, 3, 4, 1], base)
    b = np.array([2, 3, 0, 1], exponent)
    case.check(a, b)


# ---- comparisons, logic, Where -----------------------------------------------------------

COMPARISONS = ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]


@pytest.mark.parametrize("shapes", BROADCASTS[:4], ids=BROADCAST_IDS[:4])
@pytest.mark.parametrize(
    ("op", "dtype"),
    [
        (op, dtype)
        for op in COMPARISONS
        for dtype in ["float32", "int32", "int64", "bool"]
        if dtype != "bool" or op == "Equal"  # ONNX orders numbers only
    ],
)
def test_comparison(op: str, dtype: str, shapes: Any) -> None:
    a_dims, b_dims = shapes
    case = compiled(one_node_model(op, [("a", dtype, a_dims), ("b", dtype, b_dims)], "bool"))
    # few distinct values, so that equal pairs are common
    elems = st.booleans() if dtype == "bool" else st.integers(-2, 2)

    @SETTINGS
    @given(st.data())
    def run(data: Any) -> None:
        sizes = data.draw(SIZES)
        a = arrays(data.draw, dtype, concrete(a_dims, sizes), elems)
        b = arrays(data.draw, dtype, concrete(b_dims, sizes), elems)
        case.check(a, b)

    run()


@pytest.mark.parametrize("shapes", BROADCASTS, ids=BROADCAST_IDS)
@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(op: str, shapes: Any) -> None:
    a_dims, b_dims = shapes
    case = compiled(one_node_model(op, [("a", "bool", a_dims), ("b", "bool", b_dims)], "bool"))

    @SETTINGS
    @given(st.data())
    def run(data: Any) -> None:
        sizes = data.draw(SIZES)
        case.check(
            arrays(data.draw, "bool", concrete(a_dims, sizes)),
            arrays(data.draw, "bool", concrete(b_dims, sizes)),
        )

    run()


@SETTINGS
@given(st.data())
def test_not(data: Any) -> None:
    case = compiled(one_node_model("Not", [("a", "bool", ["n", "m"])], "bool"))
    case.check(arrays(data.draw, "bool", concrete(["n", "m"], data.draw(SIZES))))


@pytest.mark.parametrize(
    "dims",
    [
        (["n", "m"], ["n", "m"], ["n", "m"]),
        (["n", "m"], ["m"], []),
        (["n", 1], [1, "m"], ["m"]),
        ([], ["n", "m"], ["n", 1]),
    ],
    ids=["same", "row-scalar", "outer", "scalar-cond"],
)
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_where(dtype: str, dims: Any) -> None:
    c_dims, x_dims, y_dims = dims
    model = one_node_model(
        "Where", [("c", "bool", c_dims), ("x", dtype, x_dims), ("y", dtype, y_dims)], dtype
    )
    case = compiled(model)

    @SETTINGS
    @given(st.data())
    def run(data: Any) -> None:
        sizes = data.draw(SIZES)
        case.check(
            arrays(data.draw, "bool", concrete(c_dims, sizes)),
            arrays(data.draw, dtype, concrete(x_dims, sizes)),
            arrays(data.draw, dtype, concrete(y_dims, sizes)),
        )

    run()


# ---- variadic ------------------------------------------------------------------------------

VARIADIC_DIMS: list[list[Shape]] = [[["n", "m"]], [["n", "m"], ["m"]], [["n", 1], [], [1, "m"]]]


@pytest.mark.parametrize("dims", VARIADIC_DIMS, ids=["one", "two", "three"])
@pytest.mark.parametrize(
    ("op", "dtype"),
    # ONNX's Sum and Mean are of floats
    [("Sum", "float32"), ("Mean", "float32"), ("Mean", "float64")]
    + [(op, dtype) for op in ("Max", "Min") for dtype in ("float32", "int32", "int64")],
)
def test_variadic(op: str, dtype: str, dims: list[Shape]) -> None:
    names = [f"x{i}" for i in range(len(dims))]
    model = one_node_model(op, [(nm, dtype, d) for nm, d in zip(names, dims, strict=True)], dtype)
    case = compiled(model)
    if len(dims) == 1:  # one input is that input
        assert "main" in str(case.program) and "%0" not in str(case.program)

    @SETTINGS
    @given(st.data())
    def run(data: Any) -> None:
        sizes = data.draw(SIZES)
        case.check(*(arrays(data.draw, dtype, concrete(d, sizes)) for d in dims))

    run()


# ---- unary ---------------------------------------------------------------------------------


def _round_elements(dtype: str) -> Any:
    halves = st.integers(-10, 10).map(lambda k: k + 0.5)  # the ties: half to even
    return st.one_of(floats(dtype), halves)


#: ONNX op, attributes, elements (None: -10..10), opset.
UNARY_FLOAT: list[tuple[str, dict[str, Any], Any, int]] = [
    ("Abs", {}, None, 17),
    ("Neg", {}, None, 17),
    ("Exp", {}, None, 17),
    ("Log", {}, (0.01, 100), 17),
    ("Sqrt", {}, (0.0, 100), 17),
    ("Reciprocal", {}, "nonzero", 17),
    ("Floor", {}, None, 17),
    ("Ceil", {}, None, 17),
    ("Round", {}, "round", 17),
    ("Sin", {}, None, 17),
    ("Cos", {}, None, 17),
    ("Tanh", {}, None, 17),
    ("Sigmoid", {}, (-30, 30), 17),
    ("Erf", {}, (-4, 4), 17),
    ("Relu", {}, None, 17),
    ("LeakyRelu", {}, None, 17),
    ("LeakyRelu", {"alpha": 0.3}, None, 17),
    ("Elu", {}, None, 17),
    ("Elu", {"alpha": 0.5}, None, 17),
    ("Selu", {}, None, 17),
    ("Selu", {"alpha": 1.5, "gamma": 2.0}, None, 17),
    ("HardSigmoid", {}, None, 17),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, None, 17),
    ("HardSwish", {}, None, 17),
    ("Softplus", {}, (-30, 30), 17),
    ("Sign", {}, None, 17),
    ("Gelu", {}, (-6, 6), 20),
    ("Gelu", {"approximate": "tanh"}, (-6, 6), 20),
]


def _unary_id(case: tuple[str, dict[str, Any], Any, int]) -> str:
    op, attrs = case[0], case[1]
    return op + "".join(f"-{k}={v}" for k, v in attrs.items())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", UNARY_FLOAT, ids=[_unary_id(c) for c in UNARY_FLOAT])
def test_unary_float(case: tuple[str, dict[str, Any], Any, int], dtype: str) -> None:
    op, attrs, domain, opset = case
    model = one_node_model(op, [("x", dtype, ["n", "m"])], dtype, attrs, opset=opset)
    ran = compiled(model)
    if domain is None:
        elems = floats(dtype)
    elif domain == "nonzero":
        elems = nonzero(dtype)
    elif domain == "round":
        elems = _round_elements(dtype)
    else:
        elems = floats(dtype, *domain)

    @SETTINGS
    @given(st.data())
    def run(data: Any) -> None:
        x = arrays(data.draw, dtype, concrete(["n", "m"], data.draw(SIZES)), elems)
        ran.check(x, rtol=1e-5 if dtype == "float32" else 1e-10, atol=1e-6)

    run()


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("op", ["Abs", "Neg", "Relu", "Sign"])
def test_unary_integer(op: str, dtype: str) -> None:
    case = compiled(one_node_model(op, [("x", dtype, ["n", "m"])], dtype))

    @SETTINGS
    @given(st.data())
    def run(data: Any) -> None:
        case.check(arrays(data.draw, dtype, concrete(["n", "m"], data.draw(SIZES))))

    run()


SPECIALS = st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1.5, -2.0])


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("IsNaN", {}),
        ("IsInf", {}),
        ("IsInf", {"detect_negative": 0}),
        ("IsInf", {"detect_positive": 0}),
        ("Sign", {}),
        ("Relu", {}),
        ("Abs", {}),
    ],
)
def test_special_values(op: str, attrs: dict[str, Any]) -> None:
    out = "bool" if op.startswith("Is") else "float32"
    case = compiled(one_node_model(op, [("x", "float32", ["n", "m"])], out, attrs))

    @SETTINGS
    @given(st.data())
    def run(data: Any) -> None:
        case.check(arrays(data.draw, "float32", concrete(["n", "m"], data.draw(SIZES)), SPECIALS))

    run()


# ---- Clip ----------------------------------------------------------------------------------

CLIP_CASES = {
    "none": ([], {}),
    "min": (["lo"], {"lo": -1.5}),
    "max": (["", "hi"], {"hi": 2.0}),
    "both": (["lo", "hi"], {"lo": -1.5, "hi": 2.0}),
    "crossed": (["lo", "hi"], {"lo": 3.0, "hi": -1.0}),  # min > max: the result is max
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("bounds", ["initializers", "inputs"])
@pytest.mark.parametrize("which", list(CLIP_CASES))
def test_clip(which: str, bounds: str, dtype: str) -> None:
    names, given_values = CLIP_CASES[which]
    scalars = {
        k: np.array(math.floor(v) if "int" in dtype else v, dtype) for k, v in given_values.items()
    }
    inputs: list[tuple[str, str, Shape]] = [("x", dtype, ["n", "m"])]
    initializers = []
    if bounds == "inputs":
        inputs += [(k, dtype, []) for k in scalars]
    else:
        initializers = list(scalars.items())
    model = one_node_model(
        "Clip", inputs, dtype, node_inputs=["x", *names], initializers=initializers
    )
    case = compiled(model)
    if bounds == "initializers" and dtype.startswith("float") and which != "none":
        assert "clip(" in str(case.program)  # known scalar bounds: the catalogue's clip

    @SETTINGS
    @given(st.data())
    def run(data: Any) -> None:
        x = arrays(data.draw, dtype, concrete(["n", "m"], data.draw(SIZES)))
        extra = list(scalars.values()) if bounds == "inputs" else []
        case.check(x, *extra)

    run()


# ---- symbolic types ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a_dims", "b_dims", "signature", "result"),
    [
        (
            ["n", "m"],
            ["m"],
            "%a: Tensor[(n, m), float32], %b: Tensor[(m,), float32]",
            "Tensor[(n, m), float32]",
        ),
        (
            ["n", 1],
            [1, "m"],
            "%a: Tensor[(n, 1), float32], %b: Tensor[(1, m), float32]",
            "Tensor[(n, m), float32]",
        ),
        ([], ["n", "m"], "%a: float32, %b: Tensor[(n, m), float32]", "Tensor[(n, m), float32]"),
        (
            ["b", "n", "m"],
            ["n", 1],
            "%a: Tensor[(b, n, m), float32], %b: Tensor[(n, 1), float32]",
            "Tensor[(b, n, m), float32]",
        ),
    ],
)
def test_broadcast_keeps_symbolic_dims(
    a_dims: Shape, b_dims: Shape, signature: str, result: str
) -> None:
    model = one_node_model("Add", [("a", "float32", a_dims), ("b", "float32", b_dims)], "float32")
    program = dynshape.onnx.load(model)
    assert f"def @main({signature})" in str(program), str(program)
    typed = str(infer_types(program))
    assert typed.rstrip().splitlines()[-2].endswith(f"/* ty={result} */"), typed


def test_integer_div_keeps_symbolic_dims() -> None:
    """The truncating division is a composition; its result keeps the broadcast dims."""
    model = one_node_model("Div", [("a", "int64", ["n", "m"]), ("b", "int64", ["m"])], "int64")
    typed = str(infer_types(dynshape.onnx.load(model)))
    assert typed.rstrip().splitlines()[-2].endswith("/* ty=Tensor[(n, m), int64] */"), typed


# ---- folding shape subgraphs -------------------------------------------------------------


def _int64(name: str, values: Any) -> Any:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _shape_model(
    nodes: list[Any], x_dims: Shape, out: str, inits: list[Any], out_dtype: str = "float32"
) -> Any:
    graph = helper.make_graph(
        nodes,
        "shape_graph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_dims))],
        [helper.make_tensor_value_info(out, ELEM[out_dtype], None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _dim_nodes(axis: int, name: str) -> list[Any]:
    """``name`` = x's dim ``axis`` (a 0-d int64): Shape -> Gather."""
    return [
        helper.make_node("Shape", ["x"], [f"{name}_shape"]),
        helper.make_node("Gather", [f"{name}_shape", f"axis{axis}"], [name], axis=0),
    ]


def _axis_inits() -> list[Any]:
    return [_int64("axis0", 0), _int64("axis1", 1), _int64("axis2", 2), _int64("zero", [0])]


def test_fold_mul_into_reshape() -> None:
    """x: (n, m, 4) -> Reshape(x, [n, Mul(m, 4)]): the new shape is [n, 4*m] in the program."""
    nodes = [
        *_dim_nodes(0, "n"),
        *_dim_nodes(1, "m"),
        helper.make_node("Mul", ["m", "four"], ["m4"]),
        helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
        helper.make_node("Unsqueeze", ["m4", "zero"], ["m41"]),
        helper.make_node("Concat", ["n1", "m41"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    model = _shape_model(nodes, ["n", "m", 4], "y", [*_axis_inits(), _int64("four", 4)])
    program = dynshape.onnx.load(model)
    text = str(program)
    assert "newshape=[n, 4*m]" in text, text
    assert "shape_of" not in text and "take" not in text and "multiply" not in text, text
    case = Compiled(model)
    for n, m in [(1, 1), (2, 3), (5, 2)]:
        case.check(np.arange(n * m * 4, dtype=np.float32).reshape(n, m, 4))


def test_fold_arithmetic_chain_into_reshape() -> None:
    """x: (n, m) -> Reshape(x, [Div(Mul(n, m), 2), Max(Sub(Add(n, 2), n), Min(m, 2))]) with
    m even: [m*n // 2, 2] (Max(2, Min(m, 2)) is 2, proved at import)."""
    nodes = [
        *_dim_nodes(0, "n"),
        *_dim_nodes(1, "m"),
        helper.make_node("Mul", ["n", "m"], ["nm"]),
        helper.make_node("Div", ["nm", "two"], ["half"]),
        helper.make_node("Add", ["n", "two"], ["n2"]),
        helper.make_node("Sub", ["n2", "n"], ["d2"]),
        helper.make_node("Min", ["m", "two"], ["mmin"]),
        helper.make_node("Max", ["d2", "mmin"], ["last"]),
        helper.make_node("Unsqueeze", ["half", "zero"], ["h1"]),
        helper.make_node("Unsqueeze", ["last", "zero"], ["l1"]),
        helper.make_node("Concat", ["h1", "l1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    model = _shape_model(nodes, ["n", "m"], "y", [*_axis_inits(), _int64("two", 2)])
    text = str(dynshape.onnx.load(model))
    assert "newshape=[(m*n // 2), 2]" in text, text
    assert "shape_of" not in text and "take" not in text, text
    case = Compiled(model)
    for n, m in [(1, 2), (3, 4), (2, 6)]:
        case.check(np.arange(n * m, dtype=np.float32).reshape(n, m))


def test_fold_mod_and_where_of_known_condition() -> None:
    """Equal(n, n) is proved true at import, so Where picks Mod(m, 3) (a sympy Mod) without a
    where op; the reshape target is [n, m - Mod(m, 3) ... ] computed as dims."""
    nodes = [
        *_dim_nodes(0, "n"),
        *_dim_nodes(1, "m"),
        helper.make_node("Equal", ["n", "n"], ["same"]),
        helper.make_node("Mod", ["m", "three"], ["r"]),
        helper.make_node("Where", ["same", "m", "r"], ["m_again"]),
        helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
        helper.make_node("Unsqueeze", ["m_again", "zero"], ["m1"]),
        helper.make_node("Concat", ["n1", "m1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    model = _shape_model(nodes, ["n", "m"], "y", [*_axis_inits(), _int64("three", 3)])
    text = str(dynshape.onnx.load(model))
    assert "newshape=[n, m]" in text and "where" not in text and "shape_of" not in text, text


def test_undecidable_dims_are_built_as_ops() -> None:
    """Div(n - 10, 3) truncates toward zero, and n - 10 may be negative: not folded (floor
    would be wrong for n < 10) but computed at run time, and right for every n. Equal(n, m)
    is not decidable either."""
    nodes = [
        *_dim_nodes(0, "n"),
        helper.make_node("Sub", ["n", "ten"], ["d"]),
        helper.make_node("Div", ["d", "three"], ["y"]),
    ]
    model = _shape_model(
        nodes, ["n"], "y", [*_axis_inits(), _int64("ten", 10), _int64("three", 3)], "int64"
    )
    text = str(dynshape.onnx.load(model))
    assert "shape_of" in text and "floor_divide" in text, text
    case = Compiled(model)
    for n in [0, 1, 4, 9, 10, 11, 13, 25]:
        case.check(np.zeros(n, np.float32))

    nodes = [
        *_dim_nodes(0, "n"),
        *_dim_nodes(1, "m"),
        helper.make_node("Equal", ["n", "m"], ["y"]),
    ]
    model = _shape_model(nodes, ["n", "m"], "y", _axis_inits(), "bool")
    assert "equal(" in str(dynshape.onnx.load(model))
    case = Compiled(model)
    for n, m in [(2, 2), (2, 3)]:
        case.check(np.zeros((n, m), np.float32))


def test_fold_constants_with_onnx_integer_semantics() -> None:
    """Div and Mod of constants fold at import (no ops left but the final add) with ONNX's
    truncation and signs, not numpy's."""
    a = np.array([7, -7, 7, -7, 5], np.int64)
    b = np.array([2, 2, -2, -3, 5], np.int64)
    for op, attrs in [("Div", {}), ("Mod", {"fmod": 0}), ("Mod", {"fmod": 1})]:
        nodes = [
            helper.make_node(op, ["a", "b"], ["q"], **attrs),
            helper.make_node("Neg", ["q"], ["nq"]),
            helper.make_node("Add", ["x", "nq"], ["y"]),
        ]
        graph = helper.make_graph(
            nodes,
            "constants",
            [helper.make_tensor_value_info("x", TensorProto.INT64, ["n"])],
            [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
            initializer=[numpy_helper.from_array(a, "a"), numpy_helper.from_array(b, "b")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        text = str(dynshape.onnx.load(model))
        assert "floor_divide" not in text and "mod(" not in text and "negative" not in text, text
        Compiled(model).check(np.arange(5, dtype=np.int64))


# ---- errors --------------------------------------------------------------------------------


def test_mismatched_dtypes_name_node_and_both() -> None:
    model = one_node_model("Add", [("a", "float32", ["n"]), ("b", "int64", ["n"])], "float32")
    with pytest.raises(dynshape.ModelImportError) as info:
        dynshape.onnx.load(model)
    message = str(info.value)
    assert "Add 'add_node'" in message
    assert "float32" in message and "int64" in message


def test_mismatched_known_dtype() -> None:
    """A constant of another dtype is no different: ONNX does not promote."""
    model = one_node_model(
        "Mul",
        [("a", "float32", ["n"])],
        "float32",
        node_inputs=["a", "k"],
        initializers=[("k", np.array(2, np.int64))],
    )
    with pytest.raises(dynshape.ModelImportError, match=r"Mul 'mul_node'.*float32 and int64"):
        dynshape.onnx.load(model)


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "match"),
    [
        ("Exp", [("x", "int32", ["n"])], {}, r"Exp 'exp_node'.*floating-point.*int32"),
        ("Mod", [("a", "float32", ["n"]), ("b", "float32", ["n"])], {}, r"fmod=1"),
        ("And", [("a", "int64", ["n"]), ("b", "int64", ["n"])], {}, r"bool.*int64"),
        (
            "Where",
            [("c", "int64", ["n"]), ("x", "float32", ["n"]), ("y", "float32", ["n"])],
            {},
            r"condition must be bool, got int64",
        ),
        ("Gelu", [("x", "float32", ["n"])], {"approximate": "fast"}, r"approximate"),
    ],
)
def test_errors(op: str, inputs: Any, attrs: dict[str, Any], match: str) -> None:
    model = one_node_model(op, inputs, "float32", attrs, opset=20 if op == "Gelu" else 17)
    with pytest.raises(dynshape.ModelImportError, match=match):
        dynshape.onnx.load(model)


# ---- folding constants: every op, evaluated at import --------------------------------------


def _constant_model(
    op: str, consts: Sequence[np.ndarray], out: str, attrs: dict[str, Any], opset: int
) -> Any:
    """``out = op(*consts)`` of initializers; the graph input ``x`` is there to be a program
    input (unused)."""
    names = [f"c{i}" for i in range(len(consts))]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["out"], name="folded", **attrs)],
        "constants",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("out", ELEM[out], None)],
        initializer=[numpy_helper.from_array(c, nm) for nm, c in zip(names, consts, strict=True)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _domain_values(domain: Any, rng: np.random.Generator) -> np.ndarray:
    if domain is None:
        v = rng.uniform(-10, 10, 12)
    elif domain == "nonzero":
        v = rng.uniform(0.5, 10, 12) * rng.choice([-1, 1], 12)
    elif domain == "round":
        v = np.concatenate([rng.uniform(-10, 10, 6), np.arange(-3, 3) + 0.5])
    else:
        v = rng.uniform(*domain, 12)
    return v.reshape(3, 4)


FOLD_CASES = [
    *[
        pytest.param(op, attrs, ["float32"], domain, opset, id=f"{_unary_id((op, attrs))}")
        for op, attrs, domain, opset in UNARY_FLOAT
    ],
    *[
        pytest.param(op, {}, ["int64"], None, 17, id=f"{op}-int64")
        for op in ("Abs", "Neg", "Relu", "Sign")
    ],
    *[
        pytest.param(op, attrs, [dt, dt], "binary", 17, id=f"{op}{attrs.get('fmod', '')}-{dt}")
        for op, attrs, dt in [
            ("Add", {}, "int64"),
            ("Sub", {}, "float32"),
            ("Mul", {}, "int32"),
            ("Div", {}, "int64"),
            ("Div", {}, "float32"),
            ("Mod", {"fmod": 0}, "int64"),
            ("Mod", {"fmod": 1}, "int32"),
            ("Mod", {"fmod": 1}, "float32"),
            ("Pow", {}, "int64"),
            ("Pow", {}, "float32"),
            ("Max", {}, "int64"),
            ("Min", {}, "float32"),
            ("Sum", {}, "float32"),
            ("Mean", {}, "float32"),
        ]
    ],
    *[pytest.param(op, {}, ["int64", "int64"], "binary", 17, id=op) for op in COMPARISONS],
    *[pytest.param(op, {}, ["bool", "bool"], "binary", 17, id=op) for op in ("And", "Or", "Xor")],
    pytest.param("Not", {}, ["bool"], "binary", 17, id="Not"),
    pytest.param("Where", {}, ["bool", "float32", "float32"], "binary", 17, id="Where"),
    pytest.param("IsNaN", {}, ["float32"], "specials", 17, id="IsNaN"),
    pytest.param("IsInf", {"detect_positive": 0}, ["float32"], "specials", 17, id="IsInf"),
]


@pytest.mark.parametrize(("op", "attrs", "dtypes", "domain", "opset"), FOLD_CASES)
def test_constants_fold(
    op: str, attrs: dict[str, Any], dtypes: list[str], domain: Any, opset: int
) -> None:
    """An op of constants is a constant of the imported program (numpy at import, with ONNX's
    semantics), equal to onnxruntime's result."""
    rng = np.random.default_rng(0)
    consts = []
    for i, dt in enumerate(dtypes):
        if dt == "bool":
            consts.append(rng.integers(0, 2, (3, 4)).astype(bool))
        elif domain == "specials":
            consts.append(np.array([[np.nan, np.inf, -np.inf, 0], [1, -1, 2, 3], [0, 0, 0, 0]], dt))
        elif domain == "binary":
            if (op in ("Div", "Mod") and i == 1) or (op == "Pow" and i == 0):
                v = rng.integers(1, 6, (3, 4)) * rng.choice([1, -1] if op != "Pow" else [1], (3, 4))
            elif op == "Pow":
                v = rng.integers(0, 4, (3, 4))
            else:
                v = rng.integers(-9, 10, (3, 4))
            consts.append(
                (v + (0.5 if dt.startswith("float") and op not in ("Pow",) else 0)).astype(dt)
            )
        elif dt.startswith("int"):
            consts.append(rng.integers(-9, 10, (3, 4)).astype(dt))
        else:
            consts.append(_domain_values(domain, rng).astype(dt))
    out = (
        "bool" if op in (*COMPARISONS, "And", "Or", "Xor", "Not", "IsNaN", "IsInf") else dtypes[-1]
    )
    model = _constant_model(op, consts, out, attrs, opset)
    program = dynshape.onnx.load(model)
    body = str(program).splitlines()[1:-1]
    assert len(body) == 1 and body[0].lstrip().startswith("const("), str(program)  # no call
    Compiled(model).check(np.zeros(2, np.float32), atol=1e-6)
