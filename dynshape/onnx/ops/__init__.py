"""The converters of ONNX ops, one module per family; importing this package registers them."""

from . import elementwise, indexing, layout, nn, reduce, shape  # noqa: F401
