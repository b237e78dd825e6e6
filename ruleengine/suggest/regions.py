"""Find the fusable regions that the chosen groups leave unfused.

``search_regions`` is what ``suggest`` uses: the best partition of the graph into kernels
the target accepts (``partition``: every convex connected group the cost model fuses,
packed by CP-SAT for the most captured fusable bytes, no rule involved); its groups that
the rules in use do not already choose are the regions. Its coverage is the ceiling
allowed by UB, convexity and the fused-input limit. A second packing with at most
``COMPACT_OPS`` compute ops per group gives the small regions that recur across layers and
exporters.

``find_regions``, the greedy finder below, seeds the pool with regions grown without a
size cap. Start from the chosen groups and every other run-time node on its own; take the fusable
edges that no group captures, largest tensor first, and merge the two sides of each edge
(with the views it passes through) when the merged set is still a kernel the cost model
accepts: convex, within the target's UB and fused-input limit, saving HBM bytes net.
What grew past a chosen group, or formed among free nodes, is a *region*.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from ruleengine import coverage
from ruleengine.cost.model import Target, Verdict
from ruleengine.cost.scoring import GroupMemo, score_one
from ruleengine.cost.traffic import topo_position
from ruleengine.graph.model import Graph
from ruleengine.match.model import Candidate
from ruleengine.suggest.beside import Later, beside, settle
from ruleengine.suggest.model import Region
from ruleengine.suggest.partition import (
    MAX_POOL_SETS,
    Kernel,
    Partition,
    Pool,
    best_partition,
    displacing,
    kernel_pool,
    tightened,
)

# Compact regions: at most this many compute ops (one packing each). They recur across
# layers and exporters, so their rules carry over to other exports of the architecture.
COMPACT_OPS = (6, 3)


# Drafting partitions tried: the most net bytes (the selection stage's objective) plus
# this many quarter captured bytes per net byte; and the most captured bytes (the ceiling).
MIX = (0, 2, 8)


@dataclass(frozen=True)
class RegionSearch:
    """The regions of one graph, and the partitions they come from."""

    regions: tuple[Region, ...]  # groups of the drafting partition the rules in use lack
    compact: tuple[Region, ...]  # the same, packing groups of <= COMPACT_OPS compute ops
    ceiling: Partition  # the most captured fusable bytes, selection ignored
    selectable: Partition  # the same among partitions the selection could prefer (below)
    drafting: Partition  # the partition the regions come from
    selected: int  # captured bytes the selection stage picks, drafted groups added
    pool: Pool
    # the same as ``selectable``, its drafted groups' twins offered too (the bar's
    # ceiling: ``twins.twin_ceiling``, computed beside); None: not searched
    twin_ceiling: Later[Partition] | None = None


@dataclass(frozen=True)
class _TwinFree:
    """What ``search_regions`` computes whether or not ``twins``: held in its memo."""

    pool: Pool
    compacts: list[tuple[Partition, int]]
    compact_kernels: list[Kernel]
    rival_kernels: list[Kernel]
    offered_already: set[frozenset[str]]
    by_nodes: dict[frozenset[str], Kernel]
    wider: list[Kernel]
    ceiling: Partition
    now: Partition
    floor: int
    as_offered: list[Kernel]
    selectable: Partition
    options: tuple[Partition, ...]
    twin_ceiling: Later[Partition]


def search_regions(
    graph: Graph,
    groups: Sequence[Iterable[str]],
    target: Target,
    edges: coverage.FusableEdges | None = None,
    *,
    rivals: Sequence[tuple[frozenset[str], int]] = (),
    net_floor: int | None = None,
    compact_ops: Sequence[int] = COMPACT_OPS,
    twins: bool = False,
    memo: dict | None = None,
    max_sets: int = MAX_POOL_SETS,
) -> RegionSearch:
    """The regions to draft rules for, and the ceiling.

    ``groups``: the groups the rules in use choose (kept on ties); ``rivals``: every
    viable candidate of the rules in use (node set, net bytes). The selection stage picks
    the most *net* bytes among all candidates, the rules in use and the drafted ones, so
    the partition with the most captured bytes is not always what it picks once drafted:
    several drafting partitions are tried (``MIX``: net bytes plus a share of captured
    bytes, and captured bytes alone), the selection among the rivals and each partition's
    groups is simulated, and the partition whose selection captures most is drafted.

    Adding rules only adds candidates, and the selection maximises net bytes, so once
    rules are added it picks a partition saving at least the net bytes it saves now
    (``net_floor``: the chosen groups' net bytes; the simulated selection among the rivals
    alone, if lower). ``selectable`` is the partition with the most captured bytes among
    those: the ceiling for the rules in use plus any added rule (one more drafting option).

    ``memo``: kept by the caller across calls on the same graph object; what does not
    depend on ``twins`` (pool, ceilings, drafting options) is computed once for the same
    groups and rivals. ``max_sets``: the pool's budget of sets judged.
    """
    edges = coverage.fusable_edges(graph) if edges is None else edges
    pos = topo_position(graph)
    chosen = [frozenset(g) for g in groups]
    kept = set(chosen)
    # what does not depend on ``twins``, computed once per graph and rules in use (the
    # further round of drafting for twins searches the same graph again)
    key = (
        id(graph),
        tuple(sorted(tuple(sorted(g)) for g in chosen)),
        tuple(rivals),
        net_floor,
        tuple(compact_ops),
        target.name,
        max_sets,
    )
    held = memo.get(key) if memo is not None else None
    base = held[1] if held is not None and held[0] is graph else None
    if base is None:
        base = _twin_free(graph, chosen, target, edges, rivals, net_floor, compact_ops, max_sets)
        if memo is not None:
            memo[key] = (graph, base)  # held: its id is not reused
    selection = _Selection(graph, base, twins)
    options = _drafting_options(graph, base, twins)
    score, best, compact_used = _best_option(options, base, kept, selection)
    compact = (
        r
        for p, cap in base.compacts
        for r in _regions(p, kept, base, pos, cap)
        if frozenset(r.nodes) in compact_used
    )
    return RegionSearch(
        _regions(options[best], kept, base, pos),
        tuple(dict.fromkeys(compact)),
        base.ceiling,
        base.selectable,
        options[best],
        score,
        base.pool,
        base.twin_ceiling,
    )


def _net_bytes(k: Kernel) -> int:
    return k.net_bytes


def _mixed(m: int, k: Kernel) -> int:
    """A drafting partition's objective: net bytes plus ``m`` quarter captured bytes."""
    return 4 * k.net_bytes + m * k.captured


