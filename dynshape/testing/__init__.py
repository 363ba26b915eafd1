"""Test utilities for dynamic-shape programs: a reference interpreter, differential checking of
the compiler's stages, assertion helpers and Hypothesis strategies.

    from dynshape.testing import interpret, check_stages, assert_program

``interpret`` runs any module (any stage) with plain numpy; ``check_stages`` interprets every
stage of the pipeline and runs the VM, naming the first stage whose results differ;
``assert_program`` checks a program against a numpy reference over shape bindings;
``check_op`` checks a registered op's shape function (both modes), dtype rule and kernel
against each other on drawn inputs. The
Hypothesis strategies are in ``dynshape.testing.strategies`` (Hypothesis is needed only there).
"""

from . import memory_ops  # noqa: F401  (registers the memory dialect with the interpreter)
from .assertions import assert_program
from .check_op import check_op
from .differential import StageMismatch, check_stages, compile_checked
from .interpret import InterpreterError, interpret
from .op_checks import OpCheckError

__all__ = [
    "InterpreterError",
    "OpCheckError",
    "StageMismatch",
    "assert_program",
    "check_op",
    "check_stages",
    "compile_checked",
    "interpret",
]
