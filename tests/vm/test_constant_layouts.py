"""Kernels specialised on their constant operands (``vm/kernels/constant_layouts.py``): what is
kept, for which arrays, how much, and that a fused step with a constant operand gets the
specialised kernel while its results stay bit for bit those of the plain one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_conv_blas import attrs_of, conv_cases
from vm_testlib import KERNEL_SETTINGS, run_in_threads

import vm
import vm.kernels.conv as conv
from vm import Assembler, FusedKernel, FusedStep, Ref, VirtualMachine, tensor
from vm.kernels import constant_layouts, get_kernel_factory
from vm.kernels.constant_layouts import ConstantLayouts, with_constants


def _counting_transpose(calls: list[int]):
    def make(a: np.ndarray) -> np.ndarray:
        calls.append(1)
        return np.ascontiguousarray(a.T)

    return make


def test_a_constants_layout_is_made_once_per_key_and_kept_read_only():
    c = np.arange(6.0).reshape(2, 3)
    layouts, calls = ConstantLayouts([c]), []
    first = layouts.get(c, "t", _counting_transpose(calls))
    again = layouts.get(c, "t", _counting_transpose(calls))
    assert again is first and len(calls) == 1
    np.testing.assert_array_equal(first, c.T)
    assert not first.flags.writeable  # later calls share it: nobody may write it
    layouts.get(c, "other", _counting_transpose(calls))
    assert len(calls) == 2 and len(layouts) == 2


def test_a_layout_that_is_the_constant_itself_leaves_its_flags_alone():
    c = np.arange(6.0)
    layouts = ConstantLayouts([c])
    kept = layouts.get(c, "same", lambda a: a)
    assert c.flags.writeable and not kept.flags.writeable
    assert np.shares_memory(kept, c) and layouts.get(c, "same", lambda a: a) is kept


def test_another_array_is_never_kept_even_if_equal():
    c = np.arange(6.0).reshape(2, 3)
    layouts, calls = ConstantLayouts([c]), []
    twin = c.copy()
    for _ in range(3):
        got = layouts.get(twin, "t", _counting_transpose(calls))
        assert got.flags.writeable  # a fresh array, the caller's to use
    assert len(calls) == 3 and len(layouts) == 0
    assert len(ConstantLayouts().get(c, "t", np.copy)) == 2  # no constants: nothing kept


def test_at_most_layouts_max_are_kept(monkeypatch):
    monkeypatch.setattr(constant_layouts, "LAYOUTS_MAX", 3)
    c = np.ones((2, 2))
    layouts = ConstantLayouts([c])
    for key in range(10):
        layouts.get(c, key, np.copy)
        assert len(layouts) <= 3


def test_a_kernel_without_the_hook_is_returned_as_it_is():
    assert with_constants(np.add, {1: np.ones(3)}) is np.add
    lstm = get_kernel_factory("nn.lstm")(
        {
            "direction": "forward",
            "layout": 0,
            "clip": None,
            "act_f": "sigmoid",
            "act_g": "tanh",
            "act_h": "tanh",
            "input_forget": False,
        }
    )
    assert with_constants(lstm, {}) is lstm
    assert with_constants(lstm, {0: np.ones((1, 1, 1))}) is lstm  # x: nothing to keep of it


@pytest.mark.parametrize("small_maps", [False, True])
@pytest.mark.parametrize("depthwise", [False, True])
@KERNEL_SETTINGS
@given(data=st.data())
def test_conv2d_prepared_on_its_weight_gives_the_plain_kernels_bits(small_maps, depthwise, data):
    # small maps under wide padding take the paths that lay the weight out (channels-last,
    # gathered, taps dropped); the others view it
    case = data.draw(conv_cases(depthwise=depthwise, small_maps=small_maps))
    x, w, strides, pad4, dilation, groups = case
    kernel = get_kernel_factory("nn.conv2d")(attrs_of(strides, pad4, dilation, groups))
    prepared = with_constants(kernel, {1: w})
    assert prepared is not kernel
    out_shape = _conv_out_shape(x, w, strides, pad4, dilation)
    want = np.full(out_shape, np.nan, x.dtype)
    kernel(x, w, want)
    for _ in range(2):  # the layouts made, then kept
        got = np.full(out_shape, np.nan, x.dtype)
        prepared(x, w, got)
        np.testing.assert_array_equal(got, want, strict=True)


@pytest.mark.parametrize(
    ("shape", "weight", "pad4", "scratch_factor", "path"),
    [
        ((4, 120, 10, 10), (120, 1, 5, 5), (2, 2, 2, 2), None, "rows"),
        ((4, 120, 6, 6), (120, 1, 5, 5), (2, 2, 2, 2), None, "dense"),
        ((1, 120, 4, 4), (120, 1, 5, 5), (2, 2, 2, 2), None, "dense"),
        ((2, 16, 20, 20), (16, 1, 7, 7), (3, 3, 3, 3), None, "tiled"),
        ((2, 3, 5, 6), (4, 3, 3, 3), (1, 1, 1, 1), 0, "einsum"),
    ],
)
def test_the_rows_dense_tiled_and_einsum_paths_prepared_give_the_plain_bits(
    monkeypatch, shape, weight, pad4, scratch_factor, path
):
    if scratch_factor is not None:  # not even one row of im2col fits: the einsum contraction
        monkeypatch.setattr(conv, "SCRATCH_FACTOR", scratch_factor)
        monkeypatch.setattr(conv, "PAD_SLACK", 0)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(weight).astype(np.float32)
    groups = shape[1] // weight[1]
    out_shape = _conv_out_shape(x, w, (1, 1), pad4, (1, 1))
    limit = conv._scratch_limit(x, np.empty(out_shape))
    assert conv._plan(x.shape, w.shape, out_shape[2:], pad4, (1, 1), (1, 1), limit).path == path
    kernel = get_kernel_factory("nn.conv2d")(attrs_of((1, 1), pad4, (1, 1), groups))
    want = np.full(out_shape, np.nan, np.float32)
    kernel(x, w, want)
    prepared = with_constants(kernel, {1: w})
    for _ in range(2):
        got = np.full(out_shape, np.nan, np.float32)
        prepared(x, w, got)
        np.testing.assert_array_equal(got, want, strict=True)


def _conv_out_shape(x, w, strides, pad4, dilation):
    (sh, sw), (dh, dw) = strides, dilation
    h = x.shape[2] + pad4[0] + pad4[2] - dh * (w.shape[2] - 1) - 1
    ww = x.shape[3] + pad4[1] + pad4[3] - dw * (w.shape[3] - 1) - 1
    return (x.shape[0], w.shape[0], h // sh + 1, ww // sw + 1)


@pytest.fixture
def recording_op():
    """An op ``test.scaled(x, c) = x * c`` whose kernel records the constants it is
    specialised on and counts the calls of the specialised kernel."""
    name = "test_constant_layouts.scaled"
    seen: list[dict[int, np.ndarray]] = []
    calls: list[int] = []

    @vm.register_kernel(name)
    def factory(attrs):
        def kernel(x, c, out):
            np.multiply(x, c, out)

        def prepared(constants):
            seen.append(dict(constants))

            def specialised(x, c, out):
                calls.append(1)
                np.multiply(x, c, out)

            return specialised

        kernel.with_constants = prepared
        return kernel

    yield name, seen, calls
    vm.unregister_kernel(name)


def _scaled_vm(name: str, c: np.ndarray, constant: bool) -> VirtualMachine:
    scale = Ref("const", 0) if constant else Ref("in", 1)
    fused = FusedKernel(
        "fused_scaled",
        1 if constant else 2,
        1,
        (FusedStep(name, {}, (Ref("in", 0), scale), (Ref("out", 0),)),),
    )
    asm = Assembler()
    asm.const(c)
    k = asm.fused(fused)
    spec = tensor("float32", (3,))
    params = [("x", spec)] if constant else [("x", spec), ("c", spec)]
    f = asm.function("main", params)
    out = f.empty((3,), "float32")
    f.invoke(k, list(f.params), [out])
    f.ret(out)
    return VirtualMachine(asm.build())


def test_a_fused_step_with_a_constant_operand_runs_the_specialised_kernel(recording_op):
    name, seen, calls = recording_op
    c = np.array([1, 2, 3], np.float32)
    m = _scaled_vm(name, c, constant=True)
    assert len(seen) == 1 and list(seen[0]) == [1]
    np.testing.assert_array_equal(seen[0][1], c)
    x = np.ones(3, np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(m.run(x), c)
    assert len(calls) == 2


def test_a_fused_step_without_constant_operands_runs_the_plain_kernel(recording_op):
    name, seen, calls = recording_op
    c = np.array([1, 2, 3], np.float32)
    m = _scaled_vm(name, c, constant=False)
    np.testing.assert_array_equal(m.run(np.ones(3, np.float32), c), c)
    assert seen == [] and calls == []


def test_threads_sharing_a_vm_with_kept_layouts_get_the_answers_they_get_alone() -> None:
    # A convolution with a constant weight (its kept layouts are made by whichever thread
    # comes first, per path), four threads starting together on a fresh VM, and shapes that
    # take several paths: the small-plane ones lay the weight out, the others view it.
    import threading

    import dynshape
    import dynshape.builder as ds

    rng = np.random.default_rng(8)
    x = ds.tensor("x", ("n", 8, "h", "w"), "float32")
    weight = ds.constant_of(rng.standard_normal((16, 8, 3, 3)).astype(np.float32))
    y = ds.relu(ds.conv2d(x, weight, padding=[1, 1, 1, 1]))
    exe = dynshape.compile(ds.build([y], inputs=[x]))
    shapes = [(4, 3, 3), (1, 2, 2), (2, 1, 1), (3, 9, 7), (1, 16, 16)]
    inputs = [rng.standard_normal((n, 8, h, w)).astype(np.float32) for n, h, w in shapes]
    expected = [VirtualMachine(exe).run(v) for v in inputs]
    shared = VirtualMachine(exe)
    start = threading.Barrier(4)
    failures: list[str] = []

    def work(offset: int) -> None:
        start.wait()
        for round_ in range(3 * len(inputs)):
            i = (offset + round_) % len(inputs)
            if not np.array_equal(shared.run(inputs[i]), expected[i]):
                failures.append(f"thread {offset} input {i}")

    run_in_threads(work, 4)
    assert failures == []


def test_keeps_names_the_constants_by_identity():
    w = np.ones((2, 2))
    layouts = ConstantLayouts([w])
    assert layouts.keeps(w)
    assert not layouts.keeps(w.copy())  # equal, but not the constant
    assert not ConstantLayouts().keeps(w)


# ---- nn.bias_add: a constant bias added as its plane --------------------------------------


def _bias_add(axis: int):
    return get_kernel_factory("nn.bias_add")({"axis": axis})


@KERNEL_SETTINGS
@given(data=st.data())
def test_bias_add_prepared_on_its_bias_gives_the_plain_kernels_bits(data):
    # NCHW-like shapes with short runs after the bias's axis (the plane path) and others; two
    # shapes in turn, so the kernel's last operand is replaced and the kept plane reused
    dtype = data.draw(st.sampled_from([np.float32, np.float16, np.float64, np.int32]))
    rank = data.draw(st.integers(1, 4))
    axis = data.draw(st.integers(-rank, rank - 1))
    c = data.draw(st.integers(1, 6))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    bias = (rng.standard_normal(c) * 10).astype(dtype)
    prepared = with_constants(_bias_add(axis), {1: bias})
    shapes = []
    for _ in range(2):
        shape = [data.draw(st.integers(0, 9)) for _ in range(rank)]
        shape[axis] = c
        shapes.append(tuple(shape))
    for shape in (*shapes, shapes[0]):
        x = (rng.standard_normal(shape) * 10).astype(dtype)
        want = x + bias.reshape((c,) + (1,) * (rank - axis % rank - 1))
        got = np.full(shape, 7, dtype)
        prepared(x, bias, got)
        np.testing.assert_array_equal(got, want, strict=True)
        prepared(x, bias, x)  # in place, as a fused chain runs it
        np.testing.assert_array_equal(x, want, strict=True)


def test_bias_add_adds_a_constant_bias_as_its_plane_where_the_run_is_short():
    from vm.kernels import nn

    bias = np.arange(16, dtype=np.float32)
    kept = ConstantLayouts([bias])
    plane = nn._bias_operand(bias, 1, (4, 16, 24, 24), kept)
    assert plane.shape == (16, 24, 24) and plane.flags.c_contiguous
    assert not plane.flags.writeable  # shared by every later call
    assert nn._bias_operand(bias, 1, (2, 16, 24, 24), kept) is plane  # kept, per plane shape
    np.testing.assert_array_equal(plane[:, 5, 7], bias)

    def viewed(operand: np.ndarray) -> bool:
        return operand.base is bias or operand is bias

    assert viewed(nn._bias_operand(bias, 1, (4, 16, 24, 24), ConstantLayouts()))  # not constant
    assert viewed(nn._bias_operand(bias, -1, (4, 16), kept))  # the bias's axis is the last
    assert viewed(nn._bias_operand(bias, 1, (1, 16, 64, 64), kept))  # a run of PLANE_RUN_MAX
    assert not viewed(nn._bias_operand(bias, 1, (1, 16, 63, 63), kept))  # a run just below
    # a plane of PLANE_MAX elements is kept, one more element is not
    for channels, laid in ((nn.PLANE_MAX // 16, True), (nn.PLANE_MAX // 16 + 1, False)):
        wide = np.zeros(channels, np.float32)
        operand = nn._bias_operand(wide, 1, (1, channels, 4, 4), ConstantLayouts([wide]))
        assert (operand.shape == (channels, 4, 4)) is laid


def test_bias_add_of_a_constant_bias_of_the_wrong_length_fails_as_the_plain_kernel_does():
    bias = np.ones(3, np.float32)
    x, out = np.ones((2, 4, 5, 5), np.float32), np.empty((2, 4, 5, 5), np.float32)
    with pytest.raises(ValueError, match="broadcast"):
        _bias_add(1)(x, bias, out)
    with pytest.raises(ValueError, match="broadcast"):
        with_constants(_bias_add(1), {1: bias})(x, bias, out)


def _pointwise_case(n: int, dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, 24, 5, 7)).astype(dtype)
    w = rng.standard_normal((9, 24, 1, 1)).astype(dtype)
    return x, w


@pytest.mark.parametrize("n", [1, 3, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dilation", [(1, 1), (2, 3)])
def test_a_1x1_convolution_prepared_on_its_weight_is_one_matmul_with_the_plain_bits(
    monkeypatch, n, dtype, dilation
):
    # the pointwise kernel multiplies the weight as a matrix; the plain kernel's product of
    # its matmul plan is the same BLAS call, so the bits are the same
    x, w = _pointwise_case(n, dtype)
    kernel = get_kernel_factory("nn.conv2d")(attrs_of((1, 1), (0, 0, 0, 0), dilation, 1))
    want = np.full((n, 9, 5, 7), np.nan, dtype)
    kernel(x, w, want)
    prepared = with_constants(kernel, {1: w})
    monkeypatch.setattr(conv, "_one_tap_product", None)  # the plain path's product: not called
    got = np.full((n, 9, 5, 7), np.nan, dtype)
    prepared(x, w, got)
    np.testing.assert_array_equal(got, want, strict=True)
    oracle = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.float64), x.astype(np.float64))
    np.testing.assert_allclose(got, oracle, rtol=1e-5, atol=1e-5)


CALLS_LEFT_TO_THE_PLAIN_PATH = {
    "float16": lambda x, w: (x.astype(np.float16), w.astype(np.float16)),
    "a strided input": lambda x, w: (x[:, :, ::-1], w),
    "an empty input": lambda x, w: (x[:0], w),
}


@pytest.mark.parametrize("why", list(CALLS_LEFT_TO_THE_PLAIN_PATH))
def test_other_1x1_calls_run_the_plain_path_with_its_bits(why):
    x, w = CALLS_LEFT_TO_THE_PLAIN_PATH[why](*_pointwise_case(2))
    kernel = get_kernel_factory("nn.conv2d")(attrs_of((1, 1), (0, 0, 0, 0), (1, 1), 1))
    prepared = with_constants(kernel, {1: w})
    shape = (x.shape[0], 9, 5, 7)
    want, got = np.full(shape, np.nan, x.dtype), np.full(shape, np.nan, x.dtype)
    kernel(x, w, want)
    prepared(x, w, got)
    np.testing.assert_array_equal(got, want, strict=True)


def test_a_1x1_convolution_prepared_on_its_weight_names_a_wrong_shape_as_the_plain_kernel():
    x, w = _pointwise_case(2)
    kernel = get_kernel_factory("nn.conv2d")(attrs_of((1, 1), (0, 0, 0, 0), (1, 1), 1))
    prepared = with_constants(kernel, {1: w})
    messages = []
    for k, data in ((kernel, x[:, :20]), (prepared, x[:, :20]), (prepared, x)):
        with pytest.raises(ValueError) as e:
            k(data, w, np.empty((2, 9, 5, 6), np.float32))
        messages.append(str(e.value))
    assert messages[0] == messages[1], messages
    assert "do not fit groups=1" in messages[0]
    assert "nn.conv2d" in messages[2]  # the output's wrong width, named by the plain checks
