"""Conflict resolution: pick non-overlapping candidates that keep the graph acyclic.

``resolve(graph, scored, solver="exact")`` solves each independent component (candidates
linked by shared nodes, or by a cycle they would form together) on its own: by
enumeration when it is tiny, by interval scheduling when every candidate is a contiguous
run, by dynamic programming over cuts when it is a long chain of layers (``segments.py``),
else with CP-SAT (``exact.py``). After each round the chosen
groups are contracted and checked for a cycle; a cycle adds a no-good cut, merges the
components it touches, and that component is solved again, until none is left.
``solver="greedy"`` is the graph-autofusion reference: by net benefit, descending.

The exact solver stops on ``time_limit_s`` of wall time (``fuse --time-limit``), or, given
``deterministic_s`` (or within ``deterministic_budget``), on that much of CP-SAT's
deterministic time summed over the resolve's solves, the wall limit then only a far
safety net: the same answer whatever the machine's load (``suggest``'s measurements).
"""

from __future__ import annotations

import bisect
import pickle
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cached_property
from itertools import chain, compress, repeat
from operator import attrgetter, gt, is_, is_not
from typing import Any

from ruleengine.cost.model import ScoredCandidate, Verdict
from ruleengine.cost.scored import RecordView, ScoredRecords
from ruleengine.cost.traffic import topo_position
from ruleengine.errors import UsageError
from ruleengine.graph.model import Graph
from ruleengine.resolve.greedy import greedy_at, select_greedy
from ruleengine.resolve.lost import LostCandidates
from ruleengine.resolve.model import Resolution
from ruleengine.resolve.segments import Table, plan_chain, solve_chain
from ruleengine.resolve.segments import spans as segment_spans
from ruleengine.topology import find_cycle, graph_topology

SOLVERS = ("exact", "greedy")
# Components with at most this many candidates are solved by exhaustive enumeration
# (at most 2**6 subsets, exact and far cheaper than building a CP-SAT model); larger
# ones go to CP-SAT. Tests set it to 0 to send every component to CP-SAT.
ENUMERATE_UP_TO = 6
# Components this large whose candidates are contiguous runs of one node order (long
# elementwise chains: ~14k overlapping candidates on a 2,000-node chain) are solved by
# weighted interval scheduling, exact and O(n log n); CP-SAT needed 8 s there.
INTERVALS_FROM = 500
# Components this large are cut into segments where few candidates cross the
# topological order (``segments.py``: deep stacks whose layers overlap, exact and linear in
# the number of layers); one with no usable cut goes to CP-SAT whole.
CHAIN_FROM = 1000
# A chain plan whose largest segment keeps over 9/10 of the members, and at least this
# many, splits nothing: every pair of boundary states would solve that segment again,
# itself chained again (nested: exponential; bart-tiny with drafted rules: 1,445
# candidates, > 20 min, against 0.2 s for CP-SAT on the whole component).
UNSPLIT_FROM = 1000

# With a deterministic budget, the wall limit is at least this many times the budget: a
# far safety net (CP-SAT spends about a wall second per deterministic second on an idle
# core; a process given a small share of a loaded machine gets far less).
DETERMINISTIC_WALL_FACTOR = 40

__all__ = [
    "DETERMINISTIC_WALL_FACTOR",
    "SOLVERS",
    "LostCandidates",
    "Resolution",
    "deterministic_budget",
    "resolve",
]

_BUDGET: ContextVar[float | None] = ContextVar("deterministic_budget", default=None)


@contextmanager
def deterministic_budget(seconds: float) -> Iterator[None]:
    """Within it, every ``resolve`` not given its own ``deterministic_s`` stops its
    solves on ``seconds`` of CP-SAT's deterministic time: for callers that reach the
    selection stage through ``pipeline.analyze`` (``suggest``), whose answers must not
    depend on the machine's load; ``fuse`` keeps its wall ``--time-limit``."""
    token = _BUDGET.set(seconds)
    try:
        yield
    finally:
        _BUDGET.reset(token)


