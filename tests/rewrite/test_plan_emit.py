"""Plan, report, DOT and atomic writing on hand-built records (no other stage needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import onnx
import pytest

from ruleengine import procs
from ruleengine.cost.model import Verdict
from ruleengine.errors import OutputError
from ruleengine.match.model import MatchResult, NearMiss
from ruleengine.resources import schema_path
from ruleengine.rewrite.dot import PendingDot, render_dot
from ruleengine.rewrite.emit import render_files, write_atomically
from ruleengine.rewrite.outpaths import safe_relpath
from ruleengine.rewrite.plan import build_groups, build_plan
from ruleengine.rewrite.plan_json import plan_json
from ruleengine.rewrite.report import report_json, report_text
from ruleengine.rules.model import RuleSet
from tests.rewrite.records import TARGET, graph_from_model, resolution, rule, scored

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mlp_block.onnx"
RULES = RuleSet(
    (
        rule("bias_add", "MatMulBias", kernel="matmul_bias"),
        rule(
            "cbr",
            "ConvBnRelu",
            file_path="./output/kernels/",
            gen_dot_graph=True,
            dot_graph_path="output/graphs",
        ),
    )
)


@pytest.fixture(scope="module")
def graph():
    return graph_from_model(onnx.load(str(EXAMPLE)))


@pytest.fixture(scope="module")
def plan(graph):
    chosen = [scored("cbr", ["conv", "bn", "relu"]), scored("bias_add", ["fc1_matmul", "fc1_bias"])]
    lost = scored("bias_add", ["fc1_bias", "gelu_div"], saved=10)
    low = scored("bias_add", ["fc2_matmul", "fc2_bias"])
    from dataclasses import replace

    low = replace(low, verdict=Verdict.LOW_BENEFIT, code="low-benefit", reason="gain 1% < 20%")
    match = MatchResult(
        tuple(s.candidate for s in (*chosen, lost, low)),
        (NearMiss(scored("cbr", ["conv"]).candidate, "output-count", "2 outputs, rule wants 1"),),
    )
    res = resolution(chosen, [(lost, "lost a conflict to group 1")])
    return build_plan(
        model_name=EXAMPLE.name,
        graph=graph,
        rule_set=RULES,
        target=TARGET,
        match=match,
        scored=(*chosen, lost, low),
        resolution=res,
        groups=build_groups(graph, chosen, RULES),
    )


def test_plan_json_follows_the_schema(plan):
    data = plan_json(plan)
    schema = json.loads(schema_path("plan").read_text())
    jsonschema.validate(data, schema)
    s = data["summary"]
    assert (s["nodes_before"], s["nodes_after"], s["groups"]) == (15, 12, 2)
    assert s["hbm_bytes_before"] - s["hbm_bytes_after"] == s["gross_bytes_saved"] == 2000
    assert s["net_bytes_saved"] == s["gross_bytes_saved"] - s["overhead_bytes"]
    assert [g["rule"] for g in data["groups"]] == ["bias_add", "cbr"]
    assert data["groups"][1]["kernel"]["file_path"] == "output/kernels"
    assert {r["verdict"] for r in data["rejected"]} == {"lost_conflict", "low_benefit", "near_miss"}
    assert data["rules"] == [
        {"rule": "bias_add", "matched": 3, "fused": 1},
        {"rule": "cbr", "matched": 2, "fused": 1},  # the near miss counts as a match
    ]


def test_report_text_and_json(plan):
    text = report_text(plan, ["plan.json"], timings=False)
    assert "HBM access" in text and "fits" in text
    assert "nodes:                15 -> 12" in text
    assert "fused groups:         2 (bias_add 1, cbr 1)" in text
    assert "Verification: not run" in text
    data = report_json(plan, ["plan.json"], timings=False)
    assert data["totals"]["groups_per_rule"] == {"bias_add": 1, "cbr": 1}
    assert "timings_s" not in data


def test_dot_has_dashed_clusters_labelled_rule_and_kernel(graph, plan):
    dot = render_dot(graph, plan.groups)
    assert dot.count("subgraph cluster_g") == 2
    assert "style=dashed" in dot
    assert "group 2: cbr\\nkernel cbr" in dot


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_the_dot_graph_rendered_in_a_forked_child_is_the_same(graph, plan, monkeypatch):
    monkeypatch.setattr(procs, "FORK_FROM_NODES", 0)
    alone = PendingDot(graph, plan.groups, jobs=1)
    beside = PendingDot(graph, plan.groups, jobs=2)
    assert alone._child is None and beside._child is not None
    assert beside.result() == alone.result() == render_dot(graph, plan.groups).encode()
    # a child that gives no result: rendered in process, the same bytes
    failing = PendingDot(graph, plan.groups, jobs=2)

    def gone() -> bytes:
        raise ChildProcessError("the forked worker ended without a result")

    monkeypatch.setattr(failing._child, "result", gone)
    assert failing.result() == alone.result()
    files = render_files(
        plan=plan, fused_model_files={}, graph=graph, dot=PendingDot(graph, plan.groups, jobs=2)
    )
    assert (
        files["graph.dot"]
        == render_files(plan=plan, fused_model_files={}, graph=graph)["graph.dot"]
    )


def test_render_files_includes_rule_output_paths(graph, plan):
    files = render_files(plan=plan, fused_model_files={"mlp_block.fused.onnx": b"x"}, graph=graph)
    assert {"mlp_block.fused.onnx", "plan.json", "report.txt", "report.json", "graph.dot"} <= set(
        files
    )
    assert "output/kernels/cbr.kernel.json" in files
    assert "output/graphs/cbr.dot" in files


@pytest.mark.parametrize("bad", ["../x", "/etc", "a/../../b", "~/x", "C:\\temp"])
def test_escaping_paths_are_refused(bad):
    with pytest.raises(OutputError) as err:
        safe_relpath(bad, "output.file_path")
    assert err.value.diagnostics[0].code == "AF208"


def test_safe_relpath_normalises():
    assert safe_relpath("./output/kernels/", "x") == "output/kernels"
    assert safe_relpath("a/../b", "x") == "b"
    assert safe_relpath(".", "x") == "."


def test_write_atomically_all_or_nothing(tmp_path):
    out = tmp_path / "out"
    written = write_atomically(out, {"a.txt": b"1", "sub/b.txt": b"2"})
    assert sorted(p.name for p in written) == ["a.txt", "b.txt"]
    assert (out / "sub" / "b.txt").read_bytes() == b"2"
    # a file where a directory must go: nothing new is written, no temp file is left
    blocker = tmp_path / "out2"
    blocker.mkdir()
    (blocker / "sub").write_text("not a dir")
    with pytest.raises(OutputError):
        write_atomically(blocker, {"first.txt": b"1", "sub/b.txt": b"2"})
    assert sorted(p.name for p in blocker.iterdir()) == ["sub"]


def test_write_atomically_directory_in_the_way_writes_nothing(tmp_path):
    """A directory named like an output (out/report.txt/) failed at os.replace after the
    fused model, plan.json and graph.dot had already been replaced: a half-written set."""
    out = tmp_path / "out"
    (out / "report.txt").mkdir(parents=True)
    (out / "plan.json").write_bytes(b"old")
    with pytest.raises(OutputError, match="directory of that name is in the way"):
        write_atomically(out, {"plan.json": b"new", "report.txt": b"r"})
    assert (out / "plan.json").read_bytes() == b"old"
    assert sorted(p.name for p in out.iterdir()) == ["plan.json", "report.txt"]


def test_write_atomically_never_overwrites_the_input(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"original")
    with pytest.raises(OutputError, match="input model"):
        write_atomically(tmp_path, {"m.onnx": b"x"}, protect=(model,))
    assert model.read_bytes() == b"original"


def test_rule_output_colliding_with_a_fuse_output_is_refused(graph):
    rules = RuleSet((rule("cbr", "ConvBnRelu", kernel="graph", gen_dot_graph=True),))
    groups = build_groups(graph, [scored("cbr", ["conv", "bn", "relu"])], rules)
    res = resolution([groups[0].scored])
    plan = build_plan(
        model_name="m.onnx",
        graph=graph,
        rule_set=rules,
        target=TARGET,
        match=MatchResult((groups[0].scored.candidate,)),
        scored=(groups[0].scored,),
        resolution=res,
        groups=groups,
    )
    with pytest.raises(OutputError, match="would overwrite"):
        render_files(plan=plan, fused_model_files={"m.fused.onnx": b""}, graph=graph)
