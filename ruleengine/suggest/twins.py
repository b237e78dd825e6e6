"""Twins: node sets no rule can tell apart, and partitions their rules do not displace.

``regions.selectable_partition`` bounds the coverage added rules can reach assuming a rule
can offer exactly one partition's groups. A rule offers every node set its pattern
matches: where a group recurs with nothing a rule can see to tell the occurrences apart
(the blocks of one stage of a CNN: same ops, attributes, wiring, shapes, constants), a rule
for one occurrence matches all of them, and the net-bytes selection may tile the model
with the occurrences shifted by a block, capturing fewer fusable bytes.

**Twins.** Two node sets are twins when their nodes correspond one to one (canonical
order, plain ONNX ops) with equal op type, domain and attributes; every input read at the
same port from the same corresponding node and output, or, from outside, from a tensor
alike in everything a rule or the cost model sees (dtype, shape, initializer, constant,
graph input, foldable, small constant values, the producing op's type, and which outside
inputs are one tensor); every output alike (dtype, shape, graph output, how many readers
inside and outside, and their op types). A rule's pattern sees op types and classes,
params, input sources (``from_op``, ``const``, ``graph_input``, ``same_as``), input and
output counts, fan-out, and its constraints see dtypes, shapes, sizes and consumers: all
equal for twins, so whatever rule matches one matches the other, and the cost model
scores them alike. Stricter than needed is safe: a twin missed only leaves a displacement
unseen here, which the pruning (real rules, real selection) still measures.

**The search** (a drafting option, not a bound): solve for the most captured bytes;
simulate the selection among the rules in use's candidates and every twin of the
partition's groups; where it picks Q with more net bytes through twins of the
partition's groups at other places (shifted), those structures are left out and the
search goes on (where only the partition's own groups and the rules in use's displace
it, the floor of ``selectable_partition`` is added). Once the simulated selection keeps
the partition, it is stable under its twins: its rules' other matches do not displace
it.

**The ceiling under twins** (``twin_ceiling``, the bar's ceiling): the most captured by a
partition the selection keeps when every twin of its drafted groups is offered, proven by
CP-SAT with lazy constraints that hold for every such partition (the search above leaves
structures out, which is no bound). Where the selection, offered the rules in use's
candidates R0, the partition's own groups and their twins, picks Q instead, Q = R + S + T
(R: candidates of the rules in use; S: groups of the partition; T: twins of them at other
places). Any partition P' has on offer R, the groups of S it holds, and every group of T
whose twin class it holds (a rule for a group of that class matches all of them), and
any part of Q is a partition too, so P' is picked only if its groups outside S save at
least net(R) + the net bytes of the groups of T whose class P' holds: one linear row with
a 0-1 variable per twin class (1 where P' holds a drafted group of the class). Every row
holds for every partition the selection can pick with rules whose matches include the
twins of their groups, so the optimum under the rows bounds what such rules reach; once
the selection keeps the partition found, it is reached (exact: also a complete pool and
every solve proven optimal). Only drafted groups count for a class: a candidate of the
rules in use is on offer already, whatever its twins (its rule may tell them apart).
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from ruleengine.graph.model import Graph
from ruleengine.suggest.partition import (
    Kernel,
    Partition,
    best_partition,
    displacing,
    tightened,
)

# Rounds of the search (each one solve of at most SECONDS of deterministic time).
ROUNDS = 24
SECONDS = 10.0
# Rounds of the ceiling under twins (``twin_ceiling``), each one solve of SECONDS, and
# the deterministic time of all its solves together: a reported figure, bounded so that
# its cost does not grow with the pool; past it, the last optimum proven under the rows
# is reported as a bound. The shared models' need at most 8.5 s (regnety keepbn, 24
# rounds); a 32-layer stack's (13,320 kernels, a dense row per round) took 55 s over 24
# rounds and ~5 wall seconds per deterministic one: ~400 s of a 10-minute suggest.
CEILING_ROUNDS = 24
CEILING_SECONDS = 20.0


def _tensor_sig(graph: Graph, t: str, shapes: bool = True) -> tuple:
    tensor = graph.tensors.get(t)
    if tensor is None:
        return ("?",)
    producer = graph.node(tensor.producer).op_type if tensor.producer else ""
    return (
        tensor.dtype,
        tensor.shape if shapes or tensor.shape is None else len(tensor.shape),
        tensor.is_initializer,
        tensor.is_constant,
        tensor.is_graph_input,
        tensor.const_foldable,
        repr(tensor.const_value),
        producer,
    )


# per graph (by id, held while the graph lives): twin keys computed, by (nodes, shapes)
_KEYS: dict[int, tuple[weakref.ref, dict[tuple[frozenset[str], bool], str]]] = {}


def _keys_of(graph: Graph) -> dict[tuple[frozenset[str], bool], str]:
    """The twin keys computed on ``graph``: the drafting for twins, the structural
    partition and the ceiling under twins key the same pool's groups (tens of thousands
    on a stack of layers), each key a canonical form."""
    held = _KEYS.get(id(graph))
    if held is None or held[0]() is not graph:
        gone = id(graph)
        held = (weakref.ref(graph, lambda _: _KEYS.pop(gone, None)), {})
        _KEYS[gone] = held
    return held[1]


def twin_key(graph: Graph, nodes: frozenset[str], shapes: bool = True) -> str:
    """A key equal for two node sets exactly when they are twins (module docstring).
    ``shapes=False``: tensor shapes compared by rank only (``twin_ceiling`` compares the
    sizes a ``memory_limit`` sees apart)."""
    keys = _keys_of(graph)
    key = keys.get((nodes, shapes))
    if key is None:
        key = keys[nodes, shapes] = _twin_key(graph, nodes, shapes)
    return key


def _twin_key(graph: Graph, nodes: frozenset[str], shapes: bool) -> str:
    """``twin_key``, computed."""
    from ruleengine.cost.traffic import topo_position
    from ruleengine.suggest.canon import canonicalize

    pos = topo_position(graph)
    canon = canonicalize(graph, tuple(sorted(nodes, key=pos.__getitem__)), ())
    index = {u.nodes[0]: k for k, u in enumerate(canon.units)}
    outside: dict[str, int] = {}  # outside inputs, numbered as first read
    parts: list = []
    for u in canon.units:
        node = graph.node(u.nodes[0])
        ins = []
        for port, t in enumerate(node.inputs):
            if not t:
                ins.append((port, "-"))
                continue
            tensor = graph.tensors.get(t)
            src = tensor.producer if tensor is not None else None
            if src in index:
                ins.append((port, "in", index[src], tensor.producer_port or 0))
            else:
                ref = outside.setdefault(t, len(outside))
                ins.append((port, "out", ref, _tensor_sig(graph, t, shapes)))
        outs = []
        for t in node.outputs:
            tensor = graph.tensors.get(t) if t else None
            if tensor is None:
                outs.append("-")
                continue
            readers = sorted((c in nodes, graph.node(c).op_type, p) for c, p in tensor.consumers)
            outs.append((_tensor_sig(graph, t, shapes), tensor.is_graph_output, tuple(readers)))
        attrs = tuple(sorted((k, repr(v)) for k, v in node.attributes.items()))
        parts.append((node.op_type, node.domain, attrs, tuple(ins), tuple(outs)))
    return hashlib.sha256(repr((canon.key, tuple(parts))).encode()).hexdigest()


def twin_classes(graph: Graph, kernels: Sequence[Kernel]) -> dict[frozenset[str], str]:
    """Each kernel's twin key."""
    return {k.nodes: twin_key(graph, k.nodes) for k in kernels}


