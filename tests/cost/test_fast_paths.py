"""The cost stage's fast paths change no number: the structure memo (groups of the same
local structure share traffic, UB need, cost and kernel inputs) and the near misses
whose numbers are computed on first read."""

from __future__ import annotations

import sys
from pathlib import Path

from ruleengine.cost import load_target, score_candidates
from ruleengine.cost.formula import compute_cost
from ruleengine.cost.traffic import group_io, traffic
from ruleengine.cost.ub import ub_need
from ruleengine.cost.verdicts import score_one
from ruleengine.graph import graph_from_model, load_graph
from ruleengine.match import find_candidates
from ruleengine.rules import load_rule_set

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / ".." / "shared" / "models"


def _decoder(layers: int):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from synthetic import decoder_stack
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return graph_from_model(decoder_stack(layers))


def _fields(sc) -> tuple:
    return (sc.candidate, sc.priority, sc.verdict, sc.reason, sc.code, sc.cost, dict(sc.details))


def _check(graph) -> None:
    rule_set = load_rule_set([], preset="all")
    target = load_target("ascend910b")
    match = find_candidates(graph, rule_set)
    scored = score_candidates(graph, match, rule_set, target)
    rules = rule_set.by_name()
    fast = {(s.candidate.key, s.verdict.value): s for s in scored}
    # candidates: every memo-backed record equals a fresh score_one without the memo
    # (duplicates aside, which only change the verdict of an equal-node-set loser)
    for cand in match.candidates:
        plain = score_one(graph, cand, rules.get(cand.rule), target)
        got = next(s for (key, _), s in fast.items() if key == cand.key)
        if got.code != "duplicate":
            assert _fields(got) == _fields(plain)
    # near misses: the numbers read on demand are the eager ones
    assert match.near_misses
    for nm in match.near_misses:
        sc = next(s for (key, _), s in fast.items() if key == nm.candidate.key)
        io = group_io(graph, nm.candidate.nodes)
        tr = traffic(graph, io)
        want = {"inputs": io.inputs, "outputs": io.outputs}
        cost = None
        if not tr.unknown:
            ub = ub_need(graph, io, target)
            cost = compute_cost(graph, io, tr, ub, target)
            want["ub_buffers"] = ub.buffers
        assert (sc.code, sc.reason) == (nm.code, nm.reason)
        assert sc.cost == cost and dict(sc.details) == want


def test_fast_paths_on_a_decoder_stack() -> None:
    _check(_decoder(3))  # three identical layers: the memo is hit


def test_fast_paths_on_a_shared_model() -> None:
    _check(load_graph(SHARED / "bert-tiny.ts14.onnx"))
