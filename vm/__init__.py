"""dynshape's runtime: a bytecode VM whose kernels are numpy.

Imports numpy, the standard library, ``shape_funcs`` and ``dynshape_errors`` only (never sympy,
``ir`` or ``dynshape``): a deployed model needs numpy alone. See design/vm.md.
"""

from . import kernels
from .assembler import Assembler, FunctionBuilder, Label, tensor, tuple_type
from .backend import BACKENDS, Backend, BackendWrapper, ClosureBackend
from .errors import (
    AssemblerError,
    DeadTensorError,
    DonatedArrayError,
    FormatError,
    KernelError,
    KernelRegistryError,
    MemoryLimitError,
    OutOfBoundsError,
    RunTimeShapeError,
    StepLimitError,
    UnwrittenOutputError,
    VMArgumentError,
    VMError,
)
from .executable import (
    Executable,
    Function,
    OpKernel,
    Param,
    ShapeFuncEntry,
    TensorSpec,
    TupleSpec,
)
from .fused import FusedKernel, FusedStep, Ref, Scratch
from .interpreter import VirtualMachine
from .isa import Instruction, Op, Reg
from .kernels.registry import (
    has_kernel,
    register_kernel,
    register_table,
    registered_kernels,
    unregister_kernel,
)
from .memory import Allocator, MemoryStats, NaiveAllocator, PooledAllocator, Storage
from .memory.capacity import with_room
from .profiler import Profiler, ProfilingBackend
from .sanitizer import SanitizingBackend
from .shape_program import ShapeProgram, ShapeProgramBuilder

__all__ = [
    "BACKENDS",
    "Allocator",
    "Assembler",
    "AssemblerError",
    "Backend",
    "BackendWrapper",
    "ClosureBackend",
    "DeadTensorError",
    "DonatedArrayError",
    "Executable",
    "FormatError",
    "Function",
    "FunctionBuilder",
    "FusedKernel",
    "FusedStep",
    "Instruction",
    "KernelError",
    "KernelRegistryError",
    "Label",
    "MemoryLimitError",
    "MemoryStats",
    "NaiveAllocator",
    "Op",
    "OpKernel",
    "OutOfBoundsError",
    "Param",
    "PooledAllocator",
    "Profiler",
    "ProfilingBackend",
    "Ref",
    "Reg",
    "RunTimeShapeError",
    "SanitizingBackend",
    "Scratch",
    "ShapeFuncEntry",
    "ShapeProgram",
    "ShapeProgramBuilder",
    "StepLimitError",
    "Storage",
    "TensorSpec",
    "TupleSpec",
    "UnwrittenOutputError",
    "VMArgumentError",
    "VMError",
    "VirtualMachine",
    "has_kernel",
    "kernels",
    "register_kernel",
    "register_table",
    "registered_kernels",
    "tensor",
    "tuple_type",
    "unregister_kernel",
    "with_room",
]
