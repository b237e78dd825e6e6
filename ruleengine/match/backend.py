"""The pyDatalog backend: the ONLY module that imports pyDatalog.

A fresh ``Logic()`` per run (pyDatalog keeps its state per thread), facts asserted one by
one (``assert_fact``: no parsing), the compiled program loaded as text, one query per
rule head.

With ``jobs`` > 1 the rule heads' clauses are dealt out to that many processes (this one
and forked children, ``procs``): pyDatalog is pure Python and holds the GIL, so a
second core helps only through a second process. A head's answers are the union of its
clauses' answers (a query's answers are a set: pyDatalog keys them by value), so each
process asks for its share of every head's clauses under a head name of its own, and
the parent joins the shares: the same sorted answers as one process asking the whole
head. The clauses, not the heads, are dealt out because one head can hold most of the
work (the attention rule's 256 clauses were 0.97 s of 1.77 s at 2048 layers).
"""

from __future__ import annotations

import pickle
import re
import threading
import time
from collections.abc import Iterable, Sequence

from pyDatalog import Logic, pyDatalog

from ruleengine.runtime import paused_gc

try:  # pyDatalog's compiled engine: asserting through it skips the parser (~9x faster)
    from pyDatalog import pyEngine

    _FAST = all(
        hasattr(pyEngine, a) for a in ("Const", "Var", "Literal", "Clause", "assert_", "Pred")
    )
except ImportError:  # pragma: no cover
    _FAST = False

# At most this many processes share one Datalog run: each forked child costs the parent
# ~10 ms (a fork of a ~400 MB process at 2048 layers, measured 8-13 ms), one after the
# other, so on 64 cores splitting the window's ~1.5 s of queries 64 ways would spend
# ~0.6 s forking; ~sqrt(1.5 s / 10 ms) ~ 8-12 shares is where the two balance.
MAX_SHARES = 8

_LOCK = threading.Lock()  # pyDatalog's per-thread state is not re-entrant within a thread


def run(
    facts: Iterable[tuple[str, tuple]],
    program: str,
    queries: Sequence[tuple[str, int]],
    timings: dict[str, float] | None = None,
    jobs: int = 1,
) -> dict[str, list[tuple]]:
    """Assert ``facts``, load ``program``, ask ``head(C, V1..Vn)`` for each (head, arity).

    Returns head -> answers (tuples of constants), in a sorted, deterministic order.
    ``jobs`` > 1: the queries' clauses are shared among that many processes (the same
    answers; see the module's docstring).
    """
    return run_staged(facts, (), program, queries, timings, jobs)


def run_staged(
    facts: Iterable[tuple[str, tuple]],
    stages: Sequence[tuple[str, Sequence[tuple[str, int, str]]]],
    program: str,
    queries: Sequence[tuple[str, int]],
    timings: dict[str, float] | None = None,
    jobs: int = 1,
) -> dict[str, list[tuple]]:
    """Like ``run``, with predicates several rules share computed once beforehand.

    Each stage is ``(clauses, tables)``: the clauses are loaded, then each ``(pred,
    arity, table)`` is asked once with every argument free and its answers asserted as
    facts of ``table``, which later stages and ``program`` (the rule clauses) read.
    pyDatalog tables a subgoal only for the length of one query, so without this every
    rule's query recomputed the same composite cores and forms.
    """
    with _LOCK, paused_gc():
        Logic()
        _assert_all(facts)
        t0 = time.perf_counter()
        for clauses, tables in stages:
            if clauses.strip():
                load(clauses)
            derived: list[tuple[str, tuple]] = []
            for pred, arity, table in tables:
                answer = pyDatalog.ask(f"{pred}({', '.join(f'A{i}' for i in range(arity))})")
                rows = sorted(answer.answers) if answer is not None else []
                derived.extend((table, row) for row in rows)
            _assert_all(derived)
        if timings is not None and stages:
            timings["(shared cores and forms)"] = time.perf_counter() - t0
        jobs = min(jobs, MAX_SHARES)
        shares = _deal(program, queries, jobs) if jobs > 1 else None
        if shares is None:
            if program.strip():
                load(program)
            out, asked = _ask_each([(h, h, a) for h, a in queries])
        else:
            text, parts = shares
            load(text)
            from ruleengine.procs import Forked, forkable

            children = [Forked(_asked_bytes, part) for part in parts[1:]] if forkable(jobs) else []
            mine = parts[0] if children else [q for part in parts for q in part]
            got, asked = _ask_each(mine)
            shared: dict[str, list[list[tuple]]] = {}
            for rows_of in (got, *(_unpickled(c.result(), asked) for c in children)):
                for head, rows in rows_of.items():
                    shared.setdefault(head, []).append(rows)
            out = {
                head: rows[0] if len(rows) == 1 else sorted(set().union(*rows))
                for head, rows in ((h, shared.get(h, [[]])) for h, _ in queries)
            }
        if timings is not None:
            timings.update((h, asked[h]) for h, _ in queries if h in asked)
        Logic()
        return out


def _ask_each(
    queries: Sequence[tuple[str, str, int]],
) -> tuple[dict[str, list[tuple]], dict[str, float]]:
    """Ask ``name(C, V0..Vn)`` for each (name, head, arity): the answers per head (sorted)
    and the seconds per head (summed over a head's names)."""
    out: dict[str, list[tuple]] = {}
    seconds: dict[str, float] = {}
    for name, head, arity in queries:
        t0 = time.perf_counter()
        query = f"{name}(C, {', '.join(f'V{i}' for i in range(arity))})"
        answer = pyDatalog.ask(query)
        out[head] = sorted(answer.answers) if answer is not None else []
        seconds[head] = seconds.get(head, 0.0) + time.perf_counter() - t0
    return out, seconds


