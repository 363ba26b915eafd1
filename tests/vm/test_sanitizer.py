"""The memory sanitizer (``check_memory=True``): poisoned memory, dead registers and dead views.

Each buggy program is hand-assembled; the sanitizer must stop it at the first instruction that
uses the dead value, with a message naming that instruction, the register and the kill (or other
release) that freed it. Correct programs must run exactly as without the sanitizer.
"""

from __future__ import annotations

import numpy as np
import pytest
from vm_testlib import elementwise_program

from vm import (
    Assembler,
    FormatError,
    FusedKernel,
    FusedStep,
    NaiveAllocator,
    PooledAllocator,
    Ref,
    Scratch,
    ShapeProgramBuilder,
    VirtualMachine,
    tensor,
    tuple_type,
)
from vm.errors import DeadTensorError
from vm.sanitizer import POISON_FLOAT, POISON_OTHER, Killed

VEC = tensor("float32", (4,))
ONES = np.ones(4, np.float32)


def _vec_program():
    """An assembler with a ``copy`` kernel and ``main(x: float32[4]) -> float32[4]``."""
    asm = Assembler()
    copy = asm.kernel("copy")
    f = asm.function("main", [("x", VEC)], VEC)
    return asm, copy, f


def _dead(exe, *args, **kw) -> DeadTensorError:
    with pytest.raises(DeadTensorError) as info:
        VirtualMachine(exe, check_memory=True, **kw).run(*args)
    return info.value


# ---- buggy programs -----------------------------------------------------------------------


def test_reading_a_killed_tensor_register():
    asm, copy, f = _vec_program()
    (x,) = f.params
    s = f.alloc_storage(16)
    t = f.alloc_tensor(s, 0, (4,), "float32")  # %2
    f.invoke(copy, [x], [t])
    f.kill(t)  # @3
    out = f.alloc_tensor(f.alloc_storage(16), 0, (4,), "float32")
    f.invoke(copy, [t], [out])  # @6
    f.ret(out)
    # Refused before anything runs, checked or not: the register-kind analysis sees the kill.
    with pytest.raises(FormatError) as info:
        asm.build()
    assert str(info.value) == (
        "function 'main', instruction 6 (invoke k0, (%2), (%4)): input 0 %2 is read after "
        "instruction 3 (kill (%2)) killed it, on some path"
    )


def test_reading_a_tensor_whose_storage_was_killed():
    asm, copy, f = _vec_program()
    (x,) = f.params
    s = f.alloc_storage(16)  # %1
    t = f.alloc_tensor(s, 0, (4,), "float32")  # %2
    f.invoke(copy, [x], [t])
    f.kill(s)  # @3: the storage goes back to the pool while %2 still views it
    out = f.alloc_tensor(f.alloc_storage(1024), 0, (4,), "float32")  # another size class
    f.invoke(copy, [t], [out])
    f.ret(out)
    exe = asm.build()
    err = _dead(exe, ONES)
    assert str(err) == (
        "dead tensor: register %2 (input 0) is a view of a storage freed by main@3: kill (%1)\n"
        "  at main@6: invoke k0<copy>, (%2), (%4)"
    )
    assert err.register == 2
    # Without the sanitizer the (buggy) program runs: a new storage of another size class
    # did not reuse the buffer, so it even looks right.
    np.testing.assert_array_equal(VirtualMachine(exe).run(ONES), ONES)


def _reuse_program():
    """Storage %1 is killed, the pool hands its buffer to %3 for a new tensor, and the old view
    %2 is read afterwards."""
    asm, copy, f = _vec_program()
    (x,) = f.params
    neg = asm.kernel("negative")
    s1 = f.alloc_storage(16)
    old = f.alloc_tensor(s1, 0, (4,), "float32")  # %2
    f.invoke(copy, [x], [old])
    f.kill(s1)  # @3
    s2 = f.alloc_storage(16)  # @4: same size class: the same buffer, from the pool
    new = f.alloc_tensor(s2, 0, (4,), "float32")
    f.invoke(neg, [x], [new])  # overwrites what %2 sees
    out = f.alloc_tensor(f.alloc_storage(16), 0, (4,), "float32")
    f.invoke(copy, [old], [out])  # @9
    f.ret(out)
    return asm.build()


