"""The converters of ONNX ops, one module per family; importing this package registers them."""

from . import (  # noqa: F401
    attention,
    composite,
    control,
    detection,
    elementwise,
    image,
    indexing,
    layout,
    loss,
    misc,
    nn,
    quantize,
    recurrent,
    reduce,
    sequence,
    shape,
    signal,
    sorting,
    spatial,
)
