"""The op catalogue. Importing this package registers every built-in op."""

from . import create, dynamic, elementwise, memory, nn, reduce, transform

__all__ = ["create", "dynamic", "elementwise", "memory", "nn", "reduce", "transform"]
