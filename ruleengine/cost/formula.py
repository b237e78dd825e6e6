"""The cost formula: HBM bytes saved, less an overhead charged for the fused kernel's
compute, and the time that saves (docs/cost-model.md)."""

from __future__ import annotations

from ruleengine.cost.model import Cost, Target
from ruleengine.cost.opinfo import is_view
from ruleengine.cost.traffic import GroupIO, Traffic
from ruleengine.cost.ub import UBNeed
from ruleengine.graph.model import Graph

OVERHEAD_FRACTION = 0.05  # share of the group's compute time charged as fusion overhead


def _dtype_of(graph: Graph, io: GroupIO, ub: UBNeed) -> str:
    """The dtype the overhead is priced in: the anchor's, else the first typed output."""
    if ub.anchor and graph.tensors[ub.anchor].dtype:
        return graph.tensors[ub.anchor].dtype or "float16"
    for node in io.nodes:
        for t in node.outputs:
            if t and t in graph.tensors and graph.tensors[t].dtype:
                return graph.tensors[t].dtype or "float16"
    return "float16"


def overhead_bytes(flops: int, dtype: str, target: Target) -> int:
    """0.05 x the group's compute time, converted to bytes at the target's bandwidth."""
    peak = target.peak_flops.get(dtype)
    if peak is None:
        peak = target.peak_flops.get("float32") or min(target.peak_flops.values())
    return round(OVERHEAD_FRACTION * flops / peak * target.hbm_bandwidth)


def compute_cost(graph: Graph, io: GroupIO, tr: Traffic, ub: UBNeed, target: Target) -> Cost:
    """The cost record of a group: its traffic before and after, the overhead, the net
    saving and the launches and time it saves."""
    saved = tr.bytes_before - tr.bytes_after
    overhead = overhead_bytes(tr.flops, _dtype_of(graph, io, ub), target)
    net = saved - overhead
    launches = max(0, sum(1 for n in io.nodes if not is_view(n)) - 1)
    return Cost(
        bytes_before=tr.bytes_before,
        bytes_after=tr.bytes_after,
        bytes_saved=saved,
        overhead_bytes=overhead,
        net_bytes=net,
        accesses_before=tr.accesses_before,
        accesses_after=tr.accesses_after,
        flops=tr.flops,
        ub_bytes=ub.bytes,
        ub_limit=ub.limit,
        tile=ub.tile,
        launches_saved=launches,
        time_saved_s=net / target.hbm_bandwidth + launches * target.launch_overhead_s,
    )
