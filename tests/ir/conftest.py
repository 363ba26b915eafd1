"""Shared setup for the IR tests."""

import sys

# The IR walks deep programs recursively and raises the recursion limit on first use (see
# ir/functor.py); raising it here, before any test runs, keeps Hypothesis from warning that a
# test changed it.
if sys.getrecursionlimit() < 100_000:
    sys.setrecursionlimit(100_000)
