"""``fuse --safe`` keeps the best correct plan: a user rule whose kernel is wrong takes
24 hard-swish blocks of PP-OCRv4-det from the bundled cube_epilogue rule (higher priority,
same nodes); safe mode drops them, solves again without them (the bundled duplicates
revived, nothing matched or costed again) and ends with the bundled preset's coverage."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from ruleengine.cli import app
from ruleengine.pipeline import fuse

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT.parent / "shared" / "models" / "real" / "ppocrv4-det.onnx"
DATA = Path(__file__).resolve().parent / "data" / "wrong_user_kernel"
EXAMPLE = ROOT / "examples" / "mlp_block.onnx"
GOLDEN_RULES = ROOT / "tests" / "golden" / "fuse" / "rules"


def test_safe_mode_resolves_to_at_least_the_bundled_coverage(tmp_path):
    bundled = fuse(MODEL, preset="all", input_shapes={"x": (1, 3, 640, 640)}).plan
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app,
        [
            "fuse", str(MODEL), "--input-shape", "x:1,3,640,640", "--preset", "all",
            "--rules", str(DATA / "rules"), "--kernels", str(DATA / "kernels"),
            "--safe", "-o", str(out),
        ],
    )  # fmt: skip
    # exit 0 as documented (the fused model passes), the warning on stderr
    assert res.exit_code == 0, res.output
    assert (
        "warning: AF525 --safe dropped 24 group(s) of rule user_conv_hswish "
        "(kernel UserConvHSwish failed its isolation check); re-solved 1 time(s)" in res.stderr
    )
    plan = json.loads((out / "plan.json").read_text())
    summary = plan["summary"]
    saving = summary["gross_bytes_saved"] / summary["hbm_bytes_before"]
    assert saving >= bundled.bytes_saved / bundled.hbm_bytes_before - 1e-12
    assert f"HBM saving {saving:.1%}" in res.stderr
    assert summary["groups"] >= len(bundled.groups)
    assert not any(g["rule"] == "user_conv_hswish" for g in plan["groups"])
    # round 1: the user rule's 24 groups were chosen, failed alone, and were dropped;
    # round 2: the re-solved plan passed
    v = plan["verification"]
    assert v["ok"] and [r["next"] for r in v["rounds"]] == ["re-solved", "passed"]
    dropped = v["rounds"][0]["dropped"]
    assert len(dropped) == 24 and len(v["dropped_groups"]) == 24
    assert {(d["rule"], d["target_op"], d["found_by"]) for d in dropped} == {
        ("user_conv_hswish", "UserConvHSwish", "isolation check")
    }
    assert plan["rejected_by_verdict"]["dropped_by_verification"] == 24
    # the revived bundled groups are fused, not listed as duplicates of the dropped ones
    fused = {(g["rule"], frozenset(g["nodes"])) for g in plan["groups"]}
    assert not [r for r in plan["rejected"] if (r["rule"], frozenset(r["nodes"])) in fused]
    duplicates = bundled.rejected.by_verdict().get("duplicate", 0)
    assert plan["rejected_by_verdict"].get("duplicate", 0) == duplicates
    text = (out / "report.txt").read_text()
    assert "round 1: 52 group(s)" in text
    assert "dropped group 2 (user_conv_hswish -> UserConvHSwish, p2o.Conv.1" in text
    report = json.loads((out / "report.json").read_text())
    assert report["verification"]["rounds"][0]["next"] == "re-solved"
    assert "Safe mode" in (out / "report.html").read_text()


def test_the_round_limit_is_said():
    result = fuse(
        EXAMPLE, [GOLDEN_RULES], safe=True, safe_rounds=1, corrupt_rules=["golden_matmul_bias"]
    )
    v = result.plan.verification
    assert v.ok and [r.next for r in v.rounds] == ["round limit"]
    assert v.dropped_groups == (1, 3)
    (warning,) = [w for w in result.warnings if w.code == "AF525"]
    assert "stopped at the limit of 1 round(s)" in warning.message
    assert "round limit reached" in result.files["report.txt"].decode()
    plan = json.loads(result.files["plan.json"])
    jsonschema.validate(plan, json.loads((ROOT / "schemas" / "plan.schema.json").read_text()))
    (dropped, _) = plan["verification"]["rounds"][0]["dropped"]
    assert dropped["rule"] == "golden_matmul_bias" and dropped["found_by"] == "isolation check"


def test_a_rule_with_nothing_to_take_its_place_is_kept_dropped():
    result = fuse(EXAMPLE, [GOLDEN_RULES], safe=True, corrupt_rules=["golden_matmul_bias"])
    v = result.plan.verification
    assert v.ok and v.dropped_groups == (1, 3)
    assert [r.next for r in v.rounds] in (["kept"], ["re-solved", "passed"])
    assert {d.rule for r in v.rounds for d in r.dropped} == {"golden_matmul_bias"}


def test_safe_rounds_must_be_positive():
    from ruleengine.errors import UsageError

    with pytest.raises(UsageError, match="safe_rounds"):
        fuse(EXAMPLE, [GOLDEN_RULES], safe=True, safe_rounds=0)
