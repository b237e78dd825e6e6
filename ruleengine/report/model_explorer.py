"""model_explorer.json: the plan as Model Explorer "custom node data" (an overlay).

Format (checked against google-ai-edge/model-explorer at c0f8dba: the Python
``node_data_builder.GraphNodeData`` / ``NodeDataResult`` and the UI's
``NodeDataProviderGraphData`` in src/ui/src/components/visualizer/common/types.ts): a
graph's node data is ``{"name", "results": {node key: {"value", "bgColor"}}}``; a file
holding one such object (``results`` at the top) applies to the graph being shown
(``getNodeDataProviderData``). A node key is the node's id, which the ONNX adapter
(model-explorer-onnx) takes from the node's name in the model, ``<node_i>`` when it has
none. Every node of a fused group gets one string value (group id, rule, kernel, bytes
saved) and its group's colour; nodes not fused are left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from ruleengine.graph.model import Graph
from ruleengine.rewrite.report import fmt_bytes

OVERLAY_NAME = "autofusion groups"
# 12 colours far apart; consecutive group ids (neighbours in graph order) differ
PALETTE = (
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
    "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6", "#d37295", "#a0cbe8",
)  # fmt: skip


def group_colour(group_id: int) -> str:
    return PALETTE[(group_id - 1) % len(PALETTE)]


def node_keys(graph: Graph) -> dict[str, str]:
    """Our node name -> the node id Model Explorer's ONNX adapter gives it."""
    keys: dict[str, str] = {}
    for n in graph.nodes:
        if n.source_index < 0:
            keys[n.name] = n.name
        else:
            keys[n.name] = n.source_name or f"<node_{n.source_index}>"
    return keys


def label(group_id: int, rule: str, kernel: str, saved: int) -> str:
    return f"group {group_id}: {rule}, kernel {kernel}, saved {fmt_bytes(saved)} ({saved} B)"


def overlay_from_plan_json(
    plan: Mapping[str, Any], keys: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The overlay of a plan.json document (``keys``: ``node_keys(graph)`` of the
    original model; without it the plan's node names are the keys)."""
    rows = [
        (g["id"], g["rule"], g["kernel"]["kernel_name"], g["bytes_saved"] or 0, g["nodes"])
        for g in plan["groups"]
    ]
    return _overlay(rows, keys)


def overlay(plan: Any, graph: Graph | None = None) -> dict[str, Any]:
    """The overlay of a plan record (``rewrite.model.Plan``)."""
    rows = [
        (
            g.id,
            g.rule,
            g.kernel.kernel_name,
            g.scored.cost.bytes_saved if g.scored.cost else 0,
            g.nodes,
        )
        for g in plan.groups
    ]
    return _overlay(rows, node_keys(graph) if graph is not None else None)


def _overlay(
    rows: Sequence[tuple[int, str, str, int, Sequence[str]]], keys: Mapping[str, str] | None
) -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    for gid, rule, kernel, saved, nodes in rows:
        entry = {"value": label(gid, rule, kernel, saved), "bgColor": group_colour(gid)}
        for n in nodes:
            key = keys.get(n, n) if keys is not None else n
            results.setdefault(key, entry)
    return {"name": OVERLAY_NAME, "results": results}


def overlay_bytes(document: Mapping[str, Any]) -> bytes:
    """The file's bytes (groups in plan order, nodes in group order: deterministic)."""
    results = document["results"]
    head = {k: v for k, v in document.items() if k != "results"}
    lines = [json.dumps(head, ensure_ascii=False)[:-1] + ', "results": {']
    text: dict[int, str] = {}  # the nodes of a group share one entry: encoded once
    rows = [
        f"{json.dumps(k, ensure_ascii=False)}: "
        f"{text.get(id(v)) or text.setdefault(id(v), _compact(v))}"
        for k, v in results.items()
    ]
    lines.append(",\n".join(rows))
    lines.append("}}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def overlay_schema() -> dict[str, Any]:
    """The JSON Schema of Model Explorer's node data file (model_explorer.schema.json)."""
    text = resources.files("ruleengine.report").joinpath("model_explorer.schema.json")
    return json.loads(text.read_text("utf-8"))


def validate_overlay(document: Any) -> list[str]:
    """Every way ``document`` departs from Model Explorer's node data format (empty: valid)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(overlay_schema())
    return sorted(
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator.iter_errors(document)
    )
