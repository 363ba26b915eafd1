"""Typing helpers behind type inference (``passes/infer_types.py``) and the builder: relations
between types (refining, joining branches, instantiating signatures at a call)."""
