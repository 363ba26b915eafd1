"""Proofs about dims with floor division, modulo, ceiling, min and max: ``decide(a, op, b)``.

sympy decides ``n + 1 > n`` but not ``n // 2 <= n``, ``n % 3 < 3`` or ``ceil(n/2) <= n``: its
assumptions do not see through ``floor``, ``Mod``, ``Max`` and ``Min``. This module proves such
facts by one sound procedure, which ``ir.dims.compare`` (and so ``dim_max``, ``dim_min`` and the
memory planner's ``dims_le``) falls back to when sympy and the declared ranges say nothing.

To prove ``E <= 0`` for the integer-valued ``E = a - b``:

1. **Relax** each non-polynomial part into a polynomial with fresh bounded variables, in a way
   that holds for every value of the symbols (so a proof about the relaxation is a proof about
   ``E``): ``floor(x) = x - t`` and ``ceil(x) = x + t`` with ``t`` in ``[0, (q-1)/q]`` when ``x``
   is a polynomial whose coefficients have denominators dividing ``q`` (else ``[0, 1]``);
   ``a % b`` is some ``r`` in ``[0, b_hi - 1]``, or ``b - 1 - s`` with ``s >= 0`` (when
   ``b >= 1``), or ``a - s`` with ``s >= 0`` (when ``a >= 0``): any one relaxation that proves
   the fact is enough, so each is tried.
2. **Split cases** for ``max`` and ``min``: ``max(x, y)`` is ``x`` or ``y``, and the fact must
   hold in every case; or relax ``max(x, y)`` to ``x + s`` (or ``y + s``) with ``s >= 0``, and
   ``min(x, y)`` to ``x - s``.
3. **Bound** each case's polynomial by interval arithmetic over the symbols' ranges (``[0, inf)``
   unless declared; ``ir/ranges.py``), on the expanded and the unexpanded form (both sound: keep
   the tighter). Since ``E`` is an integer, an upper bound below 1 proves ``E <= 0``.

``a < b`` is ``a - b + 1 <= 0``; ``a == b`` is both ``a <= b`` and ``b <= a``; a fact is refuted
when its negation is proved.

**Cheap first, and bounded** (issue 27: the floor-division dims of convolutions made one compile
split cases for minutes). Before any relaxation:

- nested roundings are folded, by identities that hold for every real ``v``, integer ``k`` and
  integer ``q >= 1``: ``floor(floor(v)/q + k/q) = floor((v + k)/q)`` (and the same for
  ``ceiling``), so the ``((h - 1)//2 - 1)//2`` of a conv stack is one ``floor``, not a tower
  that multiplies the cases at every level;
- ``E`` is evaluated at a few sample bindings within the ranges (``sample_points``): one where
  ``E > 0`` refutes "``E <= 0`` for every binding" outright, no search needed (sound: the
  claim is false there);
- a polynomial in symbols and roundings of one symbol each (a convolution stack's sizes) is
  decided per residue class of its symbols, exactly (``ir.residue_proofs``: each rounding is
  linear in ``m`` when ``h = lo + L*m + r``), before any relaxation loses what ties the
  roundings of one symbol together; a node per ``RESIDUE_CLASSES_PER_NODE`` classes.

Then the search itself has a budget: ``MAX_CASES`` (relaxation, case) combinations, and
``MAX_NODES`` nodes visited (a relaxation built or a case bounded) per question. Past either the
answer is "unknown" (``Outcome.BUDGET``), never a guess: an unknown answer only costs a caller
the plan or simplification it would have made. The budgets are counts, so an answer does not
depend on the machine's speed, and answers are cached per ``(E, ranges)``.

A ``proof_session`` (the compiler opens one per compile) counts the questions and their outcomes
and can carry a ``check`` callable that the search calls every few nodes: the compiler's
cooperative deadline (``compile(..., time_budget=...)``) raises from there. ``checkpoint()`` runs
the same check from the callers' own loops.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import functools
import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

import sympy

from .dim_eval import value as _value_at
from .ranges import Ranges, VarBound, _interval, as_ranges
from .residue_proofs import clear_caches as clear_residue_caches
from .residue_proofs import prove_nonpositive_by_residues
from .roundings import ceiling_of, floor_of

__all__ = [
    "MAX_CASES",
    "MAX_NODES",
    "Outcome",
    "ProofSession",
    "afford",
    "checkpoint",
    "clear_caches",
    "coefficient_denominator",
    "current_session",
    "decide",
    "divisible_by",
    "fold_roundings",
    "outcome",
    "piecewise",
    "proof_session",
    "prove_nonpositive",
    "refuted_at_samples",
    "sample_order",
    "sample_points",
    "session_answers",
    "value",
]

#: At most this many (relaxation, case) combinations are bounded per question.
MAX_CASES = 64

#: At most this many nodes (relaxations built, cases bounded) are visited per question: the
#: bound on the search's work, whatever the nesting of the dims (``MAX_CASES`` alone bounds the
#: cases that are bounded, not the relaxations built on the way to them). The hardest proof the
#: test corpus and the example models need visits 30 (measured when the budget was set).
MAX_NODES = 300

#: Residue classes (``ir.residue_proofs``) that cost one node: a proof over 1,024 classes (a
#: conv stack's height and width, periods of 32) costs 16.
RESIDUE_CLASSES_PER_NODE = 64

#: The session's ``check`` runs every this many nodes.
CHECK_EVERY = 16


class Outcome(enum.Enum):
    """What became of one question ``E <= 0``."""

    PROVED = "proved"
    REFUTED = "refuted"
    """A sample binding within the ranges has ``E > 0``: not true, so not provable."""
    UNPROVED = "unproved"
    """Every relaxation tried, none proved it (it may still hold)."""
    BUDGET = "budget"
    """The search ran out of ``MAX_NODES`` or ``MAX_CASES``: unknown."""


@dataclass
class ProofSession:
    """Counts of the questions asked within one ``proof_session`` (a compile, or one function's
    plan choice), its limit, and the check the search runs every ``CHECK_EVERY`` nodes (it may
    raise to stop the caller: a deadline)."""

    check: Callable[[], None] | None = None
    max_nodes: int | None = None
    """Nodes all the searches of the session may visit together; past it every new search
    answers "unknown" at once (``Outcome.BUDGET``)."""
    parent: ProofSession | None = None
    questions: int = 0
    proved: int = 0
    refuted: int = 0
    unproved: int = 0
    budget: int = 0
    """Questions answered "unknown" for want of budget (``MAX_NODES``, or ``max_nodes``)."""
    nodes: int = 0
    """Nodes visited by the searches of this session (cached answers cost none)."""
    answers: dict[object, object] = field(default_factory=dict)
    """Answers given in this session, by question (``outcome``'s, and its callers' own: see
    ``session_answers``): a question asked again in the same session is answered the same
    way at no cost. The planner asks "does this tenant fit that block?" once to choose a
    group and again to choose the block, and the same peak comparisons along every path."""

    def count(self, result: Outcome) -> None:
        """Record one question's outcome (in the enclosing sessions too)."""
        session: ProofSession | None = self
        while session is not None:
            session.questions += 1
            setattr(session, result.value, getattr(session, result.value) + 1)
            session = session.parent

    def left(self) -> int | float:
        """Nodes this session and the enclosing ones can still pay for (``inf``: no limit)."""
        out: int | float = math.inf
        session: ProofSession | None = self
        while session is not None:
            if session.max_nodes is not None:
                out = min(out, max(session.max_nodes - session.nodes, 0))
            session = session.parent
        return out

    def charge(self, nodes: int) -> None:
        """Count ``nodes`` searched (at most what is left), here and in the enclosing sessions."""
        left = self.left()
        paid = int(min(nodes, left))
        session: ProofSession | None = self
        while session is not None:
            session.nodes += paid
            session = session.parent

    def summary(self) -> str:
        """``412 questions: 20 proved, 380 refuted by a sample, 10 not proved, 2 out of budget
        (1,234 nodes searched)``."""
        return (
            f"{self.questions} questions: {self.proved} proved, {self.refuted} refuted by a "
            f"sample, {self.unproved} not proved, {self.budget} out of budget "
            f"({self.nodes:,} nodes searched)"
        )