def structural_partition(
    graph: Graph,
    wider: Sequence[Kernel],
    rivals: Sequence[Kernel],
    floor: int,
    complete: bool,
    prefer: Sequence[frozenset[str]] = (),
) -> tuple[Partition, bool]:
    """A partition of ``wider`` with the most captured bytes found that the selection
    keeps when every twin of its groups is offered beside the ``rivals`` (module
    docstring), and whether one was found; else the last solve proven optimal (status
    BOUND) or none, and False."""
    keys = twin_classes(graph, wider)
    by_key: dict[str, list[Kernel]] = {}
    for k in wider:
        by_key.setdefault(keys[k.nodes], []).append(k)
    rival_nodes = {k.nodes for k in rivals}
    banned: set[str] = set()
    conditions: list[tuple[tuple[frozenset[str], ...], int]] = []
    bound: Partition | None = None
    for _ in range(ROUNDS):
        p = best_partition(
            graph,
            [k for k in wider if k.nodes in rival_nodes or keys[k.nodes] not in banned],
            complete=complete,
            prefer=prefer,
            net_floor=floor,
            conditions=conditions,
            seconds=SECONDS,
        )
        if not p.kernels:
            break
        if p.status == "OPTIMAL":
            bound = p
        prefer = [k.nodes for k in p.kernels]
        offered = {k.nodes: k for k in rivals}
        for k in p.kernels:
            for t in by_key[keys[k.nodes]]:
                offered.setdefault(t.nodes, t)
        q = displacing(graph, offered.values(), p)
        if q is None:
            return p, True
        mine = {k.nodes for k in p.kernels}
        # the twins that displace it: their structures are left out of the search
        shifted = {keys[k.nodes] for k in q.kernels if k.nodes not in rival_nodes | mine}
        if shifted:
            banned |= shifted
            continue
        # displaced by the rules in use's groups beside its own (S): as in
        # ``selectable_partition``, any partition's groups outside S save at least R's
        floor = tightened(q, mine, floor, conditions)
    if bound is not None:
        return replace(bound, status="BOUND"), False
    return Partition((), 0, "BOUND", len(wider), complete), False


