"""numpy kernels, one per op of the catalogue, registered by op name (see ``registry``).

Importing this package registers every built-in kernel.
"""

from . import (
    attention,
    conv,
    conv3d,
    create,
    dynamic,
    elementwise,
    erf,
    image,
    nn,
    recurrent,
    reduce,
    silu,
    transform,
    update,
)
from . import registry as _registry
from .registry import (
    Kernel,
    KernelFactory,
    get_kernel_factory,
    has_kernel,
    register_kernel,
    register_table,
    registered_kernels,
    unregister_kernel,
)

_registry.mark_builtins()


__all__ = [
    "Kernel",
    "KernelFactory",
    "attention",
    "conv",
    "conv3d",
    "create",
    "dynamic",
    "elementwise",
    "erf",
    "get_kernel_factory",
    "has_kernel",
    "image",
    "nn",
    "recurrent",
    "reduce",
    "register_kernel",
    "register_table",
    "registered_kernels",
    "silu",
    "transform",
    "unregister_kernel",
    "update",
]
