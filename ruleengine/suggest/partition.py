"""The best partition of a graph into kernels the target accepts, for the most fusable bytes.

This is the region finder without any rule: what the coverage *ceiling* allowed by UB,
convexity and the fused-input limit is, and which groups reach it.

1. **Pool.** Every node set that is connected by fusable edges (with the views they pass
   through), convex, and that the cost model fuses (verdict ``fuse``, no rule: within the
   target's UB and ``max_fused_inputs``, saving HBM bytes net). Sets grow one neighbour at
   a time and are closed under convexity after each step (every node on a path between
   two members joins; a closure that takes in an opaque or compile-time node is no
   kernel), so each convex connected set is reached once, through convex sets only.
   A set is not grown further when the weights of its nodes alone exceed the target's
   ``max_fused_inputs`` (weights and constant tensors stay kernel inputs whatever joins:
   exact), when its working set overflows UB (the UB model's working set grows with the
   group), or when it holds ``max_ops`` compute ops. Groups given by the caller (the
   chosen groups of the rules in use, regions grown without a size cap) join the pool.
2. **Packing.** CP-SAT (``resolve.exact.solve_component``) picks disjoint groups of the
   pool with the most captured fusable bytes; ties go to the caller's preferred groups,
   then to more, smaller groups. Lazy cycle cuts keep the contracted graph acyclic.

``Partition.exact`` says whether the optimum is proven over every such group: the
solver proved optimality and no cap cut the pool short.
"""

from __future__ import annotations

import copy
import pickle
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ruleengine import coverage, procs
from ruleengine.cost.model import Target, Verdict
from ruleengine.cost.scoring import GroupMemo, constant_root, folded_bn_inputs, score_one
from ruleengine.graph.model import Graph
from ruleengine.match.model import Candidate
from ruleengine.resolve import DETERMINISTIC_WALL_FACTOR
from ruleengine.suggest.beside import may_fork

# Pool caps: compute (non-view) ops per group and sets scored per graph; past them, merge
# rounds grow the best partition's groups (bench/suggest.py reports which models' pools
# are complete: there the ceiling is proven).
MAX_POOL_OPS = 10
MAX_POOL_SETS = 12_000
MERGE_ROUNDS = 4
# Levels of the pool's growth with this many sets to score are scored by two processes.
AHEAD_FROM_SETS = 256
MAX_CYCLE_CUTS = 200
# Solves stop after SOLVE_SECONDS of CP-SAT's deterministic time (the same partition
# whatever the machine's load: suggestions are deterministic), or WALL_FACTOR times as
# many seconds of wall time: a far safety net (8 until this round: a 10 s solve given
# ~9% of a core on a loaded machine could reach that first).
SOLVE_SECONDS = 30.0
WALL_FACTOR = DETERMINISTIC_WALL_FACTOR
_INDEX_DTYPES = frozenset({"int32", "int64"})


@dataclass(frozen=True)
class Kernel:
    """One group of the pool: its nodes and what fusing it captures and saves."""

    nodes: frozenset[str]
    captured: int  # fusable-edge bytes inside the group
    bytes_saved: int
    net_bytes: int
    compute_ops: int


@dataclass(frozen=True)
class Partition:
    """Disjoint kernels with the most captured fusable bytes found over a pool."""

    kernels: tuple[Kernel, ...]  # in graph order (first node)
    captured: int
    status: str  # the solver's: OPTIMAL, FEASIBLE
    pool: int  # groups in the pool
    complete: bool  # no cap cut the pool short

    @property
    def exact(self) -> bool:
        return self.complete and self.status == "OPTIMAL"


@dataclass(frozen=True)
class Pool:
    kernels: tuple[Kernel, ...]
    complete: bool
    scored: int  # sets the cost model judged
    capped: str = ""  # which cap cut the pool short, if any


def _candidate(graph: Graph, nodes: Iterable[str], pos: Mapping[str, int]) -> Candidate:
    ordered = sorted(set(nodes), key=pos.__getitem__)
    return Candidate("", 0, tuple((n,) for n in ordered), (), ())


