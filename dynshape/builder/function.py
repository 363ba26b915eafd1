"""``@ds.function``: build a program by tracing a Python function with annotated inputs.

    @ds.function(ranges={"n": (1, 1024)})
    def f(x: ds.Tensor[("n", 4), "float32"], b: ds.Tensor[(4,), "float32"]):
        return ds.relu(x + b)

    print(f.program)          # the IR text (a ds.Program, an ir.Module)
    f(np_x, np_b)             # compiles once, runs on the VM
    g(f(x, b))                # inside another trace: inlines f's body

The function is traced when it is decorated, so shape errors are raised at once, at the line
of the function body that is wrong.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .location import fail
from .program import Program, build, tensor
from .value import Value


@dataclass(frozen=True)
class TensorSpec:
    """The annotation ``ds.Tensor[shape, dtype]``: an input's shape and dtype."""

    shape: tuple[Any, ...]
    """Dims as ``ds.tensor`` takes them (ints, names, ``"?"``, expressions)."""
    dtype: str = "float32"
    """The element type."""


class Tensor:
    """Annotation for traced inputs: ``ds.Tensor[("n", 4), "float32"]`` (dtype optional)."""

    def __class_getitem__(cls, item: Any) -> TensorSpec:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], str):
            shape, dtype = item
        else:
            shape, dtype = item, "float32"
        if not isinstance(shape, (tuple, list)):
            shape = (shape,)
        return TensorSpec(tuple(shape), dtype)


class TracedFunction:
    """A Python function traced into a program (see the module docstring)."""

    def __init__(
        self, fn: Callable[..., Any], ranges: Mapping[str, tuple[int, int | None]]
    ) -> None:
        self.fn = fn
        """The Python function."""
        self.__name__ = getattr(fn, "__name__", "function")
        self.__doc__ = fn.__doc__
        specs = _specs(fn)
        inputs = [tensor(name, spec.shape, spec.dtype) for name, spec in specs]
        self.program: Program = build(fn(*inputs), inputs, ranges=ranges)
        """The built program."""
        self._executable: Any = None

    @property
    def module(self) -> Program:
        """The built program (an ``ir.Module``)."""
        return self.program

    def compile(self) -> Any:
        """The VM executable (compiled once, then cached)."""
        if self._executable is None:
            self._executable = self.program.compile()
        return self._executable

    def __call__(self, *args: Any) -> Any:
        """With Values (inside another trace): the traced body, inlined. With arrays: run it."""
        expected = len(self.program.inputs)
        if len(args) != expected:
            names = ", ".join(self.program.inputs)
            raise fail(f"{self.__name__} takes {expected} inputs ({names}), got {len(args)}")
        if any(isinstance(a, Value) for a in args):
            return self.fn(*args)
        from vm import VirtualMachine

        return VirtualMachine(self.compile()).run(*args)

    def __str__(self) -> str:
        return str(self.program)


def function(
    fn: Callable[..., Any] | None = None,
    *,
    ranges: Mapping[str, tuple[int, int | None]] | None = None,
) -> Any:
    """Decorator tracing ``fn`` into a program; ``@ds.function`` or ``@ds.function(ranges=...)``."""

    def decorate(f: Callable[..., Any]) -> TracedFunction:
        return TracedFunction(f, ranges or {})

    return decorate if fn is None else decorate(fn)


def _specs(fn: Callable[..., Any]) -> Sequence[tuple[str, TensorSpec]]:
    annotations = inspect.get_annotations(fn, eval_str=True)
    out = []
    for name, p in inspect.signature(fn).parameters.items():
        spec = annotations.get(name)
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or not isinstance(
            spec, TensorSpec
        ):
            raise fail(
                f"@ds.function: parameter {name!r} of {fn.__name__} needs an annotation "
                'ds.Tensor[shape, dtype], e.g. ds.Tensor[("n", 4), "float32"]'
            )
        out.append((name, spec))
    return out
