"""dynshape: compile tensor programs with symbolic dimensions once, run them on any shapes.

The public face of the project. ``ir`` holds the language, ``shape_funcs`` the shape functions,
``vm`` the runtime; this package holds the compiler passes, the public API and the CLI.

    import dynshape
    exe = dynshape.compile(text_or_module)      # a vm.Executable
    out = dynshape.VirtualMachine(exe).run(x, y)
    ids = dynshape.generate("decoder.onnx", [[1, 2, 3]], 32)   # a decoder with its KV cache
"""

from dynshape_errors import DynShapeError
from ir import IRError, Module, ParseError, parse
from shape_funcs import ShapeError
from vm import Executable, VirtualMachine, VMError

from . import builder as _builder
from .builder import *  # noqa: F403  (the model-building API: ds.tensor, ds.relu, ...)
from .custom_op import register_op, unregister_op
from .errors import (
    BuildError,
    CompileError,
    CompileTimeoutError,
    GenerateError,
    ModelImportError,
    SessionError,
)
from .frontend import compile
from .generate_loop import generate
from .passes.plan_memory import PlanMemory
from .pipeline import STAGES, CompileReport, stages
from .session import InferenceSession, ModelMetadata, NodeArg

__all__ = [
    "STAGES",
    "BuildError",
    "CompileError",
    "CompileReport",
    "CompileTimeoutError",
    "InferenceSession",
    "ModelImportError",
    "ModelMetadata",
    "NodeArg",
    "DynShapeError",
    "Executable",
    "GenerateError",
    "IRError",
    "Module",
    "ParseError",
    "PlanMemory",
    "SessionError",
    "ShapeError",
    "VMError",
    "VirtualMachine",
    "compile",
    "generate",
    "parse",
    "register_op",
    "stages",
    "unregister_op",
    *_builder.__all__,
]
__version__ = "0.1.0"
