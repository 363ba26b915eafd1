"""Detection post-processing with data-dependent sizes:

    keep = argwhere(scores > THRESHOLD)          # (count, 1): count depends on the data
    kept_scores, kept_boxes = take(scores, keep), take(boxes, keep)
    top_scores, order = topk(kept_scores, k=min(TOP_K, count))
    outputs: top_scores, take(kept_boxes, order), the original indices take(keep, order)

on scores (n,) and boxes (n, 4). ``topk`` takes a static ``k``, which may exceed ``count`` (it
may even be 0), so the script uses ``dyn.topk``, whose ``k`` is a scalar tensor computed in the
program: ``k = minimum(shape_of(kept_scores)[0], TOP_K)``. The outputs have ``k`` rows: fewer
than ``TOP_K`` when fewer boxes pass the threshold, none when none do. Ties are broken by the
lower index (numpy's stable sort), and the reference does the same.

    python examples/detection_postprocess.py [--small]
"""

from __future__ import annotations

import sys

import numpy as np
from example_runner import run_example

import dynshape as ds

THRESHOLD, TOP_K = 0.5, 100
SIZES = [0, 10, 1000, 100_000]  # n, the number of candidate boxes
SMALL_SIZES = [0, 7, 300]
RTOL, ATOL = 1e-6, 0.0


SIZE_LABEL = "n"
REPORT_NOTE = " (data-dependent ? sizes evaluated at 3)"


def build_model() -> ds.Program:
    """No parameters; the data: ``run(scores, boxes)``."""
    scores = ds.tensor("scores", ("n",), "float32")
    boxes = ds.tensor("boxes", ("n", 4), "float32")
    keep = ds.argwhere(scores > THRESHOLD).reshape(-1)  # (count,) int64
    kept_scores = ds.take(scores, keep, axis=0)
    kept_boxes = ds.take(boxes, keep, axis=0)
    k = ds.minimum(ds.shape_of(kept_scores)[0], TOP_K)  # scalar int64: min(count, TOP_K)
    top_scores, order = ds.dyn_topk(kept_scores, k)
    top_boxes = ds.take(kept_boxes, order, axis=0)
    top_index = ds.take(keep, order, axis=0)
    return ds.build((top_scores, top_boxes, top_index), [scores, boxes], ranges={"n": (0, 10**6)})


def numpy_reference(scores, boxes):
    keep = np.flatnonzero(scores > THRESHOLD)
    order = np.argsort(-scores[keep], kind="stable")[:TOP_K]
    return scores[keep][order], boxes[keep][order], keep[order]


def make_params(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    return ()


def make_inputs(rng: np.random.Generator, size: int) -> tuple[np.ndarray, ...]:
    scores = rng.random(size).astype(np.float32)
    corners = rng.random((size, 2)).astype(np.float32) * 100
    sides = rng.random((size, 2)).astype(np.float32) * 20
    return scores, np.concatenate([corners, corners + sides], axis=1)


def bindings(size: int) -> dict[str, int]:
    """The symbol values at ``size`` (for the memory report; ``?`` sizes take the default 3)."""
    return {"n": size}


def main(argv: list[str] | None = None) -> int:
    """Compile once, run at every size against numpy, print the memory report."""
    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
