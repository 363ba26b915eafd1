"""The converters of ONNX ops, one module per family; importing this package registers them."""

from . import control, elementwise, image, indexing, layout, nn, recurrent, reduce, shape  # noqa: F401
