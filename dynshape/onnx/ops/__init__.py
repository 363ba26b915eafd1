"""The converters of ONNX ops, one module per family; importing this package registers them."""

from . import (
    elementwise,  # noqa: F401
    shape,  # noqa: F401
)
