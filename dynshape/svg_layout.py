"""The arena layout as a standalone SVG: tensors as boxes over program time (x) and offset (y).

What a reader needs to follow it, and nothing that can collide:

- a title naming the function and the sizes it is drawn at (``@main at n=128``) and a line
  saying how to read it;
- the storages stacked vertically, each a band as tall as its bytes (at that binding), its name
  and size on the left, its first and last byte offset on its left edge;
- each tensor a coloured box at its offset, from the step that makes it to its last use, with
  its number inside when the number fits; every tensor is a row of the table under the drawing
  (colour, number, name, bytes, offset, steps), so no label ever has to squeeze into a box;
- a tensor written over the one that dies where it starts, at the same offset (the planner's
  in-place reuse), hatched, and said so in its row;
- the time axis: a tick per step with its number and what it does (``alloc_tensor``, the ops
  of an invoked kernel), every k-th step labelled when the steps are too narrow for each;
- the peak of live bytes marked with a dashed line at its step.

The drawing is computed first (``layout_drawing``: every box and every label with its bounding
box, at an estimated 0.6 em per monospace character), then written out as text; the tests check
on that geometry that no two labels overlap and all lie on the canvas, and render the SVG when
``cairosvg`` is installed. Plain string formatting: no dependency.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape

import sympy

import ir

from .analysis.dim_bounds import evaluate
from .analysis.liveness import END, StorageLife, TensorLife
from .memory_report import FunctionMemory

#: Font size (px) of every label, and the width of one monospace character at it.
FONT = 11.0
CHAR = 0.6 * FONT
ROW = FONT + 4.0
_W, _PLOT_H, _LEFT, _RIGHT, _GAP = 960.0, 360.0, 190.0, 20.0, 14.0
_COLORS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f")
#: Longest step description on the time axis (characters).
_STEP_CHARS = 28


@dataclass(frozen=True)
class Box:
    """An axis-aligned rectangle: ``x, y`` its top-left corner."""

    x: float
    y: float
    w: float
    h: float

    def overlaps(self, other: Box) -> bool:
        """True if the two rectangles share more than an edge."""
        return (
            self.x < other.x + other.w
            and other.x < self.x + self.w
            and self.y < other.y + other.h
            and other.y < self.y + self.h
        )

    def inside(self, width: float, height: float) -> bool:
        """True if the rectangle lies on a ``width`` x ``height`` canvas."""
        return (
            self.x >= 0 and self.x + self.w <= width and self.y >= 0 and self.y + self.h <= height
        )


@dataclass(frozen=True)
class Label:
    """One piece of text and the box it covers (rotated labels: the rotated box)."""

    text: str
    box: Box
    vertical: bool = False


@dataclass
class Drawing:
    """The geometry of a layout picture, then its SVG text."""

    width: float
    height: float
    labels: list[Label] = field(default_factory=list)
    shapes: list[str] = field(default_factory=list)

    def text(self, x: float, y: float, text: str, *, vertical: bool = False, **attrs: str) -> None:
        """A label whose baseline starts at ``(x, y)`` (vertical: reading downwards)."""
        length = len(text) * CHAR
        # Rotated by +90 degrees, the glyphs' ascent points to +x: the box is right of x.
        box = Box(x - 2, y, FONT, length) if vertical else Box(x, y - FONT + 2, length, FONT)
        self.labels.append(Label(text, box, vertical))
        extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
        turn = f' transform="rotate(90 {x:.1f} {y:.1f})"' if vertical else ""
        self.shapes.append(f'<text x="{x:.1f}" y="{y:.1f}"{turn}{extra}>{escape(text)}</text>')

    def svg(self, title: str) -> str:
        """The drawing as a standalone SVG document."""
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width:.0f}" '
            f'height="{self.height:.0f}" viewBox="0 0 {self.width:.0f} {self.height:.0f}" '
            f'font-family="monospace" font-size="{FONT:.0f}">'
        )
        hatch = (
            '<defs><pattern id="in-place" width="6" height="6" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="6" stroke="#000" '
            'stroke-width="1.5" stroke-opacity="0.45"/></pattern></defs>'
        )
        body = [head, f"<title>{escape(title)}</title>", hatch, '<rect width="100%" '
                'height="100%" fill="#fff"/>', *self.shapes, "</svg>"]  # fmt: skip
        return "\n".join(body) + "\n"


def layout_drawing(
    report: FunctionMemory, values: Mapping[sympy.Basic, int] | None = None
) -> tuple[Drawing, str]:
    """The geometry of ``report``'s layout at ``values`` (default: the report's binding), and
    the picture's title."""
    values = values if values is not None else report.values
    if values is None:
        raise ValueError("drawing a layout needs a binding of the symbols")
    storages = [(st, max(evaluate(st.size, values), 1)) for st in report.layout]
    tensors = [t for st, _ in storages for t in st.tensors]
    last = max([t.end for t in tensors if t.end != END] + [t.start for t in tensors] + [0])
    steps = max(last + 1, len(report.steps))
    named = report.bound or {str(s): v for s, v in values.items() if not ir.is_anonymous(s)}
    bound = ", ".join(f"{s}={v}" for s, v in sorted(named.items()))
    title = f"@{report.name} memory layout" + (f" at {bound}" if bound else "")
    plot_w = _W - _LEFT - _RIGHT
    step_w = plot_w / steps

    top = 72.0
    axis_h = 18.0 + _STEP_CHARS * CHAR
    total = sum(size for _, size in storages) or 1
    # Each band as tall as its share of the bytes, and at least two rows (its labels).
    heights = [max(_PLOT_H * size / total, 2 * ROW) for _, size in storages]
    plot_h = sum(heights) + _GAP * max(len(storages) - 1, 0)
    rows = len(tensors) + 1
    d = Drawing(_W, top + plot_h + axis_h + 24 + rows * ROW + 10)
    d.text(10, 20, title, font_weight="bold")
    d.text(10, 38, "time: program steps ->   offset: bytes, down from each storage's start")

    y = top
    numbers: dict[int, tuple[TensorLife, int]] = {}
    in_place = _in_place(storages, values)
    for (st, size), h in zip(storages, heights, strict=True):
        d.shapes.append(
            f'<rect x="{_LEFT:.1f}" y="{y:.1f}" width="{plot_w:.1f}" height="{h:.1f}" '
            'fill="#f4f4f4" stroke="#999"/>'
        )
        d.text(10, y + FONT, _fit(f"{report.name_of(st.var)} {size:,} B", 22))
        d.text(_LEFT - 6 - CHAR, y + FONT, "0")
        end_label = f"{size:,}"
        d.text(_LEFT - 6 - len(end_label) * CHAR, y + h - 2, end_label)
        for t in st.tensors:
            k = len(numbers) + 1
            numbers[id(t)] = (t, k)
            off, nb = evaluate(t.offset, values), evaluate(t.nbytes, values)
            stop = steps - 1 if t.end == END else t.end
            x0 = _LEFT + t.start * step_w
            w = max((stop - t.start + 1) * step_w, 2.0)
            ty, th = y + h * off / size, max(h * nb / size, 1.0)
            color = _COLORS[(k - 1) % len(_COLORS)]
            d.shapes.append(
                f'<rect x="{x0:.1f}" y="{ty:.1f}" width="{w:.1f}" height="{th:.1f}" '
                f'fill="{color}" fill-opacity="0.8" stroke="#333"/>'
            )
            if id(t) in in_place:
                d.shapes.append(
                    f'<rect x="{x0:.1f}" y="{ty:.1f}" width="{w:.1f}" height="{th:.1f}" '
                    'fill="url(#in-place)"/>'
                )
            tag = str(k)
            # The number only where the box holds it with room to spare (the in-place box
            # shares its first step with the tensor it replaces: not that column).
            room_x = x0 + (step_w if id(t) in in_place else 0)
            if th >= FONT + 2 and (x0 + w) - room_x >= len(tag) * CHAR + 4:
                d.text(room_x + 2, ty + FONT, tag, fill="#fff")
        y += h + _GAP

    plot_bottom = top + plot_h
    _peak_line(d, storages, steps, step_w, top, plot_bottom, values)
    _time_axis(d, report.steps, steps, step_w, plot_bottom + 4)
    _table(d, report, numbers, in_place, values, plot_bottom + axis_h + 24)
    return d, title


