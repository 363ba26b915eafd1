"""Serving compiled executables (issue 18; design/serving.md).

``batching`` is the rule for putting requests with symbolic dims into one call and cutting the
results back, ``wire`` the HTTP bodies, ``offline`` the Ray Data ``map_batches`` callable: all
three need numpy only. ``deployment`` is the Ray Serve deployment (the optional ``serve``
extra); it is the only module here that imports Ray, and nothing imports it but its users.
"""

from .batching import BatchPlan, Group

__all__ = ["BatchPlan", "Group"]
