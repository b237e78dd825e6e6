"""Resolve's fast paths give what the plain computations give (issue 13: same plan, same
fused model before and after): components by numpy against a union per pair, the greedy
order by C-level keys against the key function, the lost records made on first read
against an eager list, and the plan's rejections from them against those from a tuple."""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ruleengine.cost import load_target, score_candidates
from ruleengine.cost.lazy import relabel
from ruleengine.cost.model import Verdict
from ruleengine.cost.scored import ScoredRecords
from ruleengine.cost.traffic import topo_position
from ruleengine.graph import graph_from_model
from ruleengine.match import find_candidates, memo
from ruleengine.resolve import LostCandidates, resolve
from ruleengine.resolve.components import Components
from ruleengine.resolve.greedy import greedy_order, select_greedy
from ruleengine.resolve.lost import describe
from ruleengine.resolve.segments import spans as segment_spans
from ruleengine.rewrite.rejections import (
    RejectedCandidates,
    _listed,
    list_rejections,
    match_counts,
)
from ruleengine.rules import load_rule_set
from ruleengine.topology import Contraction

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from synthetic import decoder_stack

RULES = ("elementwise_chain", "norm_projections", "rmsnorm", "swiglu", "matmul_bias", "rope")


def _plain_components(sets: list[frozenset[str]]) -> dict[int, list[int]]:
    comps = Components(len(sets))
    comps.link_pairs(sets)
    out: dict[int, list[int]] = {}
    for i in range(len(sets)):
        out.setdefault(comps.find(i), []).append(i)
    return out


def test_components_match_a_union_per_pair() -> None:
    rng = random.Random(13)
    for _ in range(200):
        n, m = rng.randint(0, 50), rng.randint(1, 70)
        sets = [
            frozenset(f"e{rng.randrange(m)}" for _ in range(rng.randint(1, 4))) for _ in range(n)
        ]
        comps = Components(n)
        comps.link_overlapping(sets)
        got = comps.groups()
        want = _plain_components(sets)
        assert got == want and list(got) == list(want)
        # elements numbered by position (``position`` given): the same components,
        # and the spans ``segments`` computes from the sets
        position = {f"e{k}": (k * 7) % m for k in range(m)} if m % 7 else None
        if position is not None and n:
            by_pos = Components(n)
            by_pos.link_overlapping(sets, position)
            assert by_pos.groups() == want
            for members in want.values():
                got_span = by_pos.spans(members, sets, position)
                want_span = segment_spans(members, sets, position)
                assert all((a == b).all() for a, b in zip(got_span, want_span, strict=True))
    # a long chain in shuffled order: many hooking rounds, one component
    chain = [frozenset({f"e{i}", f"e{i + 1}"}) for i in range(3000)]
    rng.shuffle(chain)
    comps = Components(len(chain))
    comps.link_overlapping(chain)
    assert list(comps.groups().values()) == [list(range(3000))]


@pytest.fixture(scope="module")
def stack() -> tuple:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(memo, "MAX_COVER", 1.0)
        rs = load_rule_set([], preset="all")
        rs = replace(rs, rules=tuple(r for r in rs.rules if r.name in RULES))
        graph = graph_from_model(decoder_stack(24))
        match = find_candidates(graph, rs, memo=True)
    assert len(match.twins) > len(match.candidates) // 2
    scored = score_candidates(graph, match, rs, load_target("ascend910b"))
    return graph, match, scored


def _eager_lost(graph, viable, chosen, note: str) -> tuple:
    """The lost records as resolve made them before they were made on first read."""
    owner = {n: k for k, sc in enumerate(chosen) for n in sc.candidate.nodes}
    picked = {id(sc) for sc in chosen}
    contraction = Contraction(graph, [sc.candidate.node_set for sc in chosen])
    out = []
    for sc in viable:
        if id(sc) in picked:
            continue
        key = tuple(dict.fromkeys(owner.get(n) for n in sc.candidate.nodes))
        if key != (None,):
            why = "lost a conflict to " + "; ".join(
                describe(chosen[k]) for k in key if k is not None
            )
        else:
            cyc = contraction.closes_cycle(sc.candidate.node_set)
            why = (
                "would close a cycle with " + "; ".join(describe(chosen[i]) for i in cyc)
                if cyc is not None
                else f"not selected {note}".strip()
            )
        out.append((relabel(sc, Verdict.LOST_CONFLICT, "lost-conflict", why), why))
    return tuple(out)


def _view(pair: tuple) -> tuple:
    sc, why = pair
    return (sc.candidate, sc.priority, sc.verdict, sc.code, sc.cost, sc.reason, why)


