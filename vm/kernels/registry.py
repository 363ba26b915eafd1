"""The kernel registry: one kernel factory per op name.

Calling convention (the lowering targets it; see design/vm.md):

- A kernel is registered as a **factory**: ``factory(attrs) -> kernel``. ``attrs`` is a plain
  dict of the op's attributes, normalised as in the op catalogue (ints, floats, bools, strings,
  None, tuples of ints, tuples of pairs), with every default filled in. The factory runs once,
  when the VM decodes the executable, so attribute parsing is off the hot path.
- The kernel is called as ``kernel(*inputs, *outputs)``: tensors are numpy arrays, a tuple
  operand (``concatenate``'s) is one Python tuple of arrays, and every output is a pre-allocated
  C-contiguous array of the result's shape and dtype that the kernel fills in place. It returns
  nothing and never allocates its result (it may use small temporaries where numpy has no
  ``out=``; its docstring says so).

A numpy ufunc is a valid kernel as it is (``np.add(a, b, out)``), so trivial families cost no
Python frame at all: ``register_table({"add": np.add, ...})``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..errors import KernelRegistryError
from .attr_schema import unregister_attr_schema

#: A kernel: ``kernel(*inputs, *outputs) -> None``, writing the outputs in place.
Kernel = Callable[..., Any]
#: A kernel factory: ``factory(attrs) -> Kernel``, called once per kernel-table entry.
KernelFactory = Callable[[Mapping[str, Any]], Kernel]
F = TypeVar("F", bound=KernelFactory)

_REGISTRY: dict[str, KernelFactory] = {}
#: The ops registered by ``vm.kernels`` itself (``mark_builtins``).
_BUILTINS: frozenset[str] = frozenset()


def register_kernel(op_name: str) -> Callable[[F], F]:
    """Decorator registering the kernel factory of ``op_name``. Registering twice raises.

    >>> @register_kernel("my.scale")
    ... def scale(attrs):
    ...     factor = attrs["factor"]
    ...     return lambda x, out: np.multiply(x, factor, out=out)
    """

    def decorate(factory: F) -> F:
        if op_name in _REGISTRY:
            raise KernelRegistryError(f"op {op_name!r} already has a kernel")
        _REGISTRY[op_name] = factory
        return factory

    return decorate


def register_table(table: Mapping[str, Kernel]) -> None:
    """Register attribute-free kernels, one per op, as ``{op_name: kernel}``."""
    for name, kernel in table.items():
        register_kernel(name)(_constant_factory(kernel))


def _constant_factory(kernel: Kernel) -> KernelFactory:
    def factory(attrs: Mapping[str, Any]) -> Kernel:
        return kernel

    factory.__doc__ = getattr(kernel, "__doc__", None)
    return factory


def get_kernel_factory(op_name: str) -> KernelFactory:
    """The factory of ``op_name``; raises KernelRegistryError naming the op if none."""
    try:
        return _REGISTRY[op_name]
    except KeyError:
        raise KernelRegistryError(f"op {op_name!r} has no registered kernel") from None


def has_kernel(op_name: str) -> bool:
    """True if ``op_name`` has a kernel in this process."""
    return op_name in _REGISTRY


def registered_kernels() -> list[str]:
    """Names of every op with a kernel, sorted."""
    return sorted(_REGISTRY)


def unregister_kernel(op_name: str, *, missing_ok: bool = False) -> KernelFactory | None:
    """Undo ``register_kernel(op_name)``: remove the op's kernel factory, and the attribute
    schema registered for it (``attr_schema.register_attr_schema``) if any, so that the name can
    be registered again from scratch. Returns the factory (``register_kernel(op_name)(factory)``
    puts it back).

    Raises KernelRegistryError for an op without a kernel (unless ``missing_ok``: then returns
    None), and for a built-in op, whose kernel every executable using the op needs.
    """
    if op_name in _BUILTINS:
        raise KernelRegistryError(
            f"op {op_name!r} has a built-in kernel, which cannot be unregistered "
            "(executables that use it would no longer load)"
        )
    factory = _REGISTRY.pop(op_name, None)
    if factory is None and not missing_ok:
        close = difflib.get_close_matches(op_name, [n for n in _REGISTRY if n not in _BUILTINS])
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise KernelRegistryError(
            f"op {op_name!r} has no registered kernel: nothing to unregister{hint}"
        )
    # Custom ops register their schema beside their kernel; a schema left behind would check
    # the attributes of whatever kernel is registered under the name next.
    unregister_attr_schema(op_name)
    return factory


def mark_builtins() -> None:
    """Record every op registered so far as built in (``vm/kernels/__init__.py`` calls it once
    its families are imported): their kernels cannot be unregistered."""
    global _BUILTINS
    _BUILTINS = frozenset(_REGISTRY)
