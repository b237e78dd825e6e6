"""Traffic and UB need of groups, computed once per local structure (``GroupMemo``).

A decoder stack repeats one layer, so most candidates have a twin in every layer; their
numbers are pure functions of that local structure and are mapped back onto each group's
own tensor names.
"""

from __future__ import annotations

from collections.abc import Sequence

from ruleengine.cost.formula import compute_cost
from ruleengine.cost.inputs import kernel_inputs
from ruleengine.cost.model import Cost, Target
from ruleengine.cost.opinfo import REDUCE, node_flops, node_kinds, size_table, static_shape
from ruleengine.cost.traffic import GroupIO, Traffic, group_io, topo_position, traffic
from ruleengine.cost.ub import UBNeed, reduced_row, ub_need
from ruleengine.graph.model import Graph, Node

# What ``GroupMemo.analyse`` returns: group_io, traffic, and when every size is known the
# UB need and (compute_cost, kernel_inputs)
Analysis = tuple[GroupIO, Traffic, UBNeed | None, tuple[Cost, tuple[str, ...]] | None]


class GroupMemo:
    """Traffic and UB need of groups, shared between groups of the same local structure.

    A decoder stack repeats one layer, so most candidates have a twin in every layer:
    same op types, same tensor sizes, same wiring, same tensors leaving the group. Both
    numbers are pure functions of that local structure, so they are computed once per
    structure and mapped back onto each group's own tensor names. The key holds every
    input the two computations read: per node its op type, domain, kind bits, flops,
    reduced row and wiring (tensors numbered by first use); per tensor its static
    shape, element size, byte size, name length (the anchor's tie-break), dtype and
    whether it is a constant; the group's inputs, view-only inputs, outputs and storage
    roots. The cost record and the kernel inputs, functions of the same, are shared
    too. An illegal tiling (whose reason names nodes) is never shared. One memo per
    target and graph.
    """

    def __init__(self, graph: Graph, target: Target) -> None:
        self.graph = graph
        self.target = target
        self._seen: dict[tuple, tuple] = {}
        self._node_feat: dict[str, tuple] = {}
        self._tensor_feat: dict[str, tuple] = {}
        self._pos = topo_position(graph)
        # tensor -> names of its readers, None for a graph output (always leaves); made
        # for the tensors of the groups analysed (not 10^5 sets per graph up front)
        self._readers: dict[str, frozenset[str] | None] = {}
        self._kinds = node_kinds(graph)
        self._table = size_table(graph)

    def _tensor_features(self, t: str) -> tuple:
        """What traffic, UB, cost and kernel inputs read of a tensor (once per tensor)."""
        tensor = self.graph.tensors.get(t)
        if tensor is None:
            return (None, len(t), None, False, False)
        const = tensor.is_constant or tensor.is_initializer
        return (self._table.get(t), len(t), tensor.dtype, const, tensor.const_foldable)

    def _features(self, n: Node) -> tuple:
        """What traffic and UB read of a node besides its wiring (once per node)."""
        kind = self._kinds[n.name]
        row = _reduced_row_of(self.graph, n) if kind & REDUCE else 0
        return (n.op_type, n.domain, kind, node_flops(self.graph, n), row)

    def analyse(self, names: Sequence[str]) -> Analysis:
        """``group_io``, ``traffic`` and, when every size is known, ``ub_need`` and
        (``compute_cost``, ``kernel_inputs``)."""
        pos = self._pos
        node_of = self.graph.node
        # the nodes as group_io orders them (topological), tensors numbered by first use
        nodes = tuple(sorted((node_of(n) for n in set(names)), key=lambda n: pos[n.name]))
        names_by_id = tuple(
            dict.fromkeys(t for n in nodes for seq in (n.inputs, n.outputs) for t in seq if t)
        )
        ids = {t: i for i, t in enumerate(names_by_id)}
        key = self._key(nodes, names_by_id, ids)
        hit = self._seen.get(key)
        if hit is not None:
            return _from_local(hit, nodes, names_by_id)
        found = self._compute(names)
        ub = found[2]
        if ub is None or ub.legal:
            self._seen[key] = _to_local(found, ids)
        return found

    def _key(
        self, nodes: tuple[Node, ...], names_by_id: tuple[str, ...], ids: dict[str, int]
    ) -> tuple:
        """The group's local structure: per node its features and wiring (tensor ids),
        which of its outputs leave the group, per tensor its features."""
        lid = ids.get
        node_feat = self._node_feat
        wiring = []
        for n in nodes:
            feat = node_feat.get(n.name)
            if feat is None:
                feat = node_feat[n.name] = self._features(n)
            wiring.append(
                (feat, tuple(lid(t, -1) for t in n.inputs), tuple(lid(t, -1) for t in n.outputs))
            )
        # which produced tensors leave the group: with the wiring, this fixes group_io
        inside = {n.name for n in nodes}
        readers = self._readers
        tensors_of = self.graph.tensors
        for n in nodes:
            for t in n.outputs:
                if t and t not in readers and t in tensors_of:
                    tt = tensors_of[t]
                    readers[t] = (
                        None
                        if tt.is_graph_output
                        else frozenset(
                            c for c, _ in tt.consumers if not self.graph.node(c).compile_time
                        )
                    )
        key_io = tuple(
            t in readers and (readers[t] is None or not readers[t] <= inside)
            for n in nodes
            for t in n.outputs
            if t
        )
        tensor_feat = self._tensor_feat
        tensors = []
        for t in names_by_id:
            feat_t = tensor_feat.get(t)
            if feat_t is None:
                feat_t = tensor_feat[t] = self._tensor_features(t)
            tensors.append(feat_t)
        return (tuple(wiring), key_io, tuple(tensors))

    def _compute(self, names: Sequence[str]) -> Analysis:
        """The numbers of a structure not seen before, computed from the graph."""
        graph = self.graph
        io = group_io(graph, names)
        tr = traffic(graph, io)
        ub = None if tr.unknown else ub_need(graph, io, self.target)
        extra = None
        if ub is not None:
            extra = (compute_cost(graph, io, tr, ub, self.target), kernel_inputs(graph, io))
        return io, tr, ub, extra


