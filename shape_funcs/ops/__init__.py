"""The shape functions of the built-in ops. Importing this package registers all of them."""

from . import create, dynamic, elementwise, nn, reduce, transform

__all__ = ["create", "dynamic", "elementwise", "nn", "reduce", "transform"]
