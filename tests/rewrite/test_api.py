"""The Python API mirrors the CLI: AutoFusion / Fuser and the plain functions."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import onnx
import pytest

import ruleengine
from ruleengine import AutoFusion, Fuser

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mlp_block.onnx"
RULES = ROOT / "tests" / "golden" / "fuse" / "rules"


@pytest.fixture(scope="module")
def af() -> AutoFusion:
    return AutoFusion([RULES], target="ascend910b", solver="exact")


def test_candidates_explain_plan(af):
    cands = af.candidates(EXAMPLE)
    assert {c.rule for c in cands} >= {"golden_matmul_bias", "golden_conv_bn_relu"}
    verdicts = {s.candidate.rule: s.verdict.value for s in af.explain(EXAMPLE)}
    assert verdicts["golden_layernorm_matmul"] == "low_benefit"
    plan = af.plan(EXAMPLE)
    assert len(plan.groups) == 5 and plan.verification is None


def test_fuse_in_memory_and_to_disk(af, tmp_path):
    result = af.fuse(onnx.load(str(EXAMPLE)))  # an in-memory ModelProto works too
    assert result.plan.nodes_after == len(result.fused_model.graph.node)
    assert not list(tmp_path.iterdir())
    result = ruleengine.fuse(EXAMPLE, [RULES], output_dir=tmp_path / "out", verify=True)
    assert (tmp_path / "out" / "mlp_block.fused.onnx").is_file()
    assert result.plan.verification.ok
    check = af.verify(EXAMPLE, result.fused_model)
    assert check.ok and {o.name for o in check.outputs} == {"y", "features"}


def test_options_benefit_threshold_and_safe_mode():
    strict = Fuser([RULES], benefit_threshold=0.99)
    assert strict.plan(EXAMPLE).groups == ()
    safe = AutoFusion([RULES], safe_mode=True)
    assert safe.plan(EXAMPLE).verification.ok


def test_greedy_solver_and_enable(tmp_path):
    plan = ruleengine.fuse(EXAMPLE, [RULES], solver="greedy", enable=["golden_conv_bn_relu"]).plan
    assert plan.solver == "greedy" and [g.rule for g in plan.groups] == ["golden_conv_bn_relu"]


def test_pipeline_reports_progress_and_stage_timings():
    from ruleengine.pipeline import fuse

    seen: list[str] = []
    result = fuse(EXAMPLE, [RULES], verify=True, progress=seen.append)
    assert seen[0] == "loading rules" and "verifying in onnxruntime" in seen
    stages = [name for name, _ in result.plan.timings]
    assert stages == [
        "rules",
        "graph",
        "match",
        "cost",
        "resolve",
        "plan",
        "rewrite",
        "verify",
        "check",
        "emit",
    ]
    # CPU seconds of the same stages (report.json cpu_s), each at most a little over wall
    cpu = dict(result.plan.cpu_timings)
    assert list(cpu) == stages and all(v >= 0 for v in cpu.values())
    report = json.loads(result.files["report.json"])
    assert list(report["cpu_s"]) == stages[:-1] == list(report["timings_s"])  # emit: after


@pytest.mark.parametrize("name", ["../../escaped_by_graph_name", "a/b", "/abs/x", "..", ""])
def test_model_proto_graph_name_never_leaves_the_temporary_directory(af, tmp_path, name):
    """A ModelProto named '../../x' used to be written to <tmp>/../../x.onnx (outside the
    temporary directory, and never removed); 'a/b' was a FileNotFoundError."""
    model = onnx.load(str(EXAMPLE))
    model.graph.name = name
    result = af.fuse(model)
    assert "/" not in result.fused_name and not result.fused_name.startswith(".")
    assert not (Path(tempfile.gettempdir()).parent / "escaped_by_graph_name.onnx").exists()


def test_serialized_bytes_are_a_model_and_other_objects_a_type_error(af):
    assert af.candidates(EXAMPLE.read_bytes())
    with pytest.raises(TypeError, match="onnx.ModelProto"):
        af.candidates(None)


def test_one_rule_path_as_a_string(tmp_path):
    """AutoFusion(rules='rules/') iterated the string: 'no rule files at: r, u, l, e, s'."""
    assert AutoFusion(str(RULES)).candidates(EXAMPLE)
    assert AutoFusion(RULES).candidates(EXAMPLE)


@pytest.mark.parametrize("size", [-1, 0, "8", 1.5, True])
def test_bad_dim_sizes_are_refused(size):
    """dims={'batch': -1} or 'x' were accepted silently by the API (the CLI checks --dim)."""
    with pytest.raises(ruleengine.errors.UsageError, match="positive integer"):
        AutoFusion([RULES], dims={"batch": size}).candidates(EXAMPLE)
