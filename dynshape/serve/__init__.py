"""Serving compiled executables (issue 18; design/serving.md).

``batching`` is the rule for putting requests with symbolic dims into one call (joined along
the batch symbol, padded where the user allows it) and cutting the results back, ``wire`` the
HTTP bodies, ``inference_protocol`` the Open Inference Protocol's routes and bodies,
``budgets`` the bounds on a served file's work, ``source`` where an executable comes from,
``offline`` the Ray Data ``map_batches`` callable, ``local`` a Ray kept on the loopback
address: all need numpy only.
``deployment`` is the Ray Serve deployment (the optional ``serve`` extra); it is the only
module here that imports Ray, and nothing imports it but its users.
"""

from .batching import BatchPlan, Group, Pad

__all__ = ["BatchPlan", "Group", "Pad"]
