"""suggest's cache of CP-SAT solves (``suggest.solves``): a problem met again is not solved
again, whatever its node names; a different problem is; answers are unchanged."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from ruleengine.suggest.solves import SolveCache, cached_solves


def _chain(prefix: str, n: int) -> tuple[list[int], list[frozenset[str]]]:
    """Windows of 2 and 3 consecutive nodes on a chain of ``n`` named ``prefix``+k."""
    weights, sets = [], []
    for size in (2, 3):
        for start in range(n - size + 1):
            sets.append(frozenset(f"{prefix}{start + k}" for k in range(size)))
            weights.append(size * size)
    return weights, sets


def _solve(weights, sets, **kw):
    from ruleengine.resolve import exact

    return exact.solve_component(weights, sets, [], seed=0, workers=1, **kw)


def test_identical_problem_solved_once() -> None:
    weights, sets = _chain("a", 12)
    with cached_solves() as cache:
        first = _solve(weights, sets)
        again = _solve(weights, sets)
        # the same problem in another layer: other node names, the same model
        renamed = _solve(*_chain("layer7/b", 12))
    assert cache.calls == 3
    assert cache.solved == 1
    assert first == again == renamed
    assert first.status == "OPTIMAL"


def test_different_problem_solved_again() -> None:
    weights, sets = _chain("a", 12)
    with cached_solves() as cache:
        one = _solve(weights, sets)
        other = _solve([w + (i == 0) for i, w in enumerate(weights)], sets)
        longer = _solve(*_chain("a", 13))
        from ruleengine.resolve import exact

        with_cut = exact.solve_component(weights, sets, [frozenset(sorted(one.selected)[:2])])
    assert cache.calls == cache.solved == 4
    assert other.objective == one.objective + (0 in other.selected)
    assert longer.objective >= one.objective
    assert not sorted(one.selected)[:2] <= sorted(with_cut.selected)


def test_answer_matches_uncached_solve() -> None:
    from ruleengine.resolve.exact import solve_component

    weights, sets = _chain("n", 15)
    plain = solve_component(weights, sets, [], seed=0, workers=1)
    with cached_solves():
        _solve(*_chain("m", 15))  # warm it with the same problem under other names
        cached = _solve(weights, sets)
    assert (cached.selected, cached.objective) == (plain.selected, plain.objective)


@dataclass(frozen=True)
class _Answer:
    selected: frozenset[int]
    status: str
    deterministic: float = 0.0


def test_cut_short_answer_reused_only_under_the_same_limits() -> None:
    asked: list[float | None] = []

    def fake(weights, sets, cuts, *, hint, time_limit_s, deterministic_s, **rest):
        asked.append(deterministic_s)
        return _Answer(frozenset({0}), "FEASIBLE", 0.5)

    cache = SolveCache(fake)
    weights, sets = _chain("a", 6)
    cache(weights, sets, [], deterministic_s=1.0)
    cache(weights, sets, [], deterministic_s=1.0)
    cache(weights, sets, [], deterministic_s=2.0)
    assert asked == [1.0, 2.0]


def test_optimal_answer_reused_under_any_limits() -> None:
    asked: list[float | None] = []

    def fake(weights, sets, cuts, *, hint, time_limit_s, deterministic_s, **rest):
        asked.append(deterministic_s)
        return _Answer(frozenset({0}), "OPTIMAL", 0.25)

    cache = SolveCache(fake)
    weights, sets = _chain("a", 6)
    got = [cache(weights, sets, [], deterministic_s=d) for d in (1.0, 2.0, None)]
    assert asked == [1.0]
    # the answer carries its deterministic time: a budget charged with it is charged alike
    assert {a.deterministic for a in got} == {0.25}


def test_cache_is_removed_on_exit_and_shared_when_nested() -> None:
    """The cache is resolve's hook (``exact.memoized``), not a replaced function."""
    from ruleengine.resolve import exact

    original = exact.solve_component
    assert exact.current_memo() is None
    with cached_solves() as outer:
        with cached_solves() as inner:
            assert inner is outer
            assert exact.current_memo() is outer
        assert exact.current_memo() is outer
        assert exact.solve_component is original
    assert exact.current_memo() is None
    with pytest.raises(RuntimeError), cached_solves():
        assert exact.current_memo() is not None
        raise RuntimeError
    assert exact.current_memo() is None
    assert exact.solve_component is original


def _kernels(names: list[str]) -> list:
    from ruleengine.suggest.partition import Kernel

    return [
        Kernel(frozenset(names[k : k + w]), 7 * w, 7 * w, 7 * w + (k * 5) % 11, w)
        for w in (2, 3)
        for k in range(len(names) - w + 1)
    ]


