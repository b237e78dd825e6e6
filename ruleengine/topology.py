"""Graph topology checks in plain Python (kept out of Datalog, where recursion is slow).

* convexity of one node set: no path leaves the set and comes back;
* cycles in the contracted graph, where each chosen group becomes one node.

Edges into compile-time nodes (``Node.compile_time``: a ``Shape`` of a tensor whose shape
is static, and the shape arithmetic after it) are not paths: a compiler folds those nodes
to constants, so a group holding both a tensor and a Reshape/Slice whose bounds come from
that tensor's static shape is convex. The rewrite folds such Shape nodes to constants
(``ruleengine/rewrite/static_shapes.py``) so the fused graph has no cycle either.

Both walk forward along tensor edges and prune by topological position, so a check on a
local group touches only the nodes between its first and last node, not the whole graph.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
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


def graph_topology(graph: Graph) -> Topology:
    hit = _CACHE.get(id(graph))
    if hit is not None and hit[0] is graph:
        return hit[1]
    pos = {n.name: i for i, n in enumerate(graph.nodes)}
    folded = frozenset(graph.compile_time_nodes)
    succ: dict[str, tuple[str, ...]] = {}
    for node in graph.nodes:
        out: dict[str, None] = {}
        for t in node.outputs:
            tensor = graph.tensors.get(t) if t else None
            if tensor is not None:
                for consumer, _ in tensor.consumers:
                    if consumer in pos and consumer != node.name and consumer not in folded:
                        out[consumer] = None
        succ[node.name] = tuple(out)
    topo = Topology(pos, succ, tuple(n.name for n in graph.nodes))
    if len(_CACHE) > 8:
        _CACHE.clear()
    _CACHE[id(graph)] = (graph, topo)
    return topo


def is_convex(graph: Graph, nodes: Iterable[str]) -> bool:
    """True when no path from the set to itself runs through a node outside it."""
    topo = graph_topology(graph)
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


class Contraction:
    """Chosen groups, each contracted to one node; answers "would this group close a cycle?".

    Groups are added one at a time (greedy) or all at once (checking a solver's choice).
    Each query walks forward from the new group's successors and jumps through chosen
    groups; it prunes every node after position W, where W starts at the group's last
    node and grows to the last node of every chosen group that starts at or before W
    (a path can only step back in topological order by jumping through a group).
    """

    def __init__(self, graph: Graph, groups: Iterable[frozenset[str]] = ()) -> None:
        self.topo = graph_topology(graph)
        self.groups: list[frozenset[str]] = []
        self.owner: dict[str, int] = {}
        # The union of the groups' [first, last] position spans, as disjoint sorted
        # intervals (spans that overlap or touch are merged).
        self._starts: list[int] = []
        self._ends: list[int] = []
        for g in groups:
            self.add(g)

    def add(self, group: frozenset[str]) -> int:
        gi = len(self.groups)
        self.groups.append(group)
        ps = [self.topo.pos[n] for n in group]
        lo, hi = min(ps), max(ps)
        i = bisect_left(self._ends, lo)  # first interval ending at or after lo
        j = bisect_right(self._starts, hi)  # past the last one starting at or before hi
        if i < j:
            lo, hi = min(lo, self._starts[i]), max(hi, self._ends[j - 1])
        self._starts[i:j] = [lo]
        self._ends[i:j] = [hi]
        for n in group:
            self.owner[n] = gi
        return gi

    def _bound(self, start: int) -> int:
        """The end of the merged span holding ``start`` (or ``start`` in a gap)."""
        k = bisect_right(self._starts, start) - 1
        if k >= 0 and self._ends[k] >= start:
            return self._ends[k]
        return start

    def closes_cycle(self, group: frozenset[str]) -> tuple[int, ...] | None:
        """Indices of chosen groups on a cycle that ``group`` would close, or None.

        ``group`` must be convex and disjoint from every chosen group.
        """
        topo, owner, chosen = self.topo, self.owner, self.groups
        bound = self._bound(max(topo.pos[n] for n in group))
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
                    if m != u:
                        parent.setdefault(m, u)
                        nexts.extend(topo.succ[m])
            for v in nexts:
                if v in group:
                    return _groups_on_path(u, parent, owner)
                if v not in parent:
                    parent[v] = u
                    stack.append(v)
        return None


def closes_cycle(
    graph: Graph, group: frozenset[str], chosen: Sequence[frozenset[str]]
) -> tuple[int, ...] | None:
    """Indices into ``chosen`` of groups that, with ``group``, form a contracted cycle."""
    return Contraction(graph, chosen).closes_cycle(group)


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
    """Indices of the groups on one cycle of the contracted graph, or None if acyclic.

    One pass of Kahn's algorithm over the contracted graph (only the positions the
    groups span can take part in a cycle); if vertices remain, walk predecessors among
    them until one repeats: that loop is a cycle.
    """
    if len(groups) < 2:
        return None
    topo = graph_topology(graph)
    owner: dict[str, int] = {}
    lo, hi = len(topo.names), -1
    for i, g in enumerate(groups):
        for n in g:
            owner[n] = i
            p = topo.pos[n]
            lo, hi = min(lo, p), max(hi, p)

    def rep(n: str) -> str | int:
        return owner.get(n, n)

    preds: dict[str | int, set[str | int]] = {}
    succs: dict[str | int, set[str | int]] = {}
    for n in topo.names[lo : hi + 1]:
        a = rep(n)
        preds.setdefault(a, set())
        succs.setdefault(a, set())
        for m in topo.succ[n]:
            if topo.pos[m] > hi:
                continue
            b = rep(m)
            if a != b:
                succs[a].add(b)
                preds.setdefault(b, set()).add(a)
                succs.setdefault(b, set())
    indeg = {v: len(p) for v, p in preds.items()}
    ready = [v for v, d in indeg.items() if d == 0]
    while ready:
        v = ready.pop()
        for w in succs[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    left = {v for v, d in indeg.items() if d > 0}
    if not left:
        return None
    start = min(left, key=str)
    order: dict[str | int, int] = {}
    cur: str | int = start
    while cur not in order:
        order[cur] = len(order)
        cur = min((p for p in preds[cur] if p in left), key=str)
    loop = list(order)[order[cur] :]
    return tuple(sorted(v for v in loop if isinstance(v, int)))
