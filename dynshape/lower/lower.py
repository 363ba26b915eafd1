"""Lowering: a manifested module (memory dialect, A-normal form) to a VM executable.

Assumes: the output of ``manifest_alloc`` (every let value is a memory op, a call of a global,
an ``if``, a tuple, a projection or an atom), with types inferred.

Guarantees: one VM function per global function, with

- **entry checks**, as ``analysis/entry_binding.entry_plan`` plans them: each symbol is bound
  from the first parameter axis that is exactly that symbol (``dim``), else from a derived dim
  ``a*n + b`` (a shape program computes ``n = (d - b) // a``; a ``check_values`` requires
  ``d - b`` to be a non-negative multiple of ``a``: "x.shape[0] = 6 is not 2*n + 1 for any
  integer n >= 0") and, if the function declares a range for it, checked against the range
  ("n = 5000 is outside its declared range [1, 4096] (bound by x.shape[0])"); every later
  plain occurrence is checked against it (``check_dim``: "y.shape[0] = 4 but n = 3 was bound
  by x.shape[0]"); every other compound dim is computed and checked, naming its symbols'
  values and origins ("y.shape[1] = 6 but 2*n + 1 = 5 (n = 2, bound by x.shape[0])"); dtype,
  rank and static dims are checked by the VM from the signature;
- **deferred checks** (``memory.check``) fill in the values of the fact's symbols where the
  message template shows them (``check_values``);
- **symbol binding after entry**: a value whose type has a plain-symbol dim not bound yet (the
  result of a call or an ``if``) binds it from its shape; ``memory.shape_func`` binds the new
  symbols of its ``out_shapes`` from the shapes the shape function returns;
- **sizes and shapes** that are expressions of bound symbols are computed by compiled shape
  programs (integer arithmetic, no sympy at run time), static ones are immediates;
- every primitive function becomes one kernel-table entry (``kernels.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy

import ir
from ir import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Module,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Type,
    Var,
)
from ir.ranges import range_text
from ir.text.dims_text import dim_text
from vm import Assembler, Executable
from vm.assembler import FunctionBuilder, tensor, tuple_type
from vm.executable import TypeSpec
from vm.isa import Reg

from ..analysis.entry_binding import Derived, entry_plan
from ..dialect.memory import (
    AllocStorage,
    AllocTensor,
    Append,
    Check,
    Holds,
    Invoke,
    Kill,
    MemoryOp,
    ReshapeTensor,
    ShapeFunc,
    ShapeOf,
    memory_op,
)
from ..errors import CompileError
from .kernels import ValueDims, kernel_for, single_op_value_dims, vm_attrs
from .shape_exprs import ShapeExprCompiler, needed_symbols, symbol_registers

_CMP = ("==", "!=", "<", "<=", ">", ">=")


def lower(module: Module) -> Executable:
    """Lower a manifested, typed module to an executable (see the module docstring)."""
    asm = Assembler()
    kernels: dict[tuple[Function, int], tuple[int, ValueDims]] = {}
    for name, fn in module.items():
        _FunctionLowering(asm, module, name, fn, kernels).lower()
    return asm.build()


def type_spec(ty: Type) -> TypeSpec:
    """The VM's description of a parameter or result type (symbolic dims as text)."""
    if isinstance(ty, TensorType):
        return tensor(ty.dtype, [d if isinstance(d, int) else _dim_text(d) for d in ty.shape])
    if isinstance(ty, TupleType):
        return tuple_type(*(type_spec(f) for f in ty.fields))
    raise CompileError(f"a function parameter or result cannot have type {ty}")


def _dim_text(d: sympy.Expr) -> str:
    return "?" if ir.is_anonymous(d) else dim_text(d)