def test_a_storage_reused_by_the_pool_while_an_old_view_is_read():
    exe = _reuse_program()
    err = _dead(exe, ONES)
    assert str(err) == (
        "dead tensor: register %2 (input 0) is a view of a storage freed by main@3: kill (%1) "
        "and since reused by main@4: alloc_storage %3, 16, 64, 'float32' (the view is of "
        "generation 1, the storage is now at generation 2)\n"
        "  at main@9: invoke k0<copy>, (%2), (%6)"
    )
    # What the sanitizer prevents: silently reading the new tenant's data (the result's buffer,
    # when the pool hands results out too; without an arena, whose first call holds every
    # storage to its end, vm/memory/arena.py).
    pool = PooledAllocator(fresh_results=False, arenas=False)
    np.testing.assert_array_equal(VirtualMachine(exe, allocator=pool).run(ONES), -ONES)


def test_reused_twice_names_both_generations():
    asm, copy, f = _vec_program()
    (x,) = f.params
    s1 = f.alloc_storage(16)
    old = f.alloc_tensor(s1, 0, (4,), "float32")
    f.invoke(copy, [x], [old])
    f.kill(s1)
    s2 = f.alloc_storage(16)
    f.kill(s2)
    f.alloc_storage(16)
    f.ret(old)
    err = _dead(asm.build(), ONES)
    assert "view is of generation 1, the storage is now at generation 3" in str(err)
    assert "latest free by main@5: kill" in str(err)


def test_writing_into_a_dead_tensor_is_caught_too():
    asm, copy, f = _vec_program()
    (x,) = f.params
    s = f.alloc_storage(16)
    t = f.alloc_tensor(s, 0, (4,), "float32")
    f.kill(s)
    f.invoke(copy, [x], [t])
    f.ret(x)
    err = _dead(asm.build(), ONES)
    assert "register %2 (output 0) is a view of a storage freed by main@2: kill (%1)" in str(err)


def test_a_view_of_a_freed_storage_cannot_be_made():
    asm, _, f = _vec_program()
    s = f.alloc_storage(16)
    alias = f.move(s)
    f.kill(s)
    f.ret(f.alloc_tensor(alias, 0, (4,), "float32"))
    err = _dead(asm.build(), ONES)
    assert str(err) == (
        "dead storage: register %2 holds a storage freed by main@2: kill (%1)\n"
        "  at main@3: alloc_tensor %3, %2, 0, (4,), 'float32'"
    )


def test_returning_a_dead_view():
    asm, copy, f = _vec_program()
    (x,) = f.params
    s = f.alloc_storage(16)
    t = f.alloc_tensor(s, 0, (4,), "float32")
    f.invoke(copy, [x], [t])
    f.kill(s)
    f.ret(t)
    err = _dead(asm.build(), ONES)
    assert err.where == "main@4: ret %2"
    assert "register %2 is a view of a storage freed by main@3" in str(err)


def test_reshape_tuple_call_and_branch_of_dead_values():
    for use in ("reshape", "tuple", "call", "jump_if_not", "move", "shape_of"):
        asm = Assembler()
        g = asm.function("g", [("v", VEC)], VEC)
        g.ret(g.params[0])
        f = asm.function("main", [("x", VEC)], VEC)
        (x,) = f.params
        s = f.alloc_storage(16)
        t = f.alloc_tensor(s, 0, (4,), "float32")
        if use in ("move", "shape_of"):
            f.kill(s, t)  # the register itself is killed: even its shape is gone
        else:
            f.kill(s)
        if use == "reshape":
            f.reshape(t, (2, 2))
        elif use == "tuple":
            f.tuple([x, t])
        elif use == "call":
            f.call("g", [t])
        elif use == "jump_if_not":
            end = f.label()
            f.jump_if_not(t, end)
            f.place(end)
        elif use == "move":
            f.move(t)
        else:
            f.shape_of(t)
        f.ret(x)
        if use in ("move", "shape_of"):  # reading a killed register is refused at build
            with pytest.raises(FormatError, match=r"instruction 3 .* is read after instruction 2"):
                asm.build()
            continue
        err = _dead(asm.build(), ONES)
        assert err.where is not None and err.where.startswith(f"main@3: {use} "), use
        assert err.register == 2 and err.freed_by == "main@2: kill (%1)"


def test_get_item_checks_only_the_field_it_reads():
    asm, _, f = _vec_program()
    (x,) = f.params
    s = f.alloc_storage(16)
    t = f.alloc_tensor(s, 0, (4,), "float32")
    pair = f.tuple([x, t])
    f.kill(s)
    f.get_item(pair, 0)  # the live field: fine
    f.ret(f.get_item(pair, 1))  # @5
    err = _dead(asm.build(), ONES)
    assert str(err).startswith(
        "dead tensor: field 1 of register %3 is a view of a storage freed by main@3: kill (%1)"
    )
    assert err.where == "main@5: get_item %5, %3, 1"


