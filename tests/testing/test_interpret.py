"""The reference interpreter: types checked at every step, the memory dialect, recursion."""

from __future__ import annotations

import numpy as np
import pytest

import dynshape
import ir
from dynshape.testing import InterpreterError, interpret

F32 = np.float32


def test_evaluates_text_with_tuples_if_and_globals() -> None:
    program = """
    def @twice(%a: Tensor[(k,), float32]) -> Tensor[(k,), float32] { add(%a, %a) }
    def @main(%x: Tensor[(n,), float32], %y: Tensor[(n,), float32]) {
      %t = (@twice(%x), %y);
      if (less(sum(%y), 0f)) { %t.0 } else { subtract(%t.0, %t.1) }
    }
    """
    x, y = np.arange(3, dtype=F32), np.ones(3, F32)
    np.testing.assert_array_equal(interpret(program, x, y), 2 * x - y)
    np.testing.assert_array_equal(interpret(program, x, -y), 2 * x)


def test_error_is_an_interpreter_error_and_a_dynshape_error() -> None:
    assert issubclass(InterpreterError, dynshape.DynShapeError)


def test_value_contradicting_its_type_names_the_expression() -> None:
    # The annotation claims (n,) for a concatenation of two n-vectors: type inference defers
    # the check, the interpreter catches the value.
    program = """
    def @main(%x: Tensor[(n,), float32]) {
      let %c: Tensor[(n,), float32] = concatenate((%x, %x));
      %c
    }
    """
    assert interpret(program, np.zeros(0, F32)).shape == (0,)
    with pytest.raises(InterpreterError, match=r"let %c has shape \[4\].*n = 2"):
        interpret(program, np.zeros(2, F32))


def test_symbols_bound_at_first_occurrence_and_checked_after() -> None:
    program = "def @main(%x: Tensor[(n,), float32], %y: Tensor[(n,), float32]) { add(%x, %y) }"
    with pytest.raises(InterpreterError, match=r"parameter %y .*axis 0 is n = 2"):
        interpret(program, np.zeros(2, F32), np.zeros(3, F32))
    with pytest.raises(InterpreterError, match="parameter %x is float64"):
        interpret(program, np.zeros(2), np.zeros(2))


def test_python_scalars_become_arrays_of_the_parameter_dtype() -> None:
    out = interpret("def @main(%t: float32) { add(%t, 1f) }", 2.5)
    assert out.dtype == F32 and out == 3.5


def test_recursion_to_a_depth_limit() -> None:
    program = """
    def @count(%i: int64, %acc: Tensor[(n,), float32]) -> Tensor[(n,), float32] {
      if (greater(%i, 0i64)) { @count(subtract(%i, 1i64), add(%acc, 1f)) } else { %acc }
    }
    def @main(%i: int64, %x: Tensor[(n,), float32]) { @count(%i, %x) }
    """
    x = np.zeros(2, F32)
    np.testing.assert_array_equal(interpret(program, np.int64(3000), x), x + 3000)
    with pytest.raises(InterpreterError, match="deeper than 50"):
        interpret(program, np.int64(100), x, max_depth=50)


def test_memory_dialect_kill_and_check() -> None:
    manifest = dynshape.stages("def @main(%x: Tensor[(n,), float32]) { exp(%x) }")["manifest"]
    x = np.arange(4, dtype=F32)
    np.testing.assert_allclose(interpret(manifest, x), np.exp(x), rtol=1e-6)
    text = """
    def @main(%x: Tensor[(n,), float32]) {
      let %s = memory.alloc_storage(size=4*n);
      let %y = memory.alloc_tensor(%s, shape=[n]);
      let %k = memory.kill(%y);
      %y
    }
    """
    with pytest.raises(InterpreterError, match="%y is read after kill"):
        interpret(text, x)
    check = """
    def @main(%x: Tensor[(n,), float32]) {
      let %c = memory.check(kind="divides", lhs=3, rhs=n, message="{b} is not a multiple of {a}");
      %x
    }
    """
    interpret(check, np.zeros(6, F32))
    with pytest.raises(InterpreterError, match="run-time check failed: 4 is not a multiple of 3"):
        interpret(check, np.zeros(4, F32))


def test_undersized_storage_is_an_error() -> None:
    text = """
    def @main(%x: Tensor[(n,), float32]) {
      let %s = memory.alloc_storage(size=n);
      let %y = memory.alloc_tensor(%s, shape=[n]);
      %y
    }
    """
    with pytest.raises(InterpreterError, match="8 bytes at offset 0 do not fit a storage of 2"):
        interpret(text, np.zeros(2, F32))


def test_shape_func_binds_the_unknowns_of_data_dependent_ops() -> None:
    stages = dynshape.stages("def @main(%x: Tensor[(n,), float32]) { argwhere(greater(%x, 0f)) }")
    x = np.array([1, -1, 2, 0], F32)
    out = interpret(stages["manifest"], x)
    np.testing.assert_array_equal(out, np.argwhere(x > 0))
    assert "memory.shape_func" in str(stages["manifest"])


def test_interprets_a_built_module() -> None:
    x = ir.Var("x", ir.TensorType((ir.sym("n"), 2), "float32"))
    module = ir.Module.from_main(ir.function([x], ir.call("sum", x, axis=1)))
    np.testing.assert_array_equal(interpret(module, np.ones((3, 2), F32)), np.full(3, 2, F32))


def test_relu_propagates_nan_as_max_does() -> None:
    # Found by the long random run: relu is max(x, 0), and the VM's kernel propagates NaN (as
    # `maximum` does); the interpreter's first definition, where(x > 0, x, 0), gave 0.
    out = interpret(
        "def @main(%x: Tensor[(n,), float32]) { nn.relu(%x) }", np.array([np.nan, -1], F32)
    )
    assert np.isnan(out[0]) and out[1] == 0
