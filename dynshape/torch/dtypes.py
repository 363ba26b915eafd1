"""torch dtypes as the IR's dtype names, and torch tensors as read-only numpy arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import Unsupported

#: ``str(torch dtype)`` -> the IR's name (the dtypes dynshape computes with).
DTYPES = {
    "torch.float32": "float32",
    "torch.float64": "float64",
    "torch.float16": "float16",
    "torch.int64": "int64",
    "torch.int32": "int32",
    "torch.int16": "int16",
    "torch.int8": "int8",
    "torch.uint8": "uint8",
    "torch.bool": "bool",
}


def ir_dtype(dtype: Any) -> str:
    """The IR dtype name of a torch dtype (an ``Unsupported`` naming it otherwise)."""
    name = DTYPES.get(str(dtype))
    if name is None:
        raise Unsupported(f"dtype {dtype} (supported: {', '.join(sorted(DTYPES))})")
    return name


def array(tensor: Any) -> np.ndarray:
    """The contents of a (real) torch tensor as a numpy array sharing its memory where it can;
    ``ir.Constant`` makes the one copy the program keeps."""
    ir_dtype(tensor.dtype)
    out: np.ndarray = tensor.detach().cpu().contiguous().numpy()
    return out