def _weights(graph: Graph, node_names: Iterable[str]) -> dict[str, frozenset[str]]:
    """Per node, the constant inputs that take a kernel input slot whatever the group
    (the cost model's rule: not a scalar, not an integer index/shape tensor)."""
    out = {}
    for name in node_names:
        found = set()
        skip = _foldable_bn_stats(graph, name)
        for t in graph.node(name).inputs:
            if t in skip:
                continue
            tensor = graph.tensors.get(t) if t else None
            if tensor is None or not (
                tensor.is_constant or tensor.is_initializer or tensor.const_foldable
            ):
                continue
            if (tensor.numel or 0) <= 1 or tensor.dtype in _INDEX_DTYPES:
                continue
            found.add(constant_root(graph, t))  # aliases of one constant: one slot
        out[name] = frozenset(found)
    return out


def _foldable_bn_stats(graph: Graph, name: str) -> frozenset[str]:
    """The constant inputs of an inference BatchNormalization that may fold into the Conv
    before it (``folded_bn_inputs``, as if that Conv were in the set): never counted
    here, so the counts stay at most what the cost model counts (a skip, never a
    verdict: a set they let through is scored)."""
    node = graph.node(name)
    if node.op_type != "BatchNormalization" or not node.inputs:
        return frozenset()
    x = graph.tensors.get(node.inputs[0])
    if x is None or x.producer is None:
        return frozenset()
    return folded_bn_inputs(graph, (graph.node(x.producer), node))


def _slot(graph: Graph, t: str) -> bool:
    """Whether input tensor ``t`` takes a kernel input slot (the cost model's rule)."""
    tensor = graph.tensors.get(t)
    if tensor is None:
        return True
    if tensor.is_constant or tensor.is_initializer or tensor.const_foldable:
        return (tensor.numel or 0) > 1 and tensor.dtype not in _INDEX_DTYPES
    return True


def _slot_key(graph: Graph, t: str) -> str:
    """What input ``t`` is counted as: the constant it aliases (``constant_root``)."""
    tensor = graph.tensors.get(t)
    if tensor is not None and (
        tensor.is_constant or tensor.is_initializer or tensor.const_foldable
    ):
        return constant_root(graph, t)
    return t


def kernel_pool(
    graph: Graph,
    target: Target,
    edges: coverage.FusableEdges,
    *,
    extra: Sequence[Iterable[str]] = (),
    max_ops: int = MAX_POOL_OPS,
    max_sets: int = MAX_POOL_SETS,
    memo: GroupMemo | None = None,
) -> Pool:
    """Every convex connected group the cost model fuses (see the module docstring)."""
    growth = _grown(graph, target, edges, max_ops, max_sets, memo)
    judge = growth.j.copy()  # the caller's groups and the merges join this pool only
    for group in extra:
        ids = sorted(judge.index[n] for n in group)
        bits = sum(1 << i for i in ids)
        if bits not in judge.kernels and len(ids) > 1:
            judge.judge(ids, bits)
    if not growth.complete:
        _merge_rounds(judge, edges)
    ordered = sorted(judge.kernels.items())
    return Pool(tuple(k for _, k in ordered), growth.complete, growth.scored_sets, growth.capped)


# per graph (by id, held while the graph lives): the last growth per (target, op cap)
_GROWTHS: dict[int, tuple[weakref.ref, dict[tuple[str, int], _Growth]]] = {}


