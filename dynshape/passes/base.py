"""The pass interface: a small object with a name, typed options, and ``run(module)``."""

from __future__ import annotations

from typing import ClassVar

from ir import Module


class ModulePass:
    """A transformation or analysis of a whole module.

    Subclasses set ``name`` (used by ``--emit`` and in error reports), take their options as
    constructor arguments, document what they assume and guarantee, and implement ``run``,
    which returns a new module and never mutates its input.
    """

    name: ClassVar[str] = "pass"

    def run(self, module: Module) -> Module:
        """Return the transformed module."""
        raise NotImplementedError

    def __call__(self, module: Module) -> Module:
        return self.run(module)


class Sequential(ModulePass):
    """Several passes run one after the other as one stage (the pipeline's ``rewritten``
    stage is ``merge_matmuls`` then ``fuse_attention``)."""

    name = "sequential"

    def __init__(self, *passes: ModulePass) -> None:
        self.passes = passes

    def run(self, module: Module) -> Module:
        for p in self.passes:
            module = p.run(module)
        return module
