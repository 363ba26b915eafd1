"""Custom ops registered from outside the package (``custom_ops_example.py``): used from the
text format and the builder, typed symbolically, fused when elementwise, run on the VM, saved
and loaded (in this process and in a fresh one), and a clear error where the op is missing."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import custom_ops_example
import numpy as np
import pytest

import dynshape
import dynshape.builder as ds
import ir
import vm
from dynshape.custom_op import register_op, unregister_op
from dynshape.errors import BuildError

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True, scope="module")
def _registered() -> Iterator[None]:
    """The example ops exist while these tests run, and no op of theirs outlives them (the
    registries are per process; other tests check that every op is covered)."""
    custom_ops_example.register()
    yield
    for name in ("example.softplus", "example.above", "test_custom.twice", "test_custom.attrs"):
        if ir.has_op(name):  # a deselected test registered nothing (unregister_op would raise)
            unregister_op(name)


def softplus(x: np.ndarray, beta: float = 1.0) -> np.ndarray:
    return (np.log1p(np.exp(beta * x)) / beta).astype(x.dtype)


def _build() -> ds.Program:
    x = ds.tensor("x", ("n",), "float32")
    y = ds.op("example.softplus")(x + 1, beta=2.0) - 1
    return ds.build((y, ds.op("example.above")(y, threshold=0.5)), [x])


def _reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = softplus(x + 1, 2.0) - 1
    return y, y[y > 0.5]


def test_the_ops_are_declared_in_all_three_registries() -> None:
    import shape_funcs

    assert custom_ops_example.register is not None
    for name in ("example.softplus", "example.above"):
        assert ir.has_op(name) and shape_funcs.has_shape_func(name) and vm.has_kernel(name)
    assert shape_funcs.get_shape_func("example.above").data_dependent == (True,)
    assert ir.get_op("example.softplus").pattern == ir.OpPattern.ELEMWISE


def test_text_format_types_fuses_and_runs() -> None:
    text = """
def @main(%x: Tensor[(n, 4), float32]) {
  %0 = example.softplus(add(%x, %x), beta=0.5);
  example.above(reshape(%0, newshape=[-1]), threshold=1.0)
}
"""
    stages = dynshape.stages(text)
    main = stages["types"].main
    assert str(main.body.ty) == "Tensor[(?,), float32]"
    fused = str(stages["fused"])
    # add and the custom elementwise op share one primitive function.
    primitive = next(b for b in fused.split("fn (") if "example.softplus" in b)
    assert "add(" in primitive
    exe = dynshape.compile(text)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    y = softplus(x + x, 0.5).reshape(-1)
    np.testing.assert_allclose(vm.VirtualMachine(exe).run(x), y[y > 1.0], rtol=1e-6)


def test_builder_types_the_custom_ops_symbolically() -> None:
    x = ds.tensor("x", ("n",), "float32")
    y = ds.op("example.softplus")(x)
    z = ds.op("example.above")(y)
    assert str(y.type) == "Tensor[(n,), float32]"
    assert len(z.shape) == 1 and ir.is_anonymous(z.shape[0])
    with pytest.raises(BuildError, match=r"example\.softplus.*floating-point"):
        ds.op("example.softplus")(ds.tensor("i", ("n",), "int32"))


@pytest.mark.parametrize("n", [0, 1, 9])
def test_end_to_end_and_after_save_and_load(n: int, tmp_path: Path) -> None:
    exe = dynshape.compile(_build())
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    want = _reference(x)
    for got, ref in zip(vm.VirtualMachine(exe).run(x), want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-6)
    path = tmp_path / "custom.dsx"
    exe.save(path)
    loaded = dynshape.Executable.load(path)
    for got, ref in zip(vm.VirtualMachine(loaded).run(x), want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-6)


def _run_python(code: str, with_examples: bool) -> subprocess.CompletedProcess[str]:
    paths = [str(ROOT)] + ([str(HERE)] if with_examples else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT
    )


def test_a_fresh_process_that_registers_the_ops_runs_the_saved_executable(tmp_path: Path) -> None:
    path = tmp_path / "custom.dsx"
    dynshape.compile(_build()).save(path)
    code = f"""
