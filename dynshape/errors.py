"""The compiler's errors. ``DynShapeError`` is the root of every error the project raises."""

from __future__ import annotations

from dynshape_errors import DynShapeError
from ir import Span

__all__ = [
    "BuildError",
    "CompileError",
    "CompileTimeoutError",
    "DynShapeError",
    "GenerateError",
    "ModelImportError",
    "SessionError",
]


class CompileError(DynShapeError):
    """A program cannot be compiled: it is ill-typed or provably violates a shape fact.

    ``span`` is where in the source the problem is; ``listing`` is the function printed with
    the failing expression marked (``// <-- ...``). Both are part of the message when given.
    """

    def __init__(self, message: str, span: Span | None = None, listing: str | None = None):
        self.message = message
        self.span = span
        self.listing = listing
        text = message if span is None else f"{span}: {message}"
        if listing:
            text = f"{text}\n{listing}"
        super().__init__(text)

    @property
    def is_located(self) -> bool:
        """True once the error names where it happened."""
        return self.span is not None or self.listing is not None


class CompileTimeoutError(CompileError):
    """A compile ran out of its time budget (``compile(..., time_budget=seconds)``, the CLI's
    ``--time-budget``). ``stage`` and ``pass_name`` name what was running when the deadline
    was checked; ``budget`` and ``elapsed`` are seconds."""

    def __init__(self, stage: str, pass_name: str, budget: float, elapsed: float):
        self.stage, self.pass_name = stage, pass_name
        self.budget, self.elapsed = budget, elapsed
        super().__init__(
            f"the compile ran out of its time budget of {budget:g} s in {pass_name} (the "
            f"'{stage}' stage), after {elapsed:.2f} s; pass a larger time_budget= "
            "(--time-budget), or None for no limit"
        )


class BuildError(DynShapeError):
    """A model built with the Python API is wrong: shapes that do not fit, a bad argument.

    Raised at build time, by the call that is wrong. ``span`` is the user's Python line
    (``file:line:column``, outside the dynshape package); ``source_line`` is that line's text,
    shown with a caret under the column when known.
    """

    def __init__(self, message: str, span: Span | None = None, source_line: str | None = None):
        self.message = message
        self.span = span
        self.source_line = source_line
        text = message if span is None else f"{span}: {message}"
        if span is not None and source_line:
            stripped = source_line.lstrip()
            caret = " " * max(0, span.column - 1 - (len(source_line) - len(stripped))) + "^"
            text = f"{text}\n  {stripped.rstrip()}\n  {caret}"
        super().__init__(text)


class ModelImportError(DynShapeError):
    """A model file cannot be imported (``dynshape.onnx``): malformed, or using ops, opsets or
    dtypes the importer does not support. ``problems`` lists every one found, each naming the
    node (op type and name) it is about."""

    def __init__(self, message: str, problems: tuple[str, ...] = ()):
        self.message = message
        self.problems = problems
        text = message if not problems else message + "\n" + "\n".join(f"  {p}" for p in problems)
        super().__init__(text)


class SessionError(DynShapeError):
    """An ``InferenceSession`` was asked for something its model does not have: an output
    name it does not produce, a provider other than the CPU's, feeds that are not a mapping."""


class GenerateError(DynShapeError):
    """``dynshape.generate`` cannot decode with what it was given: a model that is not a
    decoder step with a key/value cache (no ``past_key_values.{i}.key/value`` inputs, a past
    without its ``present`` output, an input it cannot feed), or arguments that do not fit
    (token ids that are not integers or not in the vocabulary, a mask that is not a left
    padding, a temperature that is not positive). The message names what is wrong."""


class ServeError(DynShapeError):
    """A serving problem of ours (``dynshape.serve``): a deployment whose options do not fit
    its executable (``ServeConfigError``), or a request that cannot be answered
    (``RequestError``, an HTTP 4xx)."""


class ServeConfigError(ServeError):
    """A deployment's options do not fit its executable (found at start-up): the batch symbol
    is not the leading dim of every input and output, say."""


class RequestError(ServeError):
    """One request cannot be run as sent (an HTTP 400): its inputs disagree on the batch size,
    a field is missing or malformed. The message names what is wrong."""
