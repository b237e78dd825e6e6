"""Costing a translated candidate by its twin's numbers gives what scoring it does."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ruleengine.cost import load_target, score_candidates
from ruleengine.graph import graph_from_model
from ruleengine.match import find_candidates, memo
from ruleengine.rules import load_rule_set

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from synthetic import decoder_stack

RULES = ("elementwise_chain", "norm_projections", "rmsnorm", "swiglu", "matmul_bias")


def _view(sc) -> tuple:
    return (sc.candidate, sc.priority, sc.verdict, sc.code, sc.cost, sc.reason, dict(sc.details))


def _stack_case(monkeypatch: pytest.MonkeyPatch, layers: int) -> tuple:
    """A decoder stack, the twin-heavy rules and the default target, the memo covering all."""
    monkeypatch.setattr(memo, "MAX_COVER", 1.0)
    rs = load_rule_set([], preset="all")
    rs = replace(rs, rules=tuple(r for r in rs.rules if r.name in RULES))
    return graph_from_model(decoder_stack(layers)), rs, load_target("ascend910b")


def test_twins_score_like_their_own_scoring(monkeypatch: pytest.MonkeyPatch) -> None:
    graph, rs, target = _stack_case(monkeypatch, 30)
    with_memo = find_candidates(graph, rs, memo=True)
    assert len(with_memo.twins) > len(with_memo.candidates) // 2
    plain = replace(with_memo, twins={})
    a = score_candidates(graph, with_memo, rs, target)
    b = score_candidates(graph, plain, rs, target)
    assert [_view(x) for x in a] == [_view(x) for x in b]
    assert {x.verdict for x in b} >= {"fuse", "duplicate"}


def test_records_merged_by_near_at_equal_the_sort(monkeypatch: pytest.MonkeyPatch) -> None:
    """The near misses' records merged among the candidates' by ``MatchResult.near_at``
    (no key read) come in the order sorting them all by (key, verdict) gives."""
    graph, rs, target = _stack_case(monkeypatch, 6)
    found = find_candidates(graph, rs, memo=True)
    assert found.near_misses and found.near_at is not None
    merged = score_candidates(graph, found, rs, target)
    by_sort = score_candidates(graph, replace(found, near_at=None), rs, target)
    assert [_view(x) for x in merged] == [_view(x) for x in by_sort]
    assert {x.verdict for x in merged} >= {"fuse", "intermediate_escapes"}


def test_records_keep_no_dict_and_no_node_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory at LLM scale (issue 13): matching and costing records have slots, no
    ``__dict__``, and no node set or (translated) key tuple kept per record once
    scored (but the few read by name); every value is still there when read."""
    graph, rs, target = _stack_case(monkeypatch, 30)
    found = find_candidates(graph, rs, memo=True)
    scored = score_candidates(graph, found, rs, target)
    records = [*found.candidates, *found.near_misses, *scored]
    assert not any(hasattr(r, "__dict__") for r in records)
    translated = [c for c in found.candidates if type(c).__name__ == "Translated"]
    # (the few duplicates' keys are read by the duplicate check, and kept)
    kept = sum(hasattr(c, "_key") for c in translated)
    assert translated and kept < len(translated) // 4
    for c in translated[:50]:
        assert c.key == (c.rule, tuple(n for g in c.bindings for n in g), c.alternative)
        assert c.node_set == frozenset(c.nodes)
