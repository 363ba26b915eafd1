"""Calling the VM: argument checks naming parameter and axis, scalars, functions by name."""

from __future__ import annotations

import numpy as np
import pytest

from vm import Assembler, VirtualMachine, VMArgumentError, VMError, tensor, tuple_type


def _identity_vm(*params):
    asm = Assembler()
    f = asm.function("main", list(params))
    f.ret(f.tuple(list(f.params)))
    g = asm.function("first", list(params))
    g.ret(g.params[0])
    return VirtualMachine(asm.build())


M = _identity_vm(("x", tensor("float32", ("n", 16))), ("k", tensor("int8", ())))


def _err(*args):
    with pytest.raises(VMArgumentError) as info:
        M.run(*args)
    return str(info.value)


def test_wrong_number_of_arguments_lists_the_parameters():
    assert "main takes 2 argument(s) (x, k), got 1" in _err(np.zeros((1, 16), np.float32))


def test_wrong_dtype_rank_and_static_dim_name_parameter_and_axis():
    k = np.array(1, np.int8)
    assert "parameter 'x': expected dtype float32, got float64" in _err(np.zeros((1, 16)), k)
    assert "parameter 'x': expected rank 2 Tensor[(n, 16), float32], got rank 1" in _err(
        np.zeros(16, np.float32), k
    )
    assert "parameter 'x': axis 1 must be 16, got 15" in _err(np.zeros((2, 15), np.float32), k)
    assert "parameter 'x': expected a numpy array" in _err([[0.0] * 16], k)


def test_scalars_are_converted_only_when_lossless():
    x = np.zeros((2, 16), np.float32)
    _, k = M.run(x, 5)
    assert k.dtype == np.int8 and k == 5
    assert M.run(x, 7.0)[1] == 7  # an integral float is exact
    assert "300 cannot be converted to int8 without loss" in _err(x, 300)
    assert "2.5 cannot be converted to int8" in _err(x, 2.5)
    assert "True cannot be converted to int8" in _err(x, True)
    assert "expected a tensor Tensor[(n, 16), float32], got the scalar 1.0" in _err(1.0, 1)
    f = _identity_vm(
        ("a", tensor("float32", ())), ("b", tensor("bool", ())), ("c", tensor("float16", ()))
    )
    a, b, c = f.run(0.1, True, 3)
    assert a.dtype == np.float32 and b.dtype == np.bool_ and c == 3
    with pytest.raises(VMArgumentError, match="1e\\+300 cannot be converted to float16"):
        f.run(0.1, True, 1e300)
    with pytest.raises(VMArgumentError, match="16777217 cannot be converted to float32"):
        f.run(16777217, True, 1)


def test_numpy_scalars_and_tuples():
    f = _identity_vm(("t", tuple_type(tensor("int64", (2,)), tensor("float64", ()))))
    ((a, b),) = f.run((np.array([1, 2]), np.float64(2.5)))
    assert a.tolist() == [1, 2] and b == 2.5
    with pytest.raises(VMArgumentError, match=r"parameter 't'\[0\]: axis 0 must be 2"):
        f.run((np.array([1, 2, 3]), 1.0))
    with pytest.raises(VMArgumentError, match="expected a tuple of 2"):
        f.run(np.array([1, 2]))


def test_invoke_by_name_and_unknown_names():
    x = np.zeros((3, 16), np.float32)
    assert M.invoke("first", x, 1) is x
    assert M.run_function("first", x, 1) is x
    with pytest.raises(VMError, match=r"no function 'nope' .*main, first"):
        M.invoke("nope")


@pytest.mark.parametrize("arity", [1, 2, 3, 5])
def test_every_arity_checks_count_dtype_and_rank(arity):
    """The checker is specialised by arity; each version checks the same things."""
    params = [(f"p{i}", tensor("float32", ("n",))) for i in range(arity)]
    m = _identity_vm(*params)
    good = [np.zeros(3, np.float32)] * arity
    assert all(a is b for a, b in zip(m.run(*good), good, strict=True))
    with pytest.raises(VMArgumentError, match=f"main takes {arity} argument"):
        m.run(*good[:-1])
    with pytest.raises(VMArgumentError, match=f"parameter 'p{arity - 1}': expected dtype float32"):
        m.run(*good[:-1], np.zeros(3, np.float64))
    with pytest.raises(VMArgumentError, match="expected rank 1"):
        m.run(np.zeros((3, 1), np.float32), *good[1:])


class _Array(np.ndarray):
    pass


def test_an_ndarray_subclass_goes_through_the_full_check():
    m = _identity_vm(("x", tensor("float32", ("n",))))
    sub = np.zeros(4, np.float32).view(_Array)
    assert m.run(sub)[0] is sub
