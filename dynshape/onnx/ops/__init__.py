"""The converters of ONNX ops, one module per family; importing this package registers them."""

from . import (  # noqa: F401
    control,
    detection,
    elementwise,
    image,
    indexing,
    layout,
    nn,
    recurrent,
    reduce,
    shape,
)
