"""Inputs of a module at a binding of its symbols: random arrays in the parameters' shapes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import sympy

import ir
from ir import Module, TensorType, TupleType, Type


def plain_symbols(module: Module, entry: str = "main") -> list[str]:
    """The symbols of ``@entry``'s parameters that are a whole dim somewhere (these are what a
    binding gives; a dim ``2*n`` needs no symbol of its own), in order of first appearance."""
    out: list[str] = []
    for p in module[entry].params:
        for leaf in _leaves(p.type_annotation or p.ty):
            for d in leaf.shape:
                name = d.name if isinstance(d, sympy.Symbol) and not ir.is_anonymous(d) else ""
                if name and name not in out:
                    out.append(name)
    return out


def _leaves(ty: Type | None) -> list[TensorType]:
    if isinstance(ty, TensorType):
        return [ty]
    if isinstance(ty, TupleType):
        return [leaf for f in ty.fields for leaf in _leaves(f)]
    return []


def shape_at(ty: TensorType, binding: Mapping[str, int], what: str) -> tuple[int, ...]:
    """The concrete shape of ``ty`` under ``binding``; ValueError naming an unbound symbol."""
    dims = []
    for axis, d in enumerate(ty.shape):
        if isinstance(d, int):
            dims.append(d)
            continue
        missing = sorted(
            str(s) for s in d.free_symbols if str(s) not in binding or ir.is_anonymous(s)
        )
        if missing:
            raise ValueError(
                f"{what}: axis {axis} is {d}; the binding gives no {', '.join(missing)}"
            )
        value = d.xreplace({s: binding[str(s)] for s in d.free_symbols})
        dims.append(int(value))
    return tuple(dims)


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Normal floats, small signed ints in [-5, 5], uint8 in [0, 10), fair bools."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind == "u":
        return rng.integers(0, 10, shape).astype(dt)
    return rng.integers(-5, 6, shape).astype(dt)


def random_inputs(
    module: Module, binding: Mapping[str, int], rng: np.random.Generator, entry: str = "main"
) -> list[Any]:
    """Random arguments of ``@entry`` in the shapes that ``binding`` gives its parameters."""

    def value(ty: Type | None, what: str) -> Any:
        if isinstance(ty, TupleType):
            return tuple(value(f, f"{what}.{i}") for i, f in enumerate(ty.fields))
        if not isinstance(ty, TensorType):
            raise ValueError(f"{what}: cannot generate a value of type {ty}")
        return random_array(rng, shape_at(ty, binding, what), ty.dtype)

    return [value(p.type_annotation or p.ty, f"%{p.name_hint}") for p in module[entry].params]