def test_a_dead_field_of_a_tuple_passed_to_a_call():
    asm = Assembler()
    g = asm.function("g", [("p", tuple_type(VEC, VEC))], VEC)
    g.ret(g.get_item(g.params[0], 0))
    f = asm.function("main", [("x", VEC)], VEC)
    (x,) = f.params
    s = f.alloc_storage(16)
    t = f.alloc_tensor(s, 0, (4,), "float32")
    pair = f.tuple([x, t])
    f.kill(s)
    f.ret(f.call("g", [pair]))
    err = _dead(asm.build(), ONES)
    assert str(err) == (
        "dead tensor: field 1 of register %3 (argument 0) is a view of a storage freed by "
        "main@3: kill (%1)\n  at main@4: call %4, f0<g>, (%3)"
    )


def test_a_dead_value_in_a_callee_is_located_in_the_callee():
    asm = Assembler()
    copy = asm.kernel("copy")
    g = asm.function("g", [("v", VEC)], VEC)
    (v,) = g.params
    s = g.alloc_storage(16)
    t = g.alloc_tensor(s, 0, (4,), "float32")
    g.kill(s)
    g.invoke(copy, [v], [t])
    g.ret(t)
    f = asm.function("main", [("x", VEC)], VEC)
    f.ret(f.call("g", [f.params[0]]))
    err = _dead(asm.build(), ONES)
    assert err.where == "g@3: invoke k0<copy>, (%0), (%2) (call depth 1)"
    assert "freed by g@2: kill (%1)" in str(err)


# ---- killing a tensor register, and correct programs ------------------------------------


def test_killing_a_tensor_register_frees_nothing():
    """Consistent with the unchecked VM: killing a view drops the register only; other views of
    its storage stay valid."""
    asm, copy, f = _vec_program()
    (x,) = f.params
    s = f.alloc_storage(16)
    t = f.alloc_tensor(s, 0, (4,), "float32")
    f.invoke(copy, [x], [t])
    same = f.alloc_tensor(s, 0, (4,), "float32")
    f.kill(t)
    f.ret(same)
    m = VirtualMachine(asm.build(), check_memory=True)
    np.testing.assert_array_equal(m.run(ONES), ONES)
    assert m.allocator.stats.live_bytes == 0


def test_killing_twice_and_overwriting_a_killed_register_are_fine():
    asm, copy, f = _vec_program()
    (x,) = f.params
    s = f.alloc_storage(16)
    f.kill(s)
    f.kill(s)
    f.alloc_storage(16, dst=s)  # the register is written again: alive
    t = f.alloc_tensor(s, 0, (4,), "float32")
    f.invoke(copy, [x], [t])
    f.ret(t)
    np.testing.assert_array_equal(VirtualMachine(asm.build(), check_memory=True).run(ONES), ONES)


@pytest.mark.parametrize("allocator", ["pooled", "naive"])
@pytest.mark.parametrize("policy", ["auto", "copy", "transfer"])
def test_correct_programs_run_unchanged(allocator, policy):
    exe = elementwise_program("add")  # kills its intermediate after the last use
    checked = VirtualMachine(exe, allocator=allocator, output_policy=policy, check_memory=True)
    # The sanitizer pools small results too (it poisons every byte it hands out), which a
    # pooled allocator otherwise leaves to numpy (vm/fresh_results.py), and it sees each
    # storage, packing no arenas (vm/memory/arena.py): the plain VM does alike.
    pooled = PooledAllocator(fresh_results=False, arenas=False)
    same = pooled if allocator == "pooled" else allocator
    plain = VirtualMachine(exe, allocator=same, output_policy=policy)
    rng = np.random.default_rng(0)
    for n in (0, 1, 5, 300, 5, 1, 0, 300):
        x = rng.standard_normal((n, 4)).astype(np.float32)
        y = rng.standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_array_equal(checked.run(x, y), plain.run(x, y))
        assert checked.allocator.stats.live_bytes == 0
    # Same allocator traffic: the sanitizer changes what is in memory, not how it is managed.
    assert checked.allocator.stats == plain.allocator.stats