def _grown(
    graph: Graph,
    target: Target,
    edges: coverage.FusableEdges,
    max_ops: int,
    max_sets: int,
    memo: GroupMemo | None,
) -> _Growth:
    """The pool's growth within ``max_sets``: a growth of the same graph, target, edges
    and op cap cut short by a smaller budget resumes where it stopped (the wider pool
    judges the first pool's sets again otherwise; growth is breadth first in a fixed
    order, so the first pool's sets are the wider one's first sets)."""
    held = _GROWTHS.get(id(graph))
    if held is None or held[0]() is not graph:
        gone = id(graph)
        # (the callback holds the dict itself: at exit the module's names are None)
        held = (weakref.ref(graph, lambda _, store=_GROWTHS: store.pop(gone, None)), {})
        _GROWTHS[gone] = held
    growths = held[1]
    key = (target.name, max_ops)
    growth = growths.get(key)
    if (
        growth is None
        or growth.max_sets > max_sets
        or growth.j.target is not target
        or growth.j.edges is not edges
        or (memo is not None and growth.j.memo is not memo)
    ):
        judge = _Judge(graph, target, edges, memo or GroupMemo(graph, target))
        growth = _Growth(judge, max_ops, max_sets)
    growth.run(max_sets)
    growths[key] = growth
    return growth


def _members(bits: int) -> list[int]:
    """The node indices of a bitset, lowest first."""
    out = []
    while bits:
        low = bits & -bits
        out.append(low.bit_length() - 1)
        bits ^= low
    return out


def _reach_bits(names: Sequence[str], index: dict[str, int], succ: Any) -> tuple[list, list]:
    """Descendants and ancestors of each node (itself included) as bitsets."""
    desc = [0] * len(names)
    for n in reversed(names):
        bits = 1 << index[n]
        for s in succ[n]:
            bits |= desc[index[s]]
        desc[index[n]] = bits
    preds: list[list[int]] = [[] for _ in names]
    for u in names:
        for v in succ[u]:
            preds[index[v]].append(index[u])
    anc = [0] * len(names)
    for i in range(len(names)):
        bits = 1 << i
        for p in preds[i]:
            bits |= anc[p]
        anc[i] = bits
    return desc, anc


