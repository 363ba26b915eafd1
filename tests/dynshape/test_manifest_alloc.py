"""manifest_alloc: text in / text out, and the seed example's allocation, checked structurally."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

import dynshape
import ir
from dynshape.demo import SEED_PROGRAM
from dynshape.passes.manifest_alloc import manifest_alloc
from ir import Call
from ir.text import module_to_text

# The project's seed program (a copy of the example it grew from), kept in the repository so a
# clone on its own passes.
SEED_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "seed_before.txt"


def _manifest(source: str) -> ir.Module:
    """The program through the pipeline up to and including manifest_alloc."""
    return dynshape.stages(textwrap.dedent(source))["manifest"]


def _lets(fn: ir.Function) -> list[tuple[ir.Var, ir.Expr]]:
    return [(let.var, let.value) for let in ir.let_chain(fn.body)[0]]


def _memory_calls(fn: ir.Function, name: str) -> list[Call]:
    return [
        v for _, v in _lets(fn) if isinstance(v, Call) and v.op is not None and v.op.name == name
    ]


def check_manifest(source: str, expected: str) -> ir.Module:
    """Pipeline to manifest; the printed result (no type comments) must equal ``expected``."""
    module = _manifest(source)
    printed = module_to_text(module, show_types=False)
    want = textwrap.dedent(expected).strip()
    assert printed.strip() == want, f"--- got:\n{printed}\n--- expected:\n{want}"
    again = ir.parse(printed)
    assert ir.structurally_equal(again, ir.parse(module_to_text(again, show_types=False)))
    return module


def test_seed_example_has_one_40_byte_storage_one_tensor_and_one_invoke() -> None:
    # The seed is already fused and let-bound: manifest_alloc applies to it directly.
    source = SEED_FILE.read_text()
    main = manifest_alloc(ir.parse(source)).main
    (storage,) = _memory_calls(main, "memory.alloc_storage")
    assert storage.attrs["size"] == 40 and storage.attrs["alignment"] == 64
    (tensor,) = _memory_calls(main, "memory.alloc_tensor")
    assert tensor.attrs["shape"] == (10,) and tensor.attrs["dtype"] == "float32"
    (invoke,) = _memory_calls(main, "memory.invoke")
    inputs, outputs = invoke.args[1], invoke.args[2]
    assert isinstance(inputs, ir.Tuple) and list(inputs.fields) == list(main.params)
    assert isinstance(outputs, ir.Tuple) and len(outputs.fields) == 1
    tensor_var = next(v for v, value in _lets(main) if value is tensor)
    assert outputs.fields[0] is tensor_var
    assert main.body is not None and _lets(main)[-1][0] is not None


def test_embedded_seed_matches_the_seed_file() -> None:
    assert SEED_FILE.read_text() == SEED_PROGRAM


def test_symbolic_seed_allocates_4n_bytes() -> None:
    check_manifest(
        SEED_PROGRAM.replace("(10,)", "(n,)"),
        """
        def @main(%x: Tensor[(n,), float32], %y: Tensor[(n,), float32]) -> Tensor[(n,), float32] {
          let %storage = memory.alloc_storage(size=4*n);
          let %x1 = memory.alloc_tensor(%storage, shape=[n]);
          %1 = fn (%p0: Tensor[(n,), float32], %p1: Tensor[(n,), float32], Primitive=1, Steps="0 add -> o0; 1 subtract -> o0") -> Tensor[(n,), float32] {
            %0 = add(%p0, %p0);
            subtract(%0, %p1)
          };
          let %invoke = memory.invoke(%1, (%x, %y), (%x1,));
          %x1
        }
        """,
    )


def test_anonymous_parameter_dim_is_bound_at_entry() -> None:
    check_manifest(
        """
        def @main(%x: Tensor[(?, 4), float32]) {
          exp(%x)
        }
        """,
        """
        def @main(%x: Tensor[(?0, 4), float32]) {
          let %storage = memory.alloc_storage(size=16*?0);
          let %x1 = memory.alloc_tensor(%storage, shape=[?0, 4]);
          %0 = fn (%p0: Tensor[(?, 4), float32], Primitive=1) -> Tensor[(?, 4), float32] {
            exp(%p0)
          };
          let %invoke = memory.invoke(%0, (%x,), (%x1,));
          %x1
        }
        """,
    )


def test_data_dependent_op_gets_a_run_time_shape_function() -> None:
    check_manifest(
        """
        def @main(%x: Tensor[(n,), float32]) {
          argwhere(%x)
        }
        """,
        """
        def @main(%x: Tensor[(n,), float32]) {
          %0 = fn (%p0: Tensor[(n,), float32], Primitive=1) -> Tensor[(?, 1), int64] {
            argwhere(%p0)
          };
          let %shapes = memory.shape_func(%0, (%x,), data_dependent=[1], out_shapes=[[?0, 1]]);
          let %storage = memory.alloc_storage(size=8*?0, dtype_hint="int64");
          let %x1 = memory.alloc_tensor(%storage, shape=[?0, 1], dtype="int64");
          let %invoke = memory.invoke(%0, (%x,), (%x1,));
          %x1
        }
        """,
    )


def test_shape_inputs_of_a_shape_function_are_passed_as_shapes() -> None:
    check_manifest(
        """
        def @main(%x: Tensor[(n, 3), float32], %s: Tensor[(2,), int64]) {
          dyn.reshape(%x, %s)
        }
        """,
        """
        def @main(%x: Tensor[(n, 3), float32], %s: Tensor[(2,), int64]) {
          let %shape = memory.shape_of(%x);
          %0 = fn (%p0: Tensor[(n, 3), float32], %p1: Tensor[(2,), int64], Primitive=1) -> Tensor[(?, ?), float32] {
            dyn.reshape(%p0, %p1)
          };
          let %shapes = memory.shape_func(%0, (%shape, %s), data_dependent=[0, 1], out_shapes=[[?0, ?1]]);
          let %storage = memory.alloc_storage(size=4*?0*?1);
          let %x1 = memory.alloc_tensor(%storage, shape=[?0, ?1]);
          let %invoke = memory.invoke(%0, (%x, %s), (%x1,));
          %x1
        }
        """,
    )


def test_tuple_outputs_get_one_allocation_per_leaf() -> None:
    check_manifest(
        """
        def @main(%x: Tensor[(n, 6), float32]) {
          split(%x, indices_or_sections=3, axis=1)
        }
        """,
        """
        def @main(%x: Tensor[(n, 6), float32]) {
          let %storage0 = memory.alloc_storage(size=8*n);
          let %x0 = memory.alloc_tensor(%storage0, shape=[n, 2]);
          let %storage1 = memory.alloc_storage(size=8*n);
          let %x1 = memory.alloc_tensor(%storage1, shape=[n, 2]);
          let %storage2 = memory.alloc_storage(size=8*n);
          let %x2 = memory.alloc_tensor(%storage2, shape=[n, 2]);
          %0 = fn (%p0: Tensor[(n, 6), float32], Primitive=1) -> (Tensor[(n, 2), float32], Tensor[(n, 2), float32], Tensor[(n, 2), float32]) {
            split(%p0, indices_or_sections=3, axis=1)
          };
          let %invoke = memory.invoke(%0, (%x,), (%x0, %x1, %x2));
          let %x3 = (%x0, %x1, %x2);
          %x3
        }
        """,
    )


def test_reshape_only_primitive_becomes_a_view() -> None:
    check_manifest(
        """
        def @main(%x: Tensor[(n, 4), float32]) {
          %0 = reshape(%x, newshape=[-1]);
          (%0, exp(%0))
        }
        """,
        """
        def @main(%x: Tensor[(n, 4), float32]) {
          let %x1 = memory.reshape_tensor(%x, shape=[4*n]);
          let %storage = memory.alloc_storage(size=16*n);
          let %x2 = memory.alloc_tensor(%storage, shape=[4*n]);
          %0 = fn (%p0: Tensor[(4*n,), float32], Primitive=1) -> Tensor[(4*n,), float32] {
            exp(%p0)
          };
          let %invoke = memory.invoke(%0, (%x1,), (%x2,));
          let %x3 = (%x1, %x2);
          %x3
        }
        """,
    )


def test_undecided_fact_becomes_a_check_before_the_invoke() -> None:
    module = _manifest(
        """
        def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(m, 4), float32]) {
          add(%x, %y)
        }
        """
    )
    lets = _lets(module.main)
    first = lets[0][1]
    assert isinstance(first, Call) and first.op is ir.get_op("memory.check")
    assert first.attrs["kind"] == "broadcast"
    assert first.attrs["message"].startswith(
        "add: cannot broadcast a.shape[0] with b.shape[0]: {a} vs {b}"
    )


def test_calls_of_globals_and_ifs_are_left_alone_and_unknowns_named() -> None:
    check_manifest(
        """
        def @nonzero(%a: Tensor[(k,), float32]) {
          argwhere(%a)
        }
        def @main(%c: bool, %x: Tensor[(n,), float32]) {
          %0 = @nonzero(%x);
          %1 = if (%c) { %0 } else { concatenate((%0, %0)) };
          negative(%1)
        }
        """,
        """
        def @nonzero(%a: Tensor[(k,), float32]) {
          %0 = fn (%p0: Tensor[(k,), float32], Primitive=1) -> Tensor[(?, 1), int64] {
            argwhere(%p0)
          };
          let %shapes = memory.shape_func(%0, (%a,), data_dependent=[1], out_shapes=[[?0, 1]]);
          let %storage = memory.alloc_storage(size=8*?0, dtype_hint="int64");
          let %x = memory.alloc_tensor(%storage, shape=[?0, 1], dtype="int64");
          let %invoke = memory.invoke(%0, (%a,), (%x,));
          %x
        }

        def @main(%c: bool, %x: Tensor[(n,), float32]) {
          let %x1: Tensor[(?0, 1), int64] = @nonzero(%x);
          let %x2: Tensor[(?1, 1), int64] = if (%c) {
            %x1
          } else {
            let %storage = memory.alloc_storage(size=16*?0, dtype_hint="int64");
            let %x3 = memory.alloc_tensor(%storage, shape=[2*?0, 1], dtype="int64");
            %0 = fn (%p0: Tensor[(?, 1), int64], Primitive=1, Steps="0 concatenate -> o0") -> Tensor[(?, 1), int64] {
              concatenate((%p0, %p0))
            };
            let %invoke = memory.invoke(%0, (%x1,), (%x3,));
            %x3
          };
          let %storage1 = memory.alloc_storage(size=8*?1, dtype_hint="int64");
          let %x4 = memory.alloc_tensor(%storage1, shape=[?1, 1], dtype="int64");
          %1 = fn (%p01: Tensor[(?, 1), int64], Primitive=1) -> Tensor[(?, 1), int64] {
            negative(%p01)
          };
          let %invoke1 = memory.invoke(%1, (%x2,), (%x4,));
          %x4
        }
        """,
    )


def test_manifested_text_compiles_and_runs_the_same() -> None:
    """The printed manifest form is a program of its own: compile it again and run it."""
    import numpy as np

    source = """
    def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(1, 4), float32]) {
      %0 = argwhere(greater(%x, 0f));
      (take(%x, %0), add(%x, %y))
    }
    """
    text = module_to_text(_manifest(source), show_types=False)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    y = rng.standard_normal((1, 4)).astype(np.float32)
    want = dynshape.VirtualMachine(dynshape.compile(textwrap.dedent(source))).run(x, y)
    got = dynshape.VirtualMachine(dynshape.compile(text, start="manifest")).run(x, y)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


GELU_LIKE = """
def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] {
  %h = exp(%x);
  multiply(multiply(0.5f, %h), tanh(add(%h, multiply(%h, %h))))
}
"""


def test_scratch_of_a_fused_kernel_is_allocated_in_the_ir_after_the_outputs() -> None:
    # %h is read three times, so it cannot live in the output: one scratch tensor, passed to
    # the invoke after the output, where memory planning sees it.
    check_manifest(
        GELU_LIKE,
        """
        def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] {
          let %storage = memory.alloc_storage(size=16*n);
          let %x1 = memory.alloc_tensor(%storage, shape=[n, 4]);
          let %storage1 = memory.alloc_storage(size=16*n);
          let %scratch = memory.alloc_tensor(%storage1, shape=[n, 4]);
          %5 = fn (%p0: Tensor[(n, 4), float32], Primitive=1, Steps="0 exp -> t0; 2 multiply -> o0; 3 add -> o0; 4 tanh -> o0; 1 multiply -> t0; 5 multiply -> o0") -> Tensor[(n, 4), float32] {
            %0 = exp(%p0);
            %1 = multiply(0.5f, %0);
            %2 = multiply(%0, %0);
            %3 = add(%0, %2);
            %4 = tanh(%3);
            multiply(%1, %4)
          };
          let %invoke = memory.invoke(%5, (%x,), (%x1, %scratch));
          %x1
        }
        """,
    )


def test_the_vm_allocates_scratch_an_invoke_does_not_pass() -> None:
    """A manifested program whose invoke passes no scratch (written by hand, or a shape the IR
    cannot express) still runs: the lowering lets the fused kernel allocate it."""
    text = module_to_text(_manifest(GELU_LIKE), show_types=False).replace(
        "(%x1, %scratch)", "(%x1,)"
    )
    exe = dynshape.compile(text, start="manifest")
    (kernel,) = exe.kernels
    assert [s.shape[0] for s in kernel.scratch] == ["like"]
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    h = np.exp(x)
    want = (0.5 * h) * np.tanh(h + h * h)
    np.testing.assert_allclose(dynshape.VirtualMachine(exe).run(x), want, rtol=1e-6)
    planned = dynshape.compile(GELU_LIKE)
    assert [s.shape[0] for s in planned.kernels[0].scratch] == ["arg"]
    np.testing.assert_allclose(dynshape.VirtualMachine(planned).run(x), want, rtol=1e-6)


def test_an_invoke_with_fewer_outputs_than_results_is_a_compile_error() -> None:
    text = module_to_text(_manifest(GELU_LIKE), show_types=False).replace("(%x1, %scratch)", "()")
    with pytest.raises(dynshape.CompileError, match="passes 0 outputs to a function of 1 results"):
        dynshape.compile(text, start="manifest")


def test_scratch_that_does_not_match_the_step_plan_is_a_compile_error() -> None:
    text = module_to_text(_manifest(GELU_LIKE), show_types=False).replace(
        "(%x1, %scratch)", "(%x1, %scratch, %scratch)"
    )
    with pytest.raises(dynshape.CompileError, match="passes 2 scratch buffers, but its step plan"):
        dynshape.compile(text, start="manifest")
