"""Hand-assembled programs exercising each instruction, frames, recursion, tuples and kills."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from vm_testlib import elementwise_program

import vm
from vm import (
    Assembler,
    KernelError,
    NaiveAllocator,
    PooledAllocator,
    RunTimeShapeError,
    ShapeProgramBuilder,
    VirtualMachine,
    VMError,
    tensor,
    tuple_type,
)

F4 = tensor("float32", (4,))


def test_move_load_const_load_int_tuple_get_item():
    asm = Assembler()
    c = asm.const(np.arange(4, dtype=np.float32))
    f = asm.function("main", [("x", F4)])
    (x,) = f.params
    k = f.load_const(c)
    i = f.load_int(7)
    m = f.move(x)
    t = f.tuple([k, i, m])
    f.ret(f.tuple([f.get_item(t, 1), f.get_item(t, 0), t]))
    x = np.ones(4, np.float32)
    seven, const, whole = VirtualMachine(asm.build()).run(x)
    assert seven == 7
    np.testing.assert_array_equal(const, np.arange(4))
    assert whole[2] is x and not const.flags.writeable


def test_constants_are_read_only_for_kernels():
    asm = Assembler()
    c = asm.const(np.zeros(4, np.float32))
    k = asm.kernel("add", num_inputs=2)
    f = asm.function("main", [("x", F4)])
    (x,) = f.params
    target = f.load_const(c)
    f.invoke(k, [x, x], [target])
    f.ret(target)
    with pytest.raises(KernelError, match="kernel add failed"):
        VirtualMachine(asm.build()).run(np.ones(4, np.float32))


def test_invoke_alloc_static_and_dynamic_shapes():
    exe = elementwise_program("multiply")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.full((3, 4), 2, np.float32)
    out = VirtualMachine(exe).run(x, y)
    np.testing.assert_array_equal(out, x * y * y)
    pooled = PooledAllocator(fresh_results=False)  # a small result is numpy's by default
    out = VirtualMachine(exe, allocator=pooled, output_policy="transfer").run(x, y)
    assert out.shape == (3, 4) and out.ctypes.data % 64 == 0  # the VM's own buffer


def test_alloc_tensor_at_offsets_in_one_storage():
    asm = Assembler()
    k = asm.kernel("add", num_inputs=2)
    f = asm.function("main", [("x", F4)])
    (x,) = f.params
    s = f.alloc_storage(128)
    a = f.alloc_tensor(s, 0, (4,), "float32")
    off = f.load_int(64)
    shape = f.shape_of(x)
    b = f.alloc_tensor(s, off, shape, "float32")
    f.invoke(k, [x, x], [a])
    f.invoke(k, [a, x], [b])
    f.ret(f.tuple([a, b]))
    a, b = VirtualMachine(asm.build()).run(np.ones(4, np.float32))
    assert a.base is b.base  # one storage
    assert a.tolist() == [2] * 4 and b.tolist() == [3] * 4


def test_shape_of_dim_reshape():
    asm = Assembler()
    f = asm.function("main", [("x", tensor("int32", ("n", "m")))])
    (x,) = f.params
    shape = f.shape_of(x)
    n = f.dim(x, 0)
    m = f.dim(x, -1)
    b = ShapeProgramBuilder(["n", "m"])
    pn, pm = b.inputs
    (flat,) = f.shape_program(asm.shape_program(b.build([(pn * pm,)])), [n, m])
    v = f.reshape(x, flat)
    w = f.reshape(v, (3, 2))
    f.ret(f.tuple([shape, n, m, v, w]))
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    shape, n, m, v, w = VirtualMachine(asm.build()).run(x)
    assert (shape, n, m) == ((2, 3), 2, 3)
    assert v.shape == (6,) and w.shape == (3, 2) and np.shares_memory(v, x)


def test_reshape_to_a_different_size_fails_with_location():
    asm = Assembler()
    f = asm.function("main", [("x", F4)])
    f.ret(f.reshape(f.params[0], (5,)))
    with pytest.raises(VMError, match=r"main@0: reshape"):
        VirtualMachine(asm.build()).run(np.ones(4, np.float32))


def _abs_program():
    """main(x: int scalar-ish) -> 1 if x < 0 else 0, via jump_if_not and labels."""
    asm = Assembler()
    b = ShapeProgramBuilder(["v"])
    (v,) = b.inputs
    lt = asm.shape_program(b.build([b.node("lt", v, 0)]))
    f = asm.function("main", [("x", tensor("int64", ()))])
    (x,) = f.params
    val = f.dim(f.reshape(x, (1,)), 0)  # 1: a dim, just to feed the program an int
    (neg,) = f.shape_program(lt, [val])
    other = f.label("else")
    f.jump_if_not(neg, other)
    f.ret(f.load_int(1))
    f.place(other)
    done = f.label("done")
    r = f.load_int(0)
    f.jump(done)
    f.place(done)
    f.ret(r)
    return asm.build()


def test_branches_and_jumps():
    exe = _abs_program()
    assert VirtualMachine(exe).run(np.array(5)) == 0
    assert "jump_if_not" in exe.bytecode


def test_jump_if_not_on_a_bool_tensor():
    asm = Assembler()
    f = asm.function("main", [("c", tensor("bool", ()))])
    (c,) = f.params
    no = f.label()
    f.jump_if_not(c, no)
    f.ret(f.load_int(1))
    f.place(no)
    f.ret(f.load_int(0))
    m = VirtualMachine(asm.build())
    assert m.run(True) == 1 and m.run(np.array(False)) == 0


def _recursive_sum(
    max_depth: int = 10_000, tail: bool = False, allocator: Any = "pooled"
) -> VirtualMachine:
    """loop(i, n, acc): if i < n: return loop(i + 1, n, acc + 1) else return acc (with
    ``tail``, the recursive call is a ``tail_call``)."""
    asm = Assembler()
    add = asm.kernel("add", num_inputs=2)
    one = asm.const(np.ones(4, np.float32))
    b = ShapeProgramBuilder(["i", "n"])
    i, n = b.inputs
    step = asm.shape_program(b.build([b.node("lt", i, n), i + 1]))
    loop = asm.function(
        "loop", [("i", tensor("int64", ())), ("n", tensor("int64", ())), ("acc", F4)], F4
    )
    ri, rn, acc = loop.params
    go, nxt = loop.shape_program(step, [ri, rn])
    done = loop.label("done")
    loop.jump_if_not(go, done)
    s = loop.alloc_storage(16)
    acc2 = loop.alloc_tensor(s, 0, (4,), "float32")
    loop.invoke(add, [acc, loop.load_const(one)], [acc2])
    if tail:
        loop.tail_call("loop", [nxt, rn, acc2])
    else:
        loop.ret(loop.call("loop", [nxt, rn, acc2]))
    loop.place(done)
    loop.ret(acc)
    main = asm.function("main", [("n", tensor("int64", ())), ("x", F4)], F4)
    rn, x = main.params
    zero = main.load_int(0)
    main.ret(main.call("loop", [zero, rn, x]))
    return VirtualMachine(asm.build(), max_call_depth=max_depth, allocator=allocator)


def test_recursion_as_a_loop():
    m = _recursive_sum()
    x = np.zeros(4, np.float32)
    for n in (0, 1, 50, 3000):  # 3000 frames: the frame stack is not Python's
        np.testing.assert_array_equal(m.run(n, x), np.full(4, n, np.float32))
    # storages of intermediate frames are given back at the end of the call
    assert m.allocator.stats.live_bytes == 0


def test_a_tail_call_replaces_the_frame_and_frees_what_the_old_one_held():
    naive = NaiveAllocator()
    m = _recursive_sum(max_depth=100, tail=True, allocator=naive)
    x = np.zeros(4, np.float32)
    for n in (0, 1, 50, 20_000):  # far deeper than max_call_depth: no frame is pushed
        np.testing.assert_array_equal(m.run(n, x), np.full(4, n, np.float32))
    # Each step's accumulator is freed at the next tail call, once nothing refers to it: two
    # 16-byte storages live at the peak (the last one, and the one being made), not 20,000.
    assert naive.stats.peak_live_bytes == 2 * 16
    assert naive.stats.live_bytes == 0


def test_a_tail_call_keeps_what_a_caller_frame_still_holds():
    """loop(s, k) tail-calls itself k times; main holds a storage with no view of it across
    the call and uses it afterwards: the sweep must leave it alone."""
    asm = Assembler()
    b = ShapeProgramBuilder(["k"])
    (k,) = b.inputs
    prog = asm.shape_program(b.build([b.node("gt", k, 0), k - 1]))
    loop = asm.function("loop", [("k", tensor("int64", ()))], tensor("int64", ()))
    (rk,) = loop.params
    go, less = loop.shape_program(prog, [rk])
    done = loop.label("done")
    loop.jump_if_not(go, done)
    loop.alloc_storage(64)  # garbage of each step, swept at the next tail call
    loop.tail_call("loop", [less])
    loop.place(done)
    loop.ret(rk)
    main = asm.function("main", [("x", F4), ("k", tensor("int64", ()))], F4)
    x, rk = main.params
    kept = main.alloc_storage(16)  # held by main's register only, no view yet
    main.call("loop", [rk])
    out = main.alloc_tensor(kept, 0, (4,), "float32")
    main.invoke(asm.kernel("copy"), [x], [out])
    main.ret(out)
    m = VirtualMachine(asm.build(), allocator=NaiveAllocator(), check_memory=True)
    x4 = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(m.run(x4, 5), x4)
    assert m.allocator.stats.peak_live_bytes <= 16 + 2 * 64


def test_call_depth_is_bounded():
    m = _recursive_sum(max_depth=100)
    with pytest.raises(VMError, match="call depth exceeds 100"):
        m.run(500, np.zeros(4, np.float32))


def test_kill_frees_storage_and_clears_register():
    exe = elementwise_program("add")
    m = VirtualMachine(exe, output_policy="transfer")
    x = np.ones((2, 4), np.float32)
    m.run(x, x)
    s = m.allocator.stats
    # The result is numpy's own array (small: vm/fresh_results.py): only the intermediate.
    assert s.requests == 1 and s.frees == 1 and s.detached == 0 and s.live_bytes == 0
    m.run(x, x)
    assert s.pool_hits == 1  # the killed intermediate's buffer was reused


def test_kill_of_a_tensor_drops_only_the_reference():
    asm = Assembler()
    f = asm.function("main", [("x", F4)])
    (x,) = f.params
    y = f.move(x)
    f.kill(y)
    f.ret(x)
    x = np.ones(4, np.float32)
    got_x = VirtualMachine(asm.build()).run(x)
    assert got_x is x  # (reading y after its kill is refused when the program is built)


def test_check_values_fills_in_the_shown_registers():
    """check_values: {a}, {b} and {0}, {1} become the operands and the shown values."""
    asm = Assembler()
    f = asm.function("main", [("x", tensor("float32", ("n",))), ("y", tensor("float32", ("m",)))])
    x, y = f.params
    n, m = f.dim(x, 0), f.dim(y, 0)
    f.check_values(n, "==", m, "{a} vs {b} (m = {1}, n = {0}; {a} again)", [n, m])
    f.ret(n)
    exe = asm.build()
    loaded = type(exe).from_bytes(exe.to_bytes())  # the opcode survives the file format
    for m_ in (VirtualMachine(exe), VirtualMachine(loaded)):
        assert m_.run(np.ones(3, np.float32), np.ones(3, np.float32)) == 3
        with pytest.raises(RunTimeShapeError) as info:
            m_.run(np.ones(3, np.float32), np.ones(5, np.float32))
        assert info.value.message == "3 vs 5 (m = 5, n = 3; 3 again)"


def test_check_and_check_dim():
    asm = Assembler()
    f = asm.function("main", [("x", tensor("float32", ("n",))), ("y", tensor("float32", ("n",)))])
    x, y = f.params
    n = f.dim(x, 0)
    f.check_dim(y, 0, n, "y.shape[0]", "n", "x.shape[0]")
    f.check(n, "<=", 8, "n <= 8 (declared bound)")
    f.ret(n)
    m = VirtualMachine(asm.build())
    assert m.run(np.ones(3, np.float32), np.ones(3, np.float32)) == 3
    with pytest.raises(RunTimeShapeError) as info:
        m.run(np.ones(3, np.float32), np.ones(4, np.float32))
    assert info.value.message == "y.shape[0] = 4 but n = 3 was bound by x.shape[0]"
    assert "main@1: check_dim" in str(info.value)
    with pytest.raises(RunTimeShapeError, match=r"n <= 8 \(declared bound\) \(got 9 <= 8 false"):
        m.run(np.ones(9, np.float32), np.ones(9, np.float32))
    import shape_funcs

    assert isinstance(info.value, shape_funcs.ShapeError)


def test_shape_func_with_a_test_local_data_dependent_function():
    from shape_funcs import register_shape_func

    name = "test_vm.count_positive"
    if not vm.has_kernel(name):

        @register_shape_func(name, data_dependent=[True])
        def _shape(ctx, x):
            return (int((x > 0).sum()),)

        @vm.register_kernel(name)
        def _kernel(attrs):
            return lambda x, out: np.copyto(out, x[x > 0])

    asm = Assembler()
    sf = asm.shape_func(name)
    k = asm.kernel(name)
    b = ShapeProgramBuilder(["c"])
    (c,) = b.inputs
    nbytes = asm.shape_program(b.build([c * 4]))
    f = asm.function("main", [("x", tensor("float32", ("n",)))])
    (x,) = f.params
    shape = f.shape_func(sf, [x])
    count = f.get_item(shape, 0)
    (size,) = f.shape_program(nbytes, [count])
    out = f.alloc_tensor(f.alloc_storage(size), 0, shape, "float32")
    f.invoke(k, [x], [out])
    f.ret(out)
    got = VirtualMachine(asm.build()).run(np.array([1, -2, 3, 0], np.float32))
    assert got.tolist() == [1, 3]


def test_shape_func_argwhere_end_to_end():
    import shape_funcs

    assert shape_funcs.has_shape_func("argwhere")
    asm = Assembler()
    sf, k = asm.shape_func("argwhere"), asm.kernel("argwhere")
    b = ShapeProgramBuilder(["c", "r"])
    c, r = b.inputs
    nbytes = asm.shape_program(b.build([c * r * 8]))
    f = asm.function("main", [("x", tensor("int32", ("n", "m")))])
    (x,) = f.params
    shape = f.shape_func(sf, [x])
    (size,) = f.shape_program(nbytes, [f.get_item(shape, 0), f.get_item(shape, 1)])
    out = f.alloc_tensor(f.alloc_storage(size), 0, shape, "int64")
    f.invoke(k, [x], [out])
    f.ret(out)
    x = np.array([[0, 1], [2, 0], [0, 0]], np.int32)
    np.testing.assert_array_equal(VirtualMachine(asm.build()).run(x), np.argwhere(x))


def test_shape_func_failure_is_a_run_time_shape_error():
    import shape_funcs

    assert shape_funcs.has_shape_func("dyn.reshape")
    asm = Assembler()
    sf = asm.shape_func("dyn.reshape")
    f = asm.function("main", [("x", tensor("float32", (6,))), ("s", tensor("int64", (1,)))])
    x, s = f.params
    f.ret(f.shape_func(sf, [f.shape_of(x), s]))
    m = VirtualMachine(asm.build())
    assert m.run(np.zeros(6, np.float32), np.array([6])) == (6,)
    with pytest.raises(RunTimeShapeError, match="main@1: shape_func"):
        m.run(np.zeros(6, np.float32), np.array([5]))


def test_tuple_parameters_and_results():
    asm = Assembler()
    k = asm.kernel("concatenate", {"axis": 0}, num_inputs=1)
    f = asm.function("main", [("xs", tuple_type(F4, F4))], tensor("float32", (8,)))
    (xs,) = f.params
    out = f.empty((8,), "float32")
    f.invoke(k, [xs], [out])
    f.ret(f.tuple([out, f.get_item(xs, 1)]))
    a, b = np.zeros(4, np.float32), np.ones(4, np.float32)
    out, second = VirtualMachine(asm.build()).run((a, b))
    assert out.tolist() == [0] * 4 + [1] * 4 and second is b


def test_kernel_error_names_kernel_and_instruction():
    asm = Assembler()
    k = asm.kernel("take", {"axis": 0}, num_inputs=2)
    f = asm.function("main", [("x", F4), ("i", tensor("int64", (1,)))])
    x, i = f.params
    out = f.empty((1,), "float32")
    f.invoke(k, [x, i], [out])
    f.ret(out)
    m = VirtualMachine(asm.build())
    assert m.run(np.arange(4, dtype=np.float32), np.array([2])).tolist() == [2]
    with pytest.raises(KernelError) as info:
        m.run(np.arange(4, dtype=np.float32), np.array([9]))
    text = str(info.value)
    assert "kernel take failed: IndexError" in text and "main@2: invoke k0<take>" in text
    assert isinstance(info.value.__cause__, IndexError)
    assert m.allocator.stats.live_bytes == 0  # storages released after the failure


def test_a_kernels_own_bug_is_a_located_kernel_error_with_its_cause():
    name = "test_vm.buggy"
    if not vm.has_kernel(name):

        @vm.register_kernel(name)
        def _buggy(attrs):
            def kernel(x, out):
                raise KeyError("a bug")

            return kernel

    asm = Assembler()
    k = asm.kernel(name)
    f = asm.function("main", [("x", F4)])
    (x,) = f.params
    f.invoke(k, [x], [x])
    f.ret(x)
    with pytest.raises(KernelError, match=r"kernel test_vm.buggy failed: KeyError") as info:
        VirtualMachine(asm.build()).run(np.ones(4, np.float32))
    assert info.value.where == "main@0: invoke k0<test_vm.buggy>, (%0), (%0)"
    assert isinstance(info.value.__cause__, KeyError)  # the bug's own traceback is kept


def test_unplaced_label_and_unknown_callee():
    asm = Assembler()
    f = asm.function("main", [])
    f.jump(f.label())
    with pytest.raises(vm.AssemblerError, match="never placed"):
        asm.build()
    asm = Assembler()
    f = asm.function("main", [])
    f.ret(f.call("nope", []))
    with pytest.raises(vm.AssemblerError, match="no function named 'nope'"):
        asm.build()