_SESSION: contextvars.ContextVar[ProofSession | None] = contextvars.ContextVar(
    "dim_proof_session", default=None
)


@contextlib.contextmanager
def proof_session(
    check: Callable[[], None] | None = None, max_nodes: int | None = None
) -> Iterator[ProofSession]:
    """Count the questions asked inside the ``with`` (see ``ProofSession``), searching at most
    ``max_nodes`` nodes in all; ``check`` (default: the enclosing session's) is called every
    ``CHECK_EVERY`` nodes of a search and by ``checkpoint()``. Sessions nest: an inner one's
    counts are the outer one's too."""
    parent = _SESSION.get()
    if check is None and parent is not None:
        check = parent.check
    session = ProofSession(check, max_nodes, parent)
    token = _SESSION.set(session)
    try:
        yield session
    finally:
        _SESSION.reset(token)


def current_session() -> ProofSession | None:
    """The innermost open ``proof_session``, if any."""
    return _SESSION.get()


def checkpoint() -> None:
    """Run the current session's ``check`` (a deadline), if any: for the callers' own loops."""
    session = _SESSION.get()
    if session is not None and session.check is not None:
        session.check()


Env = dict[sympy.Basic, VarBound]
Case = tuple[sympy.Expr, Env]
Alternative = list[Case]
"""One way to relax an expression: the cases, every one of which must be proved."""


