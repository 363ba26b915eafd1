"""How many model replicas a deployment runs: a fixed number, or Ray Serve's autoscaling
between two bounds (numpy-free, no Ray: the CLI checks its options with it before Ray starts).

Autoscaling is Ray Serve's own (``autoscaling_config``): it adds a replica while the replicas
average more than ``target_requests`` requests in flight (queued in the replica or running),
and removes one while they average fewer, within ``[min_replicas, max_replicas]``. The target
cannot exceed what one replica lets in (``max_ongoing_requests``: with batching, ``max_batch *
(threads + 1)``), or the replicas could never reach it and Serve would never scale out.
"""

from __future__ import annotations

from typing import Any

from ..errors import ServeConfigError

#: Ray Serve's own default target of requests in flight per replica, made explicit.
DEFAULT_TARGET_REQUESTS = 2.0


def replica_options(
    replicas: int | None,
    min_replicas: int | None,
    max_replicas: int | None,
    target_requests: float | None,
    ongoing: int,
) -> dict[str, Any]:
    """The options of ``serve.deployment`` that set the replicas: ``num_replicas`` (``replicas``,
    1 when None), or ``autoscaling_config`` when any of the autoscaling options is given
    (``min_replicas`` 1 and ``target_requests`` ``DEFAULT_TARGET_REQUESTS`` when None;
    ``max_replicas`` is then required). ``ongoing`` is one replica's ``max_ongoing_requests``.
    ServeConfigError names what is wrong."""
    scaling = (min_replicas, max_replicas, target_requests)
    if all(v is None for v in scaling):
        n = 1 if replicas is None else replicas
        if not _positive_int(n):
            raise ServeConfigError(f"replicas ({n}) must be an integer >= 1")
        return {"num_replicas": n}
    if replicas is not None:
        raise ServeConfigError(
            f"replicas ({replicas}) is a fixed number: give it or the autoscaling bounds "
            "(min_replicas, max_replicas, target_requests), not both"
        )
    if max_replicas is None:
        raise ServeConfigError("autoscaling needs max_replicas (the most replicas to run)")
    low = 1 if min_replicas is None else min_replicas
    target = DEFAULT_TARGET_REQUESTS if target_requests is None else target_requests
    if not _positive_int(low) or not _positive_int(max_replicas):
        raise ServeConfigError(
            f"min_replicas ({low}) and max_replicas ({max_replicas}) must be integers >= 1"
        )
    if low > max_replicas:
        raise ServeConfigError(f"min_replicas ({low}) must be <= max_replicas ({max_replicas})")
    if isinstance(target, bool) or not target > 0:
        raise ServeConfigError(f"target_requests ({target}) must be > 0")
    if target > ongoing:
        raise ServeConfigError(
            f"target_requests ({target}) must be <= the requests one replica takes in at once "
            f"({ongoing}: max_batch * (threads + 1) with batching); a replica could never "
            "reach it"
        )
    return {
        "autoscaling_config": {
            "min_replicas": low,
            "max_replicas": max_replicas,
            "target_ongoing_requests": float(target),
        }
    }


def _positive_int(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1
