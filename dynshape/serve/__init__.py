"""Serving compiled executables (issue 18; design/serving.md).

``batching`` is the rule for putting requests with symbolic dims into one call (joined along
the batch symbol, padded where the user allows it) and cutting the results back, ``wire`` the
HTTP bodies, ``inference_protocol`` the Open Inference Protocol's routes and bodies,
``budgets`` the bounds on a served file's work, ``source`` where an executable comes from,
``offline`` the Ray Data ``map_batches`` callable, ``local`` a Ray kept on the loopback
address, ``generation`` the continuous batching of served generations,
``generation_request`` one generation's options, events and state, and ``generation_wire``
their bodies and server-sent events: all need numpy only.
``deployment`` and ``generation_server`` are the Ray Serve deployments (the optional ``serve``
extra), with ``front`` and ``grpc_loopback`` the only modules here that import Ray, and
nothing imports them but their users.
"""

from .batching import BatchPlan, Group, Pad

__all__ = ["BatchPlan", "Group", "Pad"]