def _twin_free(
    graph: Graph,
    chosen: Sequence[frozenset[str]],
    target: Target,
    edges: coverage.FusableEdges,
    rivals: Sequence[tuple[frozenset[str], int]],
    net_floor: int | None,
    compact_ops: Sequence[int],
    max_sets: int,
) -> _TwinFree:
    """The pool, its compact packings, the ceilings and the drafting options: what
    ``search_regions`` computes whether or not ``twins``."""
    settle()  # a ceiling still computed beside: its solves join the cache first
    kept = set(chosen)
    seeds = find_regions(graph, chosen, target, edges)
    pool = kernel_pool(
        graph, target, edges, extra=[*chosen, *(r.nodes for r in seeds)], max_sets=max_sets
    )
    rival_kernels = [Kernel(nodes, _captured(edges, nodes), 0, net, 0) for nodes, net in rivals]
    by_nodes, wider = _with_rivals(pool, rival_kernels)
    # the drafting options need nothing below: computed beside the ceilings
    options = beside(_mixes, graph, wider, pool.complete, chosen)
    compacts = []
    for cap in compact_ops:
        small = [k for k in pool.kernels if k.compute_ops <= cap or k.nodes in kept]
        packed = best_partition(graph, small, prefer=chosen, value=_net_bytes)
        compacts.append((packed, cap))
    compact_kernels = [k for p, cap in compacts for k in p.kernels if k.compute_ops <= cap]
    ceiling = best_partition(graph, wider, complete=pool.complete, prefer=chosen)
    now = best_partition(graph, rival_kernels, value=_net_bytes)
    floor = sum(k.net_bytes for k in now.kernels)
    floor = floor if net_floor is None else min(floor, net_floor)
    as_offered = [by_nodes[r.nodes] for r in rival_kernels]
    selectable, twin = _selectable_ceilings(
        graph, wider, as_offered, now, floor, pool.complete, ceiling
    )
    return _TwinFree(
        pool=pool,
        compacts=compacts,
        compact_kernels=compact_kernels,
        rival_kernels=rival_kernels,
        offered_already={k.nodes for k in rival_kernels},  # candidates of the rules in use
        by_nodes=by_nodes,
        wider=wider,
        ceiling=ceiling,
        now=now,
        floor=floor,
        as_offered=as_offered,
        selectable=selectable,
        options=options.get(),
        twin_ceiling=twin,
    )


