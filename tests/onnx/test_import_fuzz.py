"""A hostile model file: structured mutations of real-looking models (nodes removed or rewired,
attributes of the wrong type or value, bad dims and element types, truncated bytes), each
imported and compiled. Every outcome is a program or the project's error, never another
exception (a protobuf, numpy or sympy traceback)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from onnx import AttributeProto, TensorProto, helper  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402
from dynshape.batch_processes import SplitPlan, split_plan  # noqa: E402
from dynshape.pipeline import as_module, infer_types  # noqa: E402
from dynshape_errors import DynShapeError  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "exported"))
from onnx_models import cnn, encoder  # noqa: E402
from test_import import HEADS  # noqa: E402

BASES = {"heads": HEADS, "cnn": cnn(), "encoder": encoder()}

Mutation = Callable[[object, st.DataObject], None]


def _node(m: object, data: st.DataObject) -> object:
    nodes = m.graph.node  # type: ignore[attr-defined]
    return nodes[data.draw(st.integers(0, len(nodes) - 1))]


def drop_node(m: object, data: st.DataObject) -> None:
    nodes = m.graph.node  # type: ignore[attr-defined]
    del nodes[data.draw(st.integers(0, len(nodes) - 1))]


def rewire_input(m: object, data: st.DataObject) -> None:
    node = _node(m, data)
    if node.input:
        names = [n for x in m.graph.node for n in x.output] + ["x", "nowhere", ""]  # type: ignore[attr-defined]
        node.input[data.draw(st.integers(0, len(node.input) - 1))] = data.draw(
            st.sampled_from(names)
        )


def bad_attribute(m: object, data: st.DataObject) -> None:
    node = _node(m, data)
    value = data.draw(
        st.one_of(
            st.integers(-(2**40), 2**40),
            st.floats(allow_nan=True, allow_infinity=True),
            st.text(max_size=4),
            st.lists(st.integers(-5, 5), min_size=1, max_size=5),
        )
    )
    name = data.draw(st.sampled_from([a.name for a in node.attribute] + ["axis", "perm", "pads"]))
    for i, a in enumerate(node.attribute):
        if a.name == name:
            del node.attribute[i]
            break
    node.attribute.append(helper.make_attribute(name, value))


def bad_dims(m: object, data: st.DataObject) -> None:
    value = m.graph.input[0]  # type: ignore[attr-defined]
    dims = value.type.tensor_type.shape.dim
    d = dims[data.draw(st.integers(0, len(dims) - 1))]
    choice = data.draw(st.sampled_from(["negative", "name", "clear", "extra"]))
    if choice == "negative":
        d.dim_value = -3
    elif choice == "name":
        d.dim_param = data.draw(st.sampled_from(["", "1bad", "a b", "seq", "+"]))
    elif choice == "clear":
        d.Clear()
    else:
        dims.add().dim_value = 2


def bad_elem_type(m: object, data: st.DataObject) -> None:
    value = m.graph.input[0]  # type: ignore[attr-defined]
    value.type.tensor_type.elem_type = data.draw(st.integers(0, 30))


def bad_initializer(m: object, data: st.DataObject) -> None:
    inits = m.graph.initializer  # type: ignore[attr-defined]
    if inits:
        t = inits[data.draw(st.integers(0, len(inits) - 1))]
        choice = data.draw(st.sampled_from(["truncate", "dims", "type"]))
        if choice == "truncate" and t.raw_data:
            t.raw_data = t.raw_data[: len(t.raw_data) // 2]
        elif choice == "dims":
            t.dims.append(3)
        else:
            t.data_type = data.draw(st.integers(0, 30))


def bad_opset(m: object, data: st.DataObject) -> None:
    m.opset_import[0].version = data.draw(st.integers(-1, 40))  # type: ignore[attr-defined]


def bad_graph_attribute(m: object, data: st.DataObject) -> None:
    node = _node(m, data)
    empty = helper.make_graph([], "empty", [], [])
    node.attribute.append(helper.make_attribute("then_branch", empty))
    node.attribute[-1].type = AttributeProto.GRAPH


MUTATIONS = [
    drop_node,
    rewire_input,
    bad_attribute,
    bad_dims,
    bad_elem_type,
    bad_initializer,
    bad_opset,
    bad_graph_attribute,
]


def _import_and_compile(model: object) -> None:
    """Import and compile; a program compiled is also put to the batch split's row proof
    (what ``InferenceSession(..., batch_processes=2)`` runs), which gives a plan or a reason."""
    try:
        program = dynshape.onnx.load(model)
        dynshape.compile(program)
    except DynShapeError:
        return  # a clear refusal is the expected outcome for most mutants
    plan = split_plan(infer_types(as_module(program)))
    assert isinstance(plan, (SplitPlan, str))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(sorted(BASES)), data=st.data())
def test_structured_mutations_give_a_program_or_the_projects_error(
    base: str, data: st.DataObject
) -> None:
    model = type(BASES[base])()
    model.CopyFrom(BASES[base])
    for _ in range(data.draw(st.integers(1, 3))):
        data.draw(st.sampled_from(MUTATIONS))(model, data)
    _import_and_compile(model)


@settings(max_examples=40, deadline=None)
@given(base=st.sampled_from(sorted(BASES)), data=st.data())
def test_corrupted_bytes_give_the_projects_error(base: str, data: st.DataObject) -> None:
    raw = bytearray(BASES[base].SerializeToString())
    choice = data.draw(st.sampled_from(["truncate", "flip", "splice"]))
    if choice == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif choice == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            raw[data.draw(st.integers(0, len(raw) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    else:
        at = data.draw(st.integers(0, len(raw)))
        raw[at:at] = data.draw(st.binary(min_size=1, max_size=16))
    _import_and_compile(bytes(raw))


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("op_type", "model.graph.node[0].op_type is not valid UTF-8 text"),
        ("name", "model.graph.node[0].name is not valid UTF-8 text"),
    ],
)
def test_text_that_is_not_utf8_is_named(field: str, message: str) -> None:
    # ONNX's protos are proto2: protobuf hands such a string back as bytes (a flipped bit did
    # it to an op type, and the importer failed sorting bytes with str)
    model = type(BASES["cnn"])()
    model.CopyFrom(BASES["cnn"])
    setattr(model.graph.node[0], field, "Qzzq")  # a marker found once in the bytes
    raw = model.SerializeToString()
    assert raw.count(b"Qzzq") == 1
    bad = raw.replace(b"Qzzq", b"\xffzzq")
    with pytest.raises(dynshape.errors.ModelImportError) as info:
        dynshape.onnx.load(bad)
    assert str(info.value).startswith(message)


def test_the_mutants_run_when_they_import() -> None:
    # A mutant that imports is a real program: it runs (or fails with the project's error).
    model = type(HEADS)()
    model.CopyFrom(HEADS)
    model.graph.node[-1].attribute[0].ints[:] = [0, 1, 2, 3]  # Transpose: identity perm
    program = dynshape.onnx.load(model)
    x = np.ones((2, 3, 64), np.float32)
    assert dynshape.VirtualMachine(dynshape.compile(program)).run(x).shape == (2, 3, 4, 16)
    assert TensorProto.FLOAT == 1
