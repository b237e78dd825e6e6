"""report.html without a browser: self-contained, deterministic, totals from report.json,
every group and node in the embedded document, traffic that adds up to the plan's."""

from __future__ import annotations

import json
import re

import pytest

from ruleengine.report import render_html, render_report_files, report_document
from ruleengine.report.html import embed_json, unpack
from ruleengine.report.traffic import layer_of
from ruleengine.rewrite.report import report_json


def _embedded(page: bytes) -> dict:
    return unpack(page)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_page_is_self_contained_and_deterministic(fused_result, name: str) -> None:
    result = fused_result(name)
    first = render_report_files(result.plan, result.analysis.graph)
    again = render_report_files(result.plan, result.analysis.graph)
    assert first == again  # same plan, same bytes
    page = first["report.html"].decode()
    # no fetch of anything: no external script, stylesheet, image or font
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "@import" not in page and "url(" not in page
    assert page.count("<script") == 2  # the document and the inline script


def test_document_holds_every_group_and_the_report_totals(fused_result) -> None:
    result = fused_result("cnn")
    plan, graph = result.plan, result.analysis.graph
    doc = _embedded(render_html(report_document(plan, graph)))
    assert doc["totals"] == report_json(plan, timings=False)["totals"]
    assert [g[0] for g in doc["groups"]] == [g.id for g in plan.groups]
    assert len(doc["nodes"]) == len(graph.nodes)
    for g, card in zip(plan.groups, doc["groups"], strict=True):
        assert doc["labels"][card[1]] == g.rule
        assert [doc["nodes"][i] for i in card[11]["n"]] == list(g.nodes)
        assert all(doc["nodeGroup"][i] == g.id for i in card[11]["n"])
    assert sum(len(g[12]) for g in doc["groups"]) > 0  # conflicts in resnet


def test_traffic_adds_up_to_the_plan(fused_result) -> None:
    for name in ("mlp", "cnn", "transformer"):
        plan = fused_result(name).plan
        doc = report_document(plan, fused_result(name).analysis.graph)
        for rows in (doc["traffic"]["byOp"], doc["traffic"]["byLayer"]["bars"]):
            assert sum(r[1] for r in rows) == plan.hbm_bytes_before
            assert sum(r[2] for r in rows) == plan.hbm_bytes_after
            assert len(rows) <= 64


def test_group_picture_edges_inside_and_across(fused_result) -> None:
    result = fused_result("cnn")
    doc = report_document(result.plan, result.analysis.graph)
    for card in doc["groups"]:
        pic, n = card[11], len(card[11]["n"])
        assert len(pic["e"]) >= n - 1  # a connected group: n - 1 internal edges at least
        assert pic["w"], "every group writes something to HBM"
        assert all(0 <= e[0] < n and 0 <= e[1] < n for e in pic["e"])
        assert all(isinstance(doc["tensors"][r[2]], str) for r in pic["r"])


def test_script_breaking_names_are_escaped() -> None:
    text = embed_json({"nodes": ["</script><script>alert(1)</script>", "<!--", "\u2028"]})
    assert "<" not in text and "\u2028" not in text
    assert json.loads(text)["nodes"][0].startswith("</script>")


def test_layer_numbers_from_names() -> None:
    assert layer_of("/model/layers.12/self_attn/MatMul") == 12
    assert layer_of("/inner/encoder/layer.1/attention/self/MatMul_1") == 1
    assert layer_of("l37_ln1_pow3") == 37
    assert layer_of("node_linear_14") is None
    assert layer_of("node_Conv_291") is None


def test_rejections_per_rule_are_capped_and_counted() -> None:
    from ruleengine.report.data import ROWS_PER_RULE, _by_rule
    from ruleengine.rewrite.model import Rejection

    many = [Rejection("r", (f"n{i}",), "no_benefit", "no-benefit", "why") for i in range(80)]
    ((rule, rows, listed),) = _by_rule(many)
    assert (rule, len(rows), listed) == ("r", ROWS_PER_RULE, 80)
