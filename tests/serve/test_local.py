"""A local Ray on the loopback address only (dynshape/serve/local.py): Ray reads its switch
when it is imported, so each case runs in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys

from dynshape.serve.local import RAY_CLUSTER_SWITCH

NEEDS = ("ray",)  # imported before the first test (conftest.py), not at collection

CHECK = """
import sys
from dynshape.serve.local import keep_ray_on_loopback
if sys.argv[1] == "late":
    import ray
keep_ray_on_loopback()
import ray._private.ray_constants as c
from ray._private.services import resolve_ip_for_localhost
print(c.ENABLE_RAY_CLUSTER, resolve_ip_for_localhost("127.0.0.1"))
"""


def _run(order: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != RAY_CLUSTER_SWITCH}
    return subprocess.run(
        [sys.executable, "-c", CHECK, order],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_before_ray_is_imported_every_address_stays_on_loopback() -> None:
    done = _run("first")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "127.0.0.1"]


def test_after_ray_is_imported_it_says_it_is_too_late() -> None:
    done = _run("late")
    assert done.returncode == 1
    assert (
        "ServeConfigError: Ray was imported before RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 was set"
        in done.stderr
    )
