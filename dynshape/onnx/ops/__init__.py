"""The converters of ONNX ops, one module per family; importing this package registers them."""

from . import nn, shape  # noqa: F401
