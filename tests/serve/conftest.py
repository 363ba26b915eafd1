"""Every Ray these tests start listens on the loopback address only (dynshape/serve/local.py):
set before any test module imports Ray.

Each module's ``NEEDS`` (optional packages) is imported before its first test, not at
collection (``serve_testlib.py``): a missing one skips its tests as ``pytest.importorskip``
does, with "could not import"."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dynshape.serve.local import keep_ray_on_loopback

keep_ray_on_loopback()


@pytest.fixture(autouse=True, scope="module")
def _needs(request: pytest.FixtureRequest) -> Iterator[None]:
    for name in getattr(request.module, "NEEDS", ()):
        pytest.importorskip(name)
    yield
