"""Workspaces: scratch memory an op's kernel needs beyond its result, declared as a size.

Some kernels need temporary buffers whose size the compiler can state but whose layout only
the kernel knows: a convolution's im2col buffer, its zero-padded input, the product with junk
columns, a float32 accumulator for float16 data. Such an op registers a *workspace rule* here,
by the op's name:

    rule(result, *inputs, dtype, **attrs) -> bytes

``result`` and ``inputs`` are shapes (tuples of dims), ``dtype`` is the first input's dtype
name, ``attrs`` the op's attributes; the rule returns an upper bound, in bytes, of what every
path of the kernel carves from its workspace. Like a shape function it is plain arithmetic over
dims, so it runs on sympy dims at compile time and on ints alike (``+`` and ``*`` only: the
result's dims already hold the sizes' floor divisions). A rule returns 0 where the kernel
carves nothing (a 1x1 convolution is one matmul into its result): the call then has no
workspace at all, and costs no allocation.

The compiler gives each call of such an op one more destination, a 1-d ``uint8`` scratch
tensor of that many bytes, dead right after the call (``dynshape/analysis/step_plan.py``), so
the workspace is planned, reused and shown in the memory report like any other buffer. The
kernel takes it as its last argument and carves views of it (``vm/kernels/workspace.py``);
a kernel called without one (directly, or by an executable that could not size it) allocates
per call as before. Built-in ops only: the kernel must take the extra argument.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .context import Dim

#: The dtype of a workspace tensor: bytes, carved by the kernel into arrays of any dtype.
WORKSPACE_DTYPE = "uint8"

#: ``rule(result, *inputs, dtype=..., **attrs) -> bytes`` (see the module doc).
WorkspaceRule = Callable[..., Any]

#: Every piece a kernel carves starts at a multiple of this many bytes (so each is aligned for
#: any dtype and for SIMD loads); a rule adds ``PIECE_SLACK`` per piece it counts.
PIECE_ALIGNMENT = 64
PIECE_SLACK = PIECE_ALIGNMENT - 1

#: op name -> (its rule, how many result tensors its calls have)
_RULES: dict[str, tuple[WorkspaceRule, int]] = {}


def register_workspace(
    op_name: str, *, results: int = 1
) -> Callable[[WorkspaceRule], WorkspaceRule]:
    """Decorator registering the workspace rule of built-in op ``op_name``, whose calls have
    ``results`` result tensors (a call with one destination more passes a workspace)."""

    def decorate(rule: WorkspaceRule) -> WorkspaceRule:
        if op_name in _RULES:
            raise ValueError(f"op {op_name!r} already has a workspace rule")
        _RULES[op_name] = (rule, results)
        return rule

    return decorate


def has_workspace(op_name: str) -> bool:
    """True if ``op_name``'s kernel may take a workspace as its last argument."""
    return op_name in _RULES


def passes_workspace(op_name: str, destinations: int) -> bool:
    """True if a call of ``op_name`` writing ``destinations`` tensors passes a workspace (its
    last destination): the op has a rule and the call one destination past its results. A
    call whose rule gave 0 bytes has none."""
    found = _RULES.get(op_name)
    return found is not None and found[1] + 1 == destinations


def workspace_bytes(
    op_name: str,
    result: Sequence[Dim],
    inputs: Sequence[Sequence[Dim]],
    dtype: str,
    attrs: Mapping[str, Any],
) -> Dim:
    """The workspace, in bytes, that a call of ``op_name`` needs (see the module doc)."""
    rule = _RULES[op_name][0]
    return rule(tuple(result), *map(tuple, inputs), dtype=dtype, **attrs)
