"""Drafted rules can join a model's candidates into one large component whose chain
plan (``resolve/segments.py``) cuts off almost nothing; solved by that plan, every pair
of boundary states solves the rest again, itself chained again: exponential (a
suggest run on bart-tiny.ts with drafted region cores: > 20 min). The selection then
solves the component whole; its answer is the same."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

import ruleengine.resolve.component_solver as resolve_pkg
from ruleengine.cost.model import Cost, ScoredCandidate, Verdict
from ruleengine.graph import graph_from_model
from ruleengine.match.model import Candidate
from ruleengine.resolve import resolve


def _scored(rule: str, nodes: tuple[str, ...], net: int) -> ScoredCandidate:
    cost = Cost(net + 10, 10, net, 0, net, 2, 1, 0, 0, 1)
    cand = Candidate(rule, 0, tuple((n,) for n in nodes), (), ())
    return ScoredCandidate(cand, 0, Verdict.FUSE, "fuse", "fuse", cost)


def _chain_case(n: int = 24):
    """A chain of n elementwise ops; candidates: every window of 2 and 3 ops (every gap
    crossed alike but near the ends: the only cuts cut off the end ops)."""
    names = [f"o{k}" for k in range(n)]
    nodes, prev = [], "x"
    for k, name in enumerate(names):
        nodes.append(helper.make_node("Relu" if k % 2 else "Sigmoid", [prev], [name], name=name))
        prev = name
    vi = [helper.make_tensor_value_info(t, TensorProto.FLOAT, [4]) for t in ("x", prev)]
    graph = graph_from_model(
        helper.make_model(
            helper.make_graph(nodes, "chain", [vi[0]], [vi[1]]),
            opset_imports=[helper.make_opsetid("", 18)],
        )
    )
    cands = [
        _scored(f"w{w}_{k}", tuple(names[k : k + w]), 7 * w + (k * 5) % 11)
        for w in (2, 3)
        for k in range(n - w + 1)
    ]
    return graph, cands


def test_a_chain_plan_that_splits_nothing_is_not_nested(monkeypatch: pytest.MonkeyPatch) -> None:
    graph, cands = _chain_case()
    calls: list[int] = []
    real = resolve_pkg.solve_chain

    def counted(plan, *args):
        calls.append(max(map(len, plan.interiors)))
        return real(plan, *args)

    monkeypatch.setattr(resolve_pkg, "solve_chain", counted)
    monkeypatch.setattr(resolve_pkg, "CHAIN_FROM", 8)
    with monkeypatch.context() as m:
        m.setattr(resolve_pkg, "UNSPLIT_FROM", 10**9)  # the guard off: the plan nests
        nested = resolve(graph, cands)
    assert len(calls) > 1 and calls[0] * 10 > 9 * len(cands)
    calls.clear()
    monkeypatch.setattr(resolve_pkg, "UNSPLIT_FROM", 8)
    guarded = resolve(graph, cands)
    assert not calls  # solved whole
    with monkeypatch.context() as m:
        m.setattr(resolve_pkg, "CHAIN_FROM", 10**9)
        whole = resolve(graph, cands)
    assert guarded.status == nested.status == whole.status == "OPTIMAL"
    assert guarded.objective == nested.objective == whole.objective
