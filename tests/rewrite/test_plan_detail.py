"""plan.json and report.txt stay bounded by the rule set by default (compact); every
rejected candidate is listed with --plan-detail full."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from ruleengine import pipeline
from ruleengine.errors import UsageError
from ruleengine.rewrite.plan_json import plan_json
from ruleengine.rewrite.rejections import (
    EXAMPLES_PER_VERDICT,
    RejectedCandidates,
    list_rejections,
)
from ruleengine.rewrite.report import report_text

MODEL = Path(__file__).resolve().parents[2] / ".." / "shared" / "models" / "llama-tiny.ts.onnx"


@pytest.fixture(scope="module")
def result():
    return pipeline.fuse(MODEL)


@pytest.fixture(scope="module")
def full_result():
    return pipeline.fuse(MODEL, plan_detail="full")


def test_compact_lists_a_few_per_rule_and_verdict_and_counts_all(result, full_result) -> None:
    plan = full_result.plan
    compact = json.loads(result.files["plan.json"])
    full = json.loads(full_result.files["plan.json"])
    assert compact["detail"] == "compact" and full["detail"] == "full"
    assert full == plan_json(plan, "full")
    assert len(full["rejected"]) == len(plan.rejected) == len(result.plan.rejected)
    per = Counter((r["rule"], r["verdict"]) for r in compact["rejected"])
    assert max(per.values()) <= EXAMPLES_PER_VERDICT
    # every kind of "no" is still shown, and every rejection is still counted
    assert set(per) == {(r["rule"], r["verdict"]) for r in full["rejected"]}
    assert compact["rejected_by_verdict"] == dict(Counter(r.verdict for r in plan.rejected))
    assert compact["rejected_by_verdict"] == full["rejected_by_verdict"]
    assert len(compact["rejected"]) < len(full["rejected"])  # this model has many
    assert compact["groups"] == full["groups"] and compact["rules"] == full["rules"]
    # the compact list is the full list's first few of each (rule, verdict), in order
    seen: Counter = Counter()
    firsts = []
    for r in full["rejected"]:
        seen[r["rule"], r["verdict"]] += 1
        if seen[r["rule"], r["verdict"]] <= EXAMPLES_PER_VERDICT:
            firsts.append(r)
    assert compact["rejected"] == firsts
    assert compact == plan_json(plan, "compact")
    text = result.files["report.txt"].decode()
    assert "more (listed in this report with --plan-detail full" in text
    same = {"timings": False, "detail": "compact"}
    assert report_text(result.plan, **same) == report_text(plan, **same)
    assert len(report_text(plan, detail="full")) > len(text)
    # a terminal's first rows are the full list's
    terminal = {"timings": False, "max_rejected": 25}
    assert report_text(result.plan, **terminal) == report_text(plan, **terminal)


def test_compact_fuse_keeps_only_what_it_lists(result, full_result) -> None:
    """With the compact plan the per-candidate records are let go (peak memory): the plan
    counts every rejection, keeps the listed ones, and says so when asked for the rest."""
    assert result.analysis.scored == () and result.analysis.match.candidates == ()
    assert result.analysis.resolution.lost == ()
    assert result.analysis.resolution.chosen == full_result.analysis.resolution.chosen
    with pytest.raises(LookupError, match='plan_detail="full"'):
        list(result.plan.rejected)
    with pytest.raises(LookupError, match='plan_detail="full"'):
        plan_json(result.plan, "full")


def test_groups_dropped_later_are_listed_as_in_the_full_plan(full_result) -> None:
    """Safe mode drops groups after the compact summary was taken: adding them gives the
    listing the full record gives."""
    a = full_result.analysis
    dropped = full_result.groups[1::2]
    whole = RejectedCandidates(a.scored, a.resolution.lost, dropped, a.match.near_misses)
    summary = list_rejections(a.scored, a.resolution.lost, a.match).with_dropped(dropped)
    assert len(summary) == len(whole) and summary.by_verdict() == whole.by_verdict()
    k = EXAMPLES_PER_VERDICT
    assert _rows(summary.examples(k)) == _rows(whole.examples(k))
    assert _rows(summary.head(25)) == _rows(whole.all()[:25])
    assert "dropped_by_verification" in summary.by_verdict()


def _rows(rejected):
    return [(r.rule, r.nodes, r.verdict, r.code, r.reason) for r in rejected]


def test_unknown_detail_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="plan detail"):
        pipeline.fuse(MODEL, plan_detail="verbose")


def test_large_json_is_one_record_per_line_and_reads_back() -> None:
    from ruleengine.jsontext import INDENT_LIMIT_BYTES, json_bytes

    groups = [{"id": i, "nodes": [f"n{i}", "ü"], "cost": None} for i in range(20000)]
    data = {"schema_version": 1, "groups": groups, "rejected": [], "summary": {"a": 1}}
    text = json_bytes(data)
    assert len(text) > INDENT_LIMIT_BYTES
    assert json.loads(text) == data
    assert text.decode().splitlines()[4] == '    {"id":1,"nodes":["n1","ü"],"cost":null},'
    small = {"a": [1, 2]}
    assert json_bytes(small) == (json.dumps(small, indent=2) + "\n").encode()