class _Judge:
    """The graph as bitsets (node indices in topological order), and the kernels the
    cost model accepts among the sets judged so far (by bitset)."""

    def __init__(
        self, graph: Graph, target: Target, edges: coverage.FusableEdges, memo: GroupMemo
    ) -> None:
        from ruleengine.topology import graph_topology

        self.graph, self.target, self.memo, self.edges = graph, target, memo, edges
        self.topo = graph_topology(graph)
        names = self.names = self.topo.names
        index = self.index = {n: i for i, n in enumerate(names)}
        kinds = coverage.node_kinds(graph)
        folded = coverage.compile_time_nodes(graph)
        self.desc, self.anc = _reach_bits(names, index, self.topo.succ)
        self.allowed = 0
        for n in names:
            if n not in folded and kinds[n] != coverage.OPAQUE:
                self.allowed |= 1 << index[n]
        self._edges(edges)
        allowed_names = (names[i] for i in range(len(names)) if self.allowed >> i & 1)
        self.weights = _weights(graph, allowed_names)
        self.weighted = sum(1 << index[n] for n, w in self.weights.items() if w)
        self.compute = [kinds[n] != coverage.VIEW for n in names]
        self._slots(kinds)
        self.limit = target.max_fused_inputs
        self.kernels: dict[int, Kernel] = {}
        self.ahead: dict[int, tuple[Verdict, Kernel | None]] = {}  # scored, not yet judged

    def _edges(self, edges: coverage.FusableEdges) -> None:
        """Each node's allowed neighbours along fusable edges; each edge's end mask."""
        near: dict[int, set[int]] = {}
        self.edge_masks: dict[int, list[tuple[int, int]]] = {}
        for e in edges.edges:
            chain = [self.index[x] for x in (e.producer, *e.via, e.consumer)]
            for a in chain:
                near.setdefault(a, set()).update(b for b in chain if b != a)
            mask = (1 << chain[0]) | (1 << chain[-1])
            self.edge_masks.setdefault(chain[0], []).append((mask, e.nbytes))
        self.neighbours = {
            a: tuple(sorted(b for b in bs if self.allowed >> b & 1)) for a, bs in near.items()
        }

    def _slots(self, kinds: dict[str, str]) -> None:
        """Kernel inputs as the cost model counts them (data ports; weights unless
        scalar or integer), to skip scoring sets that are over the limit anyway."""
        graph = self.graph
        self.slots: list[tuple[str, ...]] = []
        self.made: list[tuple[str, ...]] = []
        for n in self.names:
            node = graph.node(n)
            ports = node.inputs[:1] if kinds[n] == coverage.VIEW else node.inputs
            # (aliases of one constant through Identity nodes: one slot, as the cost model
            # counts them; the Identity is compile-time, never in a group)
            skip = _foldable_bn_stats(graph, n)
            self.slots.append(
                tuple(_slot_key(graph, t) for t in ports if t and t not in skip and _slot(graph, t))
            )
            self.made.append(tuple(t for t in node.outputs if t))

    def copy(self) -> _Judge:
        """The same judge with a copy of the kernels found so far."""
        twin = copy.copy(self)
        twin.kernels = dict(self.kernels)
        return twin

    def closure(self, bits: int) -> int:
        """The convex closure of a set."""
        d, a = self.reach(_members(bits))
        return (d & a) | bits

    def reach(self, ids: Iterable[int]) -> tuple[int, int]:
        """The descendants and the ancestors of a set (its members included)."""
        d = a = 0
        for i in ids:
            d |= self.desc[i]
            a |= self.anc[i]
        return d, a

    def weights_of(self, bits: int) -> frozenset[str]:
        """The constant inputs a set's nodes take kernel input slots for."""
        names, weights = self.names, self.weights
        return frozenset().union(*(weights[names[k]] for k in _members(bits & self.weighted)))

    def captured(self, ids: list[int], bits: int) -> int:
        return sum(b for i in ids for mask, b in self.edge_masks.get(i, ()) if bits & mask == mask)

    def too_many_inputs(self, ids: list[int]) -> bool:
        produced = {t for i in ids for t in self.made[i]}
        return len({t for i in ids for t in self.slots[i] if t not in produced}) > self.limit

    def judge(self, ids: list[int], bits: int) -> Verdict:
        """Score the set; a kernel where the cost model fuses it and it captures bytes."""
        found = self.ahead.pop(bits, None)
        verdict, kernel = found if found is not None else self.score(ids, bits)
        if kernel is not None:
            self.kernels[bits] = kernel
        return verdict

    def score(self, ids: list[int], bits: int) -> tuple[Verdict, Kernel | None]:
        """The cost model's verdict on the set, and its kernel where it fuses it and it
        captures bytes."""
        nodes = [self.names[i] for i in ids]
        graph = self.graph
        candidate = _candidate(graph, nodes, self.topo.pos)
        scored = score_one(graph, candidate, None, self.target, memo=self.memo)
        got = self.captured(ids, bits)
        if scored.verdict is not Verdict.FUSE or got <= 0:
            return scored.verdict, None
        cost = scored.cost
        kernel = Kernel(
            frozenset(nodes),
            got,
            cost.bytes_saved,  # type: ignore[union-attr]
            cost.net_bytes,  # type: ignore[union-attr]
            sum(self.compute[i] for i in ids),
        )
        return scored.verdict, kernel

    def score_ahead(self, sets: Sequence[int]) -> None:
        """Score ``sets`` before they are judged, the second half in a forked child
        beside the first (the cost model is the pool's work; each verdict is a pure
        function of its set): ``judge`` takes them from ``ahead``."""
        if len(sets) < AHEAD_FROM_SETS or not may_fork():
            return
        half = len(sets) // 2
        child = procs.Forked(self._scored_bytes, sets[half:])
        for bits in sets[:half]:
            self.ahead[bits] = self.score(_members(bits), bits)
        self.ahead.update(pickle.loads(child.result()))

    def _scored_bytes(self, sets: Sequence[int]) -> bytes:
        scored = {bits: self.score(_members(bits), bits) for bits in sets}
        return pickle.dumps(scored, protocol=pickle.HIGHEST_PROTOCOL)