def _mixes(
    graph: Graph, wider: Sequence[Kernel], complete: bool, chosen: Sequence[frozenset[str]]
) -> tuple[Partition, ...]:
    """The drafting partitions of ``MIX``."""
    return tuple(
        best_partition(graph, wider, complete=complete, prefer=chosen, value=partial(_mixed, m))
        for m in MIX
    )


def _with_rivals(
    pool: Pool, rival_kernels: Sequence[Kernel]
) -> tuple[dict[frozenset[str], Kernel], list[Kernel]]:
    """The pool's kernels with the rules in use's candidates: every viable candidate is
    a kernel the target accepts too (a bundled group may be larger than the pool's
    caps): the partitions may use them (a node set both in the pool and a candidate: the
    selection sees both, keeps the larger net bytes). (by node set, in pool order)."""
    by_nodes = {k.nodes: k for k in pool.kernels}
    for r in rival_kernels:
        k = by_nodes.get(r.nodes)
        if k is None:
            by_nodes[r.nodes] = r
        elif r.net_bytes > k.net_bytes:
            by_nodes[r.nodes] = Kernel(
                k.nodes, k.captured, k.bytes_saved, r.net_bytes, k.compute_ops
            )
    wider = [by_nodes[k.nodes] for k in pool.kernels]
    pooled = {w.nodes for w in wider}  # once: built per rival it was quadratic
    wider += [k for k in rival_kernels if k.nodes not in pooled]
    return by_nodes, wider


def _selectable_ceilings(
    graph: Graph,
    wider: Sequence[Kernel],
    as_offered: Sequence[Kernel],
    now: Partition,
    floor: int,
    complete: bool,
    ceiling: Partition,
) -> tuple[Partition, Later[Partition]]:
    """The selectable ceiling, and the same with its drafted groups' twins offered
    (computed beside: ``beside``)."""
    rows: list = []  # the selectable ceiling's rows, proven for every pickable partition
    selectable = selectable_partition(graph, wider, as_offered, now, floor, complete, rows=rows)
    if not selectable.kernels and ceiling.kernels:  # no bound proven within the time limit
        selectable = replace(ceiling, status="BOUND")  # any partition bounds it; not reached
    if selectable.status == "BOUND":
        return selectable, Later.ready(selectable)  # a bound: the twins only add rows

    def settled(got: Partition | None) -> Partition:
        if got is None:
            return selectable  # its twins do not displace it
        return got if got.kernels else replace(selectable, status="BOUND")

    floor_row = rows[0] if rows else floor
    conditions = rows[1] if rows else ()
    twin = beside(
        _twin_ceiling,
        graph,
        wider,
        as_offered,
        floor_row,
        complete,
        conditions,
        selectable,
        then=settled,
    )  # a reported figure only: computed beside the drafting
    return selectable, twin


def _twin_ceiling(
    graph: Graph,
    wider: Sequence[Kernel],
    as_offered: Sequence[Kernel],
    floor: int,
    complete: bool,
    conditions: Sequence[tuple[tuple[frozenset[str], ...], int]],
    selectable: Partition,
) -> Partition | None:
    """``twins.twin_ceiling`` from the selectable ceiling; None where that is the answer."""
    from ruleengine.suggest.twins import twin_ceiling

    got = twin_ceiling(
        graph, wider, as_offered, floor, complete, conditions=conditions, start=selectable
    )
    return None if got is selectable else got


