"""The ``map_batches`` callable under Ray Data itself (issue 18, item 3): one instance per
worker, batches of 4 rows and a last shorter one, every row's result back."""

from __future__ import annotations

import numpy as np
from serve_testlib import Lazy

import dynshape
from dynshape.serve.offline import MapBatches

NEEDS = ("ray.data",)  # imported before the first test (conftest.py), not at collection
data = Lazy("ray.data")
ray = Lazy("ray")

PROGRAM = """
def @main(%x: Tensor[(batch, 3), float32]) -> Tensor[(batch, 3), float32] { exp(%x) }
"""


def test_map_batches_over_a_dataset(tmp_path) -> None:
    saved = tmp_path / "m.dsx"
    dynshape.compile(PROGRAM).save(saved)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        rows = np.random.default_rng(1).standard_normal((10, 3)).astype(np.float32)
        ds = data.from_items([{"x": r} for r in rows])
        out = ds.map_batches(
            MapBatches,
            fn_constructor_args=(str(saved),),
            batch_format="numpy",
            batch_size=4,
            concurrency=1,
        ).take_all()
        got = np.stack([r["out"] for r in out])
        want = np.exp(rows)
        order = np.lexsort(got.T[::-1]), np.lexsort(want.T[::-1])
        np.testing.assert_allclose(got[order[0]], want[order[1]], rtol=1e-6)
    finally:
        ray.shutdown()