@pytest.mark.parametrize("solver", ["exact", "greedy"])
def test_lost_records_and_plan_rejections_as_eager_ones(stack: tuple, solver: str) -> None:
    graph, match, scored = stack
    viable = [sc for sc in scored if sc.verdict is Verdict.FUSE and sc.cost is not None]
    want_order = sorted(
        viable,
        key=lambda s: (-s.cost.net_bytes, -s.priority, s.candidate.rule, s.candidate.nodes),
    )
    assert greedy_order(viable) == want_order

    res = resolve(graph, scored, solver=solver)
    assert isinstance(res.lost, LostCandidates) and len(res.lost) > 100
    note = "" if solver == "greedy" or res.status == "OPTIMAL" else "within the time limit"
    eager = _eager_lost(graph, viable, res.chosen, note)
    # the plan's rejections from the lazy sequence, before it is read as pairs
    fast = RejectedCandidates(scored, res.lost, (), match.near_misses)
    summary = list_rejections(scored, res.lost, match)
    plain = RejectedCandidates(scored, eager, (), match.near_misses)
    assert fast.listed(3, 100) == plain.listed(3, 100)
    assert fast.by_verdict() == plain.by_verdict()
    assert summary.kept == list_rejections(scored, eager, match).kept
    assert fast.all() == plain.all()
    assert [_view(p) for p in res.lost] == [_view(p) for p in eager]
    assert res.lost == eager and len(res.lost) == len(eager)


def test_near_miss_records_as_made_one_by_one(stack: tuple) -> None:
    from ruleengine.cost.lazy import from_near_miss, from_near_misses

    graph, match, _ = stack
    rules = load_rule_set([], preset="all").by_name()
    target = load_target("ascend910b")
    assert match.near_misses
    fast = from_near_misses(graph, match.near_misses, rules, target)
    one = [
        from_near_miss(graph, nm, rules.get(nm.candidate.rule), target) for nm in match.near_misses
    ]
    view = [
        (x.candidate, x.priority, x.verdict, x.code, x.reason, x.cost, dict(x.details)) for x in one
    ]
    assert [
        (x.candidate, x.priority, x.verdict, x.code, x.reason, x.cost, dict(x.details))
        for x in fast
    ] == view


def test_cp_sat_model_written_directly_is_cp_models() -> None:
    """exact.py writes CP-SAT's model proto itself (no pandas import); it must be the
    proto ``cp_model`` builds, field for field, and solve the same."""
    from ruleengine.resolve import exact

    rng = random.Random(7)
    for trial in range(60):
        n = rng.randint(1, 12)
        weights = [rng.choice([rng.randint(1, 9), rng.randint(-3, 9), 0]) for _ in range(n)]
        if not any(weights):
            weights[0] = 1
        covering: dict[int, list[int]] = {}
        for i in range(n):
            for node in sorted(rng.sample(range(n + 3), rng.randint(1, 3))):
                covering.setdefault(node, []).append(i)
        cuts = [frozenset(rng.sample(range(n), rng.randint(2, n))) for _ in range(n > 1)]
        cuts += [frozenset({8, 1})] if n > 8 else []  # iterates 8 first
        hint = frozenset(rng.sample(range(n), rng.randint(0, n)))
        direct = exact.model_proto(weights, covering, cuts, hint)
        built = exact.cp_model_of(weights, covering, cuts, hint).proto
        assert str(direct) == str(built), trial
        sets = [frozenset(k for k, users in covering.items() if i in users) for i in range(n)]
        a = exact.solve_component(weights, sets, cuts, hint=hint)
        b = exact._solve_cp_model(weights, covering, cuts, hint, 30.0, 0, None, (), (), None)
        assert (a.selected, a.status, a.objective, a.bound) == (
            b.selected,
            b.status,
            b.objective,
            b.bound,
        )


def test_match_counts_of_the_memo_equal_the_distinct_pairs(stack) -> None:
    """The plan's per-rule match counts of the memo's records (counted by the matcher as
    rows of ints, or by neighbours in key order) equal the distinct (rule, node tuple)
    pairs counted."""
    _graph, match, _scored = stack
    assert match.near_at is not None and match.near_misses
    assert match.matched is not None
    fast = match_counts(match)  # the matcher's counts
    neighbours = match_counts(replace(match, matched=None))
    plain = match_counts(replace(match, matched=None, near_at=None))
    assert list(fast.items()) == list(plain.items()) and sum(fast.values()) > 0
    assert list(neighbours.items()) == list(plain.items())


