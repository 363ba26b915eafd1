"""The dtype rules of the recurrent layers (the neural-network ops are declared in
``shape_funcs/declarations/catalogue/nn.py``; the others use shared rules)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..attrs import Attrs
from ..dtypes import is_float, is_int
from ..errors import IRError
from ..op import DTypeRule
from ._declare import input_dtype, own_rule


def _recurrent_dtype(outputs: int) -> DTypeRule:
    """x is floating point, every other input but sequence_lens (an integer tensor) has its
    dtype, and so has each of the ``outputs`` results."""

    def rule(dtypes: Sequence[Any], attrs: Attrs) -> tuple[str, ...]:
        x = input_dtype(dtypes, 0, "x")
        if not is_float(x):
            raise IRError(f"expects a floating-point x, got {x}")
        for i in range(1, len(dtypes)):
            dt = input_dtype(dtypes, i, f"input {i}")
            if i == 4:
                if not is_int(dt):
                    raise IRError(f"sequence_lens must be an integer tensor, got {dt}")
            elif dt != x:
                raise IRError(f"input {i} has dtype {dt}, expected x's {x} (cast explicitly)")
        return (x,) * outputs

    return rule


own_rule("nn.lstm")(_recurrent_dtype(3))  # Y, Y_h, Y_c
own_rule("nn.gru", "nn.rnn")(_recurrent_dtype(2))  # Y, Y_h
