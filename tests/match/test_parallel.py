"""Matching split over processes gives exactly the serial result."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ruleengine.graph import graph_from_model
from ruleengine.match import find_candidates, parallel
from ruleengine.rules import load_rule_set

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from synthetic import decoder_stack


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


def _counting_forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of queries each forked Datalog share asks (``backend`` forks through
    ``procs.Forked``)."""
    from ruleengine import procs as forked_mod

    shares: list[int] = []

    class Counting(forked_mod.Forked):
        def __init__(self, fn, *args) -> None:
            if fn.__name__ == "_asked_bytes":
                shares.append(len(args[0]))
            super().__init__(fn, *args)

    monkeypatch.setattr(forked_mod, "Forked", Counting)
    return shares


def test_datalog_clauses_shared_among_processes_give_the_same_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ruleengine.match import backend

    facts = [("e", (a, b)) for a, b in ((1, 2), (2, 3), (3, 4), (4, 1), (2, 5))]
    facts += [("n", (a,)) for a in range(1, 6)]
    program = "\n".join(
        [
            "q(C, A, B) <= e(A, B) & (C == 1)",
            "q(C, A, B) <= e(A, X) & e(X, B) & (C == 2)",
            "q(C, A, B) <= e(A, B) & e(B, X) & (C == 2)",  # the same C as the line above
            "r(C, A) <= n(A) & e(A, X) & (C == 1)",
            "s(C, A) <= p2(A, X) & (C == 7)",  # p2: not asked, every share keeps it
            "p2(A, B) <= e(A, X) & e(X, B)",
        ]
    )
    queries = [("q", 2), ("r", 1), ("s", 1)]
    one = backend.run(facts, program, queries)
    assert one["q"] and one["r"] and one["s"]
    shares = _counting_forks(monkeypatch)
    for jobs in (2, 3, 8):
        timings: dict[str, float] = {}
        got = backend.run(facts, program, queries, timings, jobs=jobs)
        assert got == one
        assert list(got) == list(timings) == ["q", "r", "s"]
    # 5 clauses dealt out: shares of 2 and 3 processes, 5 of 8 (the others get none)
    assert len(shares) == 1 + 2 + 4
    del shares[:]
    monkeypatch.setattr(backend, "MAX_SHARES", 2)
    assert backend.run(facts, program, queries, jobs=8) == one
    assert len(shares) == 1  # no more than MAX_SHARES processes


def test_clauses_are_dealt_in_turn_and_called_heads_stay_whole() -> None:
    from ruleengine.match import backend

    program = "\n".join(
        [
            "q(C, A) <= e(A, X) & (C == 1)",
            "q(C, A) <= e(X, A) & (C == 2)",
            "r(C, A) <= q(C, A)",  # r calls q: q's clauses stay under their name
            "t(C, A) <= n(A) & (C == 1)",
            "t(C, A) <= e(A, A) & (C == 2)",
        ]
    )
    dealt = backend._deal(program, [("q", 1), ("r", 1), ("t", 1)], 2)
    assert dealt is not None
    text, parts = dealt
    lines = text.splitlines()
    assert lines[:3] == program.splitlines()[:3]
    assert lines[3] == "t_j1(C, A) <= n(A) & (C == 1)"
    assert lines[4] == "t(C, A) <= e(A, A) & (C == 2)"
    assert parts == [[("r", "r", 1), ("t", "t", 1), ("q", "q", 1)], [("t_j1", "t", 1)]]
    # a share's new name is taken already: nothing is dealt out
    assert backend._deal(program + "\nt_j1(C, A) <= n(A)", [("t", 1)], 2) is None
    # one clause to deal: nothing to share
    assert backend._deal("t(C, A) <= n(A) & (C == 1)", [("t", 1)], 2) is None


def test_memo_window_asked_by_two_processes_equals_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from ruleengine.match import memo

    monkeypatch.setattr(memo, "MAX_COVER", 1.0)
    graph = graph_from_model(decoder_stack(6))
    rule_set = load_rule_set([], preset="all")
    one = find_candidates(graph, rule_set, memo=True)
    shares = _counting_forks(monkeypatch)
    two = find_candidates(graph, rule_set, memo=True, jobs=2)
    assert shares  # the window's clauses were shared with a child
    assert two.candidates == one.candidates
    assert two.near_misses == one.near_misses
    assert [n.reason for n in two.near_misses] == [n.reason for n in one.near_misses]
    plain = find_candidates(graph, rule_set, memo=False, jobs=2)
    assert plain.candidates == one.candidates