import numpy as np
import custom_ops_example
import vm
custom_ops_example.register()
exe = vm.Executable.load({str(path)!r})
y, big = vm.VirtualMachine(exe).run(np.array([-3, 0, 2, 5], np.float32))
print(y.tolist(), big.tolist())
"""
    result = _run_python(code, with_examples=True)
    assert result.returncode == 0, result.stderr
    y, big = _reference(np.array([-3, 0, 2, 5], np.float32))
    assert len(big) == 2
    assert result.stdout.strip() == f"{y.tolist()} {big.tolist()}"


def test_loading_without_the_registration_names_the_op(tmp_path: Path) -> None:
    path = tmp_path / "custom.dsx"
    dynshape.compile(_build()).save(path)
    result = _run_python(f"import vm; vm.Executable.load({str(path)!r})", with_examples=False)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "FormatError" in last and "'example.softplus' has no registered kernel" in last


def test_register_op_returns_the_builder_function_and_rejects_bad_declarations() -> None:
    twice = register_op(
        "test_custom.twice",
        pattern="elementwise",
        kernel=lambda x, out: np.multiply(x, 2, out=out),
    )
    x = ds.tensor("x", ("n", 2), "int32")
    program = ds.build(twice(x) + 1, [x])
    np.testing.assert_array_equal(
        dynshape.VirtualMachine(dynshape.compile(program)).run(np.ones((3, 2), np.int32)),
        np.full((3, 2), 3, np.int32),
    )
    with pytest.raises(BuildError, match=r"already registered \(an IR op, a shape function"):
        register_op("test_custom.twice", kernel=lambda x, out: None)
    bad = [
        ({"pattern": "elementwise", "data_dependent": ["x"]}, "must be opaque"),
        ({"pattern": "opaque"}, "a shape_func is needed for a OPAQUE op"),
        ({"pattern": "wobbly"}, "unknown pattern 'wobbly'"),
        ({"shape_func": lambda ctx, a, b: a}, "takes 2 inputs .a, b. but the op has 1"),
        ({"pattern": "elementwise", "data_dependent": ["y"]}, "'y', which is not an input"),
        ({"pattern": "elementwise", "attrs": {"k": object()}}, "attribute 'k'"),
        ({"pattern": "elementwise", "dtype": "complex"}, "dtype must be"),
    ]
    for options, message in bad:
        with pytest.raises(BuildError, match=message):
            register_op("test_custom.bad", kernel=lambda x, out: None, **options)  # type: ignore[arg-type]
        # Nothing was registered halfway.
        assert not ir.has_op("test_custom.bad") and not vm.has_kernel("test_custom.bad")


def test_attribute_kinds_from_defaults_and_names() -> None:
    register_op(
        "test_custom.attrs",
        attrs={"k": "int", "scale": 1.5, "flip": False, "axes": [0], "mode": ("str", "a")},
        pattern="elementwise",
        kernel=lambda x, out, **attrs: np.copyto(out, x),
    )
    op = ir.get_op("test_custom.attrs")
    assert {a.name: (a.kind.name, a.required) for a in op.attrs} == {
        "k": ("int", True),
        "scale": ("float", False),
        "flip": ("bool", False),
        "axes": ("list[int]", False),
        "mode": ("str", False),
    }
    x = ds.tensor("x", (2,), "float32")
    line = inspect.currentframe().f_lineno + 2  # type: ignore[union-attr]
    with pytest.raises(BuildError, match="missing required attribute 'k'") as info:
        ds.op("test_custom.attrs")(x)
    assert info.value.span is not None and info.value.span.line == line


@pytest.mark.parametrize("in_place", [True, False])
def test_a_custom_op_declared_in_place_is_written_over_its_dying_input(in_place: bool) -> None:
    name = f"test_custom.normalize_{'in_place' if in_place else 'apart'}"

    def normalize(x: np.ndarray, out: np.ndarray) -> None:
        """Rows scaled to unit max: the max is taken before the first write."""
        np.divide(x, np.abs(x).max(axis=-1, keepdims=True), out=out)

    op = register_op(
        name,
        inputs=["x"],
        pattern="opaque",
        shape_func=lambda ctx, x: x,  # the input's shape
        kernel=normalize,
        in_place=in_place,
    )
    try:
        x = ds.tensor("x", ("n", 4), "float32")
        w = ds.tensor("w", (4, 4), "float32")
        program = ds.build(ds.dense(op(ds.dense(x, w)), w), inputs=[x, w])
        planned = str(dynshape.stages(program)["planned"]["main"])
        offsets = [
            line.split("%arena")[1].split("shape=")[0]
            for line in planned.splitlines()
            if "alloc_tensor" in line
        ]
        # The op's output shares the bytes of the dense result it reads only when declared so.
        assert (offsets[0] == offsets[1]) is in_place, planned
        rng = np.random.default_rng(0)
        xs = rng.standard_normal((5, 4)).astype(np.float32)
        ws = rng.standard_normal((4, 4)).astype(np.float32)
        h = xs @ ws.T
        want = (h / np.abs(h).max(axis=-1, keepdims=True)) @ ws.T
        got = dynshape.VirtualMachine(dynshape.compile(program), check_memory=True).run(xs, ws)
        np.testing.assert_allclose(got, want, rtol=1e-5)
    finally:
        unregister_op(name)


@pytest.mark.parametrize(
    ("inputs", "attrs", "message"),
    [
        (("lambda",), None, "names are Python identifiers (not a keyword, not 'ctx'"),
        (("ctx",), None, "got 'ctx'"),
        (("x",), {"x": 1}, "inputs and attributes need distinct names"),
    ],
)
def test_names_that_cannot_be_arguments_are_refused(inputs, attrs, message) -> None:
    with pytest.raises(BuildError, match=re.escape(message)):
        register_op(
            "test_custom.badnames",
            inputs=inputs,
            attrs=attrs,
            pattern="elementwise",
            kernel=lambda x, out, **_: np.copyto(out, x),
        )
    assert not ir.has_op("test_custom.badnames")
