"""The picture data of one fused group: its ops, and each tensor as it moves.

A tensor made and read inside the group stays on chip (an internal edge); a tensor read
from outside (an activation or a weight) or written for a reader outside crosses HBM.
Each edge carries its bytes (None when the size is unknown). The page draws these as a
small SVG when the group's card is shown; nothing of the rest of the graph is drawn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ruleengine.cost.opinfo import size_table
from ruleengine.graph.model import Graph
from ruleengine.rewrite.model import FusedGroup


def group_picture(
    graph: Graph, group: FusedGroup, index: Mapping[str, int], tensors: dict[str, int]
) -> dict[str, Any]:
    """``{"n": node indices, "e": [[src, dst, bytes]], "r": [[dst, bytes, tensor, weight]],
    "w": [[src, bytes]]}``: src/dst are positions in ``n``; a tensor read from outside is
    its position in ``tensors`` (name -> position, extended here: one table per page).
    Edges inside and writes name no tensor (the page says whose output it is): that
    halves the page of a 10^5-node graph."""
    table = size_table(graph)
    nodes = [n for n in group.nodes if n in index]
    local = {name: k for k, name in enumerate(nodes)}
    made: dict[str, int] = {}
    by_name = {graph.nodes[index[n]].name: graph.nodes[index[n]] for n in nodes}
    for k, name in enumerate(nodes):
        for t in by_name[name].outputs:
            if t:
                made[t] = k
    edges: list[list] = []
    reads: list[list] = []
    writes: list[list] = []
    outputs = set(group.outputs)
    for k, name in enumerate(nodes):
        for t in dict.fromkeys(t for t in by_name[name].inputs if t):
            size = _bytes(table, t)
            if t in made:
                edges.append([made[t], k, size])
            else:
                tensor = graph.tensors.get(t)
                weight = bool(tensor is not None and tensor.is_constant)
                reads.append([k, size, _ref(tensors, t), 1 if weight else 0])
        for t in by_name[name].outputs:
            if t and (t in outputs or _escapes(graph, t, local)):
                writes.append([k, _bytes(table, t)])
    return {"n": [index[n] for n in nodes], "e": edges, "r": reads, "w": writes}


def _ref(tensors: dict[str, int], name: str) -> int:
    return tensors.setdefault(name, len(tensors))


def _bytes(table: Mapping[str, Any], tensor: str) -> int | None:
    entry = table.get(tensor)
    return None if entry is None else entry[2]


def _escapes(graph: Graph, tensor: str, local: Mapping[str, int]) -> bool:
    t = graph.tensors.get(tensor)
    if t is None:
        return False
    return t.is_graph_output or any(c not in local for c, _ in t.consumers)
