"""The fast paths of fused kernels give the plain step-by-step kernel's results.

The blocked runner (``vm/fused_blocked.py``) is pure numpy and always tested; the one-expression
runner (``vm/fused_expr.py``) needs the optional ``numexpr`` (the ``fast`` and ``dev`` extras).
Thresholds are lowered here so that small arrays take the fast paths, in blocks that do not
divide the arrays' sizes.
"""

from __future__ import annotations

import numpy as np
import pytest
from vm_testlib import run_in_threads

from vm import (
    Assembler,
    FusedKernel,
    FusedStep,
    KernelError,
    Ref,
    Scratch,
    VirtualMachine,
    fused_blocked,
    fused_expr,
    tensor,
)

IN0, IN1, IN2, OUT0, OUT1 = Ref("in", 0), Ref("in", 1), Ref("in", 2), Ref("out", 0), Ref("out", 1)
TMP0, C0 = Ref("tmp", 0), Ref("const", 0)


def _exe(kernel, in_specs, out_specs, consts=(), scratch_args=()):
    """main(inputs) = kernel(inputs) into fresh outputs (and caller-passed scratch)."""
    asm = Assembler()
    for c in consts:
        asm.const(c)
    k = asm.fused(kernel)
    f = asm.function("main", [(f"x{i}", tensor(d, s)) for i, (d, s) in enumerate(in_specs)])
    outs = [f.empty(s, d) for d, s in out_specs]
    extra = [f.empty(s, d) for d, s in scratch_args]
    f.invoke(k, list(f.params), outs + extra)
    f.ret(f.tuple(outs) if len(outs) > 1 else outs[0])
    return asm.build()


def _vm(exe, fast, **kw):
    """A VM whose fused kernels have their fast paths (``fast``) or only the plain steps."""
    if fast:
        return VirtualMachine(exe, **kw)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fused_expr, "plan_expr", lambda *a: None)
        mp.setattr(fused_blocked, "plan_blocked", lambda *a: None)
        return VirtualMachine(exe, **kw)


def _same(a, b):
    a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6)


@pytest.fixture
def tiny_blocks(monkeypatch):
    """Blocked from 1 element, blocks of 7 elements, the worker thread from 1 element."""
    monkeypatch.setattr(fused_blocked, "BLOCKED_MIN_ELEMENTS", 1)
    monkeypatch.setattr(fused_blocked, "BLOCK_ELEMENTS", 7)
    monkeypatch.setattr(fused_blocked, "THREAD_MIN_ELEMENTS", 1)


def _calls(monkeypatch, module, cls):
    """Count the calls of ``cls.__call__`` that took the fast path (returned True)."""
    taken = []
    original = cls.__call__

    def counting(self, *args):
        ok = original(self, *args)
        taken.append(ok)
        return ok

    monkeypatch.setattr(cls, "__call__", counting)
    return taken


# ------------------------------------------------------------------------------ blocked


def _check(kernel, in_specs, out_specs, args, consts=(), scratch_args=(), check_memory=False):
    exe = _exe(kernel, in_specs, out_specs, consts, scratch_args)
    want = _vm(exe, False).run(*args)
    got = _vm(exe, True, check_memory=check_memory).run(*args)
    _same(got, want)
    return got


SEED = FusedKernel(
    "seed",
    2,
    1,
    (FusedStep("add", {}, (IN0, IN0), (OUT0,)), FusedStep("subtract", {}, (OUT0, IN1), (OUT0,))),
)


@pytest.mark.parametrize("n", [1, 6, 7, 8, 50, 1001])
@pytest.mark.parametrize("check_memory", [False, True])
def test_blocked_seed_matches_plain_at_sizes_that_are_not_a_multiple_of_the_block(
    tiny_blocks, monkeypatch, n, check_memory
):
    taken = _calls(monkeypatch, fused_blocked, fused_blocked.BlockedPlan)
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal((2, n)).astype(np.float32)
    s = ("float32", (n,))
    got = _check(SEED, [s, s], [s], [x, y], check_memory=check_memory)
    np.testing.assert_allclose(got, (x + x) - y, rtol=1e-6)
    assert taken[-1] is (n >= 8)  # two blocks at least, else the plain kernel


