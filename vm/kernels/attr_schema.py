"""The attribute schema of each op's kernel: what a loaded file may pass to a kernel factory.

A kernel factory reads its attributes as it finds them (``attrs["axis"]``); given a value of the
wrong type (``axis="garbage"``), a list where an int belongs, or a name it does not know, it might
ignore it, misread it, or fail with anything. So the loader checks every kernel-table entry (and
every step of a fused kernel) against its op's schema before a VM binds it: exactly the declared
names (the compiler writes every default), each value of its kind.

Kinds are written as the IR catalogue names them (``ir/attrs.py``), so that a test can compare this
table with the catalogue (``tests/vm/test_attr_schema.py``): ``int``, ``float``, ``bool``, ``str``,
``dtype``, ``list[int]``, ``list[float]``, ``list[[int, int]]``, a choice ``'a' | 'b'``, and unions
``X or Y`` (``None`` among them). ``list[int | dim]`` (reshape's ``newshape``, split's indices,
resize's ``sizes``) holds ints and ``None``: the compiler writes ``None`` for a dim entry (the VM
never sees sympy), and the kernel takes that extent from its outputs' shapes. The VM cannot import
the catalogue (it depends on numpy alone), hence the copy. Custom ops registered with
``dynshape.register_op`` get their schema registered with their kernel (``register_attr_schema``); a
kernel registered with ``vm.register_kernel`` alone has none, and its attributes are only checked to
be JSON-like.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import FormatError, KernelRegistryError

#: Bounds on attribute values (the same as the loader's for immediates and lists).
MAX_INT = 1 << 62
MAX_LIST = 1 << 12
MAX_STR = 1 << 16

Check = Callable[[Any], bool]

#: The built-in ops' schemas, by op name: attribute name -> kind.
BUILTIN_SCHEMAS: dict[str, dict[str, str]] = {
    "abs": {},
    "add": {},
    "arange": {"dtype": "dtype"},
    "argmax": {"axis": "int or list[int] or None", "keepdims": "bool", "exclude": "bool"},
    "argmin": {"axis": "int or list[int] or None", "keepdims": "bool", "exclude": "bool"},
    "argwhere": {},
    "broadcast_to": {"shape": "list[int | dim]"},
    "cast": {"dtype": "dtype"},
    "ceil": {},
    "clip": {"a_min": "float", "a_max": "float"},
    "compress": {"axis": "int"},
    "concatenate": {"axis": "int"},
    "copy": {},
    "cos": {},
    "cumsum": {"axis": "int", "exclusive": "bool", "reverse": "bool"},
    "divide": {},
    "dyn.full": {"dtype": "dtype"},
    "dyn.ones": {"dtype": "dtype"},
    "dyn.reshape": {},
    "dyn.strided_slice": {},
    "dyn.topk": {
        "axis": "int",
        "ret_type": "'both' | 'values' | 'indices'",
        "is_ascend": "bool",
        "dtype": "dtype",
    },
    "dyn.zeros": {"dtype": "dtype"},
    "equal": {},
    "erf": {},
    "exp": {},
    "expand_dims": {"axis": "int", "num_newaxis": "int"},
    "floor": {},
    "floor_divide": {},
    "full": {"shape": "list[int | dim]", "dtype": "dtype"},
    "greater": {},
    "greater_equal": {},
    "less": {},
    "less_equal": {},
    "log": {},
    "logical_and": {},
    "logical_not": {},
    "logical_or": {},
    "max": {"axis": "int or list[int] or None", "keepdims": "bool", "exclude": "bool"},
    "maximum": {},
    "mean": {"axis": "int or list[int] or None", "keepdims": "bool", "exclude": "bool"},
    "min": {"axis": "int or list[int] or None", "keepdims": "bool", "exclude": "bool"},
    "minimum": {},
    "mod": {},
    "multiply": {},
    "negative": {},
    "nn.attention": {
        "scale": "float",
        "q_axes": "list[int] or None",
        "k_axes": "list[int] or None",
        "v_axes": "list[int] or None",
        "out_axes": "list[int] or None",
    },
    "nn.avg_pool2d": {
        "pool_size": "list[int]",
        "strides": "list[int]",
        "padding": "list[int]",
        "dilation": "list[int]",
    },
    "nn.batch_flatten": {},
    "nn.batch_matmul": {"transpose_a": "bool", "transpose_b": "bool"},
    "nn.bias_add": {"axis": "int"},
    "nn.conv2d": {
        "strides": "list[int]",
        "padding": "list[int]",
        "dilation": "list[int]",
        "groups": "int",
    },
    "nn.conv2d_transpose": {
        "strides": "list[int]",
        "padding": "list[int]",
        "output_padding": "list[int]",
        "dilation": "list[int]",
        "groups": "int",
    },
    "nn.dense": {},
    "nn.global_avg_pool2d": {},
    "nn.global_max_pool2d": {},
    "nn.gru": {
        "direction": "'forward' | 'reverse' | 'bidirectional'",
        "layout": "int",
        "clip": "float or None",
        "act_f": "'sigmoid' | 'tanh' | 'relu'",
        "act_g": "'sigmoid' | 'tanh' | 'relu'",
        "linear_before_reset": "bool",
    },
    "nn.layer_norm": {"axis": "int", "epsilon": "float"},
    "nn.leaky_relu": {"alpha": "float"},
    "nn.lstm": {
        "direction": "'forward' | 'reverse' | 'bidirectional'",
        "layout": "int",
        "clip": "float or None",
        "act_f": "'sigmoid' | 'tanh' | 'relu'",
        "act_g": "'sigmoid' | 'tanh' | 'relu'",
        "act_h": "'sigmoid' | 'tanh' | 'relu'",
        "input_forget": "bool",
    },
    "nn.log_softmax": {"axis": "int"},
    "nn.matmul": {},
    "nn.max_pool2d": {
        "pool_size": "list[int]",
        "strides": "list[int]",
        "padding": "list[int]",
        "dilation": "list[int]",
    },
    "nn.pad": {"pad_width": "list[[int, int]]", "pad_value": "float"},
    "nn.relu": {},
    "nn.rnn": {
        "direction": "'forward' | 'reverse' | 'bidirectional'",
        "layout": "int",
        "clip": "float or None",
        "act_f": "'sigmoid' | 'tanh' | 'relu'",
    },
    "nn.softmax": {"axis": "int"},
    "non_max_suppression": {"center_point_box": "int"},
    "not_equal": {},
    "ones": {"shape": "list[int | dim]", "dtype": "dtype"},
    "ones_like": {},
    "power": {},
    "prod": {"axis": "int or list[int] or None", "keepdims": "bool", "exclude": "bool"},
    "repeat": {"repeats": "int", "axis": "int or None"},
    "reshape": {"newshape": "list[int | dim]"},
    "resize": {
        "sizes": "list[int | dim]",
        "scales": "list[float] or None",
        "mode": "'nearest' | 'linear' | 'cubic'",
        "coordinate_transformation_mode": "'half_pixel' | 'half_pixel_symmetric' | "
        "'pytorch_half_pixel' | 'align_corners' | 'asymmetric' | 'tf_half_pixel_for_nn'",
        "nearest_mode": "'round_prefer_floor' | 'round_prefer_ceil' | 'floor' | 'ceil'",
        "cubic_coeff_a": "float",
        "exclude_outside": "bool",
    },
    "round": {},
    "rsqrt": {},
    "scatter_elements": {"axis": "int", "reduction": "'none' | 'add' | 'mul' | 'max' | 'min'"},
    "scatter_nd": {"reduction": "'none' | 'add' | 'mul' | 'max' | 'min'"},
    "shape_of": {"dtype": "'int32' | 'int64'"},
    "sigmoid": {},
    "sin": {},
    "split": {"indices_or_sections": "int or list[int | dim]", "axis": "int"},
    "sqrt": {},
    "squeeze": {"axis": "list[int] or None"},
    "stack": {"axis": "int"},
    "strided_slice": {"begin": "list[int]", "end": "list[int]", "strides": "list[int] or None"},
    "subtract": {},
    "sum": {"axis": "int or list[int] or None", "keepdims": "bool", "exclude": "bool"},
    "take": {"axis": "int or None"},
    "tanh": {},
    "tile": {"reps": "list[int | dim]"},
    "topk": {
        "k": "int",
        "axis": "int",
        "ret_type": "'both' | 'values' | 'indices'",
        "is_ascend": "bool",
        "dtype": "dtype",
    },
    "transpose": {"axes": "list[int] or None"},
    "where": {},
    "zeros": {"shape": "list[int | dim]", "dtype": "dtype"},
    "zeros_like": {},
}

_SCHEMAS: dict[str, dict[str, str]] = dict(BUILTIN_SCHEMAS)
_CHECKS: dict[str, Check] = {}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -MAX_INT <= v <= MAX_INT


def _is_ints(v: Any) -> bool:
    return isinstance(v, tuple) and len(v) <= MAX_LIST and all(_is_int(x) for x in v)


def _is_ints_or_dims(v: Any) -> bool:
    return isinstance(v, tuple) and len(v) <= MAX_LIST and all(x is None or _is_int(x) for x in v)


_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64")
_BASIC: dict[str, Check] = {
    "int": _is_int,
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str) and len(v) <= MAX_STR,
    "dtype": lambda v: v in _DTYPES,
    "None": lambda v: v is None,
    "list[int]": _is_ints,
    "list[float]": lambda v: (
        isinstance(v, tuple)
        and len(v) <= MAX_LIST
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
    ),
    "list[int | dim]": _is_ints_or_dims,
    "list[[int, int]]": lambda v: (
        isinstance(v, tuple) and len(v) <= MAX_LIST and all(_is_ints(p) and len(p) == 2 for p in v)
    ),
}


def _choice(choices: frozenset[str]) -> Check:
    return lambda v: isinstance(v, str) and v in choices


def kind_check(kind: str) -> Check:
    """The predicate of a kind's text (see the module doc); raises KernelRegistryError for a
    kind this module does not know."""
    check = _CHECKS.get(kind)
    if check is not None:
        return check
    parts = [p.strip() for p in kind.split(" or ")]
    checks: list[Check] = []
    for part in parts:
        if part in _BASIC:
            checks.append(_BASIC[part])
        elif part.startswith("'"):
            choices = frozenset(c.strip().strip("'") for c in part.split("|"))
            checks.append(_choice(choices))
        else:
            raise KernelRegistryError(f"unknown attribute kind {part!r} in {kind!r}")
    check = checks[0] if len(checks) == 1 else (lambda v: any(c(v) for c in checks))
    _CHECKS[kind] = check
    return check


def register_attr_schema(op_name: str, schema: Mapping[str, str]) -> None:
    """Declare the attributes of ``op_name``'s kernel (name -> kind text); checked at load."""
    for kind in schema.values():
        kind_check(kind)  # refuse an unknown kind now, not when a file is loaded
    _SCHEMAS[op_name] = dict(schema)


