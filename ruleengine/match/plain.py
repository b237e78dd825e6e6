"""Plain matching: every enabled rule on the whole graph, each binding checked.

One candidate per rule and node set, near misses for the bindings a check refused.
``match.memo`` uses it for the rules it cannot memoise.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from ruleengine.graph.model import Graph
from ruleengine.match.binding import Reject, build_candidate
from ruleengine.match.checks import check_binding, nothing_per_op, op_plan
from ruleengine.match.compile import PAD, Program, compile_rule_set
from ruleengine.match.datalog import datalog_answers
from ruleengine.match.model import Candidate, MatchResult, NearMiss
from ruleengine.ops.model import OpAlias
from ruleengine.rules.model import Rule, RuleSet

# The programs compiled last, with their rules and aliases: a model's control-flow bodies
# (``rewrite.bodies``: one match per body, 50 in silero-vad.onnx) share one compilation,
# and ``suggest`` matches the same few rule sets many times (the given rules on the model
# and on its spelled-out copy, the given rules with the same drafts). A program is
# graph-independent: its compilation writes it, and ``program_text`` adds only what any
# graph would get again (clause orders by rank of counts, within a bound). Kept by
# recency within KEPT_CLAUSES clauses in all (a program's memory grows with its clauses:
# the bundled library's 11,163 take ~58 MB), the most recent always.
KEPT_CLAUSES = 25_000
_KEPT: list[tuple[tuple[Rule, ...], Mapping[str, OpAlias], Program]] = []


def kept_program(rules: tuple[Rule, ...], aliases: Mapping[str, OpAlias]) -> Program:
    """``compile_rule_set(rules, aliases, tabled_forms=True)``, a kept one where the same
    rules and aliases were compiled before."""
    for i, (kept_rules, kept_aliases, prog) in enumerate(_KEPT):
        if kept_rules == rules and kept_aliases == aliases:
            _KEPT.append(_KEPT.pop(i))
            return prog
    prog = compile_rule_set(rules, aliases, tabled_forms=True)
    _KEPT.append((rules, aliases, prog))
    while len(_KEPT) > 1 and sum(_clauses(p) for _r, _a, p in _KEPT) > KEPT_CLAUSES:
        _KEPT.pop(0)
    return prog


def _clauses(prog: Program) -> int:
    return sum(len(combos) for _head, _arity, combos in prog.rules.values())


def find_plain(
    graph: Graph,
    rule_set: RuleSet,
    aliases: Mapping[str, OpAlias],
    stats: dict[str, float] | None,
    jobs: int = 1,
) -> MatchResult:
    """Every binding of every enabled rule in ``rule_set`` to ``graph``, de-duplicated
    per rule and node set, plus the near misses (``find_candidates`` without the memo)."""
    t0 = time.perf_counter()
    rules = tuple(r for r in rule_set.rules if r.enabled)
    prog = kept_program(rules, aliases)
    t1 = time.perf_counter()
    answers, timings, t2, n_facts = datalog_answers(graph, prog, jobs=jobs)
    t3 = time.perf_counter()
    candidates: dict[tuple, Candidate] = {}
    near: dict[tuple, NearMiss] = {}
    plans: dict[tuple[str, int], tuple] = {}
    for rule in rules:
        head, _arity, combos = prog.rules[rule.name]
        for row in answers.get(head, ()):
            conc = combos[row[0]]
            names = list(row[1 : 1 + conc.n_head])
            if PAD in names:
                continue
            plan_key = (rule.name, conc.alternative)
            plan = plans.get(plan_key)
            if plan is None:
                plan = plans[plan_key] = op_plan(rule, conc.alternative, aliases)
            # no per-op check to run and no composite: the bindings are not needed
            lean = conc.single_nodes and nothing_per_op(plan)
            try:
                cand, slot_bindings = build_candidate(graph, rule, conc, names, lean=lean)
            except Reject:
                continue  # structurally not a match (e.g. a node bound twice)
            if cand.key in candidates:
                continue  # the same subgraph again (e.g. a commutative op's other order)
            try:
                check_binding(graph, rule, conc, cand, slot_bindings, aliases, plan)
            except Reject as rej:
                near.setdefault(cand.key, NearMiss(cand, rej.code, rej.reason))
                continue
            candidates.setdefault(cand.key, cand)
    t4 = time.perf_counter()
    if stats is not None:
        stats.update(
            compile_s=t1 - t0,
            facts_s=t2 - t1,
            datalog_s=t3 - t2,
            check_s=t4 - t3,
            facts=float(n_facts),
        )
        head_rule = {h: name for name, (h, _a, _c) in prog.rules.items()}
        stats["by_rule"] = {  # type: ignore[assignment]
            head_rule.get(h, h): t for h, t in timings.items()
        }
    # One candidate per rule and node set: the same nodes bound in another order (three
    # interchangeable Q/K/V MatMuls) or by another alternative is the same fusion group.
    # (Node sets made here, not cached on the records: a record's ``node_set`` costs
    # ~1 KB, and most records never need it.)
    unique: dict[tuple, Candidate] = {}
    for cand in sorted(candidates.values(), key=lambda c: c.key):
        unique.setdefault((cand.rule, frozenset(cand.nodes)), cand)
    # a subgraph the rule matched is no near miss of it; each reason is told once per subgraph
    unique_near: dict[tuple, NearMiss] = {}
    for miss in sorted(near.values(), key=lambda n: n.candidate.key):
        c = miss.candidate
        nodes = frozenset(c.nodes)
        if (c.rule, nodes) not in unique:
            unique_near.setdefault((c.rule, nodes, miss.code), miss)
    return MatchResult(
        candidates=tuple(unique.values()),
        near_misses=tuple(unique_near.values()),
        seconds=t4 - t0,
        facts=n_facts,
    )
