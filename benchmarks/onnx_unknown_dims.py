"""How many dims of a model's node outputs dynshape leaves unknown, against onnxruntime's own
symbolic shape inference (``onnxruntime.tools.symbolic_shape_infer``, sympy-based too), on the
same models (issue 29, item 5: dynshape may never know less).

    python benchmarks/onnx_unknown_dims.py              # the model families + the older models
    python benchmarks/onnx_unknown_dims.py --dir DIR    # every *.onnx in DIR (real exports)
    python benchmarks/onnx_unknown_dims.py --quick      # CI smoke: two families

A dim counts as *unknown* when it cannot be written in the model's input dims: in dynshape a
dim with a ``?`` (a size known at run time only: data-dependent, or not derived); in
onnxruntime's inference a dim with no value and no name, or whose name (parsed as a sympy
expression) uses a symbol that no input dim is (its ``unk__N`` and per-node data-dependent
names). Both sides count the named node outputs that both give a shape for (a tensor whose
rank onnxruntime does not know counts each of dynshape's dims as unknown to it). The last
column is met when dynshape's count is at most onnxruntime's.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import sympy

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "exported"))

import onnx  # noqa: E402
from families import FAMILIES  # noqa: E402
from onnx_models import cnn, detection, encoder  # noqa: E402

import dynshape.onnx  # noqa: E402
import ir  # noqa: E402


def input_dim_names(model: onnx.ModelProto) -> set[str]:
    """The ``dim_param`` names of the graph's inputs."""
    return {
        d.dim_param
        for i in model.graph.input
        for d in i.type.tensor_type.shape.dim
        if d.WhichOneof("value") == "dim_param"
    }


def ort_shapes(model: onnx.ModelProto) -> dict[str, list[Any] | None]:
    """onnxruntime's inferred dims of every value: ints, names, or None (nothing); a value
    of unknown rank maps to None."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    inferred = SymbolicShapeInference.infer_shapes(model, auto_merge=True)
    graph = inferred.graph
    shapes: dict[str, list[Any] | None] = {}
    for vi in [*graph.value_info, *graph.output]:
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            shapes[vi.name] = None
            continue
        shapes[vi.name] = [
            d.dim_value
            if d.WhichOneof("value") == "dim_value"
            else (d.dim_param if d.WhichOneof("value") == "dim_param" else None)
            for d in t.shape.dim
        ]
    return shapes


def ort_unknown(dim: Any, names: set[str]) -> bool:
    """Whether onnxruntime's dim cannot be written in the input dims."""
    if isinstance(dim, int):
        return False
    if not dim:
        return True
    # every identifier that is not called a symbol: sympify alone reads N, S, E, I, Q as
    # sympy's own names; floor(...), Max(...) stay functions
    local = {n: sympy.Symbol(n) for n in re.findall(r"([A-Za-z_]\w*)(?!\w|\s*\()", dim)}
    try:
        free = {str(s) for s in sympy.parse_expr(dim, local_dict=local).free_symbols}
    except (sympy.SympifyError, SyntaxError, TypeError, ValueError):
        return True
    return not free <= names


def ours_unknown(dim: Any) -> bool:
    """Whether dynshape's dim has a ``?`` in it."""
    return not isinstance(dim, int) and any(ir.is_anonymous(s) for s in ir.free_symbols(dim))


class OrtFailed(Exception):
    """onnxruntime's symbolic shape inference failed on the model: nothing to compare with."""


def count(model: onnx.ModelProto) -> tuple[int, int, int]:
    """(node outputs compared, unknown dims of dynshape, unknown dims of onnxruntime)."""
    ours = dynshape.onnx.import_model(model).stats.shapes
    try:
        theirs = ort_shapes(model)
    except Exception as e:
        raise OrtFailed(f"{type(e).__name__}: {e}") from None
    names = input_dim_names(model)
    compared = mine = ort = 0
    for name, shape in ours.items():
        if name not in theirs:
            continue
        compared += 1
        mine += sum(ours_unknown(d) for d in shape)
        other = theirs[name]
        if other is None or len(other) != len(shape):
            ort += len(shape)
        else:
            ort += sum(ort_unknown(d, names) for d in other)
    return compared, mine, ort


def models(directory: Path | None, quick: bool) -> Iterable[tuple[str, onnx.ModelProto]]:
    """The models to compare: a folder's, or the families and the older example models."""
    if directory is not None:
        for path in sorted(directory.glob("*.onnx")):
            yield path.stem, onnx.load(str(path))
        return
    for name, family in FAMILIES.items():
        if quick and name not in ("bert_encoder", "resnet18"):
            continue
        yield name, family.build()
    if not quick:
        yield "encoder", encoder()
        yield "cnn", cnn()
        yield "detection", detection()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, help="compare the *.onnx files of this folder")
    parser.add_argument("--quick", action="store_true", help="CI smoke run: two families")
    args = parser.parse_args(argv)
    print(f"{'model':<28}{'outputs':>9}{'? dynshape':>12}{'? onnxruntime':>15}  target")
    missed = 0
    for name, model in models(args.dir, args.quick):
        try:
            compared, mine, ort = count(model)
        except OrtFailed as e:  # no comparison: not dynshape's miss
            print(f"{name:<28}  onnxruntime's inference failed: {str(e).splitlines()[0][:70]}")
            continue
        except Exception as e:  # dynshape cannot import it: a miss
            print(f"{name:<28}  failed: {type(e).__name__}: {str(e).splitlines()[0][:90]}")
            missed += 1
            continue
        ok = mine <= ort
        missed += not ok
        print(f"{name:<28}{compared:>9}{mine:>12}{ort:>15}  {'met' if ok else 'MISSED'}")
    print(f"\n{'all met' if not missed else f'{missed} MISSED'}: dynshape knows at least as much")
    return 0


if __name__ == "__main__":
    sys.exit(main())
