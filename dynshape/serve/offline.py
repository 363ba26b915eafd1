"""Offline batch inference: a ``map_batches`` callable for Ray Data (numpy only here).

    import ray
    from dynshape.serve.offline import MapBatches

    ds = ray.data.from_items([{"x": row} for row in rows])
    out = ds.map_batches(MapBatches, fn_constructor_args=("model.dsx",),
                         batch_format="numpy", concurrency=2)

Ray Data makes one ``MapBatches`` per worker (the executable is loaded and decoded once there)
and calls it with each batch: a dict of numpy arrays by column. The columns named like ``main``'s
parameters are its inputs (other columns are ignored); the result comes back as columns
``out``, or ``out.0``, ``out.1``... for a tuple (``output_names`` renames them). One executable
serves every batch size Ray Data hands it, the last, shorter batch included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from vm import Executable, VirtualMachine

from ..errors import RequestError
from .source import ExecutableSource, executable_bytes


class MapBatches:
    """Runs a saved executable on Ray Data batches (see the module doc)."""

    def __init__(self, executable: ExecutableSource, output_names: Sequence[str] = ()) -> None:
        self.exe = (
            executable
            if isinstance(executable, Executable)
            else Executable.from_bytes(executable_bytes(executable))
        )
        self.vm = VirtualMachine(self.exe)
        self.params = tuple(p.name for p in self.exe.inputs)
        self.output_names = tuple(output_names)

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The results of ``main`` on the batch's columns, as columns."""
        missing = [p for p in self.params if p not in batch]
        if missing:
            raise RequestError(
                f"the batch has no column {', '.join(map(repr, missing))} (its columns: "
                f"{', '.join(batch)}; the model takes: {', '.join(self.params)})"
            )
        result = self.vm.run(*(np.ascontiguousarray(batch[p]) for p in self.params))
        leaves = list(result) if isinstance(result, tuple) else [result]
        default = ("out",) if not isinstance(result, tuple) else _numbered(len(leaves))
        names = self.output_names or default
        if len(names) != len(leaves):
            raise RequestError(f"output_names has {len(names)} name(s) for {len(leaves)} result(s)")
        return {n: np.asarray(v) for n, v in zip(names, leaves, strict=True)}


def _numbered(n: int) -> tuple[str, ...]:
    return tuple(f"out.{i}" for i in range(n))
