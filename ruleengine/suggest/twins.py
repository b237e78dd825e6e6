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
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

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


def _tensor_sig(graph: Graph, t: str) -> tuple:
    tensor = graph.tensors.get(t)
    if tensor is None:
        return ("?",)
    producer = graph.node(tensor.producer).op_type if tensor.producer else ""
    return (
        tensor.dtype,
        tensor.shape,
        tensor.is_initializer,
        tensor.is_constant,
        tensor.is_graph_input,
        tensor.const_foldable,
        repr(tensor.const_value),
        producer,
    )


def twin_key(graph: Graph, nodes: frozenset[str]) -> str:
    """A key equal for two node sets exactly when they are twins (module docstring)."""
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
                ins.append((port, "out", ref, _tensor_sig(graph, t)))
        outs = []
        for t in node.outputs:
            tensor = graph.tensors.get(t) if t else None
            if tensor is None:
                outs.append("-")
                continue
            readers = sorted((c in nodes, graph.node(c).op_type, p) for c, p in tensor.consumers)
            outs.append((_tensor_sig(graph, t), tensor.is_graph_output, tuple(readers)))
        attrs = tuple(sorted((k, repr(v)) for k, v in node.attributes.items()))
        parts.append((node.op_type, node.domain, attrs, tuple(ins), tuple(outs)))
    return hashlib.sha256(repr((canon.key, tuple(parts))).encode()).hexdigest()


def twin_classes(graph: Graph, kernels: Sequence[Kernel]) -> dict[frozenset[str], str]:
    """Each kernel's twin key."""
    return {k.nodes: twin_key(graph, k.nodes) for k in kernels}


def structural_partition(  # noqa: PLR0913
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
