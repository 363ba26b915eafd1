"""Ray on this machine only: every Ray process listens on the loopback address (no Ray import).

``ray.init(_node_ip_address="127.0.0.1")`` is not enough on Linux: where Ray clusters are
enabled (everywhere but macOS and Windows) Ray replaces a local address with the machine's
outward one, and its GCS, raylet and agents listen there. Ray's switch for that,
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``, read when Ray is imported, set to 0 makes it do what it
does on macOS and Windows: every node address is 127.0.0.1. ``python -m dynshape serve``, the
tests and the load benchmark start a local Ray this way; a deployment on a real cluster starts
Ray as the cluster does (``ray start``, ``ray.init(address=...)``) and needs none of this.
"""

from __future__ import annotations

import os
import sys

from ..errors import ServeConfigError

#: Ray's environment switch: "0" keeps every node address on 127.0.0.1.
RAY_CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def keep_ray_on_loopback() -> None:
    """Make the Ray this process starts listen on 127.0.0.1 only; call it before Ray is
    imported (a user's own setting of the switch is kept). ServeConfigError if Ray was
    imported already with clusters on: it read the switch then."""
    os.environ.setdefault(RAY_CLUSTER_SWITCH, "0")
    constants = sys.modules.get("ray._private.ray_constants")
    if os.environ[RAY_CLUSTER_SWITCH] == "0" and getattr(constants, "ENABLE_RAY_CLUSTER", False):
        raise ServeConfigError(
            f"Ray was imported before {RAY_CLUSTER_SWITCH}=0 was set: a local Ray would listen "
            "on this machine's outward address; set it before importing Ray"
        )