def _net(sc: ScoredCandidate) -> int:
    return sc.cost.net_bytes if sc.cost else 0


def _positions(order: Mapping[str, int] | range, nodes: Iterable[Any]) -> Iterable[int]:
    """The nodes' positions: looked up by name, or the nodes themselves when they are
    positions already (``order`` is ``range(len(graph.nodes))``)."""
    return nodes if isinstance(order, range) else map(order.__getitem__, nodes)


def _indexed(graph: Graph) -> bool:
    """Whether every node's topological index is its position in ``graph.nodes`` (the
    loader's order): then node positions stand for node names in the solvers."""
    return all(n.index == i for i, n in enumerate(graph.nodes))


def _order_chosen(graph: Graph, chosen: Sequence[ScoredCandidate]) -> tuple[ScoredCandidate, ...]:
    pos = graph_topology(graph).pos
    return tuple(
        sorted(chosen, key=lambda s: (min(pos[n] for n in s.candidate.nodes), s.candidate.key))
    )


def resolve(
    graph: Graph,
    scored: Sequence[ScoredCandidate],
    *,
    solver: str = "exact",
    time_limit_s: float = 30.0,
    seed: int = 0,
    jobs: int = 1,
    deterministic_s: float | None = None,
) -> Resolution:
    """Choose the fused groups among the viable (``verdict == FUSE``) candidates.

    ``jobs`` > 1: the greedy choice (CP-SAT's hint) is made in a forked child while the
    components are formed and solved here (the same choice). ``deterministic_s`` (default:
    the enclosing ``deterministic_budget``'s, else none): CP-SAT's solves stop once they
    have spent that much deterministic time in all, and the wall limit becomes at least
    ``DETERMINISTIC_WALL_FACTOR`` times it."""
    from ruleengine.runtime import paused_gc

    if deterministic_s is None:
        deterministic_s = _BUDGET.get()
    if deterministic_s is not None:
        time_limit_s = max(time_limit_s, DETERMINISTIC_WALL_FACTOR * deterministic_s)
    with paused_gc():
        return _resolve(graph, scored, solver, time_limit_s, seed, jobs, deterministic_s)


def _resolve(
    graph: Graph,
    scored: Sequence[ScoredCandidate],
    solver: str,
    time_limit_s: float,
    seed: int,
    jobs: int = 1,
    deterministic_s: float | None = None,
) -> Resolution:
    if solver not in SOLVERS:
        raise UsageError(f"unknown solver {solver!r}; choose one of {', '.join(SOLVERS)}")
    start = time.perf_counter()
    viable: Sequence[ScoredCandidate]
    nets: list[int] | None = None
    sets: list[tuple[int, ...]] | None = None
    if isinstance(scored, ScoredRecords) and solver != "greedy" and _indexed(graph):
        # the cost stage's arrays: verdicts, costs, net bytes; each candidate's nodes as
        # node positions (a twin's from its source's), a record made only for what is
        # chosen (or read)
        at = scored.viable()
        viable = scored.view(at)
        nets = scored.nets[at].tolist()
        sets = scored.node_positions(at, topo_position(graph))
    elif isinstance(scored, ScoredRecords):
        viable = scored.view(scored.viable())
    else:
        # the verdicts compared by C-level maps (10^5-10^6 records on a stack), the few
        # viable ones then checked for a cost
        fuse = list(
            compress(scored, map(is_, map(attrgetter("verdict"), scored), repeat(Verdict.FUSE)))
        )
        viable = list(compress(fuse, map(is_not, map(attrgetter("cost"), fuse), repeat(None))))
    if solver == "greedy":
        chosen = _order_chosen(graph, select_greedy(graph, viable))
        return Resolution(
            "greedy",
            "GREEDY",
            chosen,
            LostCandidates(graph, viable, chosen, ""),
            sum(_net(s) for s in chosen),
            None,
            time.perf_counter() - start,
            0,
        )
    greedy = _Greedy(graph, viable, jobs)
    chosen, status, bound, components = _solve_exact(
        graph, viable, greedy, time_limit_s, seed, nets, sets, deterministic_s
    )
    objective = sum(_net(s) for s in chosen)
    if status != "OPTIMAL":  # an optimum is never below greedy's choice, which is feasible
        greedy_objective = sum(_net(s) for s in greedy.chosen)
        if objective < greedy_objective:  # the time limit cut a search short
            chosen, objective, status = list(greedy.chosen), greedy_objective, "FEASIBLE"
    ordered = _order_chosen(graph, chosen)
    note = "within the time limit" if status != "OPTIMAL" else ""
    return Resolution(
        "exact",
        status,
        ordered,
        LostCandidates(graph, viable, ordered, note),
        objective,
        max(bound, objective),
        time.perf_counter() - start,
        components,
    )


