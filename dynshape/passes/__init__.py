"""The passes of the pipeline, one file each, in the order ``dynshape/pipeline.py`` runs them:

- ``infer_types.py`` (stage ``types``): every node's type, deferred shape facts as checks;
- ``select.py`` (``selected``): gathers by a 1-d mask's positions as ``compress``;
- ``merge_matmuls.py`` (``rewritten``): matmuls sharing an input with constant weights merged;
- ``fuse_ops.py`` (``fused``): groups of elementwise/injective ops into primitive functions;
- ``to_anf.py`` (``anf``): every intermediate value bound by a ``let``;
- ``manifest_alloc.py`` (``manifest``): explicit storages, views and destination-passing invokes;
- ``kill.py`` (``kill``): ``memory.kill`` after every last use;
- ``plan_memory.py`` (``planned``): storages shared by tensors whose lives do not overlap.

``base.py`` is the pass interface. What the passes compute on the way (liveness, step plans,
size proofs, dataflow) lives in ``dynshape/analysis/``; typing helpers in
``dynshape/inference/``; the memory dialect's typed view in ``dynshape/dialect/``.
"""
