"""HBM traffic of a node set, unfused and fused, and the compute estimate for overhead.

A fused kernel reads each external input once and writes each tensor that leaves the
group once; unfused, every node reads its inputs and writes its outputs. View ops
(Reshape, Squeeze, Unsqueeze, Flatten, Identity) only relabel memory: they cost no
traffic on their own, their shape/axes inputs are metadata, and a view's output shares
storage with its data input (its *root*), so fusing only views saves nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ruleengine.cost.opinfo import VIEW, flops_table, node_flops, node_kinds, size_table
from ruleengine.graph.model import Graph, Node


@dataclass(frozen=True)
class GroupIO:
    """How a node set connects to the rest of the graph."""

    nodes: tuple[Node, ...]  # topological order
    inputs: tuple[str, ...]  # external data tensors read by the group, first-use order
    meta_inputs: tuple[str, ...]  # external tensors only read as view metadata (shapes)
    outputs: tuple[str, ...]  # tensors produced inside and used outside, or graph outputs
    intermediates: tuple[str, ...]  # produced inside, consumed only inside
    root: dict[str, str]  # tensor -> the tensor whose storage it shares through views


@dataclass(frozen=True)
class Traffic:
    bytes_before: int
    bytes_after: int
    accesses_before: int
    accesses_after: int
    flops: int
    unknown: tuple[str, ...]  # tensors whose size is unknown (dynamic shape or dtype)


def ordered_nodes(graph: Graph, names: Iterable[str]) -> tuple[Node, ...]:
    """The named nodes in the graph's topological order."""
    pos = topo_position(graph)
    return tuple(sorted((graph.node(n) for n in set(names)), key=lambda n: pos[n.name]))


_POS_CACHE: dict[int, tuple[Graph, dict[str, int]]] = {}


def topo_position(graph: Graph) -> dict[str, int]:
    """Node name -> position in ``graph.nodes`` (which is topological), cached per graph."""
    hit = _POS_CACHE.get(id(graph))
    if hit is not None and hit[0] is graph:
        return hit[1]
    pos = {n.name: i for i, n in enumerate(graph.nodes)}
    if len(_POS_CACHE) > 8:
        _POS_CACHE.clear()
    _POS_CACHE[id(graph)] = (graph, pos)
    return pos


def group_io(graph: Graph, names: Iterable[str]) -> GroupIO:
    """What a node group reads and writes. An output leaves the group when it is a graph
    output or a kernel outside reads it; a compile-time reader (a Shape of a static tensor,
    folded to a constant by the rewrite) does not make it leave, as in the matcher."""
    pos = topo_position(graph)
    kinds = node_kinds(graph)
    node_of = graph.node
    nodes = tuple(sorted((node_of(n) for n in set(names)), key=lambda n: pos[n.name]))
    inside = {n.name for n in nodes}
    produced: set[str] = set()
    root: dict[str, str] = {}
    data_inputs: dict[str, None] = {}
    meta_inputs: dict[str, None] = {}
    for node in nodes:
        view = kinds[node.name] & VIEW
        port = 0
        for t in node.inputs:
            if t and t not in produced:
                if view and port > 0:
                    meta_inputs.setdefault(t, None)
                else:
                    data_inputs.setdefault(t, None)
            port += 1
        if view and node.inputs and node.inputs[0]:
            src = node.inputs[0]
            for t in node.outputs:
                if t:
                    root[t] = root.get(src, src)
        for t in node.outputs:
            if t:
                produced.add(t)
                root.setdefault(t, t)
    for t in data_inputs:
        meta_inputs.pop(t, None)
    outputs: list[str] = []
    intermediates: list[str] = []
    tensors = graph.tensors
    for node in nodes:
        for t in node.outputs:
            if not t:
                continue
            tensor = tensors.get(t)
            escapes = tensor is not None and (
                tensor.is_graph_output
                or any(c not in inside and not node_of(c).compile_time for c, _ in tensor.consumers)
            )
            (outputs if escapes else intermediates).append(t)
    return GroupIO(
        nodes,
        tuple(data_inputs),
        tuple(meta_inputs),
        tuple(outputs),
        tuple(intermediates),
        root,
    )


def traffic(graph: Graph, io: GroupIO) -> Traffic:
    """Bytes and tensor accesses before/after fusing ``io.nodes``, plus their flops."""
    table = size_table(graph)
    kinds = node_kinds(graph)
    flops_of = flops_table(graph)
    unknown: dict[str, None] = {}  # in first-seen order

    def size(t: str) -> int:
        entry = table.get(t)
        if entry is None or entry[2] is None:
            unknown[t] = None
            return 0
        return entry[2]

    before = accesses_before = flops = 0
    # Fused: read the external data inputs that a compute (non-view) node needs, write
    # each escaping tensor once per storage root that a compute node produced.
    compute_reads: set[str] = set()
    compute_outputs: set[str] = set()
    root = io.root
    for node in io.nodes:
        if kinds[node.name] & VIEW:
            continue
        f = flops_of.get(node.name)
        flops += node_flops(graph, node) if f is None else f
        reads = dict.fromkeys(t for t in node.inputs if t)
        writes = [t for t in node.outputs if t]
        for t in reads:
            before += size(t)
            compute_reads.add(root.get(t, t))
        for t in writes:
            before += size(t)
        accesses_before += len(reads) + len(writes)
        compute_outputs.update(writes)
    after = accesses_after = 0
    for t in io.inputs:
        if t in compute_reads:
            after += size(t)
            accesses_after += 1
    written: set[str] = set()
    for t in io.outputs:
        r = root.get(t, t)
        if r in compute_outputs and r not in written:
            written.add(r)
            after += size(t)
            accesses_after += 1
    return Traffic(before, after, accesses_before, accesses_after, flops, tuple(unknown))
