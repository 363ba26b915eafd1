"""The bounds a server puts on work that a file from elsewhere can make it do (numpy only, so
that the CLI reads the defaults without importing Ray).

A served executable may loop for ever (a ``while`` loop whose condition never turns, a
recursion): each run stops past ``DEFAULT_MAX_STEPS`` steps (backward jumps, calls, tail calls)
or ``DEFAULT_TIMEOUT_S`` seconds, the VM's ``max_steps`` and ``timeout``, answered with its
``StepLimitError`` while the replica goes on serving. The timeout is read at each step, so a
single long kernel (one huge matmul) finishes before it is noticed; the element limits of the
request bodies (``wire.MAX_ELEMENTS``) bound what one kernel can be given. A program or ONNX
model that ``python -m dynshape serve`` compiles gives up after
``DEFAULT_COMPILE_BUDGET_S`` seconds of import and compile (``compile(time_budget=...)``).

A request whose replica died is sent again at most ``DEFAULT_RETRIES`` times (``front.py``),
after ``BACKOFF_S``; then it is answered 503 with ``Retry-After: RETRY_AFTER_S``.
"""

from __future__ import annotations

#: Most steps of one run: generous for a model's loops (a decoder's per-token loop, a scan
#: over a sequence), small enough that an endless loop stops within seconds.
DEFAULT_MAX_STEPS = 10_000_000
#: Most seconds of one run.
DEFAULT_TIMEOUT_S = 60.0
#: Most seconds importing and compiling a served program or ONNX model may take.
DEFAULT_COMPILE_BUDGET_S = 600.0
#: The HTTP status of a run stopped by its budget: the request was read, and the model could
#: not finish it within the server's bounds (neither a malformed request nor a server fault).
BUDGET_STATUS = 422
#: Most new tokens one request to a generation server may ask for, and most tokens of its
#: prompt (``python -m dynshape serve --generate``; ``generation.py``): a decode step's time
#: grows with the joint past, so one request cannot hold the batch for ever.
LIMIT_NEW_TOKENS = 1024
LIMIT_PROMPT_TOKENS = 4096
#: Attempts after the first when the replica of a request dies.
DEFAULT_RETRIES = 3
#: Seconds waited before each retry: the router has marked the dead replica by then, and a
#: lone replica is being started again by Serve's controller.
BACKOFF_S = (0.05, 0.25, 1.0, 2.0)
#: The ``Retry-After`` of a 503: about the time Serve takes to start a replica again
#: (10-19 s measured on this machine, design/serving.md).
RETRY_AFTER_S = 20