class _Selection:
    """The selection stage simulated over the rules in use's candidates, compact groups
    and a partition's groups (with ``twins``, every twin of each: a rule offers every
    twin of the group it is drafted from)."""

    def __init__(self, graph: Graph, base: _TwinFree, twins: bool) -> None:
        self.graph, self.base, self.twins = graph, base, twins
        self.picked: dict[frozenset[frozenset[str]], int] = {}  # by the node sets offered
        self.twin_of: dict[frozenset[str], str] = {}
        self.by_twin: dict[str, list[Kernel]] = {}
        if twins:
            from ruleengine.suggest.twins import twin_classes

            self.twin_of = twin_classes(graph, base.wider)
            for k in base.wider:
                self.by_twin.setdefault(self.twin_of[k.nodes], []).append(k)

    def captured(self, p: Partition, compact: Sequence[Kernel] | None = None) -> int:
        """Captured bytes it picks (``compact``: the compact groups offered, all if None)."""
        base = self.base
        compact = base.compact_kernels if compact is None else compact
        offered = {k.nodes: k for k in (*base.rival_kernels, *compact, *p.kernels)}
        offered = {nodes: base.by_nodes.get(nodes, k) for nodes, k in offered.items()}
        if self.twins:
            for k in (*compact, *p.kernels):
                for t in self.by_twin.get(self.twin_of.get(k.nodes, ""), ()):
                    offered.setdefault(t.nodes, t)
        # the drafting options often offer the same groups (two mixes, the same
        # partition): the same selection
        key = frozenset(offered)
        if key not in self.picked:
            self.picked[key] = best_partition(
                self.graph,
                sorted(offered.values(), key=lambda k: sorted(k.nodes)),
                value=_net_bytes,
            ).captured
        return self.picked[key]


def _drafting_options(graph: Graph, base: _TwinFree, twins: bool) -> list[Partition]:
    """The drafting partitions tried: the mixes, the ceiling, the selectable ceiling,
    and with ``twins`` the most captured partition stable under its twins."""
    options = [*base.options, base.ceiling, base.selectable]
    if twins:
        from ruleengine.suggest.twins import structural_partition

        stable, _ = structural_partition(
            graph,
            base.wider,
            base.as_offered,
            base.floor,
            base.pool.complete,
            [k.nodes for k in base.now.kernels],
        )
        if stable.kernels:
            options.append(stable)
    return options


def _best_option(
    options: Sequence[Partition], base: _TwinFree, kept: set[frozenset[str]], selection: _Selection
) -> tuple[int, int, set[frozenset[str]]]:
    """(captured bytes picked, index, compact groups offered) of the best drafting
    option. Each option is tried with every compact group offered too, with those apart
    from its own new groups (disjoint or equal), and with none: a compact group can
    split a drafting group and win the selection on net bytes while capturing less; then
    fewer compact regions are drafted (ties keep more: they carry across exporters)."""
    trials = []
    for i, p in enumerate(options):
        # the partition's new groups by node (disjoint): a compact group apart from them
        # or equal to one, looked up per node (a scan of every group per compact group
        # was quadratic in the layers)
        owner = {n: k.nodes for k in p.kernels if k.nodes not in kept for n in k.nodes}
        near = [
            k
            for k in base.compact_kernels
            if all(owner[n] == k.nodes for n in k.nodes if n in owner)
        ]
        trials += [
            (selection.captured(p), 2, -i, base.compact_kernels),
            (selection.captured(p, ()), 0, -i, []),
        ]
        if len(near) < len(base.compact_kernels):
            trials.append((selection.captured(p, near), 1, -i, near))
    score, _, best, compact_used = max(trials, key=lambda t: t[:3])
    return score, -best, {k.nodes for k in compact_used}


def _regions(
    p: Partition,
    kept: set[frozenset[str]],
    base: _TwinFree,
    pos: Mapping[str, int],
    cap: int | None = None,
) -> tuple[Region, ...]:
    """The partition's groups the rules in use neither choose nor offer (within ``cap``
    compute ops), as regions."""
    return tuple(
        Region(tuple(sorted(k.nodes, key=pos.__getitem__)), k.bytes_saved, k.net_bytes)
        for k in p.kernels
        if k.nodes not in kept
        and k.nodes not in base.offered_already
        and (cap is None or k.compute_ops <= cap)
    )


# Rounds of the selectable ceiling's lazy constraints (below): each one solve.
SELECTABLE_ROUNDS = 12
SELECTABLE_SECONDS = 10.0  # per solve (past it: the best found, not proven)


