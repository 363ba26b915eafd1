"""Each model family exported by ``torch.export``, imported, compiled and run on the VM at
three sizes (the ends of the declared ranges included), against torch's eager outputs."""

from __future__ import annotations

import numpy as np
import pytest

# torch.export, not torch: without torch installed, "torch" would import tests/torch itself
# (a namespace package: tests/ is on the path)
pytest.importorskip("torch.export")
import torch
from torch_models import Family, families

import dynshape
import dynshape.torch as dstorch

FAMILIES = {f.name: f for f in families()}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request: pytest.FixtureRequest) -> Family:
    return FAMILIES[request.param]


def test_matches_torch_at_three_sizes(family: Family) -> None:
    ep = family.export()
    program = dstorch.load(ep)
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    for n in family.sizes:
        args = family.inputs(n)
        with torch.no_grad():
            expected = family.model(*args)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = vm.run(*[a.numpy() for a in args])
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(expected)
        for ours, theirs in zip(got, expected, strict=True):
            assert ours.shape == tuple(theirs.shape), (family.name, n)
            assert ours.dtype == theirs.numpy().dtype
            np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-4, atol=1e-5)


def test_inputs_keep_their_names_and_ranges_carry_over(family: Family) -> None:
    program = dstorch.load(family.export())
    assert list(program.inputs) == list(family.dynamic)
    declared = {
        dim.__name__: (dim.min, dim.max)
        for axes in family.dynamic.values()
        for dim in axes.values()
    }
    assert program.ranges == declared
    text = str(program)
    for name in declared:
        assert name in text  # the Dim names, not torch's s0-style ones


def test_the_core_aten_form_matches_too(family: Family) -> None:
    """The same program after ``run_decompositions()`` (core ATen: ``convolution``,
    ``addmm``, ``native_layer_norm``, ``_native_batch_norm_legit_no_training``, ...)."""
    ep = family.export().run_decompositions()
    vm = dynshape.VirtualMachine(dynshape.compile(dstorch.load(ep)))
    for n in (family.sizes[0], family.sizes[2]):
        args = family.inputs(n)
        with torch.no_grad():
            expected = family.model(*args)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = vm.run(*[a.numpy() for a in args])
        got = got if isinstance(got, tuple) else (got,)
        for ours, theirs in zip(got, expected, strict=True):
            np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-4, atol=1e-5)
