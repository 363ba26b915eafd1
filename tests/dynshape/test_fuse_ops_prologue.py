"""Elementwise producers fused in front of a reduction (fuse_ops rule 5), end to end.

The ``fused`` stage printed for the motivating program, then each program compiled once and
run on the VM at random bindings of its symbolic dims against a numpy reference: every program
here must become exactly one kernel (a fused kernel whose steps are the prologue, the
reduction and the epilogue), and give numpy's numbers. The fusion rules themselves are tested
text in / text out in ``test_fuse_ops.py``; the step plans in ``test_step_plan.py``.
"""

from __future__ import annotations

import textwrap
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import dynshape
from dynshape.testing.differential import check_stages
from vm.fused import FusedKernel


def test_fused_stage_prints_one_primitive_with_exp_multiply_and_sum() -> None:
    source = """
    def @main(%x: Tensor[(n, m), float32], %y: Tensor[(m,), float32]) {
      sum(multiply(exp(%x), %y), axis=[1])
    }
    """
    fused = dynshape.stages(textwrap.dedent(source))["fused"]
    assert str(fused) == textwrap.dedent(
        """\
        def @main(%x: Tensor[(n, m), float32], %y: Tensor[(m,), float32]) {
          %2 = fn (%p0: Tensor[(n, m), float32], %p1: Tensor[(m,), float32], Primitive=1) -> Tensor[(n,), float32] {
            %0 = exp(%p0) /* ty=Tensor[(n, m), float32] */;
            %1 = multiply(%0, %p1) /* ty=Tensor[(n, m), float32] */;
            sum(%1, axis=[1]) /* ty=Tensor[(n,), float32] */
          } /* ty=fn (Tensor[(n, m), float32], Tensor[(m,), float32]) -> Tensor[(n,), float32] */;
          %2(%x, %y) /* ty=Tensor[(n,), float32] */
        }"""
    )
    manifest = str(dynshape.stages(textwrap.dedent(source))["manifest"])
    # The intermediate lives in one planned scratch slot, never in the output.
    assert 'Steps="0 exp -> t0; 1 multiply -> t0; 2 sum -> o0"' in manifest


@dataclass(frozen=True)
class Program:
    """A program that must compile to one kernel, with its numpy reference."""

    source: str
    reference: Callable[..., Any]
    shapes: Callable[[int, int], list[tuple[int, ...]]]
    """The input shapes at a binding ``(n, m)``."""
    ops: tuple[str, ...]
    """The fused kernel's steps, in order."""
    min_dim: int = 0
    """Smallest value drawn for a dim (1 where a reduction has no identity)."""


PROGRAMS = {
    "sum_multiply_exp": Program(
        """
        def @main(%x: Tensor[(n, m), float32], %y: Tensor[(m,), float32]) {
          sum(multiply(exp(%x), %y), axis=[1])
        }
        """,
        lambda x, y: (np.exp(x) * y).sum(axis=1),
        lambda n, m: [(n, m), (m,)],
        ("exp", "multiply", "sum"),
    ),
    # The prologue broadcasts up to a larger shape than either input.
    "mean_keepdims_of_a_broadcast_with_epilogue": Program(
        """
        def @main(%x: Tensor[(m,), float32], %y: Tensor[(n, 1), float32]) {
          sqrt(add(mean(multiply(%x, %y), axis=[0], keepdims=True), 4f))
        }
        """,
        lambda x, y: np.sqrt((x * y).mean(axis=0, keepdims=True) + 4),
        lambda n, m: [(m,), (n, 1)],
        ("multiply", "mean", "add", "sqrt"),
        min_dim=1,
    ),
    "max_negative_axis_keepdims": Program(
        """
        def @main(%x: Tensor[(n, m, 3), float32]) {
          max(negative(abs(%x)), axis=[-1, 1], keepdims=True)
        }
        """,
        lambda x: (-np.abs(x)).max(axis=(1, 2), keepdims=True),
        lambda n, m: [(n, m, 3)],
        ("abs", "negative", "max"),
        min_dim=1,
    ),
    "min_over_all_axes": Program(
        """
        def @main(%x: Tensor[(n, m), float64], %y: Tensor[(n, m), float64]) {
          min(subtract(%x, multiply(%y, 2.5f64)))
        }
        """,
        lambda x, y: (x - y * 2.5).min(),
        lambda n, m: [(n, m), (n, m)],
        ("multiply", "subtract", "min"),
        min_dim=1,
    ),
    "prod_exclude": Program(
        """
        def @main(%x: Tensor[(n, m, 2), float32]) {
          prod(add(tanh(%x), 1f), axis=[1], exclude=True)
        }
        """,
        lambda x: (np.tanh(x) + 1).prod(axis=(0, 2)),
        lambda n, m: [(n, m, 2)],
        ("tanh", "add", "prod"),
    ),
    "argmax_and_argmin_keepdims": Program(
        """
        def @main(%x: Tensor[(n, m), float32], %y: Tensor[(n, m), float32]) {
          argmin(multiply(exp(%x), %y), axis=[0], keepdims=True)
        }
        """,
        lambda x, y: (np.exp(x) * y).argmin(axis=0)[None, :],
        lambda n, m: [(n, m), (n, m)],
        ("exp", "multiply", "argmin"),
        min_dim=1,
    ),
    "argmax_of_a_shared_prologue_value": Program(
        """
        def @main(%x: Tensor[(n, m), float32]) {
          %0 = exp(%x);
          argmax(subtract(%0, multiply(%0, %0)), axis=[1])
        }
        """,
        lambda x: (np.exp(x) - np.exp(x) * np.exp(x)).argmax(axis=1),
        lambda n, m: [(n, m)],
        ("exp", "multiply", "subtract", "argmax"),
        min_dim=1,
    ),
}


