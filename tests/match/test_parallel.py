"""Matching split over processes gives exactly the serial result."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ruleengine.graph import graph_from_model
from ruleengine.match import find_candidates, parallel
from ruleengine.rules import load_rule_set

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from synthetic import decoder_stack  # noqa: E402


def test_parallel_matching_equals_serial(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = graph_from_model(decoder_stack(4))
    rule_set = load_rule_set([], preset="all")
    serial = find_candidates(graph, rule_set)
    monkeypatch.setattr(parallel, "PARALLEL_FROM_NODES", 0)
    split = parallel.find_candidates_parallel(graph, rule_set, 3)
    assert split.candidates == serial.candidates
    assert split.near_misses == serial.near_misses
    assert len(serial.candidates) > 50


def test_rules_are_split_into_balanced_chunks() -> None:
    rules = load_rule_set([], preset="all").rules
    chunks = parallel._split(rules, 3)
    assert sorted(r.name for c in chunks for r in c) == sorted(r.name for r in rules)
    assert len(chunks) == 3


def test_matching_stays_serial_while_another_thread_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    graph = graph_from_model(decoder_stack(1))
    rule_set = load_rule_set([], preset="all")
    monkeypatch.setattr(parallel, "PARALLEL_FROM_NODES", 0)
    forked: list[bool] = []
    monkeypatch.setattr(parallel.multiprocessing, "get_context", lambda *_: forked.append(True))
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        result = parallel.find_candidates_parallel(graph, rule_set, 2)
    finally:
        release.set()
        other.join()
    assert not forked
    assert result.candidates == find_candidates(graph, rule_set).candidates


def test_parallel_matching_uses_the_memo_first(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from ruleengine.match import memo

    rs = load_rule_set([], preset="all")
    rs = replace(rs, rules=tuple(r for r in rs.rules if r.name in ("rmsnorm", "matmul_bias")))
    graph = graph_from_model(decoder_stack(16))
    serial = find_candidates(graph, rs, memo=False)
    monkeypatch.setattr(parallel, "PARALLEL_FROM_NODES", 0)
    monkeypatch.setattr(memo, "MEMO_FROM_NODES", 0)
    monkeypatch.setattr(memo, "MAX_COVER", 1.0)
    with_memo = parallel.find_candidates_parallel(graph, rs, 2)
    assert with_memo.twins  # matched once per structure, in this process
    monkeypatch.setattr(memo, "MAX_COVER", 0.0)  # the memo declines: rules over processes
    split = parallel.find_candidates_parallel(graph, rs, 2)
    assert not split.twins
    for result in (with_memo, split):
        assert result.candidates == serial.candidates
        assert result.near_misses == serial.near_misses
