"""The Ray Data ``map_batches`` callable (issue 18, item 3; dynshape/serve/offline.py): called
as Ray Data calls it, with dicts of numpy columns of any batch size (tests/serve runs it under
Ray Data itself)."""

from __future__ import annotations

import numpy as np
import pytest

import dynshape
from dynshape.errors import RequestError
from dynshape.serve.offline import MapBatches

PROGRAM = """
def @main(%x: Tensor[(batch, 3), float32]) -> (Tensor[(batch, 3), float32], Tensor[(batch,), float32]) {
  (exp(%x), sum(%x, axis=[1]))
}
"""


@pytest.fixture()
def saved(tmp_path):
    path = tmp_path / "m.dsx"
    dynshape.compile(PROGRAM).save(path)
    return path


def test_every_batch_size_and_the_result_columns(saved):
    f = MapBatches(saved)
    rng = np.random.default_rng(0)
    for n in (4, 4, 1, 0):  # the last, shorter batches too
        x = rng.standard_normal((n, 3)).astype(np.float32)
        out = f({"x": x, "id": np.arange(n)})  # other columns are ignored
        assert sorted(out) == ["out.0", "out.1"]
        np.testing.assert_allclose(out["out.0"], np.exp(x), rtol=1e-6)
        np.testing.assert_allclose(out["out.1"], x.sum(axis=1), rtol=1e-5)
    named = MapBatches(saved.read_bytes(), output_names=("e", "s"))
    assert sorted(named({"x": np.ones((2, 3), np.float32)})) == ["e", "s"]


def test_a_missing_column_and_a_wrong_name_count_say_so(saved):
    with pytest.raises(RequestError, match=r"the batch has no column 'x' \(its columns: y"):
        MapBatches(saved)({"y": np.ones((2, 3), np.float32)})
    with pytest.raises(RequestError, match=r"output_names has 1 name\(s\) for 2 result\(s\)"):
        MapBatches(saved, output_names=("only",))({"x": np.ones((2, 3), np.float32)})
