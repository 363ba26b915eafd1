"""The arena layout as a standalone SVG: tensors as boxes over program time (x) and offset (y).

Storages are stacked vertically, each a band as tall as its size (at one binding), with the
tensors it holds drawn at their offset, from their ``alloc_tensor`` to their last use. Written
with plain string formatting: no dependency.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

import sympy

from .analysis.dim_bounds import evaluate
from .analysis.liveness import END
from .memory_report import FunctionMemory

_W, _H, _LEFT, _TOP, _GAP = 720.0, 420.0, 140.0, 30.0, 12.0
_COLORS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1")


def layout_svg(report: FunctionMemory, values: Mapping[sympy.Basic, int] | None = None) -> str:
    """The SVG text of ``report``'s layout at ``values`` (default: the report's binding)."""
    values = values if values is not None else report.values
    if values is None:
        raise ValueError("drawing a layout needs a binding of the symbols")
    storages = [(st, max(evaluate(st.size, values), 1)) for st in report.layout]
    steps = 1 + max(
        [t.end for st, _ in storages for t in st.tensors if t.end != END]
        + [t.start for st, _ in storages for t in st.tensors]
        + [0]
    )
    total = sum(size for _, size in storages) or 1
    usable = _H - _GAP * max(len(storages) - 1, 0)
    scale_x = (_W - _LEFT - 10) / (steps + 1)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W:.0f}" '
        f'height="{_H + _TOP + 30:.0f}" font-family="monospace" font-size="11">',
        f"<title>memory layout of @{escape(report.name)}</title>",
        f'<text x="10" y="18">@{escape(report.name)}: time (program step) -&gt;, '
        "offset (bytes) down</text>",
    ]
    y = _TOP
    k = 0
    for st, size in storages:
        h = usable * size / total
        out.append(
            f'<rect x="{_LEFT:.1f}" y="{y:.1f}" width="{_W - _LEFT - 10:.1f}" height="{h:.1f}" '
            'fill="#f4f4f4" stroke="#999"/>'
        )
        title = escape(report.name_of(st.var))
        out.append(f'<text x="6" y="{y + 12:.1f}">{title} {size:,} B</text>')
        for t in st.tensors:
            off = evaluate(t.offset, values)
            nb = evaluate(t.nbytes, values)
            end = steps if t.end == END else t.end
            x0 = _LEFT + t.start * scale_x
            w = max((end - t.start + 1) * scale_x, 2.0)
            ty = y + h * off / size
            th = max(h * nb / size, 1.0)
            color = _COLORS[k % len(_COLORS)]
            k += 1
            label = f"{report.name_of(t.var)} {nb} B @{off}"
            out.append(
                f"<g><title>{escape(label)} steps {t.start}-{end}</title>"
                f'<rect x="{x0:.1f}" y="{ty:.1f}" width="{w:.1f}" height="{th:.1f}" '
                f'fill="{color}" fill-opacity="0.75" stroke="#333"/>'
                f'<text x="{x0 + 2:.1f}" y="{ty + min(th, 12) - 1:.1f}">{escape(label)}</text></g>'
            )
        y += h + _GAP
    out.append("</svg>")
    return "\n".join(out) + "\n"