@pytest.mark.parametrize("per_key,first", [(3, 100), (1, 5), (2, 1)])
def test_listed_rejections_equal_the_first_of_the_whole_sort(stack, per_key, first) -> None:
    """The few a compact plan lists (picked per bucket without sorting it, records in
    key order or not) are those the whole sorted sequence gives."""
    graph, match, scored = stack
    res = resolve(graph, scored)
    for records in (scored, tuple(reversed(scored))):
        quick = RejectedCandidates(records, res.lost, (), match.near_misses)
        whole = RejectedCandidates(records, res.lost, (), match.near_misses).all()
        assert quick.listed(per_key, first) == _listed(whole, per_key, first)
    # cost's own records (every near miss carried, key order): neither looked up nor
    # checked, the same rejections listed and counted
    told = RejectedCandidates(scored, res.lost, (), match.near_misses, from_cost=True)
    whole = RejectedCandidates(scored, res.lost, (), match.near_misses)
    assert told.listed(per_key, first) == _listed(whole.all(), per_key, first)
    assert told.by_verdict() == whole.by_verdict() and len(told) == len(whole)
    summary = list_rejections(scored, res.lost, match, per_key, first, from_cost=True)
    assert summary.kept == list_rejections(scored, res.lost, match, per_key, first).kept


def test_resolve_and_plan_on_lazy_records_equal_the_tuple(stack) -> None:
    """On the cost stage's ``ScoredRecords`` (verdicts, codes, rules and nets as arrays)
    resolve and the compact plan read arrays and make a record only for what they keep:
    the same choice, losers and listed rejections as on the tuple of every record."""
    graph, match, _scored = stack
    rs = load_rule_set([], preset="all")
    rs = replace(rs, rules=tuple(r for r in rs.rules if r.name in RULES))
    target = load_target("ascend910b")
    lazy = score_candidates(graph, match, rs, target)
    assert isinstance(lazy, ScoredRecords)
    made = int(lazy._have.sum())  # the candidates that are no twin (or pick otherwise)
    res = resolve(graph, lazy)
    summary = list_rejections(lazy, res.lost, match, from_cost=True)
    # then a record for what is chosen or listed only
    more = int(lazy._have.sum()) - made
    assert more <= len(res.chosen) + len(summary.kept), (more, len(lazy))
    eager = tuple(score_candidates(graph, match, rs, target))
    plain = resolve(graph, eager)
    assert [s.candidate.key for s in res.chosen] == [s.candidate.key for s in plain.chosen]
    assert (res.objective, res.status) == (plain.objective, plain.status)
    assert list(res.lost) == list(plain.lost) and len(res.lost) > 0
    whole = list_rejections(eager, plain.lost, match, from_cost=True)
    assert summary.kept == whole.kept and summary.counts == whole.counts
    assert summary.total == whole.total
    assert list(lazy) == list(eager) and lazy == eager
    # a twin's node positions are its source's plus its offset: as read by name
    at, where = lazy.viable(), topo_position(graph)
    want = [tuple(map(where.__getitem__, ns)) for ns in lazy.nodes(at)]
    assert lazy.node_positions(at, where) == want and len(want) > 100
    # the greedy choice by the arrays (np.lexsort, nodes as positions) is the records'
    by_arrays = select_greedy(graph, lazy.view(at))
    assert by_arrays == select_greedy(graph, [s for s in eager if s.viable and s.cost])
    assert len(by_arrays) > 10


def test_greedy_hint_from_a_forked_child_gives_the_same_resolution(stack, monkeypatch) -> None:
    """``resolve(jobs=2)``: the greedy choice made in a forked child (CP-SAT's hint, the
    floor of a cut-short answer) is the one made here."""
    from ruleengine import procs

    graph, match, _scored = stack
    rs = load_rule_set([], preset="all")
    rs = replace(rs, rules=tuple(r for r in rs.rules if r.name in RULES))
    target = load_target("ascend910b")
    one = resolve(graph, score_candidates(graph, match, rs, target))
    began: list[str] = []

    class Counting(procs.Forked):
        def __init__(self, fn, *args) -> None:
            began.append(fn.__name__)
            super().__init__(fn, *args)

    monkeypatch.setattr(procs, "Forked", Counting)
    lazy = score_candidates(graph, match, rs, target)
    two = resolve(graph, lazy, jobs=2)
    assert began == ["_greedy_bytes"]
    assert [s.candidate.key for s in two.chosen] == [s.candidate.key for s in one.chosen]
    assert (two.objective, two.status, two.bound) == (one.objective, one.status, one.bound)
    assert list(two.lost) == list(one.lost)
    from ruleengine.resolve.greedy_hint import GreedyChoice

    viable = lazy.view(lazy.viable())
    here, there = GreedyChoice(graph, viable), GreedyChoice(graph, viable, jobs=2)
    assert there.positions == here.positions and there.chosen == here.chosen
    assert len(here.chosen) > 10
