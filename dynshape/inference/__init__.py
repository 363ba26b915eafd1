"""Typing helpers behind type inference (``passes/infer_types.py``) and the builder: relations
between types (refining, joining branches, instantiating signatures at a call), the type of one
call (``op_result``), and the symbolic context its shape functions run in (``symbolic_context``:
SymbolicContext proves, refutes or defers their facts; DeferredCheck is a deferred one)."""