def test_blocked_zero_size(tiny_blocks):
    s = ("float32", (0, 5))
    got = _check(SEED, [s, s], [s], [np.zeros((0, 5), np.float32)] * 2)
    assert got.shape == (0, 5)


def test_blocked_broadcasting_operands(tiny_blocks, monkeypatch):
    """Operands of lower rank, of leading dim 1, a full-shape and a 0-d constant."""
    taken = _calls(monkeypatch, fused_blocked, fused_blocked.BlockedPlan)
    kernel = FusedKernel(
        "bcast",
        3,
        1,
        (
            FusedStep("add", {}, (IN0, IN1), (OUT0,)),
            FusedStep("multiply", {}, (OUT0, IN2), (OUT0,)),
            FusedStep("subtract", {}, (OUT0, C0), (OUT0,)),
            FusedStep("maximum", {}, (OUT0, Ref("const", 1)), (OUT0,)),
            FusedStep("tanh", {}, (OUT0,), (OUT0,)),
        ),
    )
    rng = np.random.default_rng(1)
    x = rng.standard_normal((13, 3)).astype(np.float32)
    row = rng.standard_normal((1, 3)).astype(np.float32)
    vec = rng.standard_normal((3,)).astype(np.float32)
    full = rng.standard_normal((13, 3)).astype(np.float32)
    half = np.array(0.5, np.float32)
    got = _check(
        kernel,
        [("float32", (13, 3)), ("float32", (1, 3)), ("float32", (3,))],
        [("float32", (13, 3))],
        [x, row, vec],
        consts=[full, half],
    )
    np.testing.assert_allclose(got, np.tanh(np.maximum((x + row) * vec - full, half)), rtol=1e-6)
    assert taken == [True]


def test_blocked_with_scratch_two_outputs_and_other_dtypes(tiny_blocks, monkeypatch):
    """A scratch like the output, a caller-passed scratch, a bool output, a cast."""
    taken = _calls(monkeypatch, fused_blocked, fused_blocked.BlockedPlan)
    kernel = FusedKernel(
        "mixed",
        2,
        2,
        (
            FusedStep("multiply", {}, (IN0, IN1), (TMP0,)),
            FusedStep("exp", {}, (IN0,), (Ref("tmp", 1),)),
            FusedStep("add", {}, (TMP0, Ref("tmp", 1)), (TMP0,)),
            FusedStep("greater", {}, (TMP0, IN1), (OUT1,)),
            FusedStep("cast", {"dtype": "float64"}, (TMP0,), (OUT0,)),
        ),
        (Scratch("float32", ("like", OUT0)), Scratch("float32", ("arg", 0))),
    )
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((2, 9, 2)).astype(np.float32)
    s = ("float32", (9, 2))
    got = _check(kernel, [s, s], [("float64", (9, 2)), ("bool", (9, 2))], [x, y], scratch_args=[s])
    t = x * y + np.exp(x)
    np.testing.assert_allclose(got[0], t.astype(np.float64), rtol=1e-6)
    np.testing.assert_array_equal(got[1], t > y)
    assert taken == [True]


@pytest.mark.parametrize("fast_path", ["blocked", "expression"])
def test_fast_paths_read_non_contiguous_inputs(tiny_blocks, monkeypatch, fast_path):
    """Strided and transposed views as inputs (the VM passes caller arrays as they are)."""
    if fast_path == "expression" and fused_expr.numexpr_module() is None:
        pytest.skip("numexpr (the fast extra) not installed")
    base = np.arange(60, dtype=np.float32).reshape(10, 6) / 10
    x, y = base[::2, ::2], base[:6, :5].T[:, 1:4]  # (5, 3) each, neither contiguous
    if fast_path == "blocked":
        taken = _calls(monkeypatch, fused_blocked, fused_blocked.BlockedPlan)
        kernel, consts = SEED, []
    else:  # an output small enough for the 12-step chain's limit
        taken = _calls(monkeypatch, fused_expr, fused_expr.ExprPlan)
        kernel, consts, x, y = _chain(12), [np.array(0.5, np.float32)], x[:2], y[:2]
    s = ("float32", x.shape)
    _check(kernel, [s, s], [s], [x, y], consts=consts)
    assert taken == [True]


