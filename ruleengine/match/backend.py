"""The pyDatalog backend: the ONLY module that imports pyDatalog.

A fresh ``Logic()`` per run (pyDatalog keeps its state per thread), facts asserted one by
one (``assert_fact``: no parsing), the compiled program loaded as text, one query per
rule head.
"""

from __future__ import annotations

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

_LOCK = threading.Lock()  # pyDatalog's per-thread state is not re-entrant within a thread


def run(
    facts: Iterable[tuple[str, tuple]],
    program: str,
    queries: Sequence[tuple[str, int]],
    timings: dict[str, float] | None = None,
) -> dict[str, list[tuple]]:
    """Assert ``facts``, load ``program``, ask ``head(C, V1..Vn)`` for each (head, arity).

    Returns head -> answers (tuples of constants), in a sorted, deterministic order.
    """
    return run_staged(facts, (), program, queries, timings)


def run_staged(
    facts: Iterable[tuple[str, tuple]],
    stages: Sequence[tuple[str, Sequence[tuple[str, int, str]]]],
    program: str,
    queries: Sequence[tuple[str, int]],
    timings: dict[str, float] | None = None,
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
        if program.strip():
            load(program)
        out: dict[str, list[tuple]] = {}
        for head, arity in queries:
            t0 = time.perf_counter()
            query = f"{head}(C, {', '.join(f'V{i}' for i in range(arity))})"
            answer = pyDatalog.ask(query)
            out[head] = sorted(answer.answers) if answer is not None else []
            if timings is not None:
                timings[head] = time.perf_counter() - t0
        Logic()
        return out


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
