"""The select pass: gathers by a 1-d mask's positions become ``compress``, exactly when the two
agree (text in, text out), and the compiled programs compute what the unrewritten ones do."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import dynshape
from dynshape.passes.select import SimplifySelection
from dynshape.testing import check_stages

SELECT = """
def @main(%x: Tensor[(n,), float32]) -> Tensor[(?,), float32] {
  %idx = squeeze(argwhere(greater(%x, 0f)), axis=[1]);
  multiply(take(%x, %idx, axis=0), 2f)
}
"""

#: name -> (program, a fragment of the rewritten text, a fragment that must not remain)
REWRITTEN = {
    "vector": (SELECT, "compress(%x, %0)", "argwhere"),
    "flattened_mask": (
        """
        def @main(%x: Tensor[(n, 3), float32]) -> Tensor[(?,), float32] {
          %f = reshape(%x, newshape=[-1]);
          take(%f, reshape(argwhere(reshape(greater(%x, 0f), newshape=[-1])), newshape=[-1]), axis=0)
        }
        """,
        "compress(%0, %2)",
        "argwhere",
    ),
    "rows_by_another_tensor": (
        """
        def @main(%x: Tensor[(n, 4), float32], %s: Tensor[(n,), int32]) -> Tensor[(?, 4), float32] {
          take(%x, squeeze(argwhere(%s), axis=[-1]), axis=0)
        }
        """,
        "compress(%x, %s)",
        "take",
    ),
    "columns": (
        """
        def @main(%x: Tensor[(2, m), float32], %keep: Tensor[(m,), bool]) -> Tensor[(2, ?), float32] {
          take(%x, squeeze(argwhere(%keep), axis=[1]), axis=-1)
        }
        """,
        "compress(%x, %keep, axis=-1)",
        "argwhere",
    ),
    "axis_none_of_a_vector": (
        """
        def @main(%x: Tensor[(n,), float32]) -> Tensor[(?,), float32] {
          take(%x, squeeze(argwhere(less(%x, 1f)), axis=[1]))
        }
        """,
        "compress(%x, %0)",
        "argwhere",
    ),
}

#: name -> program the pass must leave as it is (the reason in the name)
KEPT = {
    "mask_length_not_provably_the_axis": """
        def @main(%x: Tensor[(n,), float32], %m: Tensor[(k,), bool]) -> Tensor[(?,), float32] {
          take(%x, squeeze(argwhere(%m), axis=[1]), axis=0)
        }
        """,
    "positions_used_elsewhere": """
        def @main(%x: Tensor[(n,), float32]) -> (Tensor[(?,), float32], Tensor[(?,), int64]) {
          %idx = squeeze(argwhere(greater(%x, 0f)), axis=[1]);
          (take(%x, %idx, axis=0), %idx)
        }
        """,
    "positions_of_a_matrix": """
        def @main(%x: Tensor[(n,), float32], %m: Tensor[(n, 2), bool]) -> Tensor[(?,), float32] {
          take(%x, reshape(argwhere(%m), newshape=[-1]), axis=0)
        }
        """,
    "axis_none_of_a_matrix": """
        def @main(%x: Tensor[(n, n), float32], %m: Tensor[(n,), bool]) -> Tensor[(?,), float32] {
          take(%x, squeeze(argwhere(%m), axis=[1]))
        }
        """,
    "positions_not_squeezed": """
        def @main(%x: Tensor[(n,), float32], %m: Tensor[(n,), bool]) -> Tensor[(?, 1), float32] {
          take(%x, argwhere(%m), axis=0)
        }
        """,
}


def _selected(program: str) -> str:
    return str(dynshape.stages(textwrap.dedent(program))["selected"]["main"])


@pytest.mark.parametrize("name", sorted(REWRITTEN))
def test_gathers_by_a_mask_become_compress(name: str) -> None:
    program, present, absent = REWRITTEN[name]
    text = _selected(program)
    assert present in text, text
    assert absent not in text, text


@pytest.mark.parametrize("name", sorted(KEPT))
def test_gathers_that_compress_would_change_are_kept(name: str) -> None:
    program = textwrap.dedent(KEPT[name])
    stages = dynshape.stages(program)
    assert stages["selected"] is stages["types"]  # returned as it is: nothing rewritten
    assert "compress" not in str(stages["selected"])


def test_the_pass_counts_its_rewrites_and_keeps_types() -> None:
    typed = dynshape.stages(SELECT)["types"]
    p = SimplifySelection()
    out = p.run(typed)
    assert p.rewritten == 1
    assert "compress(%x, %0) /* ty=Tensor[(?" in str(out)
    dynshape.compile(SELECT, debug=True)  # every stage re-checked against a full inference


def _vector(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("n", [0, 1, 7, 1000, 4099])
def test_selection_computes_numpy_at_every_stage(n: int) -> None:
    x = _vector(n)
    x[::5] = 0.0  # zeros are not selected by greater
    check_stages(SELECT, x)  # every stage interpreted, then the VM, against the parsed program
    vm = dynshape.VirtualMachine(dynshape.compile(SELECT), check_memory=True)
    got = vm.run(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, x[x > 0] * 2)


def _feeds(rng: np.random.Generator) -> dict[str, list[np.ndarray]]:
    return {
        "flattened_mask": [rng.standard_normal((5, 3)).astype(np.float32)],
        "rows_by_another_tensor": [
            rng.standard_normal((6, 4)).astype(np.float32),
            rng.integers(-1, 2, 6).astype(np.int32),
        ],
        "columns": [
            rng.standard_normal((2, 9)).astype(np.float32),
            rng.integers(0, 2, 9).astype(bool),
        ],
        "axis_none_of_a_vector": [rng.standard_normal(11).astype(np.float32)],
    }


def _empty(args: list[np.ndarray], name: str) -> list[np.ndarray]:
    """The same arguments with the selected axis of size 0."""
    if name == "columns":
        return [np.zeros((2, 0), np.float32), np.zeros(0, bool)]
    return [np.zeros((0, *a.shape[1:]), a.dtype) for a in args]


@pytest.mark.parametrize("name", sorted(_feeds(np.random.default_rng(0))))
def test_rewritten_programs_agree_with_the_unrewritten_ones(name: str) -> None:
    program = textwrap.dedent(REWRITTEN[name][0])
    vm = dynshape.VirtualMachine(dynshape.compile(program), check_memory=True)
    args = _feeds(np.random.default_rng(1))[name]
    for feed in (args, _empty(args, name)):
        results = check_stages(program, *feed)  # the parsed program's result at every stage
        want = results.outputs["parsed"]  # the interpreter's array
        got = vm.run(*feed)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
