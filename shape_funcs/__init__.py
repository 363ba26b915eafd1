"""Shape functions: one per op, written once over dims, run symbolically and concretely.

``register_shape_func`` is the extension point (see ``registry.py`` for the calling convention)
and ``unregister_shape_func`` removes what it added; ``concrete_shapes`` is the run-time entry;
the compile-time mode lives in the compiler (``dynshape/inference/symbolic_context.py``). This
package imports neither sympy nor the rest of the project, so a deployed runtime needs numpy
only.

``shape_funcs.declarations`` holds every op's declaration (its data, written once), here because
both the IR and the VM read it and this package is below both (design/layering.md).
"""

from . import ops as _ops  # registers the shape functions of the built-in ops
from .context import CONCRETE, ConcreteContext, Dim, ShapeContext, UnknownValue
from .errors import ShapeError, ShapeFuncRegistryError
from .registry import (
    ShapeFunc,
    _record_builtins,
    concrete_shapes,
    describe_inputs,
    get_shape_func,
    has_shape_func,
    register_shape_func,
    registered_ops,
    unregister_shape_func,
)

_record_builtins()  # every shape function registered so far is one of shape_funcs/ops

__all__ = [
    "CONCRETE",
    "ConcreteContext",
    "Dim",
    "ShapeContext",
    "ShapeError",
    "ShapeFunc",
    "ShapeFuncRegistryError",
    "UnknownValue",
    "concrete_shapes",
    "describe_inputs",
    "get_shape_func",
    "has_shape_func",
    "register_shape_func",
    "registered_ops",
    "unregister_shape_func",
]

del _ops, _record_builtins
