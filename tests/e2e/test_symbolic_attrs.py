"""Reshape to symbolic shapes and split at symbolic points, from the builder and the text: the
types, the compiled programs against numpy on random shapes (fused with other ops or alone),
the deferred checks, saving and loading, and the errors."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dynshape
import dynshape.builder as ds
import ir
from dynshape.testing import check_stages
from vm import Executable
from vm.kernels.transform import cut_points


def _vm(program: object) -> dynshape.VirtualMachine:
    return dynshape.VirtualMachine(dynshape.compile(program))  # type: ignore[arg-type]


def test_reshape_back_to_the_inputs_shape_from_the_builder() -> None:
    x = ds.tensor("x", ("n", "m"), "float32")
    f = ds.reshape(x, newshape=(-1,))
    a = f.reshape(*x.shape)
    b = ds.reshape(ds.exp(f), newshape=x.shape)  # fused: exp, reshape, exp
    n, _ = x.shape
    c = ds.reshape(x, newshape=(n, -1))
    assert str(a.type) == str(b.type) == str(c.type) == "Tensor[(n, m), float32]"
    program = ds.build([a, ds.exp(b), c], inputs=[x])
    assert ir.structurally_equal(ir.parse(str(program)), program)
    vm = _vm(program)
    rng = np.random.default_rng(0)
    for shape in [(3, 4), (1, 1), (5, 2), (2, 0), (7, 3)]:
        xv = rng.standard_normal(shape).astype(np.float32)
        got = vm.run(xv)
        np.testing.assert_array_equal(got[0], xv)
        np.testing.assert_allclose(got[1], np.exp(np.exp(xv)), rtol=1e-6)
        np.testing.assert_array_equal(got[2], xv)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 6), m=st.integers(0, 6))
def test_a_fused_reshape_to_derived_dims_runs_as_numpy(n: int, m: int) -> None:
    source = """
    def @main(%x: Tensor[(n, m), float32]) {
      exp(reshape(exp(%x), newshape=[m, (n // 2), -1]))
    }
    """
    xv = np.arange(n * m, dtype=np.float32).reshape(n, m) / 10
    known = m * (n // 2)
    if known == 0 or (n * m) % known:  # numpy refuses these too: run-time checks here
        with pytest.raises(dynshape.DynShapeError, match="must hold"):
            _vm(source).run(xv)
        return
    r = check_stages(source, xv)
    np.testing.assert_allclose(r.outputs["vm"], np.exp(np.exp(xv).reshape(m, n // 2, -1)))


def test_reshape_checks_become_run_time_checks_with_their_message() -> None:
    x = ds.tensor("x", ("n", "m"), "float32")
    n, m = x.shape
    y = ds.reshape(ds.exp(ds.reshape(x, newshape=(-1,))), newshape=(2 * n, m // 2))
    vm = _vm(ds.build(y, inputs=[x]))
    np.testing.assert_allclose(vm.run(np.ones((3, 4), np.float32)), np.full((6, 2), np.e))
    with pytest.raises(dynshape.DynShapeError) as info:
        vm.run(np.ones((3, 3), np.float32))
    assert (
        "reshape: expected the element count of newshape == that of x, got 6 != 9 "
        "(inputs: x (m*n,); where 2*n*(m // 2) == m*n must hold; m = 3, n = 3)"
    ) in str(info.value)
    vm = _vm(ds.build(ds.reshape(x, newshape=(n, -1)), inputs=[x]))
    with pytest.raises(dynshape.DynShapeError, match=re.escape("where n != 0 must hold; n = 0")):
        vm.run(np.ones((0, 3), np.float32))


def test_a_reshape_refuted_at_compile_time_is_a_build_error() -> None:
    x = ds.tensor("x", ("n", 4), "float32")
    n, _ = x.shape
    with pytest.raises(dynshape.BuildError, match="reshape: expected the element count of newsh"):
        ds.reshape(x, newshape=(n + 1, 4))


def test_an_attribute_symbol_no_parameter_binds_is_an_error() -> None:
    x = ds.tensor("x", ("n", "m"), "float32")
    y = ds.tensor("y", ("k",), "float32")
    z = ds.reshape(x, newshape=(y.shape[0], -1))
    with pytest.raises(dynshape.BuildError, match="uses k, which no parameter of @main binds"):
        ds.build(z, inputs=[x])
    src = "def @main(%x: Tensor[(n, m), float32]) {\n  reshape(%x, newshape=[k, -1])\n}"
    module = ir.parse(src.replace("[k, -1]", "[n, -1]"))
    bad = ir.Module(
        {"main": ir.function(module["main"].params, _with_newshape(module, ir.sym("k")))}
    )
    with pytest.raises(dynshape.CompileError, match=r"newshape=\[k, -1\] uses k"):
        dynshape.compile(bad)


def _with_newshape(module: ir.Module, first: object) -> ir.Expr:
    call = module["main"].body
    assert isinstance(call, ir.Call) and call.op is not None
    return ir.Call(call.op, call.args, ir.Attrs({"newshape": (first, -1)}))


def test_value_reshape_names_what_it_takes() -> None:
    x = ds.tensor("x", ("n", 4), "float32")
    with pytest.raises(dynshape.BuildError, match=r"reshape takes ints .* or dims of the inputs"):
        x.reshape(1.5, -1)


_SPLIT_ENTRY = st.one_of(
    st.integers(-6, 9),
    st.sampled_from(["n", "n // 2", "2*n", "n + 1", "k", "(n % 3)", "max(k, n) - k"]),
)


@settings(max_examples=40, deadline=None)
@given(entries=st.lists(_SPLIT_ENTRY, min_size=1, max_size=3), fused=st.booleans())
def test_split_at_symbolic_points_runs_as_np_split(entries: list, fused: bool) -> None:
    points = ", ".join(str(e) for e in entries)
    x = "exp(%x)" if fused else "%x"
    source = f"""
    def @main(%x: Tensor[(n, 3), float32], %y: Tensor[(k,), float32]) {{
      split({x}, indices_or_sections=[{points}])
    }}
    """
    module = ir.parse(source)
    assert ir.structurally_equal(ir.parse(str(module)), module)
    exe = dynshape.compile(source)
    vm = dynshape.VirtualMachine(Executable.from_bytes(exe.to_bytes()))  # saved and loaded
    for n in (0, 1, 2, 5, 8):
        for k in (0, 3):
            xv = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
            env = {"n": n, "k": k}
            values = [e if isinstance(e, int) else _eval(e, env) for e in entries]
            want = np.split(np.exp(xv) if fused else xv, values)
            try:
                got = vm.run(xv, np.zeros(k, np.float32))
            except dynshape.DynShapeError as e:  # only a part between two decreasing points
                assert "cannot be recovered" in str(e), str(e)
                assert len(values) >= 3
                continue
            assert len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(g, w, rtol=1e-6, err_msg=f"{values}, n = {n}")


def _eval(text: str, env: dict[str, int]) -> int:
    return int(eval(text, {"max": max}, dict(env)))  # the dim grammar is Python's here


def test_split_from_the_builder_and_its_types() -> None:
    x = ds.tensor("x", ("n", "m"), "float32")
    n, m = x.shape
    parts = ds.split(x, indices_or_sections=[n // 2], axis=0)
    assert [str(p.type) for p in parts] == [
        "Tensor[(n // 2, m), float32]",
        "Tensor[(n - n // 2, m), float32]",
    ]
    cols = ds.split(ds.exp(x), indices_or_sections=[m + 1, 1], axis=1)  # past the end, decreasing
    program = ds.build([*parts, *cols], inputs=[x])
    assert ir.structurally_equal(ir.parse(str(program)), program)
    vm = _vm(program)
    for shape in [(0, 0), (1, 3), (4, 2), (7, 5)]:
        xv = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        got = vm.run(xv)
        want = [*np.split(xv, [shape[0] // 2]), *np.split(np.exp(xv), [shape[1] + 1, 1], axis=1)]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-6)


def test_the_vm_gets_no_sympy_and_the_file_round_trips() -> None:
    exe = dynshape.compile(
        "def @main(%x: Tensor[(n, m), float32]) {\n"
        "  (split(%x, indices_or_sections=[(n // 2), 1]), reshape(exp(%x), newshape=[m, n]))\n"
        "}"
    )
    attrs = [dict(k.attrs) for k in exe.kernels if hasattr(k, "attrs")]
    attrs += [dict(s.attrs) for k in exe.kernels for s in getattr(k, "steps", ())]
    flat = [v for a in attrs for value in a.values() for v in np.atleast_1d(value).tolist()]
    assert None in flat and all(v is None or isinstance(v, (int, str, bool)) for v in flat)
    loaded = Executable.from_bytes(exe.to_bytes())
    xv = np.arange(12, dtype=np.float32).reshape(4, 3)
    got = dynshape.VirtualMachine(loaded).run(xv)
    for g, w in zip(got[0], np.split(xv, [2, 1]), strict=True):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_allclose(got[1], np.exp(xv).reshape(3, 4), rtol=1e-6)


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 9),
    points=st.lists(st.integers(-12, 12), max_size=6),
    known=st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_cut_points_are_np_splits_or_refused_only_when_decreasing(
    n: int, points: list[int], known: list[bool]
) -> None:
    x = np.arange(n)
    parts = np.split(x, points)
    spec = [p if k else None for p, k in zip(points, known, strict=False)]
    sizes = [len(p) for p in parts]
    clamped = [min(max(p + n if p < 0 else p, 0), n) for p in points]
    try:
        starts = cut_points(n, spec, sizes)
    except ValueError as e:
        assert "cannot be recovered" in str(e)
        assert any(a > b for a, b in itertools.pairwise(clamped))
        return
    for start, size, part in zip(starts, sizes, parts, strict=True):
        np.testing.assert_array_equal(x[start : start + size], part)


def test_creation_and_broadcast_shapes_take_dims() -> None:
    source = """
    def @main(%x: Tensor[(n, 1), float32], %y: Tensor[(n, m), float32]) {
      (broadcast_to(%x, shape=[n, m]), full(2.5f, shape=[m, (n // 2)]), zeros(shape=[2*m], dtype="int64"))
    }
    """
    module = ir.parse(source)
    assert ir.structurally_equal(ir.parse(str(module)), module)
    vm = dynshape.VirtualMachine(Executable.from_bytes(dynshape.compile(source).to_bytes()))
    for n, m in [(0, 2), (1, 1), (5, 3)]:
        x = np.arange(n, dtype=np.float32).reshape(n, 1)
        a, b, c = vm.run(x, np.zeros((n, m), np.float32))
        np.testing.assert_array_equal(a, np.broadcast_to(x, (n, m)))
        np.testing.assert_array_equal(b, np.full((m, n // 2), 2.5, np.float32))
        np.testing.assert_array_equal(c, np.zeros(2 * m, np.int64))
