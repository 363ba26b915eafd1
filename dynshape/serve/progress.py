"""Start-up progress of ``python -m dynshape serve`` on stderr (numpy-free, no Ray): each step
as it starts, with the seconds since the command started, so that a start-up of a minute and
more (an ONNX model compiled, Ray started, replicas loading the executable) says what it is
doing. stdout keeps the one ``serving FILE at URL ...`` line that scripts wait for.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``step("starting Ray")`` writes ``[  1.2 s] starting Ray`` to ``stream`` (stderr)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.perf_counter()

    def step(self, what: str) -> None:
        """Say what starts now."""
        elapsed = time.perf_counter() - self.start
        print(f"[{elapsed:6.1f} s] {what}", file=self.stream, flush=True)