def _bindings(rng: np.random.Generator, min_dim: int) -> list[tuple[int, int]]:
    """Edge bindings (the smallest dims, a 1) and a few random ones."""
    edges = [(min_dim, 3), (1, 1), (3, max(min_dim, 0))]
    drawn = [(int(rng.integers(min_dim, 9)), int(rng.integers(min_dim, 9))) for _ in range(4)]
    return edges + drawn


def _inputs(rng: np.random.Generator, source: str, shapes: list[tuple[int, ...]]) -> list[Any]:
    dtype = np.float64 if "float64" in source else np.float32
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


@pytest.mark.parametrize("name", PROGRAMS)
def test_one_kernel_and_numpy_results_at_random_shapes(name: str) -> None:
    program = PROGRAMS[name]
    source = textwrap.dedent(program.source)
    exe = dynshape.compile(source)
    (kernel,) = exe.kernels  # one primitive, one kernel
    assert isinstance(kernel, FusedKernel)
    assert tuple(step.op for step in kernel.steps) == program.ops
    machine = dynshape.VirtualMachine(exe)
    rng = np.random.default_rng(sum(map(ord, name)))
    for n, m in _bindings(rng, program.min_dim):
        args = _inputs(rng, source, program.shapes(n, m))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the reference's, as the VM's
            want = program.reference(*[a.copy() for a in args])
        got = machine.run(*args)
        assert np.asarray(got).shape == np.shape(want), (n, m)
        assert np.asarray(got).dtype == np.asarray(want).dtype, (n, m)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"n={n}, m={m}")


@pytest.mark.parametrize("name", ["sum_multiply_exp", "mean_keepdims_of_a_broadcast_with_epilogue"])
def test_every_stage_agrees_with_the_parsed_program(name: str) -> None:
    """The reference interpreter on each stage (fused, manifest with the scratch slot, planned)
    and the VM agree with the parsed program: no stage changes meaning."""
    program = PROGRAMS[name]
    rng = np.random.default_rng(7)
    source = textwrap.dedent(program.source)
    check_stages(source, *_inputs(rng, source, program.shapes(5, 3)))


def test_a_prologue_value_used_outside_is_computed_once_and_materialised() -> None:
    """exp(x) is returned as well as reduced: it is one kernel of its own, the sum another,
    and both results are numpy's."""
    source = """
    def @main(%x: Tensor[(n, m), float32]) {
      %0 = exp(%x);
      (sum(%0, axis=[1]), %0)
    }
    """
    exe = dynshape.compile(textwrap.dedent(source))
    assert sorted(k.name for k in exe.kernels) == ["exp", "sum"]
    x = np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32)
    total, e = dynshape.VirtualMachine(exe).run(x)
    np.testing.assert_allclose(e, np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(total, np.exp(x).sum(axis=1), rtol=1e-5)