def test_recursion_and_profiling_work_with_the_sanitizer():
    """Each frame of a recursive function allocates, kills its storage and returns."""
    asm = Assembler()
    add = asm.kernel("add", num_inputs=2)
    b = ShapeProgramBuilder(["k"])
    minus_one = asm.shape_program(b.build([b.inputs[0] - 1]))
    g = asm.function("rec", [("x", VEC), ("k", tensor("int64", ()))], VEC)
    x, k = g.params
    done = g.label()
    g.jump_if_not(k, done)
    s = g.alloc_storage(16)
    t = g.alloc_tensor(s, 0, (4,), "float32")
    g.invoke(add, [x, x], [t])
    (k1,) = g.shape_program(minus_one, [k])
    r = g.call("rec", [t, k1])
    out = g.alloc_tensor(g.alloc_storage(16), 0, (4,), "float32")
    g.invoke(add, [r, x], [out])
    g.kill(s, t, r)
    g.ret(out)
    g.place(done)
    g.ret(x)
    f = asm.function("main", [("x", VEC), ("k", tensor("int64", ()))], VEC)
    f.ret(f.call("rec", list(f.params)))
    exe = asm.build()
    m = VirtualMachine(exe, check_memory=True, profile=True)
    for depth in (0, 1, 3, 50):
        expected = VirtualMachine(exe).run(ONES, depth)
        np.testing.assert_array_equal(m.run(ONES, depth), expected)
    assert "invoke" in m.profile_report()
    assert m.allocator.stats.live_bytes == 0


# ---- poison -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "byte"), [("float32", POISON_FLOAT), ("float16", POISON_FLOAT), ("int32", 0xA5)]
)
def test_new_storage_is_poisoned_by_its_dtype_hint(dtype, byte):
    asm = Assembler()
    f = asm.function("main", [])
    s = f.alloc_storage(64, dtype_hint=dtype)
    f.ret(f.alloc_tensor(s, 0, (16,), "uint8"))
    out = VirtualMachine(asm.build(), check_memory=True).run()
    assert out.tolist() == [byte] * 16
    if dtype.startswith("float"):
        assert np.isnan(out.view(dtype)).all()


def test_freed_and_reused_storage_is_poisoned():
    pool = PooledAllocator()
    exe = _reuse_program()
    with pytest.raises(DeadTensorError):
        VirtualMachine(exe, allocator=pool, check_memory=True).run(ONES)
    # Every storage went back at the end of the failed call, poisoned.
    cached = [st for bucket in pool._free.values() for st in bucket]
    assert cached and all((st.buf == POISON_FLOAT).all() for st in cached)
    assert POISON_OTHER != POISON_FLOAT


def test_fused_scratch_is_poisoned_and_correct():
    asm = Assembler()
    fused = asm.fused(
        FusedKernel(
            "exp_neg",
            1,
            1,
            (
                FusedStep("exp", {}, (Ref("in", 0),), (Ref("tmp", 0),)),
                FusedStep("negative", {}, (Ref("tmp", 0),), (Ref("out", 0),)),
            ),
            (Scratch("float32", ("like", Ref("in", 0))),),
        )
    )
    f = asm.function("main", [("x", VEC)], VEC)
    out = f.alloc_tensor(f.alloc_storage(16), 0, (4,), "float32")
    f.invoke(fused, [f.params[0]], [out])
    f.ret(out)
    naive = NaiveAllocator()
    m = VirtualMachine(asm.build(), allocator=naive, check_memory=True)
    np.testing.assert_allclose(m.run(ONES), -np.exp(ONES))
    assert naive.stats.live_bytes == 0


# ---- zero cost when off -------------------------------------------------------------------


def test_unchecked_vm_uses_the_plain_closures_and_allocator():
    exe = elementwise_program("add")
    plain = VirtualMachine(exe)
    assert plain.sanitizer is None and plain._ctx.allocator is plain.allocator
    # Closures of the decoder, or generated steps (shape programs): no sanitizer wrapper.
    modules = ("vm.decode", "vm.codegen", "vm.fresh_results")
    assert all(step.__module__ in modules for step in plain._code[0])
    checked = VirtualMachine(exe, check_memory=True)
    assert checked.sanitizer is not None
    assert all(step.__module__ == "vm.sanitize_rules" for step in checked._code[0])


def test_a_killed_register_holds_a_marker_only_when_checking():
    asm, _, f = _vec_program()
    (x,) = f.params
    f.kill(x)
    f.ret(x)
    with pytest.raises(FormatError, match=r"result %0 is read after instruction 0 \(kill"):
        asm.build()  # a program that reads a killed register never runs
    assert repr(Killed("main@0: kill (%0)")) == "<killed by main@0: kill (%0)>"