def test_blocked_not_planned_for_non_elementwise_steps():
    kernel = FusedKernel(
        "center",
        1,
        1,
        (
            FusedStep("sum", {"axis": 1, "keepdims": True, "exclude": False}, (IN0,), (TMP0,)),
            FusedStep("subtract", {}, (IN0, TMP0), (OUT0,)),
        ),
        (Scratch("float32", ("static", (4, 1))),),
    )
    assert fused_blocked.plan_blocked(kernel, []) is None
    assert fused_blocked.plan_blocked(SEED, []) is not None


def test_blocked_failure_names_the_step(tiny_blocks):
    """A bad operand shape fails in the blocks; the plain kernel reports it as usual."""
    bad = FusedKernel(
        "bad",
        2,
        1,
        (FusedStep("add", {}, (IN0, IN0), (OUT0,)), FusedStep("subtract", {}, (OUT0, C0), (OUT0,))),
    )
    exe = _exe(bad, [("float32", (10,))] * 2, [("float32", (10,))], consts=[np.ones(3, np.float32)])
    with pytest.raises(KernelError, match=r"step 1 \(subtract\)"):
        _vm(exe, True).run(np.ones(10, np.float32), np.ones(10, np.float32))


def test_blocked_shared_vm_under_threads(tiny_blocks):
    s = ("float32", (101,))
    exe = _exe(SEED, [s, s], [s])
    m = _vm(exe, True)
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((2, 101)).astype(np.float32) for _ in range(8)]
    want = [(x + x) - y for x, y in inputs]
    errors = []

    def work(k):
        for _ in range(30):
            got = m.run(*inputs[k])
            if not np.array_equal(got, want[k]):
                errors.append(k)

    run_in_threads(work, 8)
    assert errors == []


def test_blocked_thresholds_keep_small_calls_plain(monkeypatch):
    """At the default thresholds a small call never enters the blocked runner."""
    taken = _calls(monkeypatch, fused_blocked, fused_blocked.BlockedPlan)
    s = ("float32", (1000,))
    _check(SEED, [s, s], [s], [np.ones(1000, np.float32)] * 2)
    assert taken == []


# --------------------------------------------------------------------------- expression


def _chain(length, dtype="float32"):
    """A chain of ``length`` steps cycling add, multiply by a constant, subtract, tanh."""
    ops = [
        ("add", (OUT0, IN1)),
        ("multiply", (OUT0, C0)),
        ("subtract", (OUT0, IN1)),
        ("tanh", (OUT0,)),
    ]
    steps = [FusedStep("add", {}, (IN0, IN1), (OUT0,))]
    steps += [FusedStep(*ops[i % 4][:1], {}, ops[i % 4][1], (OUT0,)) for i in range(1, length)]
    return FusedKernel(f"chain{length}", 2, 1, tuple(steps))


needs_numexpr = pytest.mark.skipif(
    fused_expr.numexpr_module() is None, reason="numexpr (the fast extra) not installed"
)


@needs_numexpr
@pytest.mark.parametrize("shape", [(1, 16), (3, 5), (0, 4), (7,), ()])
@pytest.mark.parametrize("check_memory", [False, True])
def test_expression_chain_matches_plain(monkeypatch, shape, check_memory):
    taken = _calls(monkeypatch, fused_expr, fused_expr.ExprPlan)
    rng = np.random.default_rng(4)
    x, y = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    s = ("float32", shape)
    _check(
        _chain(200),
        [s, s],
        [s],
        [x, y],
        consts=[np.array(0.5, np.float32)],
        check_memory=check_memory,
    )
    assert taken == [True]


@needs_numexpr
def test_expression_float64_and_broadcasting(monkeypatch):
    taken = _calls(monkeypatch, fused_expr, fused_expr.ExprPlan)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3))
    y = rng.standard_normal((3,))
    _check(
        _chain(12),
        [("float64", (2, 3)), ("float64", (3,))],
        [("float64", (2, 3))],
        [x, y],
        consts=[np.array(0.25)],
    )
    assert taken == [True]