def test_selection_and_partition_again_make_no_solve() -> None:
    """The selection stage run twice on the same candidates (the pruning's trials) and a
    drafting partition packed twice over the same pool: the second runs' CP-SAT solves
    all come from the cache, with the same answers."""
    from ruleengine.resolve import resolve
    from ruleengine.suggest.partition import best_partition

    from .test_selection_bounded import _chain_case

    graph, cands = _chain_case()
    names = [n.name for n in graph.nodes]
    with cached_solves() as cache:
        first = resolve(graph, cands)
        solved = cache.solved
        again = resolve(graph, cands)
        assert solved >= 1 and cache.solved == solved
        packed = best_partition(graph, _kernels(names))
        solved = cache.solved
        packed_again = best_partition(graph, _kernels(names))
        assert cache.solved == solved
    assert [sc.candidate.key for sc in first.chosen] == [sc.candidate.key for sc in again.chosen]
    assert packed == packed_again
    assert packed == best_partition(graph, _kernels(names))  # uncached: the same


def test_same_drafts_measured_once(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Within ``held_analyses``, a model measured again with the same drafts is not
    analysed again; other drafts, or outside it, it is."""
    from ruleengine.suggest import analyses as mod
    from ruleengine.suggest.model import Cluster, DraftRule

    model = tmp_path / "m.onnx"
    model.write_bytes(b"model")
    calls: list[tuple[str, ...]] = []

    def fake_analyze(self, path, rules=None):
        texts = tuple(Path(r).read_text() for r in (rules or ()))
        calls.append(texts)
        return object()

    monkeypatch.setattr(mod.Given, "analyze", fake_analyze)
    given = mod.Given(())
    base = [(model, "m")]
    one = [DraftRule("a", "name: a\n", Cluster((), ()), 1)]
    two = [DraftRule("b", "name: b\n", Cluster((), ()), 1)]
    with mod.held_analyses():
        first = mod.analyses_with(base, one, given, print)
        again = mod.analyses_with(base, one, given, print)
        alone = mod.analysis_with_drafts(model, one, given)
        other = mod.analyses_with(base, two, given, print)
    assert first == again == [alone]
    assert other != first
    assert calls == [("name: a\n",), ("name: b\n",)]
    mod.analyses_with(base, one, given, print)
    assert len(calls) == 3


def test_twice_the_layers_same_drafts_no_more_solves(tmp_path) -> None:
    """A stack of 2N identical layers drafts what N layers draft, with as many drafting
    partitions packed and as many distinct CP-SAT solves (the repeats come from the
    cache: more than half the solves asked for on this stack)."""
    import ruleengine.suggest.partition as partition
    from ruleengine.suggest import suggest

    from .graphs import layers, save

    runs = []
    for n in (2, 4):
        model = save(layers(["Tanh"] * n, gelu=True), tmp_path / f"l{n}.onnx")
        packed = []
        real = partition.cut_cycles

        def counted(*args, _real=real, _packed=packed, **kw):
            _packed.append(1)
            return _real(*args, **kw)

        with pytest.MonkeyPatch.context() as mp, cached_solves() as cache:
            mp.setattr(partition, "cut_cycles", counted)
            got = suggest([model])
        runs.append((got, len(packed), cache.calls, cache.solved))
    (small, packed2, calls2, solved2), (big, packed4, calls4, solved4) = runs
    assert [d.name for d in small.rules] == [d.name for d in big.rules]
    assert [(m.before, m.after) for m in small.coverage] == [
        (m.before, m.after) for m in big.coverage
    ]
    assert packed4 == packed2
    assert solved4 == solved2
    assert calls4 == calls2 and solved2 < calls2


def test_an_optimum_found_past_a_call_s_limit_is_solved_again() -> None:
    """A proven optimum is reused only by calls whose deterministic limit it was reached
    within: under a smaller limit, solving again stops short, so that call solves (the
    answers do not depend on which solve came first)."""
    asked: list[float | None] = []

    def fake(weights, sets, cuts, *, hint, time_limit_s, deterministic_s, **rest):
        asked.append(deterministic_s)
        status = "OPTIMAL" if deterministic_s is None or deterministic_s >= 2.0 else "FEASIBLE"
        return _Answer(frozenset({0}), status, min(2.0, deterministic_s or 2.0))

    cache = SolveCache(fake)
    weights, sets = _chain("a", 6)
    got = [cache(weights, sets, [], deterministic_s=d).status for d in (3.0, 2.0, None, 1.0)]
    assert got == ["OPTIMAL", "OPTIMAL", "OPTIMAL", "FEASIBLE"] and asked == [3.0, 1.0]