class _Growth:
    """Sets grown one allowed neighbour at a time (convex closures), breadth first,
    each judged once, within an op cap and a budget of sets judged; a growth the budget
    cut short resumes under a larger one exactly where it stopped."""

    def __init__(self, judge: _Judge, max_ops: int, max_sets: int) -> None:
        self.j, self.max_ops, self.max_sets = judge, max_ops, max_sets
        self.judged: set[int] = set()  # sets already scored (deferred sets come round again)
        self.overflow: set[int] = set()
        self.seen: set[int] = set()
        self.scored_sets = 0
        self.complete = True
        self.capped = ""
        self.deferred: list[int] = []  # sets at the op cap that could grow further
        self.op_cap: int | None = max_ops
        self.frontier = sorted(1 << i for i in judge.neighbours)  # the level being visited
        self.seen.update(self.frontier)
        self.at = 0  # the next set of the level to visit
        self.grown: list[int] = []  # the next level, so far
        self.stop: tuple[str, bool, str] | None = None  # where the budget stopped it

    def run(self, max_sets: int) -> None:
        """Grow until every set is judged or ``max_sets`` sets are."""
        self.max_sets = max_sets
        if self.stop is not None:  # resumed: undo what stopping said
            where, complete, capped = self.stop
            if where == "level" and self.scored_sets >= max_sets:
                return  # the same budget: it stops where it stopped
            self.stop, self.complete, self.capped = None, complete, capped
            if where == "level" and not self.next_level():
                return
        while self.frontier:
            self.score_ahead()
            while self.at < len(self.frontier):
                before = (self.complete, self.capped)
                if not self.visit(self.frontier[self.at], self.grown):
                    self.stop = ("set", *before)
                    return
                self.at += 1
            self.frontier, self.grown, self.at = sorted(self.grown), [], 0
            if self.scored_sets >= self.max_sets:
                self.stop = ("level", self.complete, self.capped)
                return
            if not self.next_level():
                return

    def score_ahead(self) -> None:
        """The sets the rest of this level judges within the budget, scored ahead."""
        j = self.j
        left = self.max_sets - self.scored_sets
        sets: list[int] = []
        for bits in self.frontier[self.at :]:
            if len(sets) >= left:
                break
            if bits in self.judged:
                continue
            ids = _members(bits)
            if len(ids) > 1 and not j.too_many_inputs(ids):
                sets.append(bits)
        j.score_ahead(sets)

    def next_level(self) -> bool:
        """Past a level within the budget: where none follows and sets wait at the op
        cap, they grow further, without it (every set within the cap is scored and the
        budget is not spent: if that ends within the budget, the pool is complete after
        all). False: nothing left to grow."""
        if not self.frontier and self.deferred and self.op_cap is not None:
            self.frontier, self.deferred, self.op_cap = sorted(self.deferred), [], None
            self.complete, self.capped = True, ""
        return bool(self.frontier)

    def visit(self, bits: int, grow: list[int]) -> bool:
        """Judge the set and add its growths to ``grow``; False where the budget is spent."""
        j = self.j
        ids = _members(bits)
        if len(ids) > 1 and bits not in self.judged:
            if self.scored_sets >= self.max_sets:
                self.complete, self.capped = False, f"{self.max_sets} sets"
                return False
            self.judged.add(bits)
            if not j.too_many_inputs(ids):
                self.scored_sets += 1
                if j.judge(ids, bits) is Verdict.UB_OVERFLOW:
                    self.overflow.add(bits)
                    return True
        elif bits in self.overflow:
            return True
        if self.op_cap is not None and sum(j.compute[i] for i in ids) >= self.op_cap:
            if any(not bits >> u & 1 for i in ids for u in j.neighbours.get(i, ())):
                self.complete, self.capped = False, f"{self.max_ops} ops"  # could grow further
                self.deferred.append(bits)
            return True
        self.grow(bits, ids, grow)
        return True

    def grow(self, bits: int, ids: list[int], grow: list[int]) -> None:
        """Each convex closure of the set and one neighbour, not seen, within the
        allowed nodes and the input limit's weights."""
        j = self.j
        below, above = j.reach(ids)  # once per set: each closure adds one node's reach
        for i in ids:
            for u in j.neighbours.get(i, ()):
                if bits >> u & 1:
                    continue
                bigger = ((below | j.desc[u]) & (above | j.anc[u])) | bits | 1 << u
                if bigger in self.seen:
                    continue
                self.seen.add(bigger)
                if bigger & ~j.allowed:
                    continue
                if len(j.weights_of(bigger)) > j.limit:
                    continue
                grow.append(bigger)


