"""Invariants of costing and resolution on real exported models (../shared/models)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ruleengine.cost import Verdict, load_target
from ruleengine.pipeline import analyze
from ruleengine.resolve import resolve

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "models"
MODELS = [
    ("resnet18-narrow.ts-keepbn.onnx", "cnn"),
    ("gpt2-tiny.ts14.onnx", "transformer"),
    ("llama-tiny.ts.onnx", "transformer"),
]


@pytest.mark.parametrize("name, preset", MODELS)
def test_cost_and_resolution_invariants(name: str, preset: str) -> None:
    analysis = analyze(SHARED / name, preset=preset, target="ascend910b")
    graph, scored, res = analysis.graph, analysis.scored, analysis.resolution
    assert scored, name
    ub_limit = load_target("ascend910b").ub_usable_bytes
    for sc in scored:
        assert sc.code and sc.reason, sc
        c = sc.cost
        if c is None:  # sizes unknown: a dynamic-shape verdict or a near miss
            assert sc.verdict not in (Verdict.FUSE, Verdict.DUPLICATE, Verdict.UB_OVERFLOW)
            continue
        # Fusing never adds HBM traffic: external inputs are read at most as often,
        # escaping outputs written at most once.
        assert c.bytes_after <= c.bytes_before and c.bytes_saved >= 0
        assert c.accesses_after <= c.accesses_before
        assert c.net_bytes == c.bytes_saved - c.overhead_bytes
        assert c.ub_limit == ub_limit
        if sc.verdict is Verdict.FUSE:
            assert c.net_bytes > 0 and c.ub_bytes <= c.ub_limit
    # The resolution: disjoint groups, objective = their net bytes, exact >= greedy.
    seen: set[str] = set()
    for sc in res.chosen:
        assert not (sc.candidate.node_set & seen)
        seen |= sc.candidate.node_set
    assert res.objective == sum(sc.cost.net_bytes for sc in res.chosen)
    assert res.status == "OPTIMAL" and res.objective > 0
    greedy = resolve(graph, scored, solver="greedy")
    assert res.objective >= greedy.objective
    viable = sum(sc.viable for sc in scored)
    assert len(res.chosen) + len(res.lost) == viable
