"""Per-group verification on real exports: every group passes, a corrupted one is caught,
and the whole/per-group choice follows the memory estimate."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ruleengine.errors import AutofusionError
from ruleengine.graph import load_graph
from ruleengine.pipeline import fuse
from ruleengine.rewrite.weights import WeightSurvey
from ruleengine.verification import choose_mode, out_of_memory

MODELS = Path(__file__).resolve().parents[3] / "shared" / "models"
SAMPLE = ["llama-tiny.ts.onnx", "resnet18-narrow.ts-keepbn.onnx", "families/bart-tiny.ts.onnx"]


@pytest.mark.parametrize("name", SAMPLE)
def test_every_group_passes_alone(name):
    v = fuse(MODELS / name, verify=True, verify_mode="per-group").plan.verification
    assert v.mode == "per-group" and v.ok
    assert v.groups and Counter(c.status for c in v.groups) == {"passed": len(v.groups)}


def test_a_corrupted_group_is_caught_and_dropped():
    path = MODELS / "llama-tiny.ts.onnx"
    result = fuse(path)
    plain, tensors = result.plan, result.analysis.graph.tensors
    rule = Counter(g.rule for g in plain.groups).most_common(1)[0][0]
    # the hook negates a float output: groups of the rule that have one are corrupted
    bad = {
        g.id
        for g in plain.groups
        if g.rule == rule and any(tensors[o].dtype in ("float32", "float16") for o in g.outputs)
    }
    assert bad
    v = fuse(path, verify=True, verify_mode="per-group", corrupt_rules=(rule,)).plan.verification
    assert not v.ok
    assert {c.group for c in v.groups if c.status == "failed"} == bad
    safe = fuse(path, safe=True, verify_mode="per-group", corrupt_rules=(rule,)).plan
    first = safe.verification.rounds[0]
    assert safe.verification.ok and {d.group for d in first.dropped} == bad
    assert first.found_by == "per-group check"
    assert set(safe.verification.found_by.split(" + ")) <= {"per-group check"}
    # group ids are renumbered after a re-solve: what was dropped is not fused again
    dropped = {frozenset(d.nodes) for r in safe.verification.rounds for d in r.dropped}
    assert not dropped & {frozenset(g.nodes) for g in safe.groups if g.rule == rule}


def _survey(total: int) -> WeightSurvey:
    return WeightSurvey(Path("."), (), total, 0)


def test_mode_follows_the_estimate_and_can_be_forced():
    graph = load_graph(MODELS / "llama-tiny.ts.onnx")
    assert choose_mode(graph, _survey(0), "auto", "m").mode == "whole"
    huge = _survey(1 << 60)  # an exabyte of weights fits no machine
    auto = choose_mode(graph, huge, "auto", "m")
    assert auto.mode == "per-group" and "available" in auto.reason
    assert choose_mode(graph, huge, "per-group", "m").mode == "per-group"
    with pytest.raises(AutofusionError) as err:
        choose_mode(graph, huge, "whole", "m")
    assert err.value.diagnostics[0].code == "AF522"
    assert "per-group" in err.value.diagnostics[0].hint


def test_memory_error_gets_a_code():
    err = out_of_memory("m.onnx", MemoryError("Unable to allocate 64.0 GiB"), "whole")
    assert err.diagnostics[0].code == "AF523" and "64.0 GiB" in err.diagnostics[0].message