def _to_local(found: Analysis, ids: dict[str, int]) -> tuple:
    """``found`` with every tensor name replaced by its id (the shared form)."""
    io, tr, ub, extra = found
    tr_l = (*astuple_traffic(tr), tuple(ids[t] for t in tr.unknown))
    ub_l = (
        None
        if ub is None
        else (
            ub.bytes,
            ub.limit,
            ub.tile_elems,
            ub.tile,
            ids[ub.anchor] if ub.anchor else -1,
            tuple((ids[t], b) for t, b in ub.buffers),
        )
    )
    extra_l = None if extra is None else (extra[0], tuple(ids[t] for t in extra[1]))
    io_l = (
        *(
            tuple(ids[t] for t in part)
            for part in (io.inputs, io.meta_inputs, io.outputs, io.intermediates)
        ),
        tuple((ids[t], ids[r]) for t, r in io.root.items()),
    )
    return (io_l, tr_l, ub_l, extra_l)


def _from_local(hit: tuple, nodes: tuple[Node, ...], names_by_id: tuple[str, ...]) -> Analysis:
    """A shared form (``_to_local``) in this group's own tensor names."""
    io_l, tr_l, ub_l, extra_l = hit
    io = GroupIO(
        nodes,
        *(tuple(names_by_id[i] for i in part) for part in io_l[:4]),
        {names_by_id[i]: names_by_id[r] for i, r in io_l[4]},
    )
    tr = Traffic(*tr_l[:5], tuple(names_by_id[i] for i in tr_l[5]))
    if ub_l is None:
        return io, tr, None, None
    size, limit, elems, tile, anchor, buffers = ub_l
    ub = UBNeed(
        size,
        limit,
        elems,
        tile,
        names_by_id[anchor] if anchor >= 0 else "",
        tuple((names_by_id[i], b) for i, b in buffers),
        True,
    )
    cost, kin = extra_l
    return io, tr, ub, (cost, tuple(names_by_id[i] for i in kin))


def astuple_traffic(tr: Traffic) -> tuple[int, int, int, int, int]:
    """The traffic's five counts, in field order."""
    return (tr.bytes_before, tr.bytes_after, tr.accesses_before, tr.accesses_after, tr.flops)


def _reduced_row_of(graph: Graph, node: Node) -> int:
    """Elements of one row of a reduction's reduced axes (0 without a static shape)."""
    shape = static_shape(graph, node.inputs[0]) if node.inputs else None
    return reduced_row(graph, node, shape) if shape else 0
