"""numpy kernels, one per op of the catalogue, registered by op name (see ``registry``).

Importing this package registers every built-in kernel.
"""

from . import create, dynamic, elementwise, nn, reduce, transform
from . import registry as _registry
from .registry import (
    Kernel,
    KernelFactory,
    get_kernel_factory,
    has_kernel,
    register_kernel,
    register_table,
    registered_kernels,
)

_registry.mark_builtins()


def unregister_kernel(op_name: str) -> None:
    """The lenient form of ``vm.unregister_kernel``: remove ``op_name``'s kernel (and schema) if
    it has one, else do nothing.

    Kept under this name because ``dynshape.unregister_op`` calls it to clean up ops that may
    never have been registered (a failed ``register_op``, a deselected test); new code should call
    ``vm.unregister_kernel``, which says when there is nothing to unregister.
    """
    _registry.unregister_kernel(op_name, missing_ok=True)


__all__ = [
    "Kernel",
    "KernelFactory",
    "create",
    "dynamic",
    "elementwise",
    "get_kernel_factory",
    "has_kernel",
    "nn",
    "reduce",
    "register_kernel",
    "register_table",
    "registered_kernels",
    "transform",
    "unregister_kernel",
]