def layout_svg(report: FunctionMemory, values: Mapping[sympy.Basic, int] | None = None) -> str:
    """The SVG text of ``report``'s layout at ``values`` (default: the report's binding)."""
    drawing, title = layout_drawing(report, values)
    return drawing.svg(title)


def _fit(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "~"


def _in_place(
    storages: Sequence[tuple[StorageLife, int]], values: Mapping[sympy.Basic, int]
) -> dict[int, TensorLife]:
    """By ``id``, each tensor made while another of its storage is still live, at the same
    offset: the one it is written over (a correct plan overlaps two live tensors only so: an
    output the planner put over the input its kernel reads for the last time)."""
    found: dict[int, TensorLife] = {}
    for st, _ in storages:
        ts = st.tensors
        for t in ts:
            for old in ts:
                if (
                    old is not t
                    and old.end != END
                    and old.start < t.start <= old.end
                    and evaluate(old.offset, values) == evaluate(t.offset, values)
                ):
                    found[id(t)] = old
    return found


def _peak_line(
    d: Drawing,
    storages: Sequence[tuple[StorageLife, int]],
    steps: int,
    step_w: float,
    top: float,
    bottom: float,
    values: Mapping[sympy.Basic, int],
) -> None:
    """A dashed line at the step with the most tensor bytes live, labelled above the plot."""
    live = [0] * steps
    for st, _ in storages:
        for t in st.tensors:
            stop = steps - 1 if t.end == END else t.end
            for s in range(t.start, stop + 1):
                live[s] += evaluate(t.nbytes, values)
    if not live:
        return
    peak = max(live)
    at = live.index(peak)
    x = _LEFT + (at + 0.5) * step_w
    d.shapes.append(
        f'<line x1="{x:.1f}" y1="{top - 6:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" '
        'stroke="#c00" stroke-dasharray="4 3"/>'
    )
    text = f"peak {peak:,} B of tensors live at step {at}"
    x_text = min(max(x - len(text) * CHAR / 2, _LEFT), _W - _RIGHT - len(text) * CHAR)
    d.text(x_text, top - 8, text, fill="#c00")


def _time_axis(d: Drawing, names: Sequence[str], steps: int, step_w: float, y: float) -> None:
    """A tick per step; labelled steps read downwards: ``3 exp+add``."""
    every = max(1, int((FONT + 2) // step_w) + 1)
    for s in range(steps):
        x = _LEFT + (s + 0.5) * step_w
        d.shapes.append(
            f'<line x1="{x:.1f}" y1="{y - 4:.1f}" x2="{x:.1f}" y2="{y + 2:.1f}" stroke="#666"/>'
        )
        if s % every == 0:
            what = names[s] if s < len(names) else ""
            d.text(x + FONT / 2 - 1, y + 6, _fit(f"{s} {what}".strip(), _STEP_CHARS), vertical=True)


def _table(
    d: Drawing,
    report: FunctionMemory,
    numbers: Mapping[int, tuple[TensorLife, int]],
    in_place: Mapping[int, TensorLife],
    values: Mapping[sympy.Basic, int],
    y: float,
) -> None:
    """One row per tensor: colour, number, name, bytes, offset, steps, in-place note."""
    d.text(10, y, "tensors (the numbers in the boxes):", font_weight="bold")
    for t, k in numbers.values():
        y += ROW
        color = _COLORS[(k - 1) % len(_COLORS)]
        d.shapes.append(
            f'<rect x="10" y="{y - FONT + 1:.1f}" width="{FONT:.0f}" height="{FONT - 1:.0f}" '
            f'fill="{color}" stroke="#333"/>'
        )
        nb, off = evaluate(t.nbytes, values), evaluate(t.offset, values)
        last = "end" if t.end == END else str(t.end)
        old = in_place.get(id(t))
        note = f", written in place over {report.name_of(old.var)}" if old is not None else ""
        row = (
            f"{k:>3} {report.name_of(t.var)}: {nb:,} B at offset {off:,} of "
            f"{report.name_of(t.storage)}, steps {t.start}-{last}{note}"
        )
        d.text(10 + FONT + 6, y, _fit(row, int((_W - 40 - FONT) / CHAR)))