class _FunctionLowering:
    def __init__(
        self,
        asm: Assembler,
        module: Module,
        name: str,
        fn: Function,
        kernels: dict[tuple[Function, int], tuple[int, ValueDims]],
    ) -> None:
        self.asm = asm
        self.module = module
        self.name = name
        self.fn = fn
        self.kernels = kernels
        ret_ty = fn.ret_type or (fn.body.ty if fn.body.ty is not None else None)
        self.b: FunctionBuilder = asm.function(
            name,
            [(p.name_hint, type_spec(_param_type(p, name))) for p in fn.params],
            None if ret_ty is None else type_spec(ret_ty),
        )
        self.b.ranges = [(s.name, lo, hi) for s, (lo, hi) in fn.ranges.items()]
        self.regs: dict[Var, Reg] = dict(zip(fn.params, self.b.params, strict=True))
        self.constants: dict[Constant, Reg] = {}
        self.unit = self.b.load_int(0)
        """The value of memory ops used for their effect (invoke, kill, check, shape_func)."""

    # ---- entry -------------------------------------------------------------------------------
    def lower(self) -> None:
        symbols = _Symbols()
        self.bind_params(symbols)
        self.tail_block(self.fn.body, symbols, [])

    def tail_block(self, expr: Expr, symbols: dict[sympy.Basic, Reg], after: list[Let]) -> None:
        """Lower a chain in tail position: every path ends in ``ret`` or ``tail_call``.

        The chain's result is a call of a global (the let binding it followed only by kills):
        a ``tail_call``, so a loop written as recursion runs in one frame and the VM frees, at
        each step, the storages the replaced frame no longer reaches (the kills that would
        have followed the call are left to that). An ``if``: each branch in tail position.
        Anything else: the value, the kills (``after``: those of enclosing chains), ``ret``.
        """
        lets, node = ir.let_chain(expr)
        k = len(lets)
        while k and _is_kill(lets[k - 1].value):
            k -= 1
        last = lets[k - 1] if k and node is lets[k - 1].var else None
        v = last.value if last is not None else None
        tail_call = isinstance(v, Call) and isinstance(v.callee, GlobalVar)
        if last is None or not (tail_call or isinstance(v, If)):
            result = self.block(expr, symbols)
            for kill in after:
                self.value(kill.value, symbols)
            self.b.ret(result)
            return
        self.prefetch(expr, symbols)
        for let in lets[: k - 1]:
            self.let(let, symbols)
        kills = lets[k:] + after
        if isinstance(v, Call):
            assert isinstance(v.callee, GlobalVar)
            self.b.tail_call(v.callee.name, [self.atom(a) for a in v.args])
            return
        assert isinstance(v, If)
        otherwise = self.b.label("else")
        self.b.jump_if_not(self.atom(v.cond), otherwise)
        self.tail_block(v.then_branch, _Symbols.branch_of(symbols), kills)
        self.b.place(otherwise)
        self.tail_block(v.else_branch, _Symbols.branch_of(symbols), kills)

    def bind_params(self, symbols: dict[sympy.Basic, Reg]) -> None:
        """Emit the entry code of ``entry_plan`` (``analysis/entry_binding``)."""
        params = [(p.name_hint, _param_type(p, self.name)) for p in self.fn.params]
        plan = entry_plan(params, f"@{self.name}", self.fn.span)
        leaf_regs: dict[tuple[int, ...], Reg] = {}

        def leaf(path: tuple[int, ...]) -> Reg:
            if path not in leaf_regs:  # a tuple field is read once, where first needed
                parent = self.b.params[path[0]] if len(path) == 1 else leaf(path[:-1])
                leaf_regs[path] = parent if len(path) == 1 else self.b.get_item(parent, path[-1])
            return leaf_regs[path]

        for site, binds in plan.plain:
            d = site.dim
            if binds:
                symbols[d] = self.b.dim(leaf(site.leaf), site.axis)
                self.check_range(d, symbols[d], site.what)
            else:
                self.b.check_dim(
                    leaf(site.leaf), site.axis, symbols[d], site.what, _show(d), plan.bound_by[d]
                )
        for derived in plan.derived:
            self.bind_derived(derived, leaf(derived.site.leaf), symbols, plan.bound_by)
        for site in plan.checked:
            actual = self.b.dim(leaf(site.leaf), site.axis)
            (expected,) = self.dims([site.dim], symbols)
            shown, values = _symbol_values(site.dim, symbols, plan.bound_by)
            self.b.check_values(
                actual,
                "==",
                expected,
                f"{site.what} = {{a}} but {_dim_text(site.dim)} = {{b}} ({shown})",
                values,
            )

    def bind_derived(
        self,
        derived: Derived,
        leaf_reg: Reg,
        symbols: dict[sympy.Basic, Reg],
        bound_by: dict[sympy.Basic, str],
    ) -> None:
        """Bind ``s`` from a dim ``a*s + b``: ``s = (d - b) // a``, where a check first requires
        ``d - b`` to be a non-negative multiple of ``a`` (one shape program computes both)."""
        site, s, a = derived.site, derived.symbol, derived.scale
        d = ir.fresh("dim")  # stands for the axis's value in the program
        rest = d - derived.offset
        value = sympy.floor(rest / a)
        bad = ir.simplify(sympy.Min(1, sympy.Mod(rest, a) + sympy.Max(0, -rest)))  # 0 iff ok
        exprs = [value] if bad == 0 else [value, d + bad]
        names = needed_symbols(exprs)
        compiler = ShapeExprCompiler(names)
        program = self.asm.shape_program(compiler.builder.build([compiler.term(e) for e in exprs]))
        d_reg = self.b.dim(leaf_reg, site.axis)
        inputs = symbol_registers(names, {**symbols, d: d_reg}, f"@{self.name}")
        regs = self.b.shape_program(program, inputs)  # type: ignore[arg-type]
        if bad != 0:
            shown, values = _symbol_values(derived.offset, symbols, bound_by)
            self.b.check_values(
                regs[1],
                "==",
                d_reg,
                f"{site.what} = {{b}} is not {_dim_text(site.dim)} for any integer "
                f"{_show(s)} >= 0" + (f" ({shown})" if shown else ""),
                values,
            )
        symbols[s] = regs[0]
        self.check_range(s, regs[0], bound_by[s])

    def check_range(self, symbol: sympy.Symbol, reg: Reg, bound_by: str) -> None:
        """Check a symbol just bound at entry against its declared range (two ``check``s)."""
        bound = self.fn.ranges.get(symbol)
        if bound is None:
            return
        lo, hi = bound
        message = (
            f"{_show(symbol)} = {{a}} is outside its declared range {range_text(bound)} "
            f"(bound by {bound_by})"
        )
        if lo > 0:
            self.b.check(reg, ">=", lo, message)
        if hi is not None:
            self.b.check(reg, "<=", hi, message)

    def leaves(self, reg: Reg, ty: Type, path: str) -> list[tuple[Reg, TensorType, str]]:
        """The tensor leaves of a value, with their registers (tuples are read by get_item)."""
        if isinstance(ty, TensorType):
            return [(reg, ty, path)]
        if isinstance(ty, TupleType):
            out = []
            for i, f in enumerate(ty.fields):
                if ir.type_symbols(f) & ir.plain_symbols(f):
                    out += self.leaves(self.b.get_item(reg, i), f, f"{path}.{i}")
            return out
        return []

    # ---- blocks --------------------------------------------------------------------------------
    def block(self, expr: Expr, symbols: dict[sympy.Basic, Reg]) -> Reg:
        self.prefetch(expr, symbols)
        lets, result = ir.let_chain(expr)
        for let in lets:
            self.let(let, symbols)
        return self.value(result, symbols)

    def let(self, let: Let, symbols: dict[sympy.Basic, Reg]) -> None:
        self.regs[let.var] = self.value(let.value, symbols)
        # The variable's type: where an annotation names a value's new unknowns.
        self.bind_new_symbols(self.regs[let.var], let.var.ty or let.value.ty, symbols)

    def prefetch(self, expr: Expr, symbols: dict[sympy.Basic, Reg]) -> None:
        """Compute, in one shape program at the start of a chain, every size, offset and shape
        of its memory ops that the symbols bound here determine: one instruction per chain
        instead of one per allocation (each costs ~0.3 us per call). Dims that divide by a
        symbol wait for their own use, after the checks that guard them."""
        memo, bound = _Symbols.memo_of(symbols), symbols.keys()
        dims: dict[ir.Dim, None] = {}
        shapes: dict[tuple[Any, ...], None] = {}
        for node in ir.let_chain(expr)[0]:
            op = memory_op(node.value)
            d = (
                op.size
                if isinstance(op, AllocStorage)
                else op.offset
                if isinstance(op, AllocTensor)
                else None
            )
            if d is not None and _hoistable(d, bound) and d not in memo:
                dims[d] = None
            # A shape, or the attribute values an invoke passes (begin=[k]): tuples alike.
            tuples: list[Any] = [op.shape] if isinstance(op, (AllocTensor, ReshapeTensor)) else []
            if isinstance(op, Invoke):
                tuples = single_op_value_dims(self.function_value(op.fn))
            for dims_of in tuples:
                key = ("shape", *dims_of)
                symbolic = [d for d in key[1:] if not isinstance(d, int)]
                if symbolic and key not in memo and all(_hoistable(d, bound) for d in symbolic):
                    shapes[key] = None
        todo = [d for d in dims if d not in symbols]
        if len(todo) + len(shapes) < 2:
            return  # nothing to share: computed where used, as before
        names = needed_symbols([*todo, *(d for k in shapes for d in k[1:])])
        compiler = ShapeExprCompiler(names)
        outputs: list[Any] = [compiler.term(d) for d in todo]
        outputs += [[compiler.term(d) for d in key[1:]] for key in shapes]
        program = self.asm.shape_program(compiler.builder.build(outputs))
        inputs = symbol_registers(names, symbols, f"@{self.name}")
        regs = self.b.shape_program(program, inputs)  # type: ignore[arg-type]
        memo.update(zip([*todo, *shapes], regs, strict=True))

    def bind_new_symbols(self, reg: Reg, ty: Type | None, symbols: dict[sympy.Basic, Reg]) -> None:
        if ty is None or not (ir.plain_symbols(ty) - symbols.keys()):
            return
        for leaf_reg, leaf, _ in self.leaves(reg, ty, "value"):
            for axis, d in enumerate(leaf.shape):
                if isinstance(d, sympy.Symbol) and d not in symbols:
                    symbols[d] = self.b.dim(leaf_reg, axis)

    def atom(self, e: Expr) -> Reg:
        if isinstance(e, Var):
            if e not in self.regs:
                raise CompileError(f"@{self.name}: variable %{e.name_hint} has no value here")
            return self.regs[e]
        if isinstance(e, Constant):
            if e not in self.constants:
                self.constants[e] = self.b.load_const(self.asm.const(e.value))
            return self.constants[e]
        if isinstance(e, Tuple):
            return self.b.tuple([self.atom(f) for f in e.fields])
        raise CompileError(f"@{self.name}: expected a variable or constant, got {e}")

    def value(self, e: Expr, symbols: dict[sympy.Basic, Reg]) -> Reg:
        if isinstance(e, (Var, Constant, Tuple)):
            return self.atom(e)
        if isinstance(e, TupleGetItem):
            return self.b.get_item(self.atom(e.tuple_value), e.index)
        if isinstance(e, If):
            return self.if_(e, symbols)
        if isinstance(e, Function):
            return self.unit  # a primitive bound to a variable: only memory ops use it
        if isinstance(e, Call):
            if isinstance(e.callee, GlobalVar):
                args = [self.atom(a) for a in e.args]
                return self.b.call(e.callee.name, args)
            op = memory_op(e)
            if op is not None:
                return _LOWER_MEMORY_OP[type(op)](self, op, symbols)
        raise CompileError(
            f"@{self.name}: cannot lower {type(e).__name__} {str(e).splitlines()[0]} "
            "(run manifest_alloc first; calls of function values are not supported)",
            e.span,
        )

    def if_(self, e: If, symbols: dict[sympy.Basic, Reg]) -> Reg:
        dst = self.b.reg()
        otherwise, end = self.b.label("else"), self.b.label("endif")
        self.b.jump_if_not(self.atom(e.cond), otherwise)
        self.b.move(self.block(e.then_branch, _Symbols.branch_of(symbols)), dst)
        self.b.jump(end)
        self.b.place(otherwise)
        self.b.move(self.block(e.else_branch, _Symbols.branch_of(symbols)), dst)
        self.b.place(end)
        return dst

    # ---- dims ----------------------------------------------------------------------------------
    def dims(self, dims: Sequence[ir.Dim], symbols: dict[sympy.Basic, Reg]) -> list[int | Reg]:
        """Immediates for static dims; registers for the rest: a bound symbol's own register,
        a value computed earlier in this scope, or one shape program computing all the others.
        """
        memo = _Symbols.memo_of(symbols)
        todo = [
            d
            for d in dict.fromkeys(dims)
            if not isinstance(d, int) and d not in memo and d not in symbols
        ]
        if todo:
            names = needed_symbols(todo)
            compiler = ShapeExprCompiler(names)
            program = self.asm.shape_program(
                compiler.builder.build([compiler.term(d) for d in todo])
            )
            inputs = symbol_registers(names, symbols, f"@{self.name}")
            outs = self.b.shape_program(program, inputs)  # type: ignore[arg-type]
            memo.update(zip(todo, outs, strict=True))
        return [d if isinstance(d, int) else symbols[d] if d in symbols else memo[d] for d in dims]

    def shape(self, dims: Sequence[ir.Dim], symbols: dict[sympy.Basic, Reg]) -> list[int] | Reg:
        """A shape: immediates when static, else one register holding the tuple (computed once
        per scope, by one shape program with a tuple output)."""
        if all(isinstance(d, int) for d in dims):
            return [int(d) for d in dims]
        memo = _Symbols.memo_of(symbols)
        key = ("shape", *dims)
        if key not in memo:
            names = needed_symbols([d for d in dims if not isinstance(d, int)])
            compiler = ShapeExprCompiler(names)
            program = self.asm.shape_program(
                compiler.builder.build([[compiler.term(d) for d in dims]])
            )
            inputs = symbol_registers(names, symbols, f"@{self.name}")
            (memo[key],) = self.b.shape_program(program, inputs)  # type: ignore[arg-type]
        return memo[key]

    # ---- memory ops (dispatched by _LOWER_MEMORY_OP) -------------------------------------------
    def alloc_storage(self, op: AllocStorage, symbols: dict[sympy.Basic, Reg]) -> Reg:
        (size,) = self.dims([op.size], symbols)
        return self.b.alloc_storage(size, op.alignment, op.dtype_hint)

    def alloc_tensor(self, op: AllocTensor, symbols: dict[sympy.Basic, Reg]) -> Reg:
        (offset,) = self.dims([op.offset], symbols)
        shape = self.shape(op.shape, symbols)
        return self.b.alloc_tensor(self.atom(op.storage), offset, shape, op.dtype)

    def kernel_entry(self, op: Invoke) -> tuple[int, ValueDims]:
        """The kernel-table entry of ``op``'s primitive (made once per primitive) and the dims
        of the attribute values its invoke passes last."""
        fn = self.function_value(op.fn)
        # Destinations beyond the results are the step plan's scratch (manifest_alloc).
        num_outs = len(op.outputs.fields) if isinstance(op.outputs, Tuple) else 0
        num_scratch = num_outs - len(ir.tensor_leaves(_result_type(fn)))
        entry = self.kernels.get((fn, num_scratch))
        if entry is None:
            entry = self.kernels[(fn, num_scratch)] = kernel_for(
                self.asm, fn, f"{self.name}_k{len(self.kernels)}", num_scratch
            )
        return entry

    def invoke(self, op: Invoke, symbols: dict[sympy.Basic, Reg]) -> Reg:
        ins, outs = self.tuple_items(op.inputs), self.tuple_items(op.outputs)
        k, value_dims = self.kernel_entry(op)
        # Attribute values the kernel needs (begin=[k]): one tuple of ints each, computed here.
        for dims in value_dims:
            values = self.shape(dims, symbols)
            assert isinstance(values, Reg), "a dim entry of an attribute is never an int"
            ins.append(values)
        self.b.invoke(k, ins, outs)
        return self.unit

    def reshape_tensor(self, op: ReshapeTensor, symbols: dict[sympy.Basic, Reg]) -> Reg:
        return self.b.reshape(self.atom(op.tensor), self.shape(op.shape, symbols))

    def append(self, op: Append, symbols: dict[sympy.Basic, Reg]) -> Reg:
        return self.b.append(self.atom(op.tensor), self.atom(op.appended), op.axis, op.capacity)

    def shape_of(self, op: ShapeOf, symbols: dict[sympy.Basic, Reg]) -> Reg:
        return self.b.shape_of(self.atom(op.tensor))

    def kill(self, op: Kill, symbols: dict[sympy.Basic, Reg]) -> Reg:
        self.b.kill(self.atom(op.target))
        return self.unit

    def function_value(self, e: Expr) -> Function:
        if isinstance(e, Function):
            return e
        if isinstance(e, Var):
            fn = _let_bound_function(self.fn.body, e)
            if fn is not None:
                return fn
        raise CompileError(f"@{self.name}: memory ops need a primitive function, got {e}")

    def tuple_items(self, e: Expr) -> list[Reg]:
        if not isinstance(e, Tuple):
            raise CompileError(f"@{self.name}: expected a tuple of operands, got {e}")
        return [self.atom(f) for f in e.fields]

    def check(self, op: Check, symbols: dict[sympy.Basic, Reg]) -> Reg:
        """A deferred fact. Its message has ``{a}``/``{b}`` where the VM puts the dims' values.

        A broadcast or divisibility fact is not one comparison, so it is compiled to
        ``A == rhs`` with ``A = rhs`` when the fact holds and ``A = lhs`` when it does not (the
        two differ then): the check fails exactly when the fact does, and reports both dims.
        """
        kind, message = op.kind, op.message
        lhs, rhs = ir.dims.as_expr(op.lhs), ir.dims.as_expr(op.rhs)
        message, values = self.symbol_values(message, [lhs, rhs], symbols)
        if kind in _CMP:
            a, b = self.dims([lhs, rhs], symbols)
            self.b.check_values(a, kind, b, message, values)
            return self.unit
        # Unevaluated min/max, as in ``holds``: evaluating them on the floor-division dims of a
        # convolution stack made sympy factor every pair of terms (9 s of a wav2vec2 compile).
        if kind == "broadcast":
            bad = sympy.Min(_abs(lhs - rhs), _abs(lhs - 1) * _abs(rhs - 1), evaluate=False)
        else:  # lhs divides rhs; 0 divides only 0
            bad = sympy.Mod(rhs, sympy.Max(lhs, 1, evaluate=False)) + rhs * _is_zero(lhs)
        holds = 1 - sympy.Min(bad, 1, evaluate=False)
        a, b = self.dims([lhs + holds * (rhs - lhs), rhs], symbols)
        self.b.check_values(a, "==", b, message, values)
        return self.unit

    def holds(self, op: Holds, symbols: dict[sympy.Basic, Reg]) -> Reg:
        """Whether a fact about dims holds, as an int (1 or 0) for ``jump_if_not``: integer
        arithmetic in a shape program, no comparison opcode (dims are integers, so ``a <= b``
        is ``min(max(b - a + 1, 0), 1)``)."""
        lhs, rhs = ir.dims.as_expr(op.lhs), ir.dims.as_expr(op.rhs)

        # Unevaluated: sympy would compare the terms of the peaks' maxima pairwise (slow).
        def le(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr:
            return sympy.Min(sympy.Max(b - a + 1, 0, evaluate=False), 1, evaluate=False)

        def ne(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr:
            # Unevaluated too: an evaluated Max(d, -d) of two peaks took 18-33 s (issue 27).
            return sympy.Min(sympy.Max(a - b, b - a, evaluate=False), 1, evaluate=False)

        truth = {
            "<=": lambda: le(lhs, rhs),
            "<": lambda: le(lhs + 1, rhs),
            ">=": lambda: le(rhs, lhs),
            ">": lambda: le(rhs + 1, lhs),
            "!=": lambda: ne(lhs, rhs),
            "==": lambda: 1 - ne(lhs, rhs),
        }[op.kind]()
        (value,) = self.dims([ir.check_dim(truth)], symbols)
        return value if isinstance(value, Reg) else self.b.load_int(int(value))

    def symbol_values(
        self, message: str, dims: Sequence[sympy.Expr], symbols: dict[sympy.Basic, Reg]
    ) -> tuple[str, list[Reg]]:
        """A deferred check's message with each ``{=n}`` (``message_template``'s placeholder for
        the value of a symbol of the fact) turned into ``check_values``'s ``{0}``, ``{1}``, ...,
        and the registers that fill them in."""
        values: list[Reg] = []
        for s in needed_symbols(dims):
            placeholder = f"{{={s}}}"
            if not ir.is_anonymous(s) and placeholder in message:
                if s not in symbols:
                    raise CompileError(f"@{self.name}: the dim symbol {s} is not bound here")
                message = message.replace(placeholder, f"{{{len(values)}}}")
                values.append(symbols[s])
        return message, values

    def shape_func(self, op: ShapeFunc, symbols: dict[sympy.Basic, Reg]) -> Reg:
        fn = self.function_value(op.fn)
        body = fn.body
        if not isinstance(body, Call) or body.op is None:
            raise CompileError(f"@{self.name}: memory.shape_func needs a single-op primitive")
        inputs = dict(zip(fn.params, self.tuple_items(op.inputs), strict=True))
        op_inputs = []
        for a in body.args:
            if isinstance(a, Var) and a in inputs:
                op_inputs.append(inputs[a])
                continue
            if not isinstance(a, Constant):
                raise CompileError(f"@{self.name}: shape function input {a} is not supported")
            reg = self.atom(a)
            from shape_funcs import get_shape_func

            dd = get_shape_func(body.op.name).data_dependent
            i = len(op_inputs)
            op_inputs.append(reg if i < len(dd) and dd[i] else self.b.shape_of(reg))
        # (the manifest already chose shapes or values for the parameters: data_dependent)
        entry = self.asm.shape_func(
            body.op.name, vm_attrs(body, f"in @{self.name}", shape_func=True)
        )
        shapes = self.b.shape_func(entry, op_inputs)
        out_shapes = op.out_shapes
        single = not isinstance(_ty_of(body), TupleType)
        for j, out in enumerate(out_shapes):
            shape_reg = shapes if single else self.b.get_item(shapes, j)
            for axis, d in enumerate(out):
                actual = self.b.get_item(shape_reg, axis)
                if isinstance(d, sympy.Symbol) and d not in symbols:
                    symbols[d] = actual
                    continue
                (expected,) = self.dims([d], symbols)
                self.b.check(
                    actual,
                    "==",
                    expected,
                    f"{body.op.name}: output {j} has shape[{axis}] = {{a}}, expected {d} = {{b}}",
                )
        return self.unit


#: How each memory op lowers: one method of ``_FunctionLowering`` per op class.
_LOWER_MEMORY_OP: dict[type[MemoryOp], Callable[[Any, Any, dict[sympy.Basic, Reg]], Reg]] = {
    AllocStorage: _FunctionLowering.alloc_storage,
    AllocTensor: _FunctionLowering.alloc_tensor,
    Invoke: _FunctionLowering.invoke,
    ReshapeTensor: _FunctionLowering.reshape_tensor,
    Append: _FunctionLowering.append,
    ShapeOf: _FunctionLowering.shape_of,
    Kill: _FunctionLowering.kill,
    Check: _FunctionLowering.check,
    Holds: _FunctionLowering.holds,
    ShapeFunc: _FunctionLowering.shape_func,
}


class _Symbols(dict[sympy.Basic, Reg]):
    """The registers of the bound symbols of one scope, and the dims already computed there.

    A branch of an ``if`` starts from copies of both: what was computed before the ``if`` is
    valid in it, and what a branch computes stays in that branch.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.memo: dict[Any, Reg] = {}

    @staticmethod
    def branch_of(parent: dict[sympy.Basic, Reg]) -> _Symbols:
        child = _Symbols(parent)
        child.memo = dict(_Symbols.memo_of(parent))
        return child

    @staticmethod
    def memo_of(symbols: dict[sympy.Basic, Reg]) -> dict[Any, Reg]:
        assert isinstance(symbols, _Symbols), "scopes are _Symbols"
        return symbols.memo


def _is_kill(value: Expr) -> bool:
    return Kill.of(value) is not None


def _hoistable(d: ir.Dim, bound: Any) -> bool:
    """``d`` is symbolic, uses only ``bound`` symbols, and divides by no symbol."""
    if isinstance(d, int) or not ir.free_symbols(d) <= bound:
        return False
    for node in sympy.preorder_traversal(d):
        if isinstance(node, sympy.Pow) and node.exp.is_negative and node.base.free_symbols:
            return False
        if isinstance(node, sympy.Mod) and node.args[1].free_symbols:
            return False
    return True


def _ty_of(e: Expr) -> Type:
    if e.ty is None:
        raise CompileError("the lowering needs a typed module")
    return e.ty


def _param_type(p: Var, fn_name: str) -> Type:
    ty = p.ty or p.type_annotation
    if ty is None:
        raise CompileError(f"parameter %{p.name_hint} of @{fn_name} has no type")
    return ty


def _show(s: sympy.Basic) -> str:
    return "?" if ir.is_anonymous(s) else str(s)


def _symbol_values(
    dim: ir.Dim, symbols: dict[sympy.Basic, Reg], bound_by: dict[sympy.Basic, str]
) -> tuple[str, list[Reg]]:
    """The symbols of ``dim`` for a ``check_values`` message (``n = {0}, bound by x.shape[0];
    m = {1}, ...``) and the registers that fill it in."""
    named = sorted(ir.free_symbols(dim), key=str)
    text = "; ".join(f"{_show(s)} = {{{i}}}, bound by {bound_by[s]}" for i, s in enumerate(named))
    return text, [symbols[s] for s in named]


def _is_zero(a: sympy.Expr) -> sympy.Expr:
    """1 when ``a`` (a non-negative integer) is 0, else 0."""
    return 1 - sympy.Min(a, 1, evaluate=False)


def _abs(e: sympy.Expr) -> sympy.Expr:
    """``|e|`` as ``Max(e, -e)``: shape programs have max but no abs (unevaluated: see
    ``check``)."""
    return sympy.Max(e, -e, evaluate=False)


def _let_bound_function(body: Expr, var: Var) -> Function | None:
    node = body
    stack = [node]
    while stack:
        for let in ir.let_chain(stack.pop())[0]:
            if let.var is var and isinstance(let.value, Function):
                return let.value
            if isinstance(let.value, If):
                stack += [let.value.then_branch, let.value.else_branch]
    return None


def _result_type(fn: Function) -> ir.Type:
    ty = fn.ret_type or fn.body.ty
    if ty is None:
        raise CompileError("the lowering needs typed primitive functions (run infer_types)")
    return ty