def selectable_partition(
    graph: Graph,
    wider: Sequence[Kernel],
    rivals: Sequence[Kernel],
    now: Partition,
    floor: int,
    complete: bool,
    rows: list | None = None,
) -> Partition:
    """The most captured bytes among the partitions of ``wider`` that the selection stage
    could pick once rules offering their groups are added to the rules in use.

    The selection maximises net bytes over every candidate: the ``rivals`` (the rules in
    use) and the added ones. A partition P is picked only if no partition of the rivals
    and P's own groups saves more net bytes; in particular it saves at least ``floor``
    (what the rivals alone give). Lazy constraints: solve for the most captured bytes
    under the floors found so far; simulate the selection among the rivals and P's
    groups; if it picks Q with more net bytes, Q = R + S (R rivals' groups, S groups of
    P). Any subset of Q is a partition too, so for any P' the selection has R plus the
    groups of S that P' holds on offer: P' can be picked only if its groups outside S
    save at least R's net bytes. Add that floor, solve again. Each floor holds for every
    partition the selection can pick, so the result bounds the coverage any added rules
    reach (over a complete pool); once the simulated selection keeps P, P reaches it
    (``exact`` then also needs a complete pool and optimal solves). Past
    ``SELECTABLE_ROUNDS``, or once a solve finds nothing within its time limit (more
    floors only make it harder), the result is the last solve proven optimal: a bound no
    partition found reaches (status ``BOUND``); with none, it is empty and the caller
    falls back to the most captured by any partition, a bound too. ``rows``: given, it
    receives the floor and the conditions found (they hold for every pickable partition:
    ``twins.twin_ceiling`` starts from them)."""
    conditions: list[tuple[tuple[frozenset[str], ...], int]] = []
    if rows is not None:
        rows[:] = [floor, conditions]  # the floor is updated below
    prefer = [k.nodes for k in now.kernels]
    bound: Partition | None = None  # the last solve proven optimal: a bound, not reached
    for _ in range(SELECTABLE_ROUNDS):
        p = best_partition(
            graph,
            wider,
            complete=complete,
            prefer=prefer,
            net_floor=floor,
            conditions=conditions,
            seconds=SELECTABLE_SECONDS,
        )
        if not p.kernels:  # no solution within the time limit: more floors only add work
            break
        if p.status == "OPTIMAL":
            bound = p
        prefer = [k.nodes for k in p.kernels]  # the next solve starts from this one
        offered = {k.nodes: k for k in rivals}
        offered.update({k.nodes: k for k in p.kernels})
        q = displacing(graph, offered.values(), p)
        if q is None:
            return p
        floor = tightened(q, {k.nodes for k in p.kernels}, floor, conditions)
        if rows is not None:
            rows[0] = floor
    # not reached: the tightest figure proven to bound every pickable partition (a solve
    # proven optimal under floors that hold for all of them); else none (empty)
    if bound is not None:
        return replace(bound, status="BOUND")
    return replace(now, kernels=(), captured=0, status="BOUND")


def _captured(edges: coverage.FusableEdges, nodes: frozenset[str]) -> int:
    return sum(e.nbytes for e in edges.edges if e.producer in nodes and e.consumer in nodes)


def group_candidate(graph: Graph, nodes: Iterable[str]) -> Candidate:
    """A node set as a candidate of no rule, in topological order: what the cost model
    scores (``score_one``) to judge a group on its own."""
    pos = topo_position(graph)
    ordered = sorted(set(nodes), key=pos.__getitem__)
    return Candidate("", 0, tuple((n,) for n in ordered), (), ())


def find_regions(
    graph: Graph,
    groups: Sequence[Iterable[str]],
    target: Target,
    edges: coverage.FusableEdges | None = None,
    *,
    max_ops: int | None = None,
) -> tuple[Region, ...]:
    """Regions (node sets) that capture fusable edges the ``groups`` leave uncaptured.

    A region may swallow chosen groups (it then extends them); ``max_ops``: at most this
    many compute (non-view) nodes per region (no local search then).
    """
    kinds = coverage.node_kinds(graph)
    edges = coverage.fusable_edges(graph) if edges is None else edges
    pos = topo_position(graph)
    memo = GroupMemo(graph, target)
    parts = _Parts(groups)
    baseline = {members: i for i, members in parts.parts.items()}
    order = sorted(
        edges.edges, key=lambda e: (-e.nbytes, pos[e.producer], pos[e.consumer], e.tensor)
    )
    accepted: dict[frozenset[str], object] = {}
    for _ in range(2):  # a second pass picks up edges a later merge made possible
        changed = False
        for e in order:
            ids = {parts.of(n) for n in (e.producer, *e.via, e.consumer)}
            if parts.of(e.producer) == parts.of(e.consumer):
                continue
            union = frozenset().union(*(parts.parts[i] for i in ids))
            if max_ops is not None and sum(kinds[n] != coverage.VIEW for n in union) > max_ops:
                continue
            scored = score_one(graph, group_candidate(graph, union), None, target, memo=memo)
            if scored.verdict is not Verdict.FUSE:
                continue
            parts.merge(ids, union)
            accepted[union] = scored
            changed = True
        if not changed:
            break
    if max_ops is None:
        _move_nodes(graph, target, memo, edges, parts.parts, parts.part_of)
    regions = []
    for members in parts.parts.values():
        if len(members) < 2 or members in baseline:
            continue
        scored = accepted.get(members) or score_one(
            graph, group_candidate(graph, members), None, target, memo=memo
        )
        cost = scored.cost  # type: ignore[attr-defined]
        nodes = tuple(sorted(members, key=pos.__getitem__))
        regions.append(Region(nodes, cost.bytes_saved, cost.net_bytes))
    return tuple(sorted(regions, key=lambda r: pos[r.nodes[0]]))