def _merge_rounds(judge: _Judge, edges: coverage.FusableEdges) -> None:
    """Merge rounds past the caps: the best partition so far; every uncaptured edge
    between two of its groups (or lone nodes) tries the convex closure of their union."""
    index = judge.index
    tried: set[int] = set()
    for _ in range(MERGE_ROUNDS):
        ordered = [k for _, k in sorted(judge.kernels.items())]
        part = best_partition(judge.graph, ordered)
        owner: dict[int, int] = {}
        for k in part.kernels:
            bits = sum(1 << index[n] for n in k.nodes)
            for n in k.nodes:
                owner[index[n]] = bits
        added = 0
        for e in sorted(edges.edges, key=lambda e: (-e.nbytes, e.producer, e.consumer, e.tensor)):
            a, b = index[e.producer], index[e.consumer]
            ends = owner.get(a, 1 << a) | owner.get(b, 1 << b)
            if owner.get(a) is not None and owner.get(a) == owner.get(b):
                continue
            bits = judge.closure(ends | sum(1 << index[v] for v in e.via))
            if bits in tried or bits in judge.kernels or bits & ~judge.allowed:
                continue
            tried.add(bits)
            ids = _members(bits)
            if not judge.too_many_inputs(ids) and judge.judge(ids, bits) is Verdict.FUSE:
                added += 1
        if not added:
            break


def best_partition(
    graph: Graph,
    pool: Sequence[Kernel],
    *,
    complete: bool = True,
    prefer: Iterable[Iterable[str]] = (),
    value: Callable[[Kernel], int] = lambda k: k.captured,
    net_floor: int | None = None,
    conditions: Sequence[tuple[Iterable[frozenset[str]], int]] = (),
    seconds: float = SOLVE_SECONDS,
) -> Partition:
    """Disjoint kernels of ``pool`` with the most total ``value`` (default: captured
    fusable bytes), acyclic once contracted; among equal values, the ``prefer`` groups,
    then more groups. ``net_floor``: only partitions whose kernels save at least that many
    net bytes in all (the selection stage's objective) count; ``conditions``: (groups,
    floor) pairs: the chosen kernels other than those groups save at least ``floor`` net
    bytes in all."""
    if net_floor is not None or conditions:
        at = {k.nodes: i for i, k in enumerate(pool)}
        floors = [((), net_floor or 0)]
        floors += [(tuple(at[g] for g in groups), f) for groups, f in conditions]
        solve = bounded_solve(seconds, floors=floors, floor_values=[k.net_bytes for k in pool])
    else:
        solve = bounded_solve(seconds)
    return cut_cycles(graph, pool, solve, complete=complete, value=value, prefer=prefer)


def bounded_solve(seconds: float, **floors: Any) -> Callable[..., Any]:
    """``solve_component`` on one worker, bounded by CP-SAT's deterministic time (the
    same answer whatever the load), with the caller's floor rows bound. A light presolve
    (``exact.LIGHT_PRESOLVE``): on a pool of thousands of overlapping groups over a few
    hundred nodes, CP-SAT's default presolve took ~90% of the solve; the proven optimum
    is the same."""
    from functools import partial

    from ruleengine.resolve.exact import solve_component

    return partial(
        solve_component,
        time_limit_s=WALL_FACTOR * seconds,
        deterministic_s=seconds,
        seed=0,
        workers=1,
        light_presolve=True,
        **floors,
    )