def unregister_attr_schema(op_name: str) -> None:
    """Forget a registered schema (a built-in op's stays)."""
    if op_name in BUILTIN_SCHEMAS:
        _SCHEMAS[op_name] = dict(BUILTIN_SCHEMAS[op_name])
    else:
        _SCHEMAS.pop(op_name, None)


def has_schema(op_name: str) -> bool:
    """True if ``op_name``'s attributes are declared (every built-in op's are)."""
    return op_name in _SCHEMAS


def check_kernel_attrs(op_name: str, attrs: Mapping[str, Any], what: str) -> None:
    """Raise FormatError unless ``attrs`` has exactly ``op_name``'s attributes, each of its
    kind. An op with no schema passes (its attributes were checked to be JSON-like)."""
    schema = _SCHEMAS.get(op_name)
    if schema is None:
        return
    unknown = sorted(set(attrs) - set(schema))
    if unknown:
        raise FormatError(
            f"{what}: unknown attribute(s) {', '.join(map(repr, unknown))} for {op_name} "
            f"(it takes: {', '.join(schema) or 'none'})"
        )
    missing = [name for name in schema if name not in attrs]
    if missing:
        raise FormatError(f"{what}: attribute(s) {', '.join(map(repr, missing))} missing")
    for name, kind in schema.items():
        if not kind_check(kind)(attrs[name]):
            raise FormatError(f"{what}: attribute {name!r} = {attrs[name]!r} is not {kind}")
