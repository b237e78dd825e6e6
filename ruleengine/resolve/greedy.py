"""Greedy selection, the reference behaviour of graph-autofusion.

Take candidates by net benefit, descending (ties: higher priority, then rule name, then
nodes); take one when none of its nodes is taken and it closes no contracted cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain
from operator import attrgetter, neg
from typing import Any

from ruleengine.cost.model import ScoredCandidate
from ruleengine.cost.scored import RecordView
from ruleengine.graph.model import Graph
from ruleengine.topology import Contraction


def _order(
    nets: Iterable[int], prios: Iterable[int], rules: Iterable[str], nodes: Iterable[tuple]
) -> list[int]:
    """Indices sorted by (-net bytes, -priority, rule, nodes), ties in input order: the
    stable sort's order by keys made by C-level maps, not a key function per record."""
    keys = list(zip(map(neg, nets), map(neg, prios), rules, nodes, strict=True))
    return sorted(range(len(keys)), key=keys.__getitem__)


def greedy_order(viable: Sequence[ScoredCandidate]) -> list[ScoredCandidate]:
    """Sorted by (-net bytes, -priority, rule, nodes), ties in input order (10^5 viable
    candidates on a 2048-layer stack)."""
    order = _order(
        [c.net_bytes if c else 0 for c in map(attrgetter("cost"), viable)],
        map(attrgetter("priority"), viable),
        map(attrgetter("candidate.rule"), viable),
        map(attrgetter("candidate.nodes"), viable),
    )
    return list(map(viable.__getitem__, order))


def _taken(graph: Graph, order: Iterable[int], nodes_of: Sequence[tuple]) -> list[int]:
    """Of ``order``, those taken: no node taken before, no contracted cycle closed."""
    chosen: list[int] = []
    contraction = Contraction(graph)
    taken: set[str] = set()
    for i in order:
        nodes = frozenset(nodes_of[i])  # made and let go: not cached on the record
        if not taken.isdisjoint(nodes):
            continue
        if contraction.closes_cycle(nodes) is not None:
            continue
        chosen.append(i)
        contraction.add(nodes)
        taken |= nodes
    return chosen


def select_greedy(graph: Graph, viable: Sequence[ScoredCandidate]) -> list[ScoredCandidate]:
    """The greedy choice (in the order taken). On a ``RecordView`` of the cost stage's
    ``ScoredRecords`` the order is read from its arrays and the candidates, and a record
    is made for the chosen only."""
    if isinstance(viable, RecordView):
        return list(map(viable.__getitem__, greedy_at(graph, viable)))
    ordered = greedy_order(viable)
    return list(map(ordered.__getitem__, _taken(graph, range(len(ordered)), _Nodes(ordered))))


def greedy_at(graph: Graph, viable: RecordView) -> list[int]:
    """``select_greedy``'s choice as indices of ``viable``, no record (or candidate) made:
    the order by one ``np.lexsort`` of the arrays (net bytes, priority, the rule's rank
    among the rule names, the node names' ranks column by column, -1 padding a shorter
    tuple: the order of the key tuples, ties in input order as the stable sort keeps
    them), the nodes as positions (a twin's from its source's), named for the cycle
    check only."""
    import numpy as np

    from ruleengine.cost.traffic import topo_position
    from ruleengine.topology import graph_topology

    records, at = viable.records, viable.positions
    sets = records.node_positions(at, topo_position(graph))
    names = graph_topology(graph).names
    n = len(sets)
    if not n:
        return []
    rank = np.empty(len(names), dtype=np.int64)
    rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
    lens = np.fromiter(map(len, sets), np.int64, n)
    flat = np.fromiter(chain.from_iterable(sets), np.int64, int(lens.sum()))
    width = int(lens.max())
    cols = np.full((n, width), -1, dtype=np.int64)
    rows = np.repeat(np.arange(n), lens)
    cols[rows, np.arange(len(flat)) - np.repeat(np.cumsum(lens) - lens, lens)] = rank[flat]
    rule_names = records.rule_names
    rule_rank = np.empty(len(rule_names), dtype=np.int64)
    rule_rank[sorted(range(len(rule_names)), key=rule_names.__getitem__)] = np.arange(
        len(rule_names)
    )
    rule_ids = records.rules[at].astype(np.int64)
    prio = np.asarray(records.rule_priority, dtype=np.int64)[rule_ids]
    keys = [*(cols[:, j] for j in range(width - 1, -1, -1)), rule_rank[rule_ids]]
    order = np.lexsort([*keys, -prio, -records.nets[at]])
    chosen: list[int] = []
    contraction = Contraction(graph)
    taken: set[int] = set()
    for i in order.tolist():
        ps = sets[i]
        if not taken.isdisjoint(ps):
            continue
        nodes = frozenset(map(names.__getitem__, ps))
        if contraction.closes_cycle(nodes) is not None:
            continue
        chosen.append(i)
        contraction.add(nodes)
        taken.update(ps)
    return chosen


class _Nodes(Sequence[tuple]):
    """The records' node tuples, read when asked."""

    def __init__(self, records: Sequence[ScoredCandidate]) -> None:
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: Any) -> Any:
        return self.records[i].candidate.nodes
