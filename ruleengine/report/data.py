"""The report's data: one JSON document built from the plan record and the graph.

report.html embeds it and renders everything from it in the browser (cards page by
page, the SVG pictures on demand), so the page stays small and quick at 10^5 nodes.
Only rendering: every figure is the plan's (totals are report.json's own), except the
per-node traffic split of the plot (ruleengine/report/traffic.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ruleengine.graph.model import Graph
from ruleengine.report.subgraph import group_picture
from ruleengine.report.traffic import by_layer, by_op_type, node_traffic
from ruleengine.rewrite.model import FusedGroup, Plan, Rejection
from ruleengine.rewrite.rejections import shown_rejections
from ruleengine.rewrite.report import report_json

DOCUMENT_VERSION = 1
LOSERS_PER_GROUP = 20  # losers listed on a group's card (the rest counted)
ROWS_PER_RULE = 50  # near misses / other rejections shown per rule (the rest counted)
# verdicts of candidates whose matching failed on a detail: "near misses"
NEAR_VERDICTS = (
    "constraint_failed",
    "near_miss",
    "param_mismatch",
    "pattern_mismatch",
    "const_value",
)


def report_document(plan: Plan, graph: Graph, detail: str = "compact") -> dict[str, Any]:
    """The document report.html renders (deterministic: no time, no path)."""
    summary = report_json(plan, timings=False)
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    ops = sorted({n.op_type for n in graph.nodes})
    op_id = {op: k for k, op in enumerate(ops)}
    owner = [0] * len(graph.nodes)
    for g in plan.groups:
        for n in g.nodes:
            if n in index:
                owner[index[n]] = g.id
    shown = shown_rejections(plan, detail)
    lost, lost_counts, others = _losers(shown, owner, index)
    traffic = node_traffic(graph, plan)
    tensors: dict[str, int] = {}
    labels: dict[str, int] = {}
    groups = [_group(graph, g, index, tensors, labels, lost, lost_counts) for g in plan.groups]
    return {
        "version": DOCUMENT_VERSION,
        "model": plan.model,
        "graph": plan.graph_name,
        "target": plan.target,
        "detail": detail,
        "totals": summary["totals"],
        "solver": summary["solver"],
        "verification": _verification(summary["verification"]),
        "rules": _rules(plan),
        "rulesSilent": sum(1 for s in plan.rules if not s.matched),
        "rejected": summary["rejected"],
        "groups": groups,
        "labels": list(labels),
        "near": _by_rule(r for r in others if r.verdict in NEAR_VERDICTS),
        "notFused": _by_rule(r for r in others if r.verdict not in NEAR_VERDICTS),
        "ops": ops,
        "nodes": [n.name for n in graph.nodes],
        "nodeOp": [op_id[n.op_type] for n in graph.nodes],
        "nodeGroup": owner,
        "tensors": list(tensors),
        "traffic": {
            "byOp": by_op_type(graph, traffic),
            "byLayer": by_layer(graph, traffic),
        },
    }


def _losers(
    shown: Sequence[Rejection], owner: Sequence[int], index: Mapping[str, int]
) -> tuple[dict[int, list[list]], dict[int, int], list[Rejection]]:
    """The listed lost_conflict rejections under the group sharing most of their nodes
    (ties: the first group); every other rejection returned as is."""
    lost: dict[int, list[list]] = {}
    counts: dict[int, int] = {}
    others: list[Rejection] = []
    for r in shown:
        if r.verdict != "lost_conflict":
            others.append(r)
            continue
        shared: dict[int, int] = {}
        for n in r.nodes:
            g = owner[index[n]] if n in index else 0
            if g:
                shared[g] = shared.get(g, 0) + 1
        if not shared:
            others.append(r)
            continue
        g = max(shared, key=lambda k: (shared[k], -k))
        counts[g] = counts.get(g, 0) + 1
        if counts[g] <= LOSERS_PER_GROUP:
            lost.setdefault(g, []).append([r.rule, list(r.nodes), r.reason])
    return lost, counts, others


def _group(
    graph: Graph,
    g: FusedGroup,
    index: Mapping[str, int],
    tensors: dict[str, int],
    labels: dict[str, int],
    lost: Mapping[int, list[list]],
    lost_counts: Mapping[int, int],
) -> list[Any]:
    """``[id, rule, kernel, target op, fused node, bytes before, after, gross saved, net,
    [accesses before, after], [UB need, limit], picture, losers listed, losers]``: an
    array, not an object (10^4 groups: the keys would be a fifth of the page); rule,
    kernel and target op are positions in ``labels``."""
    c = g.scored.cost
    return [
        g.id,
        _ref(labels, g.rule),
        _ref(labels, g.kernel.kernel_name),
        _ref(labels, g.target_op),
        g.node_name,
        c.bytes_before if c else None,
        c.bytes_after if c else None,
        c.bytes_saved if c else 0,
        c.net_bytes if c else 0,
        [c.accesses_before, c.accesses_after] if c else None,
        [c.ub_bytes, c.ub_limit] if c else None,
        group_picture(graph, g, index, tensors),
        lost.get(g.id, []),
        lost_counts.get(g.id, 0),
    ]


def _ref(table: dict[str, int], name: str) -> int:
    return table.setdefault(name, len(table))


def _rules(plan: Plan) -> list[list]:
    """``[rule, matched, fused, gross saved, net saved]`` of the rules that matched."""
    gross: dict[str, int] = {}
    net: dict[str, int] = {}
    for g in plan.groups:
        c = g.scored.cost
        gross[g.rule] = gross.get(g.rule, 0) + (c.bytes_saved if c else 0)
        net[g.rule] = net.get(g.rule, 0) + (c.net_bytes if c else 0)
    return [
        [s.rule, s.matched, s.fused, gross.get(s.rule, 0), net.get(s.rule, 0)]
        for s in plan.rules
        if s.matched
    ]


def _by_rule(rejections: Iterable[Rejection]) -> list[list]:
    """``[rule, [[verdict, nodes, reason], ...], listed]`` in rule order (plan order
    within), at most ``ROWS_PER_RULE`` rows each (a full plan of a 10^5-node graph lists
    10^5 rejections; ``listed`` counts them all)."""
    out: dict[str, list[list]] = {}
    counts: dict[str, int] = {}
    for r in rejections:
        counts[r.rule] = counts.get(r.rule, 0) + 1
        if counts[r.rule] <= ROWS_PER_RULE:
            out.setdefault(r.rule, []).append([r.verdict, list(r.nodes), r.reason])
    return [[rule, rows, counts[rule]] for rule, rows in sorted(out.items())]


def _verification(v: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if v is None:
        return None
    return {
        "ok": v["ok"],
        "mode": v["mode"],
        "inputs": v["inputs"],
        "dropped": v["dropped_groups"],
        # safe mode's rounds: [round, next, [[group, rule, target_op, reason], ...]]
        "rounds": [
            [
                r["round"],
                r["next"],
                [[d["group"], d["rule"], d["target_op"], d["reason"]] for d in r["dropped"]],
            ]
            for r in v.get("rounds", ())
        ],
        "error": v["error"],
        "outputs": [[o["name"], o["cosine"], o["max_abs_error"], o["ok"]] for o in v["outputs"]],
    }
