"""HBM traffic per node before and after fusion, aggregated for the report's plot.

The figures add up to the plan's totals: a node's unfused traffic is counted as
``rewrite.plan.node_traffic`` counts it (inputs read, outputs written, compile-time and
view nodes moving nothing), and a group's gross saving is split over its nodes in
proportion to their unfused traffic. The plot is aggregated (by op type, by layer or
by graph position), never one bar per node, so it stays small at 10^5 nodes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ruleengine.cost.opinfo import VIEW, node_kinds, size_table
from ruleengine.graph.model import Graph
from ruleengine.rewrite.model import Plan

MAX_BINS = 64  # bars of the by-layer / by-position plot
TOP_OPS = 24  # op types shown one by one; the rest are summed as "other"

# "layers.12", "layer_3", "h.7", "blocks/4", "/model/layers.0/...", "l12_pow3" (bench)
_LAYER = re.compile(
    r"(?:^|[/._\-])(?:layers?|blocks?|h|encoder\.layer|decoder\.layers?|l)[._/\-]?(\d+)(?=$|[/._\-])",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class NodeTraffic:
    """Per node (graph order): unfused and fused HBM bytes (ints)."""

    before: tuple[int, ...]
    after: tuple[int, ...]


def node_bytes(graph: Graph) -> list[int]:
    """Each node's unfused HBM bytes (tensors of unknown size count 0, as in the plan)."""
    table = size_table(graph)
    kinds = node_kinds(graph)
    out = []
    for node in graph.nodes:
        if node.compile_time or kinds[node.name] & VIEW:
            out.append(0)
            continue
        total = 0
        for t in (*dict.fromkeys(t for t in node.inputs if t), *(t for t in node.outputs if t)):
            entry = table.get(t)
            if entry is not None and entry[2] is not None:
                total += entry[2]
        out.append(total)
    return out


def node_traffic(graph: Graph, plan: Plan) -> NodeTraffic:
    """Before and after per node; each group's gross saving spread over its nodes."""
    before = node_bytes(graph)
    after = list(before)
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    for g in plan.groups:
        saved = g.scored.cost.bytes_saved if g.scored.cost is not None else 0
        where = [index[n] for n in g.nodes if n in index]
        if not where or not saved:
            continue
        weight = sum(before[i] for i in where)
        left = saved
        for k, i in enumerate(where):
            if k == len(where) - 1:
                share = left
            elif weight:
                share = saved * before[i] // weight
            else:
                share = saved // len(where)
            after[i] -= share
            left -= share
    return NodeTraffic(tuple(before), tuple(after))


def by_op_type(graph: Graph, traffic: NodeTraffic) -> list[list]:
    """``[op, before, after]`` rows, biggest unfused traffic first, the tail as "other"."""
    sums: dict[str, list[int]] = {}
    for node, b, a in zip(graph.nodes, traffic.before, traffic.after, strict=True):
        row = sums.setdefault(node.op_type, [0, 0])
        row[0] += b
        row[1] += a
    rows = sorted(([op, b, a] for op, (b, a) in sums.items()), key=lambda r: (-r[1], r[0]))
    if len(rows) > TOP_OPS:
        rest = rows[TOP_OPS - 1 :]
        rows = rows[: TOP_OPS - 1]
        rows.append([f"other ({len(rest)} ops)", sum(r[1] for r in rest), sum(r[2] for r in rest)])
    return rows


def layer_of(name: str) -> int | None:
    """The layer number in a node name, or None."""
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


def by_layer(graph: Graph, traffic: NodeTraffic) -> dict:
    """Bars by layer when most nodes' names carry one, else by graph position; at most
    ``MAX_BINS`` bars (consecutive layers or positions summed)."""
    n = len(graph.nodes)
    layers = [layer_of(node.source_name or node.name) for node in graph.nodes]
    known = sum(x is not None for x in layers)
    if n and known >= n // 2 and len({x for x in layers if x is not None}) > 1:
        return _layer_bins(layers, traffic)
    return _position_bins(n, traffic)


def _layer_bins(layers: Sequence[int | None], traffic: NodeTraffic) -> dict:
    values = sorted({x for x in layers if x is not None})
    lo, hi = values[0], values[-1]
    width = max(1, -(-(hi - lo + 1) // MAX_BINS))
    bins: dict[int, list[int]] = {}
    last = lo
    for layer, b, a in zip(layers, traffic.before, traffic.after, strict=True):
        if layer is None:  # embeddings, head: kept with the layer before them
            layer = last
        last = layer
        row = bins.setdefault((layer - lo) // width, [0, 0])
        row[0] += b
        row[1] += a
    rows = []
    for k in sorted(bins):
        first = lo + k * width
        label = str(first) if width == 1 else f"{first}-{min(hi, first + width - 1)}"
        rows.append([label, bins[k][0], bins[k][1]])
    return {"axis": "layer", "width": width, "bars": rows}


def _position_bins(n: int, traffic: NodeTraffic) -> dict:
    bins = min(MAX_BINS, max(1, n))
    width = max(1, -(-n // bins)) if n else 1
    rows = []
    for start in range(0, n, width):
        stop = min(n, start + width)
        rows.append(
            [f"{start}-{stop - 1}", sum(traffic.before[start:stop]), sum(traffic.after[start:stop])]
        )
    return {"axis": "position", "width": width, "bars": rows}
