"""model_explorer.json against Model Explorer's node data format (a JSON Schema written
from its source), keyed by the node ids its ONNX adapter gives, coloured by group."""

from __future__ import annotations

import json

import pytest

from ruleengine.report.model_explorer import (
    group_colour,
    node_keys,
    overlay,
    overlay_bytes,
    overlay_from_plan_json,
    validate_overlay,
)


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_overlay_is_valid_node_data(fused_result, name: str) -> None:
    result = fused_result(name)
    doc = overlay(result.plan, result.analysis.graph)
    assert validate_overlay(doc) == []
    assert json.loads(overlay_bytes(doc)) == doc
    keys = node_keys(result.analysis.graph)
    grouped = {n for g in result.plan.groups for n in g.nodes}
    assert set(doc["results"]) == {keys[n] for n in grouped}
    for g in result.plan.groups:
        cost = g.scored.cost
        for n in g.nodes:
            entry = doc["results"][keys[n]]
            assert entry["bgColor"] == group_colour(g.id)
            assert entry["value"].startswith(f"group {g.id}: {g.rule}, kernel ")
            assert f"({cost.bytes_saved} B)" in entry["value"]


def test_overlay_from_plan_json_matches(fused_result) -> None:
    result = fused_result("cnn")
    plan = json.loads(result.files["plan.json"])
    keys = node_keys(result.analysis.graph)
    assert overlay_from_plan_json(plan, keys) == overlay(result.plan, result.analysis.graph)


def test_unnamed_nodes_take_the_adapter_ids(tmp_path) -> None:
    import onnx
    from onnx import TensorProto, helper

    from ruleengine.graph import load_graph

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])]
    nodes[1].name = "named"
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]))
    onnx.save(model, tmp_path / "m.onnx")
    graph = load_graph(tmp_path / "m.onnx")
    assert sorted(node_keys(graph).values()) == ["<node_0>", "named"]


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"results": {"n": {}}},
        {"results": {"n": {"value": 1, "color": "red"}}},
        {"results": {"n": {"value": [1]}}},
        {"results": {}, "gradient": [{"stop": 2}]},
        {"results": {}, "thresholds": [{"value": 1}]},
        {"main": {"results": {"n": {"value": "x", "bgColor": 3}}}},
    ],
)
def test_schema_rejects_what_model_explorer_would_not_read(bad: dict) -> None:
    assert validate_overlay(bad) != []


def test_schema_accepts_both_file_forms() -> None:
    one = {"name": "x", "results": {"n": {"value": 3, "bgColor": "#aabbcc"}}}
    assert validate_overlay(one) == []
    assert validate_overlay({"main_graph": one, "other": {"results": {}}}) == []


def test_keys_are_node_ids_of_the_onnx_adapter(fused_result) -> None:
    """Where Model Explorer's ONNX adapter is installed (``pip install -e ".[view]"``),
    every overlay key names a node of the graph it builds."""
    adapter = pytest.importorskip("model_explorer_onnx.main")
    result = fused_result("transformer")
    graphs = adapter.ONNXAdapter().convert(str(result.model_path), {})
    ids = {n.id for n in graphs["graphs"][0].nodes}
    assert set(overlay(result.plan, result.analysis.graph)["results"]) <= ids
