"""Every Ray these tests start listens on the loopback address only (dynshape/serve/local.py):
set before any test module imports Ray.

Each module's ``NEEDS`` (optional packages) is imported before its first test, not at
collection (``serve_testlib.py``): a missing one skips its tests as ``pytest.importorskip``
does, with "could not import"."""

from __future__ import annotations

import importlib
import socket
from collections.abc import Iterator

import pytest

from dynshape.serve.local import keep_ray_on_loopback

keep_ray_on_loopback()


@pytest.fixture(autouse=True, scope="module")
def _needs(request: pytest.FixtureRequest) -> Iterator[None]:
    for name in getattr(request.module, "NEEDS", ()):
        pytest.importorskip(name)
    yield


def free_port() -> int:
    """A port free on the loopback address now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: How many times ``cluster`` tries to start Ray (see there).
STARTS = 3


@pytest.fixture(scope="module")
def cluster() -> Iterator[int]:
    """A local Ray (2 CPUs, loopback only) and Serve's HTTP proxy on a free port, for one test
    module, shut down after it: yields the port."""
    ray, serve = importlib.import_module("ray"), importlib.import_module("ray.serve")
    port = free_port()
    for attempt in range(STARTS):
        try:
            ray.init(
                num_cpus=2,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
                _node_ip_address="127.0.0.1",
            )
            break
        except Exception as e:
            # Ray waits a fixed 30 s for its raylet; on a machine whose cores are both busy
            # that start has timed out ("The current node timed out during startup"): try
            # again from a clean state, and fail with Ray's error after the last try.
            ray.shutdown()
            if attempt == STARTS - 1 or "timed out during startup" not in str(e):
                raise
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield port
    finally:
        serve.shutdown()
        ray.shutdown()
