"""A graph's facts and the compiled program -> the rule heads' answers (``backend``).

Composite cores and tabled forms are asked once for all rules, in stages.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping

from ruleengine.graph.model import Graph
from ruleengine.match import backend
from ruleengine.match.compile import REP, Program, program_text
from ruleengine.match.facts import build_facts

_DERIVED_CALL = re.compile(r"\b([kf])_(\w+)\(")


def datalog_answers(
    graph: Graph,
    prog: Program,
    only: set[str] | None = None,
    jobs: int = 1,
    anchored: tuple[Mapping[str, Mapping[str, int]], Iterable[str]] | None = None,
) -> tuple[dict[str, list[tuple]], dict[str, float], float, int]:
    """The rule heads' answers over ``graph``'s facts (``only``: the memo's window), the
    Datalog seconds per head, the perf_counter time at which the program text was ready
    (facts and text before it, Datalog after: the stage timings split there), and the
    number of facts. ``jobs`` > 1: the rule clauses are asked in that many processes
    (``backend``: the same answers). ``anchored``: the memo's clause anchors (per rule,
    per combo, a head position) and its representatives' node names; a rule clause then
    yields only the rows anchored at a representative, the only ones the memo reads."""
    facts = build_facts(graph, prog, only)
    if anchored is not None:
        facts.extend((REP, (name,)) for name in anchored[1])
    counts = Counter(pred for pred, _ in facts)
    heads: set[str] = set()
    text = program_text(
        prog,
        counts,
        alive=set(counts),
        defined_out=heads,
        chains=True,
        distinct=True,
        anchored=None if anchored is None else anchored[0],
    )
    ready = time.perf_counter()
    queries = [(h, a) for (h, a, _) in prog.rules.values() if h in heads]
    timings: dict[str, float] = {}
    answers = _ask(facts, text, queries, timings, jobs) if queries else {}
    return answers, timings, ready, len(facts)


def _ask(
    facts: list,
    text: str,
    queries: list[tuple[str, int]],
    timings: dict[str, float],
    jobs: int = 1,
) -> dict[str, list[tuple]]:
    """Run the program; composite cores (``k_``) and tabled forms (``f_``) are computed
    once for all rules instead of once per rule's query.

    Stage 1 loads the cores and asks each once; its answers become facts ``u_<core>``.
    Stage 2 loads the forms (reading those facts) and asks each form some rule clause
    calls; its answers become facts ``t_<form>``. The rule clauses then read the facts.
    Same answers: each core and form is a conjunctive query whose whole answer set the
    facts hold (a form without answers simply has no facts, like a dead edge type).
    """
    cores: list[str] = []
    forms: list[str] = []
    rules: list[str] = []
    arity: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith(("k_", "f_")):
            (cores if line.startswith("k_") else forms).append(line)
            name = line[: line.index("(")]
            arity[name] = line[: line.index(")")].count(",") + 1
        else:
            rules.append(line)
    called = sorted(
        {f"f_{m.group(2)}" for ln in rules for m in _DERIVED_CALL.finditer(ln) if m.group(1) == "f"}
    )
    form_tables = [(f, arity[f], f"t_{f[2:]}") for f in called if f in arity]
    if not form_tables:
        return backend.run(facts, text, queries, timings, jobs)
    used = sorted(
        {
            f"k_{m.group(2)}"
            for ln in (*forms, *rules)
            for m in _DERIVED_CALL.finditer(ln)
            if m.group(1) == "k"
        }
    )
    core_tables = [(k, arity[k], f"u_{k[2:]}") for k in used if k in arity]

    def to_facts(line: str) -> str:
        return _DERIVED_CALL.sub(
            lambda m: f"{'u' if m.group(1) == 'k' else 't'}_{m.group(2)}(", line
        )

    form_text = "\n".join(ln[: ln.index("<=")] + to_facts(ln[ln.index("<=") :]) for ln in forms)
    stages = [("\n".join(cores) + "\n", core_tables), (form_text + "\n", form_tables)]
    program = "\n".join(to_facts(ln) for ln in rules) + "\n"
    return backend.run_staged(facts, stages, program, queries, timings, jobs)
