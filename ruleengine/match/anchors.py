"""Where a clause's bindings are anchored, and how far they reach from there.

The memo (``match.memo``) verifies and windows balls around representatives; their
radius is the farthest hop from a clause's anchor (a centre of the clause) to its other
nodes, over the links its facts state. Fan-out siblings (bound in name order) are not
anchors; ``sibling_groups`` finds them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from ruleengine.match.compile import Concrete, Program, overlapping_slots
from ruleengine.ops.composites import CompositeForm


def _clause_links(
    conc: Concrete, hub_types: frozenset[str] = frozenset()
) -> tuple[tuple[str, ...], list[list[int]]]:
    """The clause's head variables and, per variable, the variables its facts link it
    to (edges, and composite nodes sharing an input), as indices. ``hub_types``: a
    shared input whose readers' op types all are among them may be a hub and links
    nothing."""
    head = conc.head_vars()
    at = {v: k for k, v in enumerate(head)}
    adj: list[set[int]] = [set() for _ in head]

    def join(a: str, b: str) -> None:
        i, j = at[a], at[b]
        adj[i].add(j)
        adj[j].add(i)

    for link in conc.links:
        join(conc.slots[link.src].out_var, conc.slots[link.dst].entry_var)
    for slot in conc.slots:
        if slot.form is None:
            continue
        var = dict(zip((n.id for n in slot.form.nodes), slot.node_vars(), strict=True))
        shared: dict[str, list[str]] = {}
        ops: dict[str, set[str]] = {}
        for n in slot.form.nodes:
            for r in n.inputs:
                if r.kind == "node":
                    join(var[r.name], var[n.id])
                elif r.kind == "external":
                    shared.setdefault(r.name, []).append(var[n.id])
                    ops.setdefault(r.name, set()).add(n.op)
        for name, readers in shared.items():
            if hub_types and ops[name] <= hub_types:
                continue
            for a in readers[1:]:
                join(readers[0], a)
    return head, [sorted(x) for x in adj]


def _distances(adj: Sequence[Sequence[int]], root: int) -> list[int]:
    """Hops from ``root`` to every variable (-1: not connected)."""
    dist = [-1] * len(adj)
    dist[root] = 0
    queue = deque([root])
    while queue:
        v = queue.popleft()
        for w in adj[v]:
            if dist[w] < 0:
                dist[w] = dist[v] + 1
                queue.append(w)
    return dist


def clause_radius(conc: Concrete) -> int | None:
    """Hops from the clause's first head node to its farthest node, over the links the
    clause's facts state (edges, and composite nodes sharing an input); None when some
    node is not connected to it."""
    head, adj = _clause_links(conc)
    if not head:
        return None
    dist = _distances(adj, 0)
    return None if min(dist) < 0 else max(dist)


def clause_anchor(conc: Concrete, avoid: Iterable[int] = ()) -> tuple[int, int] | None:
    """(head position, radius): the head node a binding of this clause is anchored at,
    and the hops from it to the clause's farthest node. The anchor is a centre of the
    clause (least farthest distance; ties: the earliest position), so a chain of 15 ops
    has radius 7, not 14: the memo verifies and windows balls of that radius. ``avoid``:
    positions not to anchor at (fan-out siblings, whose order in a row changes with
    the node names); when the first head node is one, it is the anchor, as before.
    None when some node is not connected to the others."""
    head, adj = _clause_links(conc)
    if not head:
        return None
    shape = (tuple(map(tuple, adj)), frozenset(avoid))
    hit = _ANCHORS.get(shape, _ANCHORS)
    if hit is not _ANCHORS:
        return hit  # type: ignore[return-value]
    ecc = _eccentricities(adj)
    if ecc is None:
        _ANCHORS[shape] = None
        return None
    banned = shape[1]
    best = (ecc[0], 0)
    if 0 not in banned:
        best = min((e, k) for k, e in enumerate(ecc) if k not in banned)
    _ANCHORS[shape] = got = (best[1], best[0])
    return got


def edge_reach(conc: Concrete, anchor: tuple[int, int], hub_types: frozenset[str]) -> int | None:
    """Hops from ``anchor`` (``clause_anchor``'s head position and radius) to the
    clause's farthest node without the shared inputs that may be hubs, read by op types
    all in ``hub_types`` (None: some node is reached only through one). A hub (a mask
    read by every layer) does not make its readers neighbours in the memo's balls; a
    clause whose nodes the other links reach from the anchor still lies in the anchor's
    ball of this radius, the hub's shared-input facts a mere filter there."""
    if not any(_hub_shared(s.form, hub_types) for s in conc.slots if s.form is not None):
        return anchor[1]
    head, adj = _clause_links(conc, hub_types)
    dist = _distances(adj, anchor[0])
    return None if min(dist) < 0 else max(dist)


def _hub_shared(form: CompositeForm, hub_types: frozenset[str]) -> bool:
    """Whether some input ``form``'s nodes share is read only by op types in
    ``hub_types`` (so it may be a hub)."""
    key = (form, hub_types)
    got = _HUB_SHARED.get(key)
    if got is None:
        readers: dict[str, list[str]] = {}
        for n in form.nodes:
            for r in n.inputs:
                if r.kind == "external":
                    readers.setdefault(r.name, []).append(n.op)
        got = any(len(ops) > 1 and set(ops) <= hub_types for ops in readers.values())
        _HUB_SHARED[key] = got
    return got


# (composite form, hub reader types) -> _hub_shared's answer
_HUB_SHARED: dict[tuple, bool] = {}


def _eccentricities(adj: Sequence[Sequence[int]]) -> list[int] | None:
    """Each variable's farthest hop to another (all at once: after k rounds, ``reach[v]``
    is the bit set of the variables within k hops of v); None when not connected."""
    n = len(adj)
    full = (1 << n) - 1
    reach = [1 << v for v in range(n)]
    ecc = [0] * n
    left = {v for v in range(n) if reach[v] != full}
    level = 0
    while left:
        level += 1
        grown = list(reach)
        for v in left:
            r = reach[v]
            for u in adj[v]:
                r |= reach[u]
            grown[v] = r
        if all(grown[v] == reach[v] for v in left):
            return None  # no longer growing: some variable is not connected
        reach = grown
        for v in [v for v in left if reach[v] == full]:
            ecc[v] = level
            left.discard(v)
    return ecc


# clause shape (links, positions to avoid) -> clause_anchor's answer: the 3,000 clauses of
# the bundled rules have a few hundred shapes
_ANCHORS: dict[tuple, tuple[int, int] | None] = {}


def rule_preds(prog: Program, rule_name: str) -> set[str]:
    """Every fact predicate a rule's clauses read, through shared forms and cores."""
    out: set[str] = set()
    todo = [lit for _, lits in prog.rule_clauses[rule_name] for lit in lits]
    seen: set[str] = set()
    while todo:
        pred, _args = todo.pop()
        if pred in seen:
            continue
        seen.add(pred)
        if pred.startswith("f_") and pred[2:] in prog.form_calls:
            todo.extend(prog.form_calls[pred[2:]][1])
        elif pred.startswith("k_") and prog.cores.get(pred[2:]) is not None:
            todo.extend(prog.cores[pred[2:]][1])  # type: ignore[index]
        else:
            out.add(pred)
    return out


def sibling_groups(prog: Program, rule_name: str, conc: Concrete) -> tuple[tuple[int, ...], ...]:
    """Row positions (1 + head position) of fan-out siblings Datalog binds in ascending
    name order, one group per op."""
    linked = {(link.src, link.dst) for link in conc.links}
    if not any(
        (a, b) not in linked
        for idx in conc.slots_by_op.values()
        for a, b in zip(idx, idx[1:], strict=False)
    ):
        return ()  # every copy of a repeated op reads the one before: no fan-out siblings
    head = conc.head_vars()
    groups: dict[int, set[int]] = {}
    for a, b, test in overlapping_slots(prog, rule_name, f"x('{conc.combo}')"):
        if test != "<":
            continue
        i, j = head.index(a), head.index(b)
        op = next(s.op for s in conc.slots if s.form is None and s.var == a)
        groups.setdefault(op, set()).update((1 + i, 1 + j))
    return tuple(tuple(sorted(g)) for _, g in sorted(groups.items()))
