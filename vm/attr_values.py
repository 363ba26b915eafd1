"""Attribute values computed at run time: ``strided_slice(x, begin=[k])`` on the VM.

A dim entry of an attribute (``begin=[k]``, ``end=[n // 2]``) has no value when the program is
compiled. Most kernels do not need one (``reshape`` copies into its output's shape, ``split``
recovers its cut points from its parts' sizes), and the compiler writes ``None`` there. A kernel
that does (where a slice starts is not in its output's shape; ``OpDecl.dim_values`` names such
attributes) gets the values from its caller at every call, as a fused kernel gets a scratch
shape: the kernel entry lists the entries filled at run time (``OpKernel.runtime_attrs``, pairs
``(attribute, index)``), and its ``invoke`` passes one more input, last, holding a tuple of ints
in that order (computed by the function's shape program from the symbols bound at entry).

The bound kernel fills the entries and calls the op's kernel factory for those values; the
kernels of the last few distinct values are kept, so a loop calling the slice with the same
values builds nothing. The int-only path does not change: an entry without ``runtime_attrs``
passes no extra input and is bound once, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import FormatError, KernelError
from .kernels.registry import Kernel, KernelFactory

#: Most entries one kernel fills at run time (an attribute list is at most this long anyway).
MAX_RUNTIME_ATTRS = 1 << 12
#: Kernels kept per entry, one per distinct tuple of values (cleared when full).
CACHED_KERNELS = 16


def check_runtime_attrs(slots: Any, attrs: Mapping[str, Any], num_inputs: int, what: str) -> None:
    """Raise FormatError unless ``slots`` are distinct ``(attribute, index)`` pairs naming
    ``None`` entries of list attributes in ``attrs``, with an input to pass their values in."""
    if not isinstance(slots, tuple) or len(slots) > MAX_RUNTIME_ATTRS:
        raise FormatError(f"{what}: runtime_attrs must be a list of [attribute, index] pairs")
    seen: set[tuple[str, int]] = set()
    for slot in slots:
        if (
            not isinstance(slot, tuple)
            or len(slot) != 2
            or not isinstance(slot[0], str)
            or type(slot[1]) is not int
        ):
            raise FormatError(f"{what}: bad runtime_attrs entry {slot!r:.80}")
        name, i = slot
        value = attrs.get(name)
        if not isinstance(value, tuple) or not 0 <= i < len(value) or value[i] is not None:
            raise FormatError(
                f"{what}: runtime_attrs names {name}[{i}], which is not a dim entry "
                "(None) of a list attribute"
            )
        if slot in seen:
            raise FormatError(f"{what}: runtime_attrs names {name}[{i}] twice")
        seen.add(slot)
    if slots and num_inputs < 1:
        raise FormatError(
            f"{what}: fills attributes at run time but passes no input holding their values"
        )


def bind_runtime_attrs(
    factory: KernelFactory,
    op: str,
    attrs: Mapping[str, Any],
    slots: tuple[tuple[str, int], ...],
    num_inputs: int,
) -> Kernel:
    """The kernel ``run(*inputs, values, *outputs)`` of an entry filling ``slots`` of ``attrs``
    with ``values`` (input ``num_inputs - 1``), before it calls ``op``'s kernel."""
    at = num_inputs - 1
    lists = {name: list(attrs[name]) for name, _ in slots}
    cache: dict[Any, Kernel] = {}

    def kernel_for(values: Any) -> Kernel:
        if (
            type(values) is not tuple
            or len(values) != len(slots)
            or not all(type(v) is int for v in values)
        ):
            raise KernelError(
                f"{op}: the attribute values passed are {values!r:.80}, expected a tuple of "
                f"{len(slots)} ints (for {', '.join(f'{n}[{i}]' for n, i in slots)})"
            )
        filled = {name: list(v) for name, v in lists.items()}
        for (name, i), v in zip(slots, values, strict=True):
            filled[name][i] = v
        kernel = factory({**attrs, **{name: tuple(v) for name, v in filled.items()}})
        if len(cache) >= CACHED_KERNELS:
            cache.clear()
        cache[values] = kernel
        return kernel

    if at == 1:  # one tensor input (a slice's): no argument tuple sliced per call

        def run_one(x: Any, values: Any, *outputs: Any) -> None:
            try:
                kernel = cache[values]
            except (KeyError, TypeError):
                kernel = kernel_for(values)
            kernel(x, *outputs)

        run_one.__doc__ = factory.__doc__
        return run_one

    def run(*args: Any) -> None:
        values = args[at]
        try:
            kernel = cache[values]
        except (KeyError, TypeError):  # new values, or not a tuple of ints (kernel_for says)
            kernel = kernel_for(values)
        kernel(*args[:at], *args[at + 1 :])

    run.__doc__ = factory.__doc__
    return run
