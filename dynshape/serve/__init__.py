"""Serving compiled executables (issue 18). ``batching`` is the rule for putting requests with
symbolic dims into one call and splitting the results back; it needs numpy only. The Ray Serve
deployment that uses it is the optional ``serve`` extra (not built yet: design/serving.md)."""

from .batching import BatchPlan, Group

__all__ = ["BatchPlan", "Group"]
