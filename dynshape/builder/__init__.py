"""The model-building API: build IR with numpy-like Python, checked shape by shape.

    import dynshape as ds
    x = ds.tensor("x", ("batch", 512), "float32")
    w = ds.tensor("w", (512, 10), "float32")
    y = ds.softmax(ds.relu(x @ w), axis=-1)
    program = ds.build(y, inputs=[x, w], ranges={"batch": (1, 4096)})

Every call is type-checked when it is made (symbolic shapes through the op's shape function),
so a wrong one raises ``BuildError`` at the user's line; the IR nodes carry that line as their
span. See ``design/builder.md``.
"""

from . import ops as _ops
from .control import cond, while_loop
from .function import Tensor, TensorSpec, TracedFunction, function
from .ops import *  # noqa: F403  (one function per op: made from its declaration, or written out)
from .program import Program, build, tensor
from .value import Value

__all__ = [
    "Program",
    "Tensor",
    "TensorSpec",
    "TracedFunction",
    "Value",
    "build",
    "cond",
    "function",
    "tensor",
    "while_loop",
    *_ops.__all__,
]
