"""The dynshape IR: types with symbolic dims, expressions, modules, ops and the text format.

This package depends on sympy and on nothing else of the project (see ``design/layering.md``).
"""

from . import dim_eval as dim_eval
from . import ops as _ops  # registers the op catalogue
from .attrs import AttrDef, Attrs
from .dims import (
    Dim,
    bounds,
    check_dim,
    compare,
    dim_max,
    dim_min,
    free_symbols,
    fresh,
    is_anonymous,
    is_static,
    known_equal,
    simplify,
    simplify_under,
    sym,
    upper_bound,
)
from .dtypes import DTYPES, ITEMSIZE, StorageDTypeError, is_extended
from .errors import IRError, ParseError
from .expr import (
    Binding,
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Tuple,
    TupleGetItem,
    Var,
    call,
    const,
    function,
    let_chain,
    nest_lets,
    tuple_of,
)
from .function_attrs import Dest, FunctionAttrs, Step
from .functor import ExprFunctor, ExprMutator, ExprVisitor
from .module import Module
from .nesting import MAX_NESTING, check_nesting, find_too_deep, nesting_depth, too_deep_message
from .op import (
    OpDef,
    Operand,
    OpPattern,
    all_ops,
    get_op,
    has_op,
    is_builtin_op,
    register_op,
    tensor_ops,
    unregister_op,
)
from .ranges import Ranges
from .rebind import fresh_binders
from .span import Span
from .steps import StepsError, op_calls, step_calls
from .structural import structurally_equal
from .text import parse, parse_type
from .types import (
    FuncType,
    StorageType,
    TensorType,
    TupleType,
    Type,
    plain_symbols,
    scalar,
    tensor_leaves,
    type_symbols,
)

__all__ = [
    "DTYPES",
    "ITEMSIZE",
    "MAX_NESTING",
    "AttrDef",
    "Attrs",
    "Binding",
    "Call",
    "Constant",
    "Dest",
    "Dim",
    "Expr",
    "ExprFunctor",
    "ExprMutator",
    "ExprVisitor",
    "FuncType",
    "Function",
    "FunctionAttrs",
    "GlobalVar",
    "IRError",
    "If",
    "Let",
    "Module",
    "OpDef",
    "OpPattern",
    "Operand",
    "ParseError",
    "Ranges",
    "Span",
    "Step",
    "StepsError",
    "StorageDTypeError",
    "StorageType",
    "TensorType",
    "Tuple",
    "TupleGetItem",
    "TupleType",
    "Type",
    "Var",
    "all_ops",
    "bounds",
    "call",
    "check_dim",
    "check_nesting",
    "compare",
    "const",
    "dim_max",
    "dim_min",
    "find_too_deep",
    "free_symbols",
    "fresh",
    "fresh_binders",
    "function",
    "get_op",
    "has_op",
    "is_anonymous",
    "is_builtin_op",
    "is_extended",
    "is_static",
    "known_equal",
    "let_chain",
    "nest_lets",
    "nesting_depth",
    "op_calls",
    "parse",
    "parse_type",
    "plain_symbols",
    "register_op",
    "scalar",
    "simplify",
    "simplify_under",
    "step_calls",
    "structurally_equal",
    "sym",
    "tensor_leaves",
    "tensor_ops",
    "too_deep_message",
    "tuple_of",
    "type_symbols",
    "unregister_op",
    "upper_bound",
]

del _ops