class _Greedy:
    """The greedy choice, made on first use: the exact solver needs it only as CP-SAT's
    hint for a component solved whole and as the floor of an answer the time limit cut
    short (a component cut into segments, an enumerated or interval one do without it)."""

    def __init__(self, graph: Graph, viable: Sequence[ScoredCandidate], jobs: int = 1) -> None:
        from ruleengine.graph.forked import Forked, forkable

        self.graph, self.viable = graph, viable
        # On the cost stage's records (``RecordView``) with a second core, the choice
        # (~0.55 s CPU at 2048 layers) is made in a forked child from the start, sent
        # back as indices; a child never asked for is killed with this object.
        self._child = (
            Forked(_greedy_bytes, graph, viable)
            if isinstance(viable, RecordView) and forkable(jobs)
            else None
        )

    @cached_property
    def at(self) -> list[int]:
        """``greedy_at``'s choice, as indices of ``viable`` (a ``RecordView``)."""
        child, self._child = self._child, None
        if child is not None:
            try:
                return pickle.loads(child.result())
            except Exception:  # noqa: BLE001 - any fault of the child: chosen here
                pass
        viable = self.viable
        assert isinstance(viable, RecordView)
        return greedy_at(self.graph, viable)

    @cached_property
    def chosen(self) -> list[ScoredCandidate]:
        if isinstance(self.viable, RecordView):  # ``select_greedy`` on the same choice
            return list(map(self.viable.__getitem__, self.at))
        return select_greedy(self.graph, self.viable)

    @cached_property
    def ids(self) -> frozenset[int]:
        return frozenset(map(id, self.chosen))

    @cached_property
    def positions(self) -> frozenset[int]:
        """The chosen's positions in the cost stage's records (``RecordView``)."""
        viable = self.viable
        assert isinstance(viable, RecordView)
        return frozenset(viable.positions[self.at].tolist())

    def hint(self, cands: Sequence[ScoredCandidate], members: Sequence[int]) -> tuple[int, ...]:
        """Which of ``members`` (indices of ``cands``) the greedy choice takes."""
        if isinstance(cands, RecordView) and isinstance(self.viable, RecordView):
            taken = self.positions
            at = cands.positions[list(members)].tolist()
            return tuple(k for k, p in enumerate(at) if p in taken)
        ids = self.ids
        return tuple(k for k, g in enumerate(members) if id(cands[g]) in ids)


def _greedy_bytes(graph: Graph, viable: RecordView) -> bytes:
    """The forked child's work: ``greedy_at``'s indices, pickled."""
    return pickle.dumps(greedy_at(graph, viable), protocol=pickle.HIGHEST_PROTOCOL)


