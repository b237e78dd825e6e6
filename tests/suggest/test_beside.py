"""Figures computed beside the drafting (``suggest.beside``): the value the parent would
have computed, the child's solves joining the parent's cache."""

from __future__ import annotations

import os

import pytest

from ruleengine import procs
from ruleengine.resolve.exact import solve_component
from ruleengine.suggest import beside as beside_module
from ruleengine.suggest.beside import Later, beside, settle
from ruleengine.suggest.partition import best_partition
from ruleengine.suggest.regions import _selectable_ceilings
from ruleengine.suggest.solves import cached_solves

from .test_twins import _chain, _pool

PROBLEM = ([3, 2, 2], [frozenset({"a", "b"}), frozenset({"a"}), frozenset({"b"})], [])


def _solved_in(report_pid: int) -> tuple[int, frozenset[int]]:
    """Which process solved the problem, and its answer."""
    return os.getpid() if report_pid else 0, solve_component(*PROBLEM, seed=0, workers=1).selected


@pytest.fixture
def forking(monkeypatch):
    """Forking allowed whatever the machine's cores (the CI machine has two)."""
    monkeypatch.setattr(procs, "cores", lambda: 2)


def test_the_value_comes_from_a_child_and_its_solves_join_the_cache(forking):
    with cached_solves() as cache:
        later = beside(_solved_in, 1)
        assert list(beside_module._OUTSTANDING) == [id(later)]  # (a Later compares as its value)
        pid, selected = later.get()
        assert pid != os.getpid() and selected == frozenset({1, 2})
        assert not beside_module._OUTSTANDING
        assert (cache.calls, cache.solved) == (1, 1)
        # the parent asks the same problem: answered from what the child solved
        assert solve_component(*PROBLEM, seed=0, workers=1).selected == selected
        assert (cache.calls, cache.solved) == (2, 1)


def test_settle_reads_every_value_still_outstanding(forking):
    with cached_solves() as cache:
        a, b = beside(_solved_in, 1), beside(_solved_in, 1, then=lambda v: v[1])
        settle()
        assert not beside_module._OUTSTANDING
        assert cache.solved == 2 and len(cache.held) == 1  # one problem, solved twice
        assert b.get() == frozenset({1, 2}) and a.get()[1] == b.get()


def _slow_in_a_child(parent: int) -> tuple[int, frozenset[int]]:
    """``_solved_in``, ten minutes late in any process but ``parent``."""
    import time

    if os.getpid() != parent:
        time.sleep(600)
    return _solved_in(1)


def test_a_value_put_off_is_computed_here_when_read_and_its_child_let_go(forking):
    """The wider pool's search replaces the first one's: the first one's ceiling under
    twins, computed beside, is put off; nothing waits for it (``settle``), its child is
    killed, and where it is read after all the parent computes the same value."""
    with cached_solves():
        before = set(procs._LIVE)
        later = beside(_slow_in_a_child, os.getpid(), then=lambda v: v)
        (child,) = set(procs._LIVE) - before
        later.put_off()
        assert not beside_module._OUTSTANDING
        settle()  # at once: nothing outstanding
        assert child not in procs._LIVE  # killed and reaped
        assert later.get() == (os.getpid(), frozenset({1, 2}))  # computed here


def test_without_a_fork_the_call_runs_at_once(monkeypatch):
    monkeypatch.setattr(procs, "forkable", lambda _jobs: False)
    later = beside(_solved_in, 0, then=lambda v: v[1])
    assert not beside_module._OUTSTANDING
    assert later.get() == frozenset({1, 2})


def test_a_later_reads_as_its_value():
    figures = Later(lambda: (0.5, True, 0.75, False))
    share, exact, *rest = figures
    assert (share, exact, rest) == (0.5, True, [0.75, False])
    assert figures[2] == 0.75 and len(figures) == 4
    assert figures == (0.5, True, 0.75, False) == Later.ready((0.5, True, 0.75, False))


@pytest.mark.parametrize("fork", [True, False])
def test_the_ceiling_under_twins_is_the_same_beside_or_not(tmp_path, monkeypatch, fork):
    """The ceiling under twins of test_twins' chain (48, below the selectable 58), and
    the selectable ceiling itself (the same object) where its twins displace nothing."""
    monkeypatch.setattr(procs, "forkable", lambda _jobs: fork)
    graph = _chain(tmp_path)
    pool = _pool()
    empty = best_partition(graph, [], value=lambda k: k.net_bytes)
    ceiling = best_partition(graph, pool)
    selectable, twin = _selectable_ceilings(graph, pool, [], empty, 0, True, ceiling)
    assert selectable.captured == 58
    assert twin.get().captured == 48 and twin.get().exact
    triples = [k for k in pool if len(k.nodes) == 3]
    top, same = _selectable_ceilings(graph, triples, [], empty, 0, True, ceiling)
    assert same.get() is top


def test_a_run_that_ends_lets_go_of_what_it_did_not_read(forking):
    """A value left unread when its run ends (an error) is not read by a later run's
    ``settle``; read by whoever still holds it, it is still the child's."""
    from ruleengine.suggest.beside import processes

    with pytest.raises(RuntimeError), processes(None):
        later = beside(_solved_in, 1)
        raise RuntimeError("the run stops")
    assert not beside_module._OUTSTANDING
    settle()  # nothing to read
    assert later.get()[1] == frozenset({1, 2})