class _Parts:
    """The greedy merge's partition: the chosen groups, then each other node met on its
    own (numbered as met), merged along fusable edges."""

    def __init__(self, groups: Sequence[Iterable[str]]) -> None:
        self.part_of: dict[str, int] = {}
        self.parts: dict[int, frozenset[str]] = {}
        for i, g in enumerate(groups):
            members = frozenset(g)
            self.parts[i] = members
            self.part_of.update(dict.fromkeys(members, i))
        self.fresh = len(self.parts)

    def of(self, node: str) -> int:
        """The node's part (a new part of its own the first time a free node is met)."""
        if node not in self.part_of:
            self.part_of[node] = self.fresh
            self.parts[self.fresh] = frozenset((node,))
            self.fresh += 1
        return self.part_of[node]

    def merge(self, ids: Iterable[int], union: frozenset[str]) -> None:
        """The parts ``ids`` become one (``union``), numbered as the lowest of them."""
        keep = min(ids)
        for i in ids:
            del self.parts[i]
        self.parts[keep] = union
        self.part_of.update(dict.fromkeys(union, keep))


def _components(graph: Graph, members: frozenset[str]) -> list[frozenset[str]]:
    """The weakly connected pieces of a node set (links: a tensor from one to another)."""
    left = set(members)
    out = []
    while left:
        seed = min(left)
        piece = {seed}
        stack = [seed]
        left.discard(seed)
        while stack:
            node = graph.node(stack.pop())
            near = [graph.tensors[t].producer for t in node.inputs if t]
            near += [c for t in node.outputs if t for c, _ in graph.tensors[t].consumers]
            for m in near:
                if m in left:
                    left.discard(m)
                    piece.add(m)
                    stack.append(m)
        out.append(frozenset(piece))
    return out


def _move_nodes(
    graph: Graph,
    target: Target,
    memo: GroupMemo,
    edges: coverage.FusableEdges,
    parts: dict[int, frozenset[str]],
    part_of: dict[str, int],
    rounds: int = 3,
) -> None:
    """Local search after the greedy merge: move one end of an uncaptured edge (with the
    views between) into the other end's part when that captures more fusable bytes and
    every part it touches stays a kernel the cost model accepts. The greedy order can
    bind a node to the wrong neighbour (a LayerNorm kept with the block before it while
    its three projections and the residual read its output); this undoes it."""
    pos = topo_position(graph)
    mover = _Mover(graph, target, memo, edges, parts, part_of)
    order = sorted(edges.edges, key=lambda e: (-e.nbytes, pos[e.producer], pos[e.consumer]))
    for _ in range(rounds):
        changed = False
        for e in order:
            src_of = part_of.get(e.producer)
            dst_of = part_of.get(e.consumer)
            if src_of is not None and src_of == dst_of:
                continue
            for node, frm, to in ((e.producer, src_of, dst_of), (e.consumer, dst_of, src_of)):
                if mover.moved(e, node, frm, to):
                    changed = True
                    break
        if not changed:
            break


