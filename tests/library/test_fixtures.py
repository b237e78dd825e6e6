"""Every bundled rule against its own positive and negative fixture graphs.

Fixtures are discovered from ``fixtures/<rule>/``; a new rule without fixtures fails
``test_every_rule_has_fixtures``. Positives must give exactly the expected node sets,
negatives none at all.
"""

from __future__ import annotations

import pytest

from ruleengine.graph import load_graph
from ruleengine.match import find_candidates
from ruleengine.rules import load_rule_set

from .fixturelib import (
    FIXTURES,
    RULES,
    discover,
    matcher_supports_multiple_roots,
    rule_file,
    save_fixture_model,
)

FIXTURE_LIST = discover()


@pytest.mark.parametrize("fixture", FIXTURE_LIST, ids=[f.id for f in FIXTURE_LIST])
def test_fixture(fixture, tmp_path):
    rule_set = load_rule_set([rule_file(fixture.rule)])
    assert [r.name for r in rule_set.rules] == [fixture.rule]
    graph = load_graph(save_fixture_model(fixture, tmp_path))
    result = find_candidates(graph, rule_set)
    found = {c.node_set for c in result.candidates if c.rule == fixture.rule}
    if fixture.positive:
        assert fixture.expected, f"{fixture.path} has no '# expect:' line"
        assert found == set(fixture.expected), (
            f"{fixture.id}: expected {sorted(map(sorted, fixture.expected))}, "
            f"got {sorted(map(sorted, found))}"
        )
    else:
        assert not fixture.expected, f"{fixture.path}: a negative fixture expects nothing"
        assert not found, f"{fixture.id}: unexpected candidates {sorted(map(sorted, found))}"
        codes = {nm.code for nm in result.near_misses if nm.candidate.rule == fixture.rule}
        assert fixture.near_misses <= codes, (
            f"{fixture.id}: near-miss codes {sorted(codes)} lack {sorted(fixture.near_misses)}"
        )


def test_matcher_starts_a_root_at_kind_only_input_sources():
    """The contract the multi-root rules rely on (attention paths, SwiGLU's up projection)."""
    assert matcher_supports_multiple_roots()


def test_every_rule_has_fixtures():
    rules = {p.stem for p in RULES.glob("*/*.yaml")}
    kinds: dict[str, set[bool]] = {}
    for f in FIXTURE_LIST:
        kinds.setdefault(f.rule, set()).add(f.positive)
    missing = sorted(r for r in rules if kinds.get(r) != {True, False})
    assert not missing, f"rules without both a positive and a negative fixture: {missing}"
    stray = sorted(set(kinds) - rules)
    assert not stray, f"fixture folders naming no bundled rule: {stray} (in {FIXTURES})"
