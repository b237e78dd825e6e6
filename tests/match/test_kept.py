"""What suggest keeps between its analyses gives exactly what matching again gives: each
rule's matches per model file (``match.kept``) and the compiled programs
(``kept_program``)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import onnx
import pytest

from ruleengine.graph import load_graph
from ruleengine.graph.loader import graph_from_model
from ruleengine.match import plain
from ruleengine.match.compile import compile_rule_set, program_text
from ruleengine.match.kept import kept_matches
from ruleengine.match.matcher import default_aliases
from ruleengine.match.parallel import find_candidates_parallel
from ruleengine.rules import load_rule_set

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from synthetic import decoder_stack

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def stack_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kept") / "stack.onnx"
    onnx.save(decoder_stack(1), path)
    return path


@pytest.fixture(scope="module")
def bundled():
    return load_rule_set([], preset="all")


def test_kept_matches_equal_matching_every_rule_again(stack_file: Path, bundled) -> None:
    full = find_candidates_parallel(load_graph(stack_file), bundled, 1)
    half = replace(bundled, rules=bundled.rules[::2])
    with kept_matches() as kept:
        first = find_candidates_parallel(load_graph(stack_file), half, 1)
        both = find_candidates_parallel(load_graph(stack_file), bundled, 1)
        asked_again = kept.matched
        again = find_candidates_parallel(load_graph(stack_file), bundled, 1)
    assert len(full.candidates) > 20 and full.near_misses
    assert both.candidates == full.candidates
    assert both.near_misses == full.near_misses
    assert again.candidates == full.candidates and again.near_misses == full.near_misses
    assert first.candidates == find_candidates_parallel(load_graph(stack_file), half, 1).candidates
    # the second call matched only the rules the first had not; the third, none
    assert asked_again == len(bundled.rules)
    assert kept.matched == asked_again


def test_a_changed_rule_or_file_is_matched_again(tmp_path: Path, stack_file: Path, bundled) -> None:
    first = bundled.rules[0]
    changed = replace(
        bundled, rules=(replace(first, priority=first.priority + 1), *bundled.rules[1:])
    )
    copy = tmp_path / "copy.onnx"
    copy.write_bytes(stack_file.read_bytes())
    with kept_matches() as kept:
        find_candidates_parallel(load_graph(stack_file), bundled, 1)
        n = kept.matched
        find_candidates_parallel(load_graph(stack_file), changed, 1)
        assert kept.matched == n + 1
        find_candidates_parallel(load_graph(copy), bundled, 1)  # another file: all again
        assert kept.matched == 2 * n + 1


def test_a_graph_without_a_file_is_matched_as_usual(bundled) -> None:
    graph = graph_from_model(decoder_stack(1))
    with kept_matches() as kept:
        got = find_candidates_parallel(graph, bundled, 1)
    assert kept.held == {} and kept.matched == 0
    assert got.candidates == find_candidates_parallel(graph, bundled, 1).candidates


def test_kept_programs_are_reused_and_bounded(monkeypatch: pytest.MonkeyPatch, bundled) -> None:
    rules = tuple(r for r in bundled.rules if r.enabled)[:24]  # composites and repeats among them
    aliases = default_aliases()
    monkeypatch.setattr(plain, "_KEPT", [])
    compiled: list[int] = []
    real = plain.compile_rule_set

    def counted(rs, al, **kw):
        compiled.append(len(rs))
        return real(rs, al, **kw)

    monkeypatch.setattr(plain, "compile_rule_set", counted)
    head = plain.kept_program(rules[:10], aliases)
    reloaded = tuple(load_rule_set([], preset="all").rules)  # equal rules, new objects
    assert plain.kept_program(tuple(r for r in reloaded if r.enabled)[:10], aliases) is head
    whole = plain.kept_program(rules, aliases)
    assert compiled == [10, 24]
    assert program_text(whole) == program_text(compile_rule_set(rules, aliases, tabled_forms=True))
    # within KEPT_CLAUSES: the oldest programs go first, the most recent always stays
    monkeypatch.setattr(plain, "KEPT_CLAUSES", plain._clauses(whole))
    plain.kept_program(rules[:5], aliases)
    assert [len(r) for r, _a, _p in plain._KEPT] == [5]


def test_clause_orders_kept_in_a_program_write_what_a_fresh_one_writes(bundled) -> None:
    """``program_text`` keeps each clause's order by the rank of its literals' counts: a
    program matched on graph after graph (counts that rank alike, and counts that do not)
    writes every time the text a program compiled afresh writes for those counts."""
    rules = tuple(r for r in bundled.rules if r.enabled)[:24]
    aliases = default_aliases()
    kept = compile_rule_set(rules, aliases, tabled_forms=True)
    preds = sorted(
        {pred for clauses in kept.rule_clauses.values() for _, ls in clauses for pred, _ in ls}
    )
    assert len(preds) > 10
    ranked = {p: 10 * (i + 1) for i, p in enumerate(preds)}
    scaled = {p: 7 * n + 3 for p, n in ranked.items()}  # the same rank, other counts
    reversed_ = {p: 10 * (len(preds) - i) for i, p in enumerate(preds)}  # the rank reversed
    for counts in (ranked, scaled, reversed_, ranked):
        fresh = compile_rule_set(rules, aliases, tabled_forms=True)
        options = {"distinct": True, "chains": True}
        assert program_text(kept, counts, **options) == program_text(fresh, counts, **options)
    assert kept.clause_orders  # kept, and asked again
    assert program_text(kept, reversed_) != program_text(kept, ranked)


def test_clause_orders_stay_within_their_bound(monkeypatch: pytest.MonkeyPatch, bundled) -> None:
    """Past ``MAX_CLAUSE_ORDERS`` the kept orders start again: the same text, bounded."""
    from ruleengine.match import compile as compile_mod

    rules = tuple(r for r in bundled.rules if r.enabled)[:24]
    aliases = default_aliases()
    monkeypatch.setattr(compile_mod, "MAX_CLAUSE_ORDERS", 5)
    kept = compile_rule_set(rules, aliases, tabled_forms=True)
    preds = sorted(
        {p for clauses in kept.rule_clauses.values() for _, ls in clauses for p, _ in ls}
    )
    for shift in range(3):
        counts = {p: (i * 7 + shift * 13) % 29 for i, p in enumerate(preds)}
        fresh = compile_rule_set(rules, aliases, tabled_forms=True)
        assert program_text(kept, counts) == program_text(fresh, counts)
        assert 0 < len(kept.clause_orders) <= 5
