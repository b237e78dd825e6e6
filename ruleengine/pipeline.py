"""The one orchestrator: calls each stage with the previous stage's immutable output.

load rules -> load graph -> match -> cost -> resolve  (``analyze``)
                                         -> rewrite/emit  (see ``ruleengine.rewrite``)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ruleengine.cost.model import ScoredCandidate, Target
from ruleengine.errors import UsageError
from ruleengine.graph.model import Graph
from ruleengine.match.model import Candidate
from ruleengine.resolve.model import Resolution
from ruleengine.rules.model import RuleSet

DEFAULT_TARGET = "ascend910b"
DEFAULT_PRESET = "all"
SOLVERS = ("exact", "greedy")


@dataclass(frozen=True)
class Analysis:
    """Everything up to (not including) rewriting; what explain/compare/fuse read."""

    rule_set: RuleSet
    graph: Graph
    target: Target
    candidates: tuple[Candidate, ...]
    scored: tuple[ScoredCandidate, ...]
    resolution: Resolution


def select_rules(
    rule_set: RuleSet, enable: Sequence[str] = (), disable: Sequence[str] = ()
) -> RuleSet:
    """Apply --enable/--disable: enable names rules to keep (all when empty)."""
    known = {r.name for r in rule_set.rules}
    unknown = sorted((set(enable) | set(disable)) - known)
    if unknown:
        raise UsageError(
            f"unknown rule name(s): {', '.join(unknown)}; known rules: {', '.join(sorted(known))}"
        )
    keep = tuple(
        r
        for r in rule_set.rules
        if (not enable or r.name in enable) and r.name not in disable and r.enabled
    )
    return replace(rule_set, rules=keep)


def analyze(
    model: str | Path,
    rules: Sequence[str | Path] = (),
    *,
    preset: str | None = None,
    target: str | Target = DEFAULT_TARGET,
    solver: str = "exact",
    dims: Mapping[str, int] | None = None,
    enable: Sequence[str] = (),
    disable: Sequence[str] = (),
) -> Analysis:
    from ruleengine.cost import load_target, score_candidates
    from ruleengine.graph import load_graph
    from ruleengine.match import find_candidates
    from ruleengine.resolve import resolve
    from ruleengine.rules import load_rule_set

    if solver not in SOLVERS:
        raise UsageError(f"unknown solver {solver!r}; choose one of {', '.join(SOLVERS)}")
    if not rules and preset is None:
        preset = DEFAULT_PRESET
    rule_set = select_rules(load_rule_set(rules, preset=preset), enable, disable)
    tgt = target if isinstance(target, Target) else load_target(target)
    graph = load_graph(model, dims or {})
    candidates = find_candidates(graph, rule_set)
    scored = score_candidates(graph, candidates, rule_set, tgt)
    resolution = resolve(graph, scored, solver=solver)
    return Analysis(rule_set, graph, tgt, candidates, scored, resolution)
