"""An op's workspace as planned memory (``dynshape/analysis/workspace.py``): ``nn.conv2d``'s
im2col buffers are a scratch slot of its step, allocated in the IR, shown in the memory report,
bounded by the VM's memory limit, and checked wherever a file can get them wrong."""

from __future__ import annotations

import re
import textwrap

import numpy as np
import pytest

import dynshape
from dynshape.errors import CompileError
from dynshape.memory_report import memory_report
from ir.text import module_to_text
from shape_funcs.workspace import workspace_bytes
from vm import FusedKernel, FusedStep, Ref, Scratch
from vm.errors import FormatError, MemoryLimitError

CONV = """
def @main(%x: Tensor[(n, 4, h, w), float32], %k: Tensor[(8, 4, 3, 3), float32],
          %b: Tensor[(8, 1, 1), float32], %p: Tensor[(2, 8, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %k, padding=[1, 1, 1, 1]);
  %1 = nn.relu(add(%0, %b));
  nn.conv2d(%1, %p)
}
"""

ATTRS = {"strides": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1}


def _manifest() -> str:
    return module_to_text(dynshape.stages(textwrap.dedent(CONV))["manifest"], show_types=False)


def _inputs(n: int, h: int, w: int) -> list[np.ndarray]:
    rng = np.random.default_rng(n * 100 + h * 10 + w)
    return [
        rng.standard_normal(s).astype(np.float32)
        for s in [(n, 4, h, w), (8, 4, 3, 3), (8, 1, 1), (2, 8, 1, 1)]
    ]


def _expected(x, k, b, p):
    n, _, h, w = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((n, 8, h, w))
    for i in range(3):
        for j in range(3):
            y += np.einsum("nchw,oc->nohw", xp[:, :, i : i + h, j : j + w], k[:, :, i, j])
    y = np.maximum(y + b, 0)
    return np.einsum("nchw,oc->nohw", y, p[:, :, 0, 0])


def test_a_convolution_writes_its_workspace_into_a_planned_scratch_slot():
    text = _manifest()
    steps = re.findall(r'Steps="([^"]*)"', text)
    assert steps == ["0 nn.conv2d -> o0,t0; 1 add -> o0; 2 nn.relu -> o0"]
    (alloc,) = re.findall(r"%workspace = memory.alloc_tensor\(%\w+, shape=\[([^\]]*)\]", text)
    size = int(alloc.replace("*h*n*w", "").split(" ")[0])  # the h*n*w coefficient
    # the rule at n = h = w = 1 and 2 gives the coefficient of h*n*w: the flat path's
    # im2col buffer (4 * 9 taps), its product (8) and the padded region (4), in float32
    one = workspace_bytes("nn.conv2d", (1, 8, 1, 1), [(1, 4, 1, 1), (8, 4, 3, 3)], "float32", ATTRS)
    assert size == 4 * (4 * 9 + 8 + 4) and one > 0
    # the 1x1 convolution needs none: a lone op, one matmul into its result
    assert 'Steps="0 nn.conv2d' not in text.split("%workspace")[-1]
    assert text.count("%workspace") == 2  # its alloc and the invoke passing it


def test_the_memory_report_shows_the_workspace_with_its_size():
    report = memory_report(textwrap.dedent(CONV), {"n": 2, "h": 16, "w": 16})["main"].format()
    nbytes = workspace_bytes(
        "nn.conv2d", (2, 8, 16, 16), [(2, 4, 16, 16), (8, 4, 3, 3)], "float32", ATTRS
    )
    assert re.search(rf"%workspace\s+offset \d+, {nbytes} bytes, steps", report), report


@pytest.mark.parametrize("check_memory", [False, True])
@pytest.mark.parametrize(("n", "h", "w"), [(1, 1, 1), (2, 7, 5), (3, 16, 9), (0, 4, 4)])
def test_convolutions_with_workspaces_give_numpy_s_answers(check_memory, n, h, w):
    vm = dynshape.VirtualMachine(dynshape.compile(textwrap.dedent(CONV)), check_memory=check_memory)
    args = _inputs(n, h, w)
    np.testing.assert_allclose(vm.run(*args), _expected(*args), rtol=1e-4, atol=1e-4)


def test_the_memory_limit_counts_the_workspace():
    exe = dynshape.compile(textwrap.dedent(CONV))
    args = _inputs(2, 32, 32)
    outputs = 4 * 2 * 8 * 32 * 32 + 4 * 2 * 2 * 32 * 32  # the two results, without scratch
    with pytest.raises(MemoryLimitError):
        dynshape.VirtualMachine(exe, memory_limit=2 * outputs).run(*args)
    workspace = workspace_bytes(
        "nn.conv2d", (2, 8, 32, 32), [(2, 4, 32, 32), (8, 4, 3, 3)], "float32", ATTRS
    )
    vm = dynshape.VirtualMachine(exe, memory_limit=outputs + workspace + (1 << 16))
    np.testing.assert_allclose(vm.run(*args), _expected(*args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("dests", "message"),
    [
        ("o0", "gives nn.conv2d (step 0) 1 destinations for 1 results and its workspace"),
        ("o0,o0", "gives nn.conv2d (step 0)'s workspace an output, not a scratch slot"),
    ],
)
def test_a_recorded_plan_that_drops_or_misplaces_the_workspace_is_refused(dests, message):
    text = _manifest().replace("0 nn.conv2d -> o0,t0;", f"0 nn.conv2d -> {dests};")
    with pytest.raises(CompileError, match=re.escape(message)):
        dynshape.compile(text, start="manifest")


def _conv_kernel(outputs: tuple[Ref, ...], scratch: tuple[Scratch, ...]) -> FusedKernel:
    step = FusedStep("nn.conv2d", ATTRS, (Ref("in", 0), Ref("in", 1)), outputs)
    return FusedKernel("fused_conv2d", 2, 1, (step,), scratch)


def test_the_vm_refuses_a_workspace_that_is_an_output_or_not_bytes():
    good = _conv_kernel((Ref("out", 0), Ref("tmp", 0)), (Scratch("uint8", ("arg", 0)),))
    good.validate(0, "k0")
    as_output = FusedKernel(
        "f",
        2,
        2,
        (FusedStep("nn.conv2d", ATTRS, good.steps[0].inputs, (Ref("out", 0), Ref("out", 1))),),
    )
    with pytest.raises(FormatError, match="workspace: expected a ref of kind tmp"):
        as_output.validate(0, "k0")
    floats = _conv_kernel((Ref("out", 0), Ref("tmp", 0)), (Scratch("float32", ("arg", 0)),))
    with pytest.raises(FormatError, match="scratch 0 is a workspace of float32, not uint8"):
        floats.validate(0, "k0")


def test_the_vm_refuses_a_step_reading_a_workspace():
    conv = FusedStep(
        "nn.conv2d", ATTRS, (Ref("in", 0), Ref("in", 1)), (Ref("tmp", 1), Ref("tmp", 0))
    )
    relu = FusedStep("nn.relu", {}, (Ref("tmp", 0),), (Ref("out", 0),))
    scratch = (Scratch("uint8", ("arg", 0)), Scratch("float32", ("arg", 1)))
    kernel = FusedKernel(
        "f",
        2,
        1,
        (conv, FusedStep("add", {}, (Ref("tmp", 1), Ref("tmp", 1)), (Ref("tmp", 0),)), relu),
        scratch,
    )
    with pytest.raises(FormatError, match="reads scratch 0, a workspace"):
        kernel.validate(0, "k0")