class _Mover:
    """Moves of one edge end into the other end's part (``_move_nodes``), made in
    ``parts`` and ``part_of``; the pieces a move leaves get new part numbers."""

    def __init__(
        self,
        graph: Graph,
        target: Target,
        memo: GroupMemo,
        edges: coverage.FusableEdges,
        parts: dict[int, frozenset[str]],
        part_of: dict[str, int],
    ) -> None:
        self.graph, self.target, self.memo = graph, target, memo
        self.parts, self.part_of = parts, part_of
        self.incident: dict[str, list[coverage.Edge]] = {}
        for e in edges.edges:
            self.incident.setdefault(e.producer, []).append(e)
            self.incident.setdefault(e.consumer, []).append(e)
        self.fresh = max(parts, default=0) + 1

    def captured(self, members: frozenset[str]) -> int:
        seen = set()
        total = 0
        for n in members:
            for e in self.incident.get(n, ()):
                if id(e) not in seen and e.producer in members and e.consumer in members:
                    seen.add(id(e))
                    total += e.nbytes
        return total

    def ok(self, members: frozenset[str]) -> bool:
        if len(members) < 2:
            return True
        sc = score_one(
            self.graph, group_candidate(self.graph, members), None, self.target, memo=self.memo
        )
        return sc.verdict is Verdict.FUSE

    def moved(self, e: coverage.Edge, node: str, frm: int | None, to: int | None) -> bool:
        """Move ``node`` (with the edge's views) from part ``frm`` into part ``to``
        where that captures more and every part touched stays a kernel."""
        parts, part_of = self.parts, self.part_of
        moving = {node, *e.via}
        if to is None or any(part_of.get(v) not in (frm, to, None) for v in e.via):
            return False
        old_from = parts[frm] if frm is not None else frozenset({node})
        old_to = parts[to]
        new_to = old_to | moving
        rest = old_from - moving
        pieces = _components(self.graph, rest) if rest else []
        gain = self.captured(new_to) + sum(self.captured(p) for p in pieces)
        gain -= self.captured(old_to) + (self.captured(old_from) if frm is not None else 0)
        if gain <= 0 or not self.ok(new_to) or not all(self.ok(p) for p in pieces):
            return False
        if frm is not None:
            del parts[frm]
        parts[to] = new_to
        part_of.update(dict.fromkeys(new_to, to))
        for p in pieces:
            parts[self.fresh] = p
            part_of.update(dict.fromkeys(p, self.fresh))
            self.fresh += 1
        return True


_UNREACHABLE = frozenset(
    {Verdict.UB_OVERFLOW, Verdict.TOO_MANY_INPUTS, Verdict.NOT_CONVEX, Verdict.DYNAMIC_SHAPE}
)


def edge_ceiling(graph: Graph, edges: coverage.FusableEdges, target: Target) -> float:
    """The coverage no rule set can exceed under UB and convexity: the share of fusable
    bytes on edges whose smallest convex group (both ends, the views between, every node
    on a path from one to the other) fits the target's UB and fused-input limit."""
    from ruleengine.topology import graph_topology

    if not edges.edges:
        return 1.0
    topo = graph_topology(graph)
    kinds = coverage.node_kinds(graph)
    pred: dict[str, list[str]] = {n.name: [] for n in graph.nodes}
    for u, succs in topo.succ.items():
        for v in succs:
            pred[v].append(u)
    memo = GroupMemo(graph, target)
    reachable = 0
    for e in edges.edges:
        lo, hi = topo.pos[e.producer], topo.pos[e.consumer]
        down = _walk(e.producer, topo.succ, topo.pos, upto=hi)
        up = _walk(e.consumer, pred, topo.pos, downto=lo)
        hull = (down & up) | {e.producer, e.consumer, *e.via}
        if any(kinds[n] == coverage.OPAQUE for n in hull):
            continue
        scored = score_one(graph, group_candidate(graph, hull), None, target, memo=memo)
        if scored.verdict not in _UNREACHABLE:
            reachable += e.nbytes
    return reachable / edges.fusable_bytes if edges.fusable_bytes else 1.0


def _walk(
    start: str,
    step: Mapping[str, Iterable[str]],
    pos: Mapping[str, int],
    *,
    upto: int = 1 << 62,
    downto: int = -1,
) -> set[str]:
    """Nodes reachable from ``start`` by ``step`` within topological positions."""
    seen = {start}
    stack = [start]
    while stack:
        for v in step.get(stack.pop(), ()):
            if v not in seen and downto <= pos[v] <= upto:
                seen.add(v)
                stack.append(v)
    return seen