def decide(a: sympy.Expr, op: str, b: sympy.Expr, ranges: Ranges) -> bool | None:
    """``a op b`` for ``op`` in ``== != < <= > >=``: True or False when proved, else None."""
    if op in (">", ">="):
        a, b, op = b, a, "<" if op == ">" else "<="
    # Which orders the sample bindings show: a question that one of them contradicts is not
    # searched (its answer would be "not proved" anyway, after the costly part).
    lt, eq, gt = sample_order(a, b, ranges)
    if op == "<=":
        return _verdict(a - b, b - a + 1, ranges, gt, lt or eq)
    if op == "<":
        return _verdict(a - b + 1, b - a, ranges, eq or gt, lt)
    le = _verdict(a - b, b - a + 1, ranges, gt, lt or eq)
    ge = _verdict(b - a, a - b + 1, ranges, lt, gt or eq)
    if le is True and ge is True:
        equal: bool | None = True
    elif le is False or ge is False:
        equal = False
    else:
        equal = None
    if equal is None or op == "==":
        return equal
    return not equal


def _verdict(
    holds: sympy.Expr,
    fails: sympy.Expr,
    ranges: Ranges,
    holds_refuted: bool = False,
    fails_refuted: bool = False,
) -> bool | None:
    """True if ``holds <= 0`` is proved, False if ``fails <= 0`` is, else None (a question a
    sample binding refuted is not searched)."""
    session = _SESSION.get()
    for e, refuted, answer in ((holds, holds_refuted, True), (fails, fails_refuted, False)):
        if refuted:
            if session is not None:
                session.count(Outcome.REFUTED)
        elif outcome(e, ranges, sampled=True) is Outcome.PROVED:
            return answer
    return None


def sample_order(a: sympy.Expr, b: sympy.Expr, ranges: Ranges) -> tuple[bool, bool, bool]:
    """Whether ``a < b``, ``a == b`` and ``a > b`` hold at some of the sample bindings of
    their symbols (``sample_points``; bindings where either has no value are skipped). Each
    side's values are computed once per expression and cached: the planner compares the same
    peaks with many others."""
    both = _symbols(a) | _symbols(b)
    if not all(s.is_integer for s in both):
        return False, False, False  # sample points are integers; a real symbol is not a dim
    symbols = tuple(sorted(both, key=_printed))
    restricted = as_ranges(ranges).restrict(symbols)
    lt = eq = gt = False
    pairs = zip(_values(a, symbols, restricted), _values(b, symbols, restricted), strict=True)
    for x, y in pairs:
        if x is None or y is None:
            continue
        lt, eq, gt = lt or x < y, eq or x == y, gt or x > y
    return lt, eq, gt


@functools.lru_cache(maxsize=4096)
def _printed(symbol: sympy.Basic) -> str:
    """``str(symbol)``, the order of symbols everywhere here, cached: sympy's printer took
    a tenth of a conv stack's plan choice, sorting the symbols of every question."""
    return str(symbol)


@functools.lru_cache(maxsize=65536)
def _symbols(e: sympy.Basic) -> frozenset[sympy.Basic]:
    """``e.free_symbols``, cached (sympy walks the whole tree on every access)."""
    return frozenset(e.free_symbols)


@functools.lru_cache(maxsize=65536)
def _values(e: sympy.Expr, symbols: tuple[sympy.Basic, ...], ranges: Ranges) -> list[int | None]:
    return [value(e, point) for point in _points(symbols, ranges)]


def value(e: int | sympy.Expr, point: Mapping[sympy.Basic, int]) -> int | None:
    """The integer value of the dim ``e`` at ``point`` (every symbol bound), or None where it
    has none (a division by 0 there), as ``ir.dim_eval.value`` computes it, faster: a dim
    whose divisions are all floor divisions of integer polynomials (a conv's ``(h - 1)//2``)
    is compiled once into one Python expression over ints (``(h - 1)//2``, no ``Fraction``).
    The planner evaluates thousands of peaks, sums of hundreds of such terms."""
    if isinstance(e, int):
        return e
    fast = _int_function(e)
    if fast is None:
        return _value_at(e, point)
    fn, symbols = fast
    try:
        return int(fn(*(point[x] for x in symbols)))
    except ZeroDivisionError:
        return None


