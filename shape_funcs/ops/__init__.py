"""The shape functions of the built-in ops. Importing this package registers all of them."""

from . import create, dynamic, elementwise, image, nn, reduce, transform

__all__ = ["create", "dynamic", "elementwise", "image", "nn", "reduce", "transform"]
