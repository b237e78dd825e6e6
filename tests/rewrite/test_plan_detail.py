"""plan.json and report.txt stay bounded by the rule set by default (compact); every
rejected candidate is listed with --plan-detail full."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from ruleengine import pipeline
from ruleengine.errors import UsageError
from ruleengine.rewrite.plan import EXAMPLES_PER_VERDICT, plan_json
from ruleengine.rewrite.report import report_text

MODEL = Path(__file__).resolve().parents[2] / ".." / "shared" / "models" / "llama-tiny.ts.onnx"


@pytest.fixture(scope="module")
def result():
    return pipeline.fuse(MODEL)


def test_compact_lists_a_few_per_rule_and_verdict_and_counts_all(result) -> None:
    plan = result.plan
    compact = json.loads(result.files["plan.json"])
    full = plan_json(plan, "full")
    assert compact["detail"] == "compact" and full["detail"] == "full"
    assert len(full["rejected"]) == len(plan.rejected)
    per = Counter((r["rule"], r["verdict"]) for r in compact["rejected"])
    assert max(per.values()) <= EXAMPLES_PER_VERDICT
    # every kind of "no" is still shown, and every rejection is still counted
    assert set(per) == {(r["rule"], r["verdict"]) for r in full["rejected"]}
    assert compact["rejected_by_verdict"] == dict(Counter(r.verdict for r in plan.rejected))
    assert len(compact["rejected"]) < len(full["rejected"])  # this model has many
    assert compact["groups"] == full["groups"]
    text = result.files["report.txt"].decode()
    assert "more (listed in this report with --plan-detail full" in text
    assert len(report_text(plan, detail="full")) > len(text)


def test_unknown_detail_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="plan detail"):
        pipeline.fuse(MODEL, plan_detail="verbose")


def test_large_json_is_one_record_per_line_and_reads_back() -> None:
    from ruleengine.rewrite.emit import INDENT_LIMIT_BYTES, json_bytes

    groups = [{"id": i, "nodes": [f"n{i}", "ü"], "cost": None} for i in range(20000)]
    data = {"schema_version": 1, "groups": groups, "rejected": [], "summary": {"a": 1}}
    text = json_bytes(data)
    assert len(text) > INDENT_LIMIT_BYTES
    assert json.loads(text) == data
    assert text.decode().splitlines()[4] == '    {"id":1,"nodes":["n1","ü"],"cost":null},'
    small = {"a": [1, 2]}
    assert json_bytes(small) == (json.dumps(small, indent=2) + "\n").encode()