def _asked_bytes(queries: Sequence[tuple[str, str, int]]) -> bytes:
    """A forked child's share: its answers and seconds, pickled for the parent."""
    return pickle.dumps(_ask_each(queries), protocol=pickle.HIGHEST_PROTOCOL)


def _unpickled(data: bytes, seconds: dict[str, float]) -> dict[str, list[tuple]]:
    """A child's answers; its seconds are added to ``seconds`` (per head)."""
    got, asked = pickle.loads(data)
    for head, t in asked.items():
        seconds[head] = seconds.get(head, 0.0) + t
    return got


_HEAD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\(")


def _deal(
    program: str, queries: Sequence[tuple[str, int]], jobs: int
) -> tuple[str, list[list[tuple[str, str, int]]]] | None:
    """The program with the queried heads' clauses dealt out to ``jobs`` shares, and per
    share the (name, head, arity) to ask; None when there is nothing to share.

    Clauses are dealt in program order, one to each share in turn (across heads too, so
    that heads of one clause do not all land in the first share): a head's clauses are
    alike, so each share gets about its part of every head's work. Share ``k`` > 0 asks
    a head under the name ``<head>_j<k>``. A head that some clause body calls is not
    dealt out (its name must stay), nor is anything when a new name is taken already."""
    arity = dict(queries)
    lines = program.splitlines()
    heads: list[str | None] = []
    called: set[str] = set()
    for line in lines:
        head = None
        if " <= " in line:
            left, body = line.split(" <= ", 1)
            m = _HEAD.match(left)
            head = m.group(1) if m else None
            called.update(_HEAD.findall(body))
        heads.append(head if head in arity else None)
    dealt = [h for h in heads if h is not None and h not in called]
    if len(dealt) < 2:
        return None
    names = {h: [h, *(f"{h}_j{k}" for k in range(1, jobs))] for h in set(dealt)}
    taken = set(_HEAD.findall(program))
    if any(n in taken for ns in names.values() for n in ns[1:]):
        return None
    out: list[str] = []
    have: list[dict[str, None]] = [{} for _ in range(jobs)]
    turn = 0
    for line, head in zip(lines, heads, strict=True):
        if head is None or head in called:
            out.append(line)
            continue
        k, turn = turn, (turn + 1) % jobs
        have[k][head] = None
        out.append(names[head][k] + line[len(head) :] if k else line)
    parts: list[list[tuple[str, str, int]]] = [
        [(names[h][k], h, arity[h]) for h in have[k]] for k in range(jobs)
    ]
    # queried heads nobody was dealt (no clause, or called by a body): asked by share 0
    for h, a in queries:
        if h not in names:
            parts[0].append((h, h, a))
    return "\n".join(out) + "\n", [p for p in parts if p] or [[]]


def _assert_all(facts: Iterable[tuple[str, tuple]]) -> None:
    """Assert ground facts. Same effect as ``pyDatalog.assert_fact`` for each, but built
    directly as engine clauses (the public call parses every argument: ~80 us a fact)."""
    if not _FAST:
        for pred, args in facts:
            pyDatalog.assert_fact(pred, *args)
        return
    const, literal, clause, assert_ = (
        pyEngine.Const,
        pyEngine.Literal,
        pyEngine.Clause,
        pyEngine.assert_,
    )
    for pred, args in facts:
        assert_(clause(literal(pred, [const(a) for a in args]), []))


# The program lines the compiler writes: ``head(args) <= lit & lit & (A != B)``, each
# argument a variable, a quoted constant or an integer.
_LIT = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)\(([^()]*)\)|\((\w+) (!=|<|==) (\w+)\))\s*")
_VAR = re.compile(r"[A-Z][A-Za-z0-9_]*")


def load(program: str) -> None:
    """Load Datalog clauses. Same clauses as ``pyDatalog.load``, built directly as engine
    clauses: pyDatalog's parser rebuilds each body once per literal (quadratic in its
    length; ~5 s for the bundled rule set). A line outside the compiler's plain grammar
    goes through ``pyDatalog.load``."""
    if not _FAST:
        pyDatalog.load(program)
        return
    other: list[str] = []
    for line in program.splitlines():
        if not line.strip():
            continue
        clause = _clause(line)
        if clause is None:
            other.append(line)
        else:
            pyEngine.assert_(clause)
    if other:
        pyDatalog.load("\n".join(other) + "\n")


def _term(arg: str):  # -> pyEngine term
    if _VAR.fullmatch(arg):
        return pyEngine.Var(arg)
    if len(arg) >= 2 and arg[0] == arg[-1] == "'" and "'" not in arg[1:-1]:
        return pyEngine.Const(arg[1:-1])
    if re.fullmatch(r"-?\d+", arg):
        return pyEngine.Const(int(arg))
    raise ValueError(arg)


def _literal(text: str):  # -> pyEngine.Literal | None
    m = _LIT.fullmatch(text)
    if m is None:
        return None
    try:
        if m.group(1) is not None:
            args = [a.strip() for a in m.group(2).split(",")] if m.group(2).strip() else []
            return pyEngine.Literal(m.group(1), [_term(a) for a in args])
        return pyEngine.Literal(m.group(4), [_term(m.group(3)), _term(m.group(5))])
    except ValueError:
        return None


def _clause(line: str):  # -> pyEngine.Clause | None
    if " <= " not in line:
        return None
    head_text, body_text = line.split(" <= ", 1)
    head = _literal(head_text)
    if head is None:
        return None
    body = []
    for part in body_text.split(" & "):
        lit = _literal(part)
        if lit is None:
            return None
        body.append(lit)
    return pyEngine.Clause(head, body)