@needs_numexpr
def test_expression_other_dtypes_run_the_plain_kernel(monkeypatch):
    """Compiled for float32 (its constant's dtype): float64 arrays take the plain steps."""
    taken = _calls(monkeypatch, fused_expr, fused_expr.ExprPlan)
    s = ("float64", (2, 3))
    _check(_chain(12), [s, s], [s], [np.ones((2, 3))] * 2, consts=[np.array(0.5, np.float32)])
    assert taken == [False]


@needs_numexpr
def test_expression_thresholds(monkeypatch):
    """Short kernels and large outputs keep the plain kernel."""
    taken = _calls(monkeypatch, fused_expr, fused_expr.ExprPlan)
    assert fused_expr.plan_expr(SEED, []) is None  # 2 steps: below EXPR_MIN_STEPS
    plan = fused_expr.plan_expr(_chain(12), [np.array(0.5, np.float32)])
    assert plan is not None
    n = plan.max_elements + 1
    s = ("float32", (n,))
    _check(
        _chain(12), [s, s], [s], [np.ones(n, np.float32)] * 2, consts=[np.array(0.5, np.float32)]
    )
    assert taken == []


@needs_numexpr
def test_expression_shared_vm_under_threads():
    s = ("float32", (1, 16))
    exe = _exe(_chain(40), [s, s], [s], consts=[np.array(0.5, np.float32)])
    m, plain = _vm(exe, True), _vm(exe, False)
    rng = np.random.default_rng(6)
    inputs = [rng.standard_normal((2, 1, 16)).astype(np.float32) for _ in range(8)]
    want = [np.array(plain.run(x, y)) for x, y in inputs]
    errors = []

    def work(k):
        for _ in range(50):
            if not np.allclose(m.run(*inputs[k]), want[k], rtol=1e-6, atol=1e-6):
                errors.append(k)

    run_in_threads(work, 8)
    assert errors == []


def test_size_limit_follows_the_cost_model():
    """Transcendental ops lower the limit; too few steps to pay the call give 0."""
    arith = fused_expr.size_limit(["add", "multiply"] * 50)
    tanh = fused_expr.size_limit(["add", "tanh"] * 50)
    assert fused_expr.EXPR_MAX_ELEMENTS >= arith > tanh > 0
    assert fused_expr.size_limit(["add"] * 7) == 0
    assert fused_expr.size_limit(["add", "tanh", "multiply", "subtract"] * 50) >= 16


def test_translation_uses_only_generated_names_and_fixed_text():
    """Op names outside the table are refused; the text names operands ``v<k>`` only."""
    found = fused_expr.translate(_chain(8), 1)
    assert found is not None
    text, operands = found
    assert operands == [("in", 0), ("in", 1), ("const", 0)]
    assert set(text) <= set("v012 +-*()tanh")
    odd = FusedKernel("odd", 1, 1, (FusedStep("nn.relu", {}, (IN0,), (OUT0,)),))
    assert fused_expr.translate(odd, 0) is None
    two = FusedKernel(
        "two", 1, 2, (FusedStep("exp", {}, (IN0,), (OUT0,)), FusedStep("exp", {}, (IN0,), (OUT1,)))
    )
    assert fused_expr.translate(two, 0) is None


def test_without_numexpr_chains_run_plain(monkeypatch):
    """The VM works with numpy alone: no numexpr, no expression plan, the same results."""
    monkeypatch.setattr(fused_expr, "numexpr_module", lambda: None)
    assert fused_expr.plan_expr(_chain(20), [np.array(0.5, np.float32)]) is None
    s = ("float32", (1, 16))
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)
    _check(_chain(20), [s, s], [s], [x, x], consts=[np.array(0.5, np.float32)])


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_blocked_threads_work_in_a_forked_child(tiny_blocks):
    """The worker pool made in the parent is not reused by a child (it has no thread there)."""
    import os
    import signal

    s = ("float32", (50,))
    m = _vm(_exe(SEED, [s, s], [s]), True)
    x = np.arange(50, dtype=np.float32)
    np.testing.assert_array_equal(m.run(x, x), x)  # the parent's pool now exists
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if the blocked, threaded call completes correctly
        signal.alarm(20)  # a child waiting for a worker that does not exist dies, not hangs
        ok = np.array_equal(m.run(x, x), x)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
