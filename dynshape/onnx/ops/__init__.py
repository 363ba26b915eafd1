"""The converters of ONNX ops, one module per family; importing this package registers them."""

from . import layout, shape  # noqa: F401