# One lazy row of ``twin_ceiling``: the chosen kernels outside ``skip`` (indices into the
# pool) save at least ``floor`` + the net bytes of each (class, net) of ``terms`` whose
# twin class the partition holds (a class named by its first kernel in pool order).
TwinRow = tuple[tuple[int, ...], int, tuple[tuple[frozenset[str], int], ...]]


def _limits(graph: Graph, nodes: frozenset[str]) -> tuple[int, int] | None:
    """The largest intermediate and output tensor of ``nodes`` in bytes, as a drafted
    ``memory_limit`` measures them (``group_io``); None where one is of unknown size."""
    from ruleengine.cost.traffic import group_io

    io = group_io(graph, nodes)
    inter = [graph.tensors[t].nbytes for t in io.intermediates]
    outs = [graph.tensors[t].nbytes for t in io.outputs]
    if any(n is None for n in (*inter, *outs)):
        return None
    return max(inter, default=0), max(outs, default=0)


def _op_types(graph: Graph, nodes: frozenset[str]) -> tuple[str, ...]:
    return tuple(sorted(graph.node(n).op_type for n in nodes))


def twin_ceiling(
    graph: Graph,
    wider: Sequence[Kernel],
    rivals: Sequence[Kernel],
    floor: int,
    complete: bool,
    *,
    prefer: Sequence[frozenset[str]] = (),
    conditions: Sequence[tuple[tuple[frozenset[str], ...], int]] = (),
    start: Partition | None = None,
) -> Partition:
    """The most captured bytes of a partition of ``wider`` that the selection keeps when
    the ``rivals`` (the rules in use's candidates), its groups and every twin of its
    drafted groups are offered (module docstring, *the ceiling under twins*).

    ``floor`` and ``conditions``: rows already proven for every pickable partition (those
    of ``regions.selectable_partition``); ``start``: a partition to check first (the
    selectable ceiling: where its twins do not displace it, it is the answer). Status
    OPTIMAL or FEASIBLE for a partition the selection keeps (``exact`` where OPTIMAL over
    a complete pool); else BOUND: the last solve proven optimal under the rows, a bound no
    partition found reaches; with none, an empty BOUND."""
    ceiling = _TwinCeiling(graph, wider, rivals)
    rows: list[TwinRow] = [((), floor, ())]
    rows += [(tuple(sorted(ceiling.at[g] for g in groups)), f, ()) for groups, f in conditions]
    if start is not None and start.kernels and all(k.nodes in ceiling.at for k in start.kernels):
        row = ceiling.broken_row(start)
        if row is None:
            return start
        rows.append(row)
        prefer = [k.nodes for k in start.kernels]
    bound: Partition | None = None
    budget = _Budget(CEILING_SECONDS)
    for _ in range(CEILING_ROUNDS):
        p = _best_under_rows(
            graph, wider, rows, ceiling.offerers, ceiling.rival_nodes, prefer, complete, budget
        )
        if not p.kernels:  # nothing within the time limit: more rows only add work
            break
        if p.status == "OPTIMAL":
            bound = p
        prefer = [k.nodes for k in p.kernels]
        row = ceiling.broken_row(p)
        if row is None:
            return p
        rows.append(row)
        if budget.spent():
            break
    if bound is not None:
        return replace(bound, status="BOUND")
    return Partition((), 0, "BOUND", len(wider), complete)


class _Budget:
    """Deterministic seconds left to the solves of one ``twin_ceiling``: each solve gets
    at most ``SECONDS`` of what is left and is charged what it took (a reused answer
    too), so where it stops does not depend on the load or on the solve cache."""

    def __init__(self, seconds: float) -> None:
        self.left = seconds

    def spent(self) -> bool:
        return self.left <= 0

    def bounded(self, solve: Callable[[float], Callable[..., Any]]) -> Callable[..., Any]:
        """``solve(seconds)``'s solver, bounded by and charged to this budget."""

        def charged(*args: Any, **options: Any) -> Any:
            sol = solve(min(SECONDS, max(0.0, self.left)))(*args, **options)
            self.left -= sol.deterministic
            return sol

        return charged


