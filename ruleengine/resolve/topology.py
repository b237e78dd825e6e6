"""Graph topology checks in plain Python (kept out of Datalog, where recursion is slow).

* convexity of one node set: no path leaves the set and comes back;
* cycles in the contracted graph, where each chosen group becomes one node.

Both walk forward along tensor edges and prune by topological position, so a check on a
local group touches only the nodes between its first and last node, not the whole graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ruleengine.graph.model import Graph


@dataclass(frozen=True)
class Topology:
    """Positions and successor lists of a graph, computed once per graph."""

    pos: dict[str, int]
    succ: dict[str, tuple[str, ...]]
    names: tuple[str, ...]


_CACHE: dict[int, tuple[Graph, Topology]] = {}


def topology(graph: Graph) -> Topology:
    hit = _CACHE.get(id(graph))
    if hit is not None and hit[0] is graph:
        return hit[1]
    pos = {n.name: i for i, n in enumerate(graph.nodes)}
    succ: dict[str, tuple[str, ...]] = {}
    for node in graph.nodes:
        out: dict[str, None] = {}
        for t in node.outputs:
            tensor = graph.tensors.get(t) if t else None
            if tensor is not None:
                for consumer, _ in tensor.consumers:
                    if consumer in pos and consumer != node.name:
                        out[consumer] = None
        succ[node.name] = tuple(out)
    topo = Topology(pos, succ, tuple(n.name for n in graph.nodes))
    if len(_CACHE) > 8:
        _CACHE.clear()
    _CACHE[id(graph)] = (graph, topo)
    return topo


def is_convex(graph: Graph, nodes: Iterable[str]) -> bool:
    """True when no path from the set to itself runs through a node outside it."""
    topo = topology(graph)
    inside = set(nodes)
    if len(inside) <= 1:
        return True
    last = max(topo.pos[n] for n in inside)
    stack = [s for n in inside for s in topo.succ[n] if s not in inside]
    seen = set(stack)
    while stack:
        u = stack.pop()
        for v in topo.succ[u]:
            if v in inside:
                return False
            if v not in seen and topo.pos[v] < last:
                seen.add(v)
                stack.append(v)
    return True


def closes_cycle(
    graph: Graph, group: frozenset[str], chosen: Sequence[frozenset[str]]
) -> tuple[int, ...] | None:
    """Indices into ``chosen`` of the groups that, with ``group``, form a contracted cycle.

    ``group`` must be convex and disjoint from every chosen group. Returns None when
    adding it keeps the contracted graph acyclic, else the chosen groups on one cycle.
    A node after position W can never reach ``group``: W starts at the group's last
    node and grows to the last node of every chosen group that starts at or before W
    (a path can only step back in topological order by jumping through a group).
    """
    topo = topology(graph)
    owner: dict[str, int] = {}
    spans: list[tuple[int, int, int]] = []
    for i, g in enumerate(chosen):
        ps = [topo.pos[n] for n in g]
        spans.append((min(ps), max(ps), i))
        for n in g:
            owner[n] = i
    bound = max(topo.pos[n] for n in group)
    for lo, hi, _ in sorted(spans):
        if lo > bound:
            break
        bound = max(bound, hi)
    parent: dict[str, str | None] = {}
    stack: list[str] = []
    for n in group:
        for s in topo.succ[n]:
            if s not in group and s not in parent:
                parent[s] = None
                stack.append(s)
    expanded: set[int] = set()
    while stack:
        u = stack.pop()
        if topo.pos[u] > bound:
            continue
        nexts: list[str] = list(topo.succ[u])
        gi = owner.get(u)
        if gi is not None and gi not in expanded:
            expanded.add(gi)
            for m in chosen[gi]:
                if m != u and m not in parent:
                    parent[m] = u
                    nexts.extend(topo.succ[m])
                elif m != u:
                    nexts.extend(topo.succ[m])
        for v in nexts:
            if v in group:
                return _groups_on_path(u, parent, owner)
            if v not in parent:
                parent[v] = u
                stack.append(v)
    return None


def _groups_on_path(
    end: str, parent: dict[str, str | None], owner: dict[str, int]
) -> tuple[int, ...]:
    out: dict[int, None] = {}
    cur: str | None = end
    while cur is not None:
        if cur in owner:
            out[owner[cur]] = None
        cur = parent.get(cur)
    return tuple(sorted(out))


def find_cycle(graph: Graph, groups: Sequence[frozenset[str]]) -> tuple[int, ...] | None:
    """Indices of the groups on one cycle of the contracted graph, or None if acyclic."""
    for i in range(len(groups)):
        others = [g for j, g in enumerate(groups) if j != i]
        hit = closes_cycle(graph, groups[i], others)
        if hit is not None:
            idx = [j for j in range(len(groups)) if j != i]
            return tuple(sorted({i, *(idx[k] for k in hit)}))
    return None
