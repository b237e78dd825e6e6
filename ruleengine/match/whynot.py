"""Why a rule does not match: its own compiled clauses, relaxed, asked on the graph.

No second matcher: the rule's clauses are cut into prefixes and, where the structure
stops, relaxed one condition at a time (``whynot_engine`` says how); ``whynot_text``
words each kind of condition. This module is the entry point (``why_not``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from ruleengine.graph.model import Graph
from ruleengine.match.compile import Program, compile_rule_set
from ruleengine.match.facts import match_type
from ruleengine.match.model import MatchResult, WhyNot
from ruleengine.match.whynot_engine import (
    CLAUSES_CHECKED,
    Asker,
    Clause,
    Ladder,
    Outcome,
    Relaxed,
    outcome,
    relaxations,
)
from ruleengine.match.whynot_text import describe
from ruleengine.ops.model import OpAlias
from ruleengine.rules.model import Rule, RuleSet


def why_not(
    graph: Graph,
    rule_set: RuleSet | Sequence[Rule],
    names: Sequence[str] | None = None,
    *,
    result: MatchResult | None = None,
    aliases: Mapping[str, OpAlias] | None = None,
    max_places: int = 3,
) -> tuple[WhyNot, ...]:
    """Why each rule named in ``names`` (default: each enabled rule without a candidate in
    ``result``) does or does not match ``graph``, from its compiled clauses relaxed.

    Two Datalog runs for all the rules asked: their clauses' prefixes, then the
    relaxations at the op where each stops."""
    from ruleengine.match.matcher import default_aliases

    table = default_aliases() if aliases is None else aliases
    rules = _chosen(rule_set, names, result)
    if not rules:
        return ()
    prog = compile_rule_set(rules, table)
    ladders = _ladders(rules, prog)
    asker = Asker(prog)
    for per_rule in ladders.values():
        for ladder in per_rule:
            ladder.ask(asker)
    answers = asker.run(graph)
    cache: dict = {}
    best = {
        name: _best(graph, per_rule, answers, table, cache) for name, per_rule in ladders.items()
    }
    any_types = frozenset(match_type(n) for n in graph.nodes)
    relax_asker = Asker(prog)
    relaxed = {
        name: [
            (o, relaxations(o.ladder.clause, o.slot, relax_asker, any_types))
            for o in tied
            if o.kind == "struct" and o.slot is not None
        ]
        for name, (_, _, tied) in best.items()
    }
    relaxed_answers = relax_asker.run(graph)
    counts = Counter(c.rule for c in result.candidates) if result is not None else None
    out = []
    for rule in rules:
        o, per_alt, _ = best[rule.name]
        o, relax = _most_telling(o, relaxed[rule.name], relaxed_answers)
        alt = o.ladder.clause.conc.alternative
        others = [x for x in per_alt if x.ladder.clause.conc.alternative != alt]
        n = counts[rule.name] if counts is not None else int(o.kind == "match")
        out.append(describe(graph, o, others, relax, relaxed_answers, n, max_places))
    return tuple(out)


def _most_telling(
    best: Outcome, tied: list[tuple[Outcome, list[Relaxed]]], answers: Mapping[str, list]
) -> tuple[Outcome, list[Relaxed]]:
    """Of the clauses that stop at the same op (a single ONNX op or each composite form
    of one op type), the one whose relaxations explain most: one condition dropped or
    freed with answers, then the type freed, then any."""

    def score(item: tuple[Outcome, list[Relaxed]]) -> int:
        found = [r for r in item[1] if answers.get(r.head)]
        if any(r.joined and r.dropped is not None for r in found):
            return 0
        return 1 if found else 2

    if not tied:
        return best, []
    return min(tied, key=score)


def _chosen(
    rule_set: RuleSet | Sequence[Rule], names: Sequence[str] | None, result: MatchResult | None
) -> list[Rule]:
    rules = rule_set.rules if isinstance(rule_set, RuleSet) else tuple(rule_set)
    if names is not None:
        wanted = set(names)
        return [r for r in rules if r.name in wanted]
    if result is None:
        return [r for r in rules if r.enabled]
    have = {c.rule for c in result.candidates}
    return [r for r in rules if r.enabled and r.name not in have]


def _ladders(rules: Sequence[Rule], prog: Program) -> dict[str, list[Ladder]]:
    out: dict[str, list[Ladder]] = {}
    for rule in rules:
        _head, _arity, combos = prog.rules[rule.name]
        clauses = prog.rule_clauses[rule.name]
        out[rule.name] = [
            Ladder(Clause(rule, conc, list(lits)))
            for conc, (_text, lits) in zip(combos.values(), clauses, strict=True)
        ]
    return out


def _best(
    graph: Graph,
    ladders: list[Ladder],
    answers: Mapping[str, list],
    aliases: Mapping[str, OpAlias],
    cache: dict,
) -> tuple[Outcome, list[Outcome], list[Outcome]]:
    """The clause that got furthest, the best of each alternative, and the clauses as far
    as the first (its own first), whose relaxations decide which one is told."""

    def depth(ladder: Ladder) -> tuple:
        s = ladder.failing_slot(answers)
        n = len(ladder.clause.conc.slots)
        op = ladder.clause.conc.slots[s].op if s is not None else n
        return (op, ladder.reached(answers))

    ranked = sorted(ladders, key=depth, reverse=True)
    per_alt: dict[int, list[Ladder]] = {}
    for ladder in ranked:
        per_alt.setdefault(ladder.clause.conc.alternative, []).append(ladder)
    outcomes = []
    every: list[Outcome] = []
    for alt_ladders in per_alt.values():
        checked = [
            outcome(graph, lad, answers, aliases, cache) for lad in alt_ladders[:CLAUSES_CHECKED]
        ]
        every += checked
        outcomes.append(max(checked, key=lambda o: o.rank))
    outcomes.sort(key=lambda o: o.rank, reverse=True)
    top = outcomes[0]
    tied = [top] + [o for o in every if o is not top and o.rank[:2] == top.rank[:2]]
    return top, outcomes, tied[:CLAUSES_CHECKED]