class _TwinCeiling:
    """Which kernels of a pool a drafted rule matches together, and the rows a
    partition breaks once their twins are offered (``twin_ceiling``)."""

    def __init__(self, graph: Graph, wider: Sequence[Kernel], rivals: Sequence[Kernel]) -> None:
        self.graph, self.rivals = graph, rivals
        self.rival_nodes = frozenset(k.nodes for k in rivals)
        self.at = {k.nodes: i for i, k in enumerate(wider)}
        # keys only where needed (a pool holds tens of thousands of kernels): kernels a
        # rule cannot tell apart have the same op types, so only a needed kernel's bucket
        # is keyed
        self.buckets: dict[tuple[str, ...], list[Kernel]] = {}
        for k in wider:
            self.buckets.setdefault(_op_types(graph, k.nodes), []).append(k)
        self.keys: dict[frozenset[str], tuple[str, str, tuple[int, int] | None]] = {}

    def key_of(self, nodes: frozenset[str]) -> tuple[str, str, tuple[int, int] | None]:
        if nodes not in self.keys:
            graph = self.graph
            self.keys[nodes] = (
                twin_key(graph, nodes, shapes=False),
                twin_key(graph, nodes),
                _limits(graph, nodes),
            )
        return self.keys[nodes]

    def below(self, h: frozenset[str], g: frozenset[str]) -> bool:
        """Whether every rule the drafter can write that matches ``g`` matches ``h``."""
        hk, gk = self.key_of(h), self.key_of(g)
        if hk[0] != gk[0]:
            return False
        if hk[1] == gk[1]:
            return True  # twins
        return (
            hk[2] is not None
            and gk[2] is not None
            and all(a <= b for a, b in zip(hk[2], gk[2], strict=True))
        )

    def matched_by(self, g: frozenset[str]) -> list[Kernel]:
        """The kernels every rule matching ``g`` matches too (``g`` among them)."""
        bucket = self.buckets.get(_op_types(self.graph, g), [])
        return [h for h in bucket if self.below(h.nodes, g)]

    def offerers(self, t: frozenset[str]) -> list[Kernel]:
        """The kernels whose rules offer ``t``."""
        return [g for g in self.buckets.get(_op_types(self.graph, t), []) if self.below(t, g.nodes)]

    def broken_row(self, p: Partition) -> TwinRow | None:
        """The row ``p`` breaks, None where the selection keeps it."""
        rival_nodes, at = self.rival_nodes, self.at
        offered = {k.nodes: k for k in self.rivals}
        offered.update({k.nodes: k for k in p.kernels})
        for k in p.kernels:
            if k.nodes not in rival_nodes:
                for t in self.matched_by(k.nodes):
                    offered.setdefault(t.nodes, t)
        q = displacing(self.graph, offered.values(), p)
        if q is None:
            return None
        mine = {k.nodes for k in p.kernels} - rival_nodes
        skip = tuple(sorted(at[k.nodes] for k in q.kernels if k.nodes in mine))
        net_r = sum(k.net_bytes for k in q.kernels if k.nodes in rival_nodes)
        terms = tuple(
            (k.nodes, k.net_bytes)
            for k in q.kernels
            if k.nodes not in rival_nodes and k.nodes not in mine
        )
        return skip, net_r, tuple(sorted(terms, key=lambda t: at[t[0]]))


def _best_under_rows(
    graph: Graph,
    pool: Sequence[Kernel],
    rows: Sequence[TwinRow],
    offerers: Callable[[frozenset[str]], list[Kernel]],
    rival_nodes: frozenset[frozenset[str]],
    prefer: Sequence[frozenset[str]],
    complete: bool,
    budget: _Budget,
) -> Partition:
    """``partition.best_partition`` for the most captured bytes under ``rows`` (a 0-1
    variable per kernel a row names, 1 where a drafted kernel whose rules offer it is
    chosen), acyclic once contracted (lazy cycle cuts), within CP-SAT's deterministic
    time (``budget``)."""
    from ruleengine.suggest.partition import bounded_solve, cut_cycles

    at = {k.nodes: i for i, k in enumerate(pool)}
    named = sorted({t for _, _, terms in rows for t, _ in terms}, key=at.__getitem__)
    group_of = {t: g for g, t in enumerate(named)}
    members = [
        sorted(at[g.nodes] for g in offerers(t) if g.nodes not in rival_nodes) for t in named
    ]
    solve = budget.bounded(
        partial(
            bounded_solve,
            floors=[(skip, floor) for skip, floor, _ in rows],
            floor_values=[k.net_bytes for k in pool],
            floor_groups=members,
            floor_terms=[tuple((group_of[c], w) for c, w in t) for _, _, t in rows],
        )
    )
    return cut_cycles(graph, pool, solve, complete=complete, prefer=prefer, unknown_is_empty=True)
