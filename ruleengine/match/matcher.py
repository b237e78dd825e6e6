"""find_candidates: compile rules, build facts, run Datalog, check bindings in Python.

Datalog finds the structure (op types, which op reads which, composite shapes); Python
then checks what Datalog expresses badly: output indices, input source kinds, input
counts, params (by meaning, with ONNX defaults and alias mappings), shapes, and the
subgraph conditions. A binding failing a check becomes a ``NearMiss`` with a code.

The stage entry point picks the way: ``match.memo`` (once per repeated structure) on a
large graph, else ``match.plain``; both give the same result.
"""

from __future__ import annotations

from collections.abc import Mapping

from ruleengine.graph.model import Graph
from ruleengine.match import memo as memo_mod
from ruleengine.match.compile import Program, compile_rule_set
from ruleengine.match.model import MatchResult
from ruleengine.match.plain import find_plain
from ruleengine.ops.model import OpAlias
from ruleengine.rules.model import RuleSet
from ruleengine.runtime import paused_gc


def default_aliases() -> Mapping[str, OpAlias]:
    """The bundled alias table (the matcher's default)."""
    try:
        from ruleengine.ops.aliases import alias_table
    except ImportError:  # pragma: no cover - the alias table is part of the package
        return {}
    return alias_table()


def find_candidates(
    graph: Graph,
    rule_set: RuleSet,
    *,
    aliases: Mapping[str, OpAlias] | None = None,
    stats: dict[str, float] | None = None,
    memo: bool | None = None,
    jobs: int = 1,
) -> MatchResult:
    """Every binding of every enabled rule to ``graph`` (overlaps included), plus near misses.

    ``stats``, when given, receives per-step seconds (compile, facts, datalog, check) and
    the fact count, for the benchmark. ``memo``: match repeated structures once
    (``match.memo``; the same result); None: when the graph is large enough to pay.
    ``jobs`` > 1: the Datalog queries are shared among that many processes (the same
    result; ``backend``).
    """
    with paused_gc():
        table = default_aliases() if aliases is None else aliases
        if memo or (memo is None and memo_mod.memo_applies(graph)):
            found = memo_mod.find_memo(graph, rule_set, table, stats, jobs)
            if found is not None:
                return found
        return find_plain(graph, rule_set, table, stats, jobs)


def compiled_program(rule_set: RuleSet, aliases: Mapping[str, OpAlias] | None = None) -> Program:
    """The compiled (graph-independent) program, for explain-rule --datalog."""
    return compile_rule_set(
        tuple(r for r in rule_set.rules if r.enabled),
        default_aliases() if aliases is None else aliases,
    )