def _as_intervals(members: Sequence[int], span: tuple) -> list[tuple[int, int, int]] | None:
    """(first, last, member) node positions when every candidate covers a contiguous run
    of the component's nodes in topological order (``span``: ``_Components.spans``),
    else None. Then two candidates share a node exactly when their ranges overlap, so set
    packing is interval scheduling."""
    import numpy as np

    lo, hi, sizes, where = span
    covered = np.searchsorted(where, hi, "right") - np.searchsorted(where, lo, "left")
    if not (covered == sizes).all():
        return None
    return list(zip(lo.tolist(), hi.tolist(), members, strict=True))


def best_intervals(intervals: Sequence[tuple[int, int, int]], weights: list[int]) -> frozenset[int]:
    """Weighted interval scheduling: the heaviest set of non-overlapping ranges (exact).

    Ties keep the earlier-ending, lower-index choice, so the answer is deterministic.
    """
    ranked = sorted(intervals, key=lambda t: (t[1], t[0], t[2]))
    ends = [hi for _, hi, _ in ranked]
    best = [0] * (len(ranked) + 1)  # best[k]: optimum over the first k ranges
    take = [False] * len(ranked)
    prev = [0] * len(ranked)
    for k, (lo, _hi, i) in enumerate(ranked):
        prev[k] = bisect.bisect_left(ends, lo, 0, k)  # ranges ending before lo
        with_it = weights[i] + best[prev[k]]
        take[k] = with_it > best[k]
        best[k + 1] = with_it if take[k] else best[k]
    chosen = []
    k = len(ranked)
    while k > 0:
        if take[k - 1]:
            chosen.append(ranked[k - 1][2])
            k = prev[k - 1]
        else:
            k -= 1
    return frozenset(chosen)


def _enumerate(
    members: tuple[int, ...],
    sets: Mapping[int, frozenset[str]] | Sequence[frozenset[str]],
    weights: list[int],
    cuts: list[frozenset[int]],
) -> frozenset[int]:
    """The best subset of a small component: disjoint node sets, no cut fully chosen."""
    best: frozenset[int] = frozenset()
    best_w = 0
    for mask in range(1, 1 << len(members)):
        pick = [members[k] for k in range(len(members)) if mask >> k & 1]
        total = sum(weights[i] for i in pick)
        if total <= best_w:
            continue
        nodes = [n for i in pick for n in sets[i]]
        if len(nodes) != len(set(nodes)):
            continue
        chosen = frozenset(pick)
        if any(cut <= chosen for cut in cuts):
            continue
        best, best_w = chosen, total
    return best


