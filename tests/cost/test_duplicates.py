"""Among viable candidates with one node set, the higher priority survives, ties by
candidate key: the ranking by (-priority, rule) where those differ equals the ranking by
(-priority, key) it stands for."""

from __future__ import annotations

import itertools

from ruleengine.cost.duplicates import reduce_duplicates
from ruleengine.cost.model import Cost, ScoredCandidate, Verdict
from ruleengine.match.model import Candidate

COST = Cost(10, 5, 5, 0, 5, 2, 1, 0, 0, 1)


def _sc(rule: str, nodes: tuple[str, ...], priority: int, alt: int = 0) -> ScoredCandidate:
    c = Candidate(rule, alt, tuple((n,) for n in nodes), (), ())
    return ScoredCandidate(c, priority, Verdict.FUSE, "ok", "fuse", COST)


def _expected(records: list[ScoredCandidate]) -> list[tuple[str, str]]:
    """The survivor of each node set by the key function, the others duplicates."""
    out = []
    for sc in records:
        same = [o for o in records if frozenset(o.candidate.nodes) == frozenset(sc.candidate.nodes)]
        win = min(same, key=lambda o: (-o.priority, o.candidate.key))
        out.append((sc.candidate.rule, "fuse" if win is sc else "duplicate"))
    return out


def test_duplicate_ranking_by_priority_rule_and_key() -> None:
    cases = [
        # distinct priorities; equal priority, rules differ; same rule and priority
        # (nodes in another order, or another alternative): the key decides
        [_sc("b", ("x", "y"), 1), _sc("a", ("y", "x"), 2)],
        [_sc("b", ("x", "y"), 3), _sc("a", ("y", "x"), 3), _sc("c", ("x", "y"), 1)],
        [_sc("a", ("y", "x"), 3), _sc("a", ("x", "y"), 3), _sc("b", ("x", "y"), 3)],
        [_sc("a", ("x", "y"), 2, alt=1), _sc("a", ("x", "y"), 2, alt=0)],
    ]
    for case in cases:
        for records in itertools.permutations(case):
            got = reduce_duplicates(list(records))
            assert [(s.candidate.rule, s.verdict.value) for s in got] == _expected(list(records))
            losers = [s for s in got if s.verdict is Verdict.DUPLICATE]
            assert all(s.code == "duplicate" and s.reason.startswith("same nodes") for s in losers)
