"""Greedy selection, the reference behaviour of graph-autofusion.

Take candidates by net benefit, descending (ties: higher priority, then rule name, then
nodes); take one when none of its nodes is taken and it closes no contracted cycle.
"""

from __future__ import annotations

from collections.abc import Sequence

from ruleengine.cost.model import ScoredCandidate
from ruleengine.graph.model import Graph
from ruleengine.topology import Contraction


def greedy_order(viable: Sequence[ScoredCandidate]) -> list[ScoredCandidate]:
    return sorted(
        viable,
        key=lambda s: (
            -(s.cost.net_bytes if s.cost else 0),
            -s.priority,
            s.candidate.rule,
            s.candidate.nodes,
        ),
    )


def select_greedy(graph: Graph, viable: Sequence[ScoredCandidate]) -> list[ScoredCandidate]:
    """The greedy choice (in the order taken)."""
    chosen: list[ScoredCandidate] = []
    contraction = Contraction(graph)
    taken: set[str] = set()
    for sc in greedy_order(viable):
        nodes = sc.candidate.node_set
        if nodes & taken:
            continue
        if contraction.closes_cycle(nodes) is not None:
            continue
        chosen.append(sc)
        contraction.add(nodes)
        taken |= nodes
    return chosen