class _NotIntegral(Exception):
    """A dim the integer compiler does not handle (``ir.dim_eval`` does)."""


@functools.lru_cache(maxsize=16384)  # each entry holds a compiled closure
def _int_function(
    e: sympy.Expr,
) -> tuple[Callable[..., int], tuple[sympy.Basic, ...]] | None:
    symbols = tuple(sorted(e.free_symbols, key=_printed))
    names = {x: f"a{i}" for i, x in enumerate(symbols)}
    try:
        source = _int_source(e, names)
        fn = eval(f"lambda {', '.join(names.values())}: {source}", {"max": max, "min": min})
    except (_NotIntegral, RecursionError, SyntaxError, MemoryError):
        return None
    return fn, symbols


def _int_source(e: sympy.Basic, names: Mapping[sympy.Basic, str]) -> str:
    """Python source computing the integer-valued ``e`` with ints only."""
    if e.is_Integer:
        return f"({int(e)})"
    if e.is_Symbol:
        if e not in names or not e.is_integer:
            raise _NotIntegral
        return names[e]
    if isinstance(e, sympy.Add):
        return "(" + " + ".join(_int_source(a, names) for a in e.args) + ")"
    if isinstance(e, sympy.Mul):
        return "(" + " * ".join(_int_source(a, names) for a in e.args) + ")"
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp >= 0:
        return f"({_int_source(e.base, names)} ** {int(e.exp)})"
    if isinstance(e, (sympy.Max, sympy.Min)):
        fn = "max" if isinstance(e, sympy.Max) else "min"
        return f"{fn}(" + ", ".join(_int_source(a, names) for a in e.args) + ")"
    if isinstance(e, sympy.Mod):
        a, b = (_int_source(x, names) for x in e.args)
        return f"({a} % {b})"  # Python's %, like sympy's Mod, takes the divisor's sign
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        arg = sympy.expand(e.args[0])
        q = coefficient_denominator(arg)
        scaled = sympy.expand(arg * q)
        if any(not t.as_coeff_Mul()[0].is_Integer for t in sympy.Add.make_args(scaled)):
            raise _NotIntegral
        inner = _int_source(scaled, names)
        if isinstance(e, sympy.floor):
            return f"({inner} // {q})"
        return f"(-((-{inner}) // {q}))"
    raise _NotIntegral


@functools.lru_cache(maxsize=4096)
def _points(symbols: tuple[sympy.Basic, ...], ranges: Ranges) -> list[dict[sympy.Basic, int]]:
    return sample_points(list(symbols), ranges)


def prove_nonpositive(e: sympy.Expr, ranges: Ranges) -> bool:
    """True if the integer-valued dim expression ``e`` is ``<= 0`` for every value of its
    symbols in ``ranges`` (see the module docstring); False means *not proved*."""
    return outcome(e, ranges) is Outcome.PROVED


def outcome(e: sympy.Expr, ranges: Ranges, sampled: bool = False) -> Outcome:
    """What the procedure makes of "``e <= 0`` for every binding within ``ranges``": proved,
    refuted by a sample, not proved, or out of budget (counted in the current session).
    ``sampled``: the caller has already seen the samples not refute it (``decide``).

    A search costs the session its nodes whether its answer was cached or not, and an answer
    that needed more nodes than the session has left is "unknown": so the same program gets
    the same answers whatever was compiled before it in the process."""
    session = _SESSION.get()
    key = ("outcome", e, ranges, sampled)
    if session is not None and key in session.answers:
        known = session.answers[key]
        assert isinstance(known, Outcome)
        session.count(known)
        return known
    if session is not None and session.left() == 0:
        session.count(Outcome.BUDGET)
        return Outcome.BUDGET
    result, nodes = _prove(e, ranges, sampled)
    if session is not None:
        if nodes > session.left():
            result = Outcome.BUDGET
        session.charge(nodes)
        session.count(result)
        session.answers[key] = result
    return result


def session_answers() -> dict[object, object] | None:
    """The answers of the innermost ``proof_session`` (None outside one), for callers that
    cache their own questions for as long as the session (``ProofSession.answers``): an answer
    depends on the budget the session had left, so it is kept no longer than the session."""
    session = _SESSION.get()
    return None if session is None else session.answers


