"""Analyses: facts about a module that passes, the lowering and the reports read; none of them
rewrites IR. ``dataflow`` (uses and scopes), ``liveness`` (allocations and last uses),
``step_plan`` (where each step of a primitive writes; ``recorded_plan`` records it in the
IR as ``fn.attrs.steps`` and reads it back, verified), ``in_place`` (outputs that may take an
input's bytes), ``dim_bounds`` (proofs about sizes), ``memory_check`` (no overlap, checked at
concrete sizes)."""