class _Components:
    """Union-find over candidate indices."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))
        self.first = None  # numpy arrays made by link_overlapping(sets, position)

    def spans(self, members: Sequence[int], sets: Sequence[Collection[str]], position):
        """Per member of a component (numpy arrays): its first and last node position,
        its node count, and the sorted positions of the component's nodes."""
        import numpy as np

        if self.first is None:  # (link_pairs made the components): from the sets
            return segment_spans(members, sets, position)
        at = np.asarray(members, np.int64)
        roots = np.unique(self.root[at])
        a = np.searchsorted(self.node_roots, roots, "left")
        b = np.searchsorted(self.node_roots, roots, "right")
        where = np.sort(np.concatenate([self.node_where[i:j] for i, j in zip(a, b, strict=True)]))
        return self.first[at], self.last[at], self.sizes[at], where

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, i: int, j: int) -> None:
        a, b = self.find(i), self.find(j)
        if a != b:
            self.parent[max(a, b)] = min(a, b)

    def link_overlapping(
        self, sets: Sequence[Collection[str]], position: Mapping[str, int] | None = None
    ) -> None:
        """Union every two members sharing an element: the connected components of the
        member-element graph, by min-label hooking and pointer jumping over numpy arrays
        (a few passes over the ~10^6 (member, element) pairs of a 2048-layer stack, not a
        Python step per pair). Every member then points at its component's smallest
        member, the root ``union`` keeps. With ``position`` (a node's topological
        index) it also keeps what ``spans`` reads."""
        n = len(sets)
        if n < 2:
            return
        import numpy as np

        count = sum(map(len, sets))
        if position is not None:
            # elements numbered by node position (one lookup per pair, no dict of names):
            # which number an element gets changes no root (a member's is its least member)
            at_all = np.fromiter(_positions(position, chain.from_iterable(sets)), np.int32, count)
            used = np.zeros(int(at_all.max()) + 1, dtype=bool)
            used[at_all] = True
            where = np.flatnonzero(used)  # the element numbered n + k is at where[k]
            n_elements = len(where)
        else:
            elements = dict.fromkeys(chain.from_iterable(sets))
            index = dict(zip(elements, range(n, n + len(elements)), strict=True))
            n_elements = len(elements)
        dtype = np.int32 if n + n_elements < 1 << 31 else np.int64
        sizes = np.fromiter(map(len, sets), dtype, n)
        u = np.repeat(np.arange(n, dtype=dtype), sizes)
        if position is not None:
            v = (np.cumsum(used, dtype=np.int64) - 1 + n).astype(dtype)[at_all]
        else:
            v = np.fromiter(map(index.__getitem__, chain.from_iterable(sets)), dtype, count)
        parent = np.arange(n + n_elements, dtype=dtype)
        for _ in range(64):
            pu, pv = parent[u], parent[v]
            cross = pu != pv
            if not cross.any():
                break
            pu, pv = pu[cross], pv[cross]
            # every vertex points at a root: hook each larger root under the smallest
            # root next to it (pointers only decrease, so no cycle), then jump to roots
            np.minimum.at(parent, np.maximum(pu, pv), np.minimum(pu, pv))
            while True:
                up = parent[parent]
                if np.array_equal(up, parent):
                    break
                parent = up
            u, v = u[cross], v[cross]
        if cross.any():  # not settled in 64 rounds (never seen): one Python pass
            self._link_pairs(sets)
            return
        self.parent = parent[:n].tolist()  # a member's root is its component's least member
        if position is not None:
            # each member's first and last node position and each component's node
            # positions (by its root here) for `spans`: numpy passes, no Python step per pair
            at = at_all
            starts = np.r_[0, np.cumsum(sizes)[:-1]]
            self.first = np.minimum.reduceat(at, starts)
            self.last = np.maximum.reduceat(at, starts)
            self.sizes = sizes
            self.root = parent[:n]
            by_root = np.argsort(parent[n:], kind="stable")
            roots = parent[n:][by_root]
            self.node_roots = roots
            self.node_where = where[by_root]

    def _link_pairs(self, sets: Sequence[Collection[str]]) -> None:
        """``link_overlapping`` by a union per (member, element) pair."""
        first: dict[str, int] = {}
        for i, nodes in enumerate(sets):
            for e in nodes:
                j = first.setdefault(e, i)
                if j != i:
                    self.union(i, j)

    def groups(self) -> dict[int, list[int]]:
        """Members by root (the least member), roots and members in increasing order."""
        import numpy as np

        parent = np.array(self.parent, dtype=np.int64)
        while True:
            up = parent[parent]
            if np.array_equal(up, parent):
                break
            parent = up
        order = np.argsort(parent, kind="stable")
        roots = parent[order]
        cuts = np.flatnonzero(roots[1:] != roots[:-1]) + 1
        if not len(order):
            return {}
        starts = np.r_[0, cuts]
        return {
            int(roots[a]): members.tolist()
            for a, members in zip(starts, np.split(order, cuts), strict=True)
        }