def core_region(
    graph: Graph,
    region: Region,
    units: Sequence,
    target: Target,
    edges: coverage.FusableEdges,
    memo: GroupMemo | None = None,
) -> Region | None:
    """The region without the epilogue chains at its ends, where that is still a kernel
    the cost model fuses and captures fusable bytes; else None.

    ``units``: the region's canonical units. A chain (``emit.chains``: plain elementwise,
    BatchNorm or view ops in a row) that starts at a root of the pattern or ends at a
    leaf is where another export's bundled rules take the neighbouring op (an activation
    fused with the projection before it, a residual Add or a cast with the norm after
    it): the core composes with those groups there, where the whole region overlaps them.
    """
    from ruleengine.suggest.emit import chains
    from ruleengine.suggest.model import Cluster, Instance

    probe = Cluster((), (Instance("", region, tuple(units), False, frozenset(), frozenset()),))
    readers: dict[int, int] = {}
    for u in units:
        for ref in u.inputs:
            readers[ref.source] = readers.get(ref.source, 0) + 1
    peeled: set[str] = set()
    for run in chains(probe):
        if not units[run[0]].inputs or not readers.get(run[-1]):
            peeled.update(n for k in run for n in units[k].nodes)
    core = frozenset(region.nodes) - peeled
    if not peeled or len(core) < 2 or not _captured(edges, core):
        return None
    if len(_components(graph, core)) != 1:
        return None
    memo = memo or GroupMemo(graph, target)
    scored = score_one(graph, group_candidate(graph, core), None, target, memo=memo)
    if scored.verdict is not Verdict.FUSE:
        return None
    pos = topo_position(graph)
    cost = scored.cost  # type: ignore[attr-defined]
    return Region(tuple(sorted(core, key=pos.__getitem__)), cost.bytes_saved, cost.net_bytes)


# Sub-forms of one non-viable match tried, largest first (each a trim of its two ends).
MAX_TRIMS = 4_000


def largest_viable_form(
    graph: Graph,
    nodes: frozenset[str],
    target: Target,
    edges: coverage.FusableEdges,
    skip: Iterable[frozenset[str]] = (),
    memo: GroupMemo | None = None,
) -> Region | None:
    """The largest trim of ``nodes`` (a drafted rule's match that is not viable: an
    intermediate read outside it, or not convex) that the cost model fuses: the nodes
    less those before one node and those after another (within ``nodes``), connected,
    capturing the most fusable bytes (ties: more nodes, then earlier in the graph).
    ``skip``: node sets not to return (the match itself, forms already drafted).

    A rule drafted from one occurrence of a structure matches its other occurrences
    (other layers, other exports); where one of those leaves and re-enters the match, or
    a residual sum inside it is read outside, the match is no kernel, and the form
    without the offending end is the one that still fuses there (bloom: the MLP with its
    residual sum, without the next layer's norm)."""
    pos = topo_position(graph)
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    pred: dict[str, list[str]] = {n: [] for n in nodes}
    for n in nodes:
        for t in graph.node(n).outputs:
            tensor = graph.tensors.get(t) if t else None
            for c, _ in tensor.consumers if tensor is not None else ():
                if c in nodes and c != n:
                    succ[n].append(c)
                    pred[c].append(n)
    after = {n: frozenset(_walk(n, succ, pos)) for n in nodes}
    before = {n: frozenset(_walk(n, pred, pos)) for n in nodes}
    skipped = set(skip)
    forms: set[frozenset[str]] = set()
    ends: list[frozenset[str]] = [frozenset(), *before.values()]
    tails: list[frozenset[str]] = [frozenset(), *after.values()]
    for head in ends:
        for tail in tails:
            form = nodes - head - tail
            if len(form) >= 2 and form not in skipped:
                forms.add(form)
    inner = [e for e in edges.edges if e.producer in nodes and e.consumer in nodes]
    captured = {
        f: sum(e.nbytes for e in inner if e.producer in f and e.consumer in f) for f in forms
    }
    ranked = sorted(forms, key=lambda f: (-captured[f], -len(f), sorted(pos[n] for n in f)))
    memo = memo or GroupMemo(graph, target)
    for form in ranked[:MAX_TRIMS]:
        if not captured[form]:
            break
        if len(_components(graph, form)) != 1:
            continue
        scored = score_one(graph, group_candidate(graph, form), None, target, memo=memo)
        if scored.verdict is not Verdict.FUSE:
            continue
        cost = scored.cost  # type: ignore[attr-defined]
        return Region(tuple(sorted(form, key=pos.__getitem__)), cost.bytes_saved, cost.net_bytes)
    return None
