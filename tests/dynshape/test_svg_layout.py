"""The memory-layout picture (issue 17, item 4) for the README's model, the transformer encoder
and the RNN example: a title with the sizes, a time axis naming each step, the peak marked, a
row per tensor, in-place reuse shown, and no label that overlaps another or leaves the canvas
(checked on the drawing's geometry; rendered to PNG too, with cairosvg)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from types import ModuleType
from xml.etree import ElementTree as ET

import numpy as np
import pytest

import dynshape as ds
from dynshape.memory_report import memory_report
from dynshape.svg_layout import layout_drawing, layout_svg


def _readme_model() -> ds.Program:
    x = ds.tensor("x", ("batch", 512), np.float32)
    w1 = ds.tensor("w1", (512, 256), np.float32)
    w2 = ds.tensor("w2", (256, 10), np.float32)
    y = ds.softmax(ds.relu(x @ w1) @ w2, -1)
    return ds.build(y, inputs=[x, w1, w2], ranges={"batch": (1, 4096)})


def _case(
    name: str, load_example: Callable[[str], ModuleType]
) -> tuple[ds.Program, dict[str, int]]:
    """The README's model at batch 64, the encoder at seq 64, the MLP at batch 64, the RNN at
    10 steps of batch 8."""
    if name == "readme":
        return _readme_model(), {"batch": 64}
    if name == "mlp":
        mlp = load_example("mlp")
        return mlp.build_model(), mlp.bindings(64)
    if name == "encoder":
        encoder = load_example("transformer_encoder")
        return encoder.build_model(), encoder.bindings(64)
    rnn = load_example("rnn")
    return rnn.build_model(), rnn.bindings((10, 8))


@pytest.mark.parametrize("name", ["readme", "encoder", "rnn"])
def test_no_label_overlaps_another_or_leaves_the_canvas(name, load_example):
    program, binding = _case(name, load_example)
    report = memory_report(program, binding)["main"]
    drawing, title = layout_drawing(report)
    assert title.startswith("@main memory layout at ")
    for symbol, value in binding.items():
        assert f"{symbol}={value}" in title
    labels = drawing.labels
    overlapping = [
        (a.text, b.text) for a, b in itertools.combinations(labels, 2) if a.box.overlaps(b.box)
    ]
    assert overlapping == []
    assert [lab.text for lab in labels if not lab.box.inside(drawing.width, drawing.height)] == []
    texts = [lab.text for lab in labels]
    assert any(t.startswith("peak ") and "live at step" in t for t in texts)
    tensors = [t for st in report.layout for t in st.tensors]
    rows = [t for t in texts if ": " in t and " B at offset " in t]
    assert len(rows) == len(tensors) > 0
    # step ticks name what the step does
    assert any(lab.vertical and "alloc_tensor" in lab.text for lab in labels)


def test_in_place_reuse_is_hatched_and_said(load_example):
    # The MLP's softmax writes over its dying input (the encoder's softmax is now inside the
    # attention kernel, and its layer norms' inputs live on in the residuals).
    program, binding = _case("mlp", load_example)
    report = memory_report(program, binding)["main"]
    svg = layout_svg(report)
    texts = [lab.text for lab in layout_drawing(report)[0].labels]
    in_place = [t for t in texts if "written in place over" in t]
    assert in_place, "the MLP's last op writes in place"
    assert svg.count('fill="url(#in-place)"') == len(in_place)


def test_the_svg_is_well_formed_and_renders(load_example):
    program, binding = _case("readme", load_example)
    svg = layout_svg(memory_report(program, binding)["main"])
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg") and root.get("viewBox", "").startswith("0 0 ")
    try:
        import cairosvg
    except OSError as e:  # the library is there but the system's cairo is not
        pytest.skip(f"cairosvg cannot load cairo: {e}")
    png = cairosvg.svg2png(bytestring=svg.encode())
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_a_layout_needs_a_binding():
    report = memory_report(_readme_model())["main"]
    with pytest.raises(ValueError, match="needs a binding"):
        layout_svg(report)