def _solve_exact(
    graph: Graph,
    viable: Sequence[ScoredCandidate],
    greedy: _Greedy,
    time_limit_s: float,
    seed: int,
    nets: list[int] | None = None,
    node_tuples: list[tuple[int, ...]] | None = None,
    deterministic_s: float | None = None,
) -> tuple[list[ScoredCandidate], str, int, int]:
    """``nets`` and ``node_tuples``: the viable records' net bytes and nodes as node
    positions, when known without reading the records (``ScoredRecords``): the solvers
    then number nodes by position (the names are read back for the cycle check).
    ``deterministic_s``: the CP-SAT solves' deterministic time in all (each solve gets
    what is left, in the order they run, which does not depend on the load)."""
    deadline = time.perf_counter() + time_limit_s
    spent = [0.0]  # deterministic time of the solves so far

    def out_of_budget() -> bool:
        if deterministic_s is not None and spent[0] >= deterministic_s:
            return True
        return time.perf_counter() > deadline

    # Only candidates that save something can be worth choosing.
    # (viable records all have a cost; C-level maps: 10^5 of them on a 2048-layer stack)
    if nets is None:
        nets = list(map(attrgetter("cost.net_bytes"), viable))
    saves = list(map(gt, nets, repeat(0)))
    weights = list(compress(nets, saves))
    # each candidate's nodes as its tuple (a node set per record is ~1 KB: 10^5 viable
    # records on a 2048-layer stack); sets are made where set semantics matter
    cands: Sequence[ScoredCandidate]
    sets: list[tuple[str, ...]] | list[tuple[int, ...]]
    order: Mapping[str, int] | range
    if isinstance(viable, RecordView) and node_tuples is not None:
        cands = viable.view(list(compress(range(len(viable)), saves)))
        sets = list(compress(node_tuples, saves))
        order = range(len(graph.nodes))  # a node's position is its number
        names = graph_topology(graph).names
    else:
        cands = list(compress(viable, saves))
        sets = list(map(attrgetter("candidate.nodes"), cands))
        order = {n.name: n.index for n in graph.nodes}  # node -> topological index
        names = None
    comps = _Components(len(cands))
    comps.link_overlapping(sets, order)  # type: ignore[arg-type]
    cuts: list[frozenset[int]] = []
    solved: dict[tuple[int, ...], tuple[frozenset[int], str, int]] = {}
    memo: dict[tuple, tuple[frozenset[int], str, int]] = {}
    tables: dict[tuple, Table] = {}  # chain segments by canonical form

    def solve(members: tuple[int, ...]) -> tuple[frozenset[int], str, int]:
        if cuts:
            member_set = set(members)
            local_cuts = [cut for cut in cuts if cut <= member_set]
        else:
            local_cuts = []
        return solve_with(members, local_cuts)

    def solve_parts(
        members: tuple[int, ...], nogoods: tuple[frozenset[int], ...]
    ) -> tuple[frozenset[int], str, int]:
        """A segment's interior (``segments``): its own components, each solved alone."""
        parts = _Components(len(members))
        parts._link_pairs([sets[g] for g in members])
        at = {g: k for k, g in enumerate(members)}
        for cut in nogoods:
            ks = sorted(at[g] for g in cut)
            for k in ks[1:]:
                parts.union(ks[0], k)
        chosen: set[int] = set()
        statuses, bound = set(), 0
        for group in parts.groups().values():
            part = tuple(members[k] for k in group)
            part_set = set(part)
            got, status, top = solve_with(part, [c for c in nogoods if c <= part_set], True)
            chosen |= got
            statuses.add(status)
            bound += top
        return frozenset(chosen), "OPTIMAL" if statuses <= {"OPTIMAL"} else "FEASIBLE", bound

    def solve_with(
        members: tuple[int, ...], local_cuts: Sequence[frozenset[int]], part: bool = False
    ) -> tuple[frozenset[int], str, int]:
        """``part``: a part of a component (not one ``comps`` knows)."""
        if len(members) == 1 and not local_cuts:  # a lone group with net > 0 is taken
            i = members[0]
            return frozenset({i}), "OPTIMAL", weights[i]
        if len(members) <= ENUMERATE_UP_TO:
            small = {i: frozenset(sets[i]) for i in members}
            best = _enumerate(members, small, weights, local_cuts)
            return best, "OPTIMAL", sum(weights[i] for i in best)
        if len(members) >= min(INTERVALS_FROM, CHAIN_FROM):
            if part:
                span = segment_spans(members, sets, order)
            else:
                span = comps.spans(members, sets, order)
            if len(members) >= INTERVALS_FROM and not local_cuts:
                intervals = _as_intervals(members, span)
                if intervals is not None:
                    best = best_intervals(intervals, weights)
                    return best, "OPTIMAL", sum(weights[i] for i in best)
            plan = (
                plan_chain(members, sets, span, local_cuts) if len(members) >= CHAIN_FROM else None
            )
            big = max(map(len, plan.interiors)) if plan is not None else 0
            if plan is not None and (big < UNSPLIT_FROM or 10 * big <= 9 * len(members)):
                return solve_chain(plan, sets, weights, order, local_cuts, solve_parts, tables)
        # The component in canonical form: nodes numbered by first use (members in
        # order, each candidate's nodes in rule op order). CP-SAT sees only this form, so
        # its answer never depends on node names or string hashing, and the identical
        # components of a stack of identical layers are solved once.
        local = {g: k for k, g in enumerate(members)}
        node_lists = [sets[g] for g in members]
        first_use = dict.fromkeys(chain.from_iterable(node_lists))
        label = dict(zip(first_use, range(len(first_use)), strict=True))
        local_sets = tuple(tuple(map(label.__getitem__, ns)) for ns in node_lists)
        local_weights = tuple(weights[g] for g in members)
        local_cut_sets = tuple(sorted(tuple(sorted(local[g] for g in cut)) for cut in local_cuts))
        # the greedy choice as CP-SAT's hint, for a whole component (a segment's interior
        # part goes without: greedy's choice there may clash with the segment's boundary)
        hint = greedy.hint(cands, members) if not part else ()
        key = (local_weights, local_sets, local_cut_sets, hint)
        hit = memo.get(key)
        if hit is None:
            # OR-Tools (and the pandas it imports, ~0.3 s) only when a component needs it
            from ruleengine.resolve.exact import solve_component

            sol = solve_component(
                local_weights,
                [frozenset(x) for x in local_sets],
                [frozenset(c) for c in local_cut_sets],
                hint=frozenset(hint),
                time_limit_s=deadline - time.perf_counter(),
                seed=seed,
                deterministic_s=None if deterministic_s is None else deterministic_s - spent[0],
            )
            spent[0] += sol.deterministic
            hit = (sol.selected, sol.status, sol.bound)
            if sol.status == "OPTIMAL":  # a time-limited answer is not reused
                memo[key] = hit
        return frozenset(members[k] for k in hit[0]), hit[1], hit[2]

    while True:
        current: dict[tuple[int, ...], tuple[frozenset[int], str, int]] = {}
        for members in comps.groups().values():
            key = tuple(members)
            current[key] = solved[key] if key in solved else solve(key)
        solved = current
        selected = sorted(i for sol in solved.values() for i in sol[0])
        if names is None:
            cycle = find_cycle(graph, [frozenset(sets[i]) for i in selected])  # type: ignore[misc]
        else:
            groups = [frozenset(map(names.__getitem__, sets[i])) for i in selected]
            cycle = find_cycle(graph, groups)
        if cycle is None or out_of_budget():
            break
        cut = frozenset(selected[k] for k in cycle)
        cuts.append(cut)
        members = sorted(cut)
        for i in members[1:]:
            comps.union(members[0], i)
        for key in [k for k in solved if set(k) & cut]:
            del solved[key]
    statuses = {sol[1] for sol in solved.values()}
    status = "OPTIMAL" if statuses <= {"OPTIMAL"} else "FEASIBLE"
    if cycle is not None:  # out of time with a cycle left: fall back on greedy
        bound = sum(sol[2] for sol in solved.values())
        return list(greedy.chosen), "FEASIBLE", bound, len(solved)
    bound = sum(sol[2] for sol in solved.values())
    return [cands[i] for i in selected], status, bound, len(solved)