def afford(nodes: int = 1) -> bool:
    """Charge ``nodes`` to the current session for work outside the search (a caller's own
    sympy query): False, charging nothing, when the session cannot pay (then skip the work)."""
    session = _SESSION.get()
    if session is None:
        return True
    if session.left() < nodes:
        session.count(Outcome.BUDGET)  # a question left unanswered for want of budget
        return False
    session.charge(nodes)
    return True


def clear_caches() -> None:
    """Forget every cached answer (for tests that count the work of a search)."""
    _prove.cache_clear()
    clear_residue_caches()
    _fold.cache_clear()
    _fold_cached.cache_clear()
    _symbols.cache_clear()
    _piecewise.cache_clear()
    _values.cache_clear()
    _int_function.cache_clear()


@functools.lru_cache(maxsize=65536)
def _prove(e: sympy.Expr, ranges: Ranges, sampled: bool) -> tuple[Outcome, int]:
    """The outcome for ``e``, and the nodes its search visited (cached before expanding: the
    callers ask the same questions in the same form, and expanding is what costs)."""
    e = sympy.expand(e)
    if e.is_Number:
        return (Outcome.PROVED if e <= 0 else Outcome.REFUTED), 0
    if not sampled and refuted_at_samples(e, ranges):
        return Outcome.REFUTED, 0
    folded = sympy.expand(fold_roundings(e))
    if folded.is_Number:
        return (Outcome.PROVED if folded <= 0 else Outcome.REFUTED), 0
    env: Env = {s: ranges.get(s, (0, None)) for s in folded.free_symbols}
    budget = _Budget()
    by_residues = prove_nonpositive_by_residues(folded, env)
    if by_residues is not None:
        proved, classes = by_residues
        budget.nodes = -(-classes // RESIDUE_CLASSES_PER_NODE)
        if proved:
            return Outcome.PROVED, budget.nodes
    try:
        for alternative in _alternatives(folded, env, budget):
            if all(budget.bound(x, case_env) < 1 for x, case_env in alternative):
                return Outcome.PROVED, budget.nodes
            if budget.cases <= 0:
                return Outcome.BUDGET, budget.nodes
    except _OutOfBudget:
        return Outcome.BUDGET, budget.nodes
    return Outcome.UNPROVED, budget.nodes


class _OutOfBudget(Exception):
    """The search visited ``MAX_NODES`` nodes (caught by ``_prove``: the answer is unknown)."""


class _Budget:
    """What one search may still spend: ``cases`` (``MAX_CASES``) and nodes (``MAX_NODES``)."""

    def __init__(self) -> None:
        self.cases = MAX_CASES
        self.nodes = 0

    def spend(self) -> None:
        """One node: raises ``_OutOfBudget`` past ``MAX_NODES``; every ``CHECK_EVERY`` nodes,
        runs the session's check (a deadline: its exception passes through the cache)."""
        self.nodes += 1
        if self.nodes % CHECK_EVERY == 0:
            checkpoint()
        if self.nodes > MAX_NODES:
            raise _OutOfBudget

    def bound(self, e: sympy.Expr, env: Env) -> Fraction | float:
        """``_upper``, counted as a node."""
        self.spend()
        return _upper(e, env)


def fold_roundings(e: sympy.Expr) -> sympy.Expr:
    """``e`` with nested roundings folded (module docstring): ``floor(floor(v)/q + k/q)`` is
    ``floor((v + k)/q)`` for integer ``q >= 1`` and ``k``, and the same for ``ceiling``. An
    identity for every real ``v``, so the result equals ``e`` at every binding. And a rounding
    of an exact quotient of polynomials is the quotient (``floor(128*b*s/(32*s))`` is ``4*b``):
    equal wherever ``e`` is defined (its divisor not 0); and ``y * min(1, y)`` is ``y`` for a
    dim ``y`` (an integer ``>= 0``)."""
    return _fold_cached(e)


@functools.lru_cache(maxsize=65536)
def _fold_cached(e: sympy.Expr) -> sympy.Expr:
    return _fold(e) if _needs_relaxing(e) else e


@functools.lru_cache(maxsize=65536)
def _fold(e: sympy.Expr) -> sympy.Expr:
    if not e.args or e.is_Atom:
        return e
    args = [_fold(a) for a in e.args]
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        kind = type(e)
        exact = _exact_quotient(args[0])
        if exact is not None:
            args[0] = exact
        if not any(isinstance(x, kind) for x in sympy.preorder_traversal(args[0])):
            return e if args[0] is e.args[0] else _round_as(kind, args[0])  # nothing to fold
        arg = sympy.expand(args[0])
        # arg = c * kind(v) + r with c = 1/q: then kind(arg) = kind(v/q + r) when q*r is an
        # integer. Repeat: a tower of n roundings folds in n steps.
        while True:
            inner = [t for t in sympy.Add.make_args(arg) if isinstance(t.as_coeff_Mul()[1], kind)]
            if len(inner) != 1:
                break
            coeff, rounded = inner[0].as_coeff_Mul()
            rest = arg - inner[0]
            if not (coeff.is_Rational and coeff > 0 and coeff.p == 1 and rest.is_Rational):
                break
            q = int(coeff.q)
            if not (rest * q).is_Integer:
                break
            arg = sympy.expand(rounded.args[0] / q + rest)
        return _round_as(kind, arg)
    if isinstance(e, sympy.Mul):
        args = _without_unit_mins(args)
    if len(args) == len(e.args) and all(x is y for x, y in zip(args, e.args, strict=True)):
        return e
    if isinstance(e, (sympy.Max, sympy.Min)):
        # Unevaluated: sympy's Max compares every pair of its arguments (seconds for the peaks
        # of a conv stack); the arguments are already as simple as they get.
        return e.func(*args, evaluate=False)
    return e.func(*args)


def _round_as(kind: type[sympy.Function], arg: sympy.Expr) -> sympy.Expr:
    """``kind(arg)`` for ``floor`` or ``ceiling``, without sympy's assumption queries where
    the argument allows (``ir.roundings``)."""
    return floor_of(arg) if kind is sympy.floor else ceiling_of(arg)


def _without_unit_mins(factors: list[sympy.Expr]) -> list[sympy.Expr]:
    """The factors of a product without each ``min(1, y)`` whose ``y`` is itself a product of
    some of the other factors: ``y * min(1, y)`` is ``y`` for every integer ``y >= 0`` (0 at
    0, ``y`` from 1 on). numpy's broadcast of two dims neither of which is known to be 1 is
    ``max(a, b) * min(a, b, 1)`` (``SymbolicContext.broadcast``): an encoder's positions,
    ``min(512, seq)`` of them, broadcast with ``seq`` give ``seq * min(1, seq)``, and every
    proof about the sizes built on it split the ``min`` again (issue 27: BERT's)."""
    out = list(factors)
    for f in factors:
        if not (isinstance(f, sympy.Min) and len(f.args) == 2 and sympy.S.One in f.args):
            continue
        y = f.args[0] if f.args[1] == 1 else f.args[1]
        others = [x for x in out if x is not f]
        needed = sympy.Mul.make_args(y)
        if (
            y.is_integer
            and y.is_nonnegative
            and all(others.count(x) >= needed.count(x) for x in set(needed))
        ):
            out = others
    return out


def _exact_quotient(arg: sympy.Expr) -> sympy.Expr | None:
    """``arg``, a quotient by a symbolic polynomial, as the polynomial it equals when the
    division is exact (sympy's ``cancel``), else None: a reshape's inferred ``-1`` of
    ``(b, s, 128)`` into ``(-1, 32)`` is ``floor(128*b*s/(32*s))``, which is ``4*b`` wherever it
    is defined (``s != 0``: the reshape checks that the divisor is not 0), but which sympy
    keeps as a floor once its numerator is expanded, and every proof about it then relaxes the
    floor and fails (issue 27: a GPT-2 decode step's sizes). The polynomial may keep rational
    coefficients (``floor(n/2)``): the rounding is then folded or relaxed as usual.

    Only for a quotient of polynomials of a few terms (``_QUOTIENT_TERMS``): sympy's ``cancel``
    of a sum with maxes in it took 8 s of a speech encoder's compile."""
    terms = sympy.Add.make_args(arg)
    if len(terms) > _QUOTIENT_TERMS or _needs_relaxing(arg):
        return None
    if not any(
        isinstance(x, sympy.Pow) and x.exp.is_negative and x.base.free_symbols
        for x in sympy.preorder_traversal(arg)
    ):
        return None
    try:
        quotient = sympy.cancel(arg)
    except (sympy.PolynomialError, RecursionError):
        return None
    return quotient if sympy.fraction(quotient)[1].is_Number else None


#: ``_exact_quotient`` tries sums of at most this many terms (a reshape's inferred dim has a
#: term per term of the element count).
_QUOTIENT_TERMS = 16


#: Values every symbol takes together in ``sample_points`` (then clipped to its range).
_TOGETHER = (0, 1, 2, 3, 7, 64, 1000, 65536)


def sample_points(
    symbols: list[sympy.Basic], ranges: Mapping[sympy.Basic, tuple[int, int | None]]
) -> list[dict[sympy.Basic, int]]:
    """A few bindings of ``symbols`` within ``ranges`` (``[0, inf)`` without one): all symbols
    at one value, then each symbol small while the others are large and large while the others
    are small. Clipped to the ranges, so every point is a binding the claim is about."""

    def clip(s: sympy.Basic, v: int) -> int:
        lo, hi = ranges.get(s, (0, None))
        return max(lo, v if hi is None else min(hi, v))

    ordered = sorted(symbols, key=_printed)
    points = [{s: clip(s, v) for s in ordered} for v in _TOGETHER]
    if len(ordered) > 1:
        points += [{s: clip(s, 1 if s is t else 512) for s in ordered} for t in ordered]
        points += [{s: clip(s, 512 if s is t else 1) for s in ordered} for t in ordered]
        # One symbol at its least (an empty batch) while the others are not: "the scores are
        # at least the mask" fails only there, and a search would find no proof after dozens
        # of nodes (issue 27: BERT's peak comparisons).
        points += [{s: clip(s, 0 if s is t else 1) for s in ordered} for t in ordered]
    return points


def refuted_at_samples(e: sympy.Expr, ranges: Mapping[sympy.Basic, tuple[int, int | None]]) -> bool:
    """True if ``e > 0`` at one of ``sample_points`` (where it is defined): then "``e <= 0``
    for every binding" is false, and no search is needed."""
    return sample_order(e, sympy.Integer(0), as_ranges(ranges))[2]


def _upper(e: sympy.Expr, env: Env) -> Fraction | float:
    """An upper bound of ``e`` (the tighter of its expanded and its given form)."""
    hi = _interval(e, env)[1]
    expanded = sympy.expand(e)
    if expanded != e:
        other = _interval(expanded, env)[1]
        hi = other if other < hi else hi
    return hi


def _alternatives(e: sympy.Expr, env: Env, budget: _Budget) -> Iterator[Alternative]:
    """The relaxations of ``e``, each as its cases (see the module docstring)."""
    budget.spend()
    if not _needs_relaxing(e):
        budget.cases -= 1
        yield [(e, env)]
        return
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        down = isinstance(e, sympy.floor)
        for inner in _alternatives(e.args[0], env, budget):
            yield [_round(x, case_env, down) for x, case_env in inner]
        return
    if isinstance(e, sympy.Mod):
        yield from _mod_alternatives(e, env, budget)
        return
    if isinstance(e, (sympy.Max, sympy.Min)):
        # Also relaxed as one argument plus (max) or minus (min) some s >= 0: what proves
        # max(m, n) >= n, where the case split would need m >= n too.
        sign = 1 if isinstance(e, sympy.Max) else -1
        for arg in e.args:
            for alternative in itertools.islice(_alternatives(arg, env, budget), 4):
                cases = []
                for x, case_env in alternative:
                    s, s_env = _fresh(case_env, 0, None)
                    cases.append((x + sign * s, s_env))
                yield cases
    # A max or min is one of its arguments: every case must be proved. A sum, product or power
    # combines one relaxation of each argument (their cases multiply).
    per_arg = [list(itertools.islice(_alternatives(a, env, budget), 4)) for a in e.args]
    for choice in itertools.product(*per_arg):
        if isinstance(e, (sympy.Max, sympy.Min)):
            yield [case for alternative in choice for case in alternative]
        else:
            combined: Alternative = []
            for picked in itertools.product(*choice):
                merged: Env = dict(env)
                for _, case_env in picked:
                    merged.update(case_env)
                combined.append((e.func(*(x for x, _ in picked)), merged))
                budget.cases -= 1
            yield combined
        if budget.cases <= 0:
            return


_RELAXED = (sympy.floor, sympy.ceiling, sympy.Mod, sympy.Max, sympy.Min)


def piecewise(e: int | sympy.Basic) -> bool:
    """``e`` has a floor, ceiling, ``%``, max or min: sympy's own queries about it can be slow
    (its assumptions walk every case), where a polynomial's are quick. Cached."""
    return not isinstance(e, int) and _piecewise(e)


@functools.lru_cache(maxsize=65536)
def _piecewise(e: sympy.Basic) -> bool:
    return _needs_relaxing(e)


def _needs_relaxing(e: sympy.Basic) -> bool:
    return any(isinstance(x, _RELAXED) for x in sympy.preorder_traversal(e))


def _fresh(
    env: Env, lo: Fraction | float | int, hi: Fraction | float | int | None
) -> tuple[sympy.Dummy, Env]:
    """A new relaxation variable in ``[lo, hi]`` (real-valued: sympy assumes nothing)."""
    t = sympy.Dummy("t")
    return t, {**env, t: (lo, hi)}


def _round(x: sympy.Expr, env: Env, down: bool) -> Case:
    """``floor(x)`` as ``x - t`` (``ceil(x)`` as ``x + t``), ``t`` in ``[0, (q-1)/q]``."""
    q = _denominator(x)
    t, env = _fresh(env, 0, Fraction(q - 1, q) if q is not None else 1)
    return (x - t if down else x + t), env


def _denominator(x: sympy.Expr) -> int | None:
    """``q`` such that ``q*x`` is an integer for all integer values of its symbols, or None
    when that is not known (a relaxation variable is not an integer)."""
    expanded = sympy.expand(x)
    terms = sympy.Add.make_args(expanded)
    if not all(_integer_monomial(term.as_coeff_Mul()[1]) for term in terms):
        return None
    return coefficient_denominator(expanded)


def coefficient_denominator(e: sympy.Expr) -> int:
    """The least common denominator of the rational coefficients of ``e``'s terms (1 when they
    are all integers, or not rational): ``q*e`` has integer coefficients."""
    q = 1
    for term in sympy.Add.make_args(e):
        coeff = term.as_coeff_Mul()[0]
        if coeff.is_Rational:
            q = q * int(coeff.q) // math.gcd(q, int(coeff.q))
    return q


def divisible_by(e: sympy.Expr | int, k: int) -> bool:
    """True only if the integer-valued dim ``e`` is a multiple of ``k`` for every value of its
    symbols, proved from its structure: a sum of multiples, a product with a multiple among its
    factors (the coefficient's common factor counts), a max or min of multiples. sympy's ``Mod``
    does not see through ``Max`` (``max(8, 8*n) % 4`` stays unevaluated).
    """
    if k == 1:
        return True
    e = sympy.sympify(e)
    if e.is_Integer:
        return int(e) % k == 0
    if isinstance(e, (sympy.Add, sympy.Max, sympy.Min)):
        return all(divisible_by(a, k) for a in e.args)
    if isinstance(e, sympy.Mul):
        coeff, rest = e.as_coeff_Mul()
        if not coeff.is_Integer:
            return False
        need = k // math.gcd(int(coeff), k)
        return need == 1 or any(
            _integer_valued(f) and divisible_by(f, need) for f in sympy.Mul.make_args(rest)
        )
    return False


def _integer_valued(e: sympy.Expr) -> bool:
    """``e`` takes integer values: an integer, an integer symbol, or built from them by
    ``floor``, ``ceiling``, ``Mod``, ``Max``, ``Min``, sums and products."""
    if e.is_Integer or (e.is_Symbol and e.is_integer):
        return True
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        return True
    if isinstance(e, (sympy.Add, sympy.Mul, sympy.Max, sympy.Min, sympy.Mod)):
        return all(_integer_valued(a) for a in e.args)
    return isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp >= 0 and _integer_valued(e.base)


def _integer_monomial(m: sympy.Expr) -> bool:
    """True if ``m`` is a product of non-negative integer powers of integer symbols."""
    for f in sympy.Mul.make_args(m):
        if f == 1:
            continue
        base, exp = f.as_base_exp()
        if not (base.is_Symbol and base.is_integer and exp.is_Integer and exp >= 0):
            return False
    return True


def _mod_alternatives(e: sympy.Mod, env: Env, budget: _Budget) -> Iterator[Alternative]:
    """``a % b`` relaxed: ``r`` in its interval; ``b - 1 - s`` (``b >= 1``); ``a - s``
    (``a >= 0``), with ``s >= 0``. Any one that proves the fact is enough."""
    a, b = e.args
    (a_lo, _), (b_lo, _) = _interval(a, env), _interval(b, env)
    lo, hi = _interval(e, env)
    if not math.isinf(lo):
        r, r_env = _fresh(env, lo, None if math.isinf(hi) else hi)
        budget.cases -= 1
        yield [(r, r_env)]
    for applies, operand, offset in ((b_lo >= 1, b, 1), (a_lo >= 0, a, 0)):
        if not applies:
            continue
        for alternative in _alternatives(operand, env, budget):
            cases = []
            for x, case_env in alternative:
                s, s_env = _fresh(case_env, 0, None)
                cases.append((x - offset - s, s_env))
            yield cases