def cut_cycles(
    graph: Graph,
    pool: Sequence[Kernel],
    solve: Callable[..., Any],
    *,
    complete: bool,
    value: Callable[[Kernel], int] = lambda k: k.captured,
    prefer: Iterable[Iterable[str]] = (),
    unknown_is_empty: bool = False,
) -> Partition:
    """The kernels of ``pool`` that ``solve`` (``solve_component`` with the caller's time
    and floors bound) picks for the most ``value``, acyclic once contracted: a cycle found
    becomes a cut and the solve runs again; where the cuts do not converge, the groups of
    the last cycle are dropped. ``unknown_is_empty``: a solve that finds nothing ends in an
    empty UNKNOWN partition (a bound search must not read it as a proof)."""
    from ruleengine.cost.traffic import topo_position
    from ruleengine.topology import find_cycle

    pos = topo_position(graph)
    preferred = {frozenset(g) for g in prefer}
    scale = 8 * (len(graph.nodes) + 1)  # ties never outweigh one unit of value
    weights = [max(0, value(k)) * scale + 1 + 4 * (k.nodes in preferred) for k in pool]
    node_sets = [k.nodes for k in pool]
    hint = frozenset(i for i, k in enumerate(pool) if k.nodes in preferred)
    cuts: list[frozenset[int]] = []
    status = "OPTIMAL"
    chosen: list[int] = []
    for _ in range(MAX_CYCLE_CUTS):
        sol = solve(weights, node_sets, cuts, hint=hint)
        if unknown_is_empty and sol.status not in ("OPTIMAL", "FEASIBLE"):
            return Partition((), 0, "UNKNOWN", len(pool), complete)
        status = sol.status
        chosen = sorted(sol.selected)
        cycle = find_cycle(graph, [pool[i].nodes for i in chosen])
        if cycle is None:
            break
        cuts.append(frozenset(chosen[c] for c in cycle))
    else:  # cuts did not converge: drop the groups of the last cycle found
        bad = set(cuts[-1]) if cuts else set()
        chosen = [i for i in chosen if i not in bad]
        status = "FEASIBLE"
    kernels = sorted((pool[i] for i in chosen), key=lambda k: min(pos[n] for n in k.nodes))
    return Partition(tuple(kernels), sum(k.captured for k in kernels), status, len(pool), complete)


def displacing(graph: Graph, offered: Iterable[Kernel], p: Partition) -> Partition | None:
    """The selection stage simulated over ``offered`` (the most net bytes, as it picks):
    the partition it picks instead of ``p`` where that saves more net bytes, else None
    (it keeps ``p``). The check of the lazy-constraint loops that look for a partition
    the selection keeps (``regions.selectable_partition``, ``twins.structural_partition``)."""
    q = best_partition(graph, sorted(offered, key=lambda k: sorted(k.nodes)), value=net_of)
    if sum(k.net_bytes for k in q.kernels) <= sum(k.net_bytes for k in p.kernels):
        return None
    return q


def net_of(k: Kernel) -> int:
    return k.net_bytes


def tightened(
    q: Partition,
    mine: set[frozenset[str]],
    floor: int,
    conditions: list[tuple[tuple[frozenset[str], ...], int]],
) -> int:
    """The floor after the selection picked ``q`` = R + S over a partition P (S: the
    groups of P it holds, ``mine``; R: the others): any partition's groups outside S
    must save at least R's net bytes to be picked. With S empty that is a floor for
    every partition (returned raised); else a condition on holding S (appended)."""
    kept = tuple(sorted((k.nodes for k in q.kernels if k.nodes in mine), key=sorted))
    net_r = sum(k.net_bytes for k in q.kernels if k.nodes not in mine)
    if not kept:
        return max(floor, net_r)
    conditions.append((kept, net_r))
    return floor
