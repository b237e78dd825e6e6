"""The wider pool resumes the first pool's growth: the same pool as grown afresh."""

from __future__ import annotations

import pytest

from ruleengine import coverage
from ruleengine.cost import load_target
from ruleengine.graph import load_graph
from ruleengine.suggest import partition
from ruleengine.suggest.partition import kernel_pool

from .graphs import layers, save


def _pool(graph, max_sets: int, max_ops: int, edges=None):
    target = load_target("ascend910b")
    edges = edges or coverage.fusable_edges(graph)
    pool = kernel_pool(graph, target, edges, max_ops=max_ops, max_sets=max_sets)
    return pool, edges, target


def _same(a: partition.Pool, b: partition.Pool) -> None:
    assert a.kernels == b.kernels
    assert (a.complete, a.scored, a.capped) == (b.complete, b.scored, b.capped)


@pytest.mark.parametrize("max_ops", [2, partition.MAX_POOL_OPS])
def test_a_resumed_growth_is_the_growth_made_afresh(tmp_path, max_ops):
    """Budgets that stop the first growth mid-level, at a level's end, past the op cap
    and not at all: the same budget again and each larger budget after it give the pool
    grown afresh with that budget (same kernels, completeness, sets scored and cap)."""
    path = save(layers(["Tanh"], gelu=True), tmp_path / "m.onnx")
    full, _, _ = _pool(load_graph(path), 10**6, max_ops)
    assert not full.capped and full.scored > 34  # the budgets below cut it short
    fresh = {b: _pool(load_graph(path), b, max_ops)[0] for b in range(1, full.scored + 2)}
    fresh[10**6] = full
    for first in range(1, full.scored + 1):  # every budget: mid-level and at a level's end
        graph = load_graph(path)
        edges = coverage.fusable_edges(graph)
        for second in (first, first, first + 1, 10**6):  # again the same, then larger
            _same(_pool(graph, second, max_ops, edges)[0], fresh[second])


def test_the_caller_groups_join_one_pool_only(tmp_path):
    """Groups given by one caller (``extra``) join its pool, not the graph's next one:
    that is the pool grown afresh."""
    path = save(layers(["Sigmoid", "Tanh"], gelu=True), tmp_path / "m.onnx")
    graph = load_graph(path)
    target = load_target("ascend910b")
    edges = coverage.fusable_edges(graph)
    wide = frozenset(
        f"{op}0" for op in ("bias", "act", "gate", "div", "erf", "one", "half", "gelu")
    )
    with_extra = kernel_pool(graph, target, edges, extra=[wide], max_ops=2, max_sets=5)
    assert wide in {k.nodes for k in with_extra.kernels}
    plain = kernel_pool(graph, target, edges, max_ops=2, max_sets=5)
    _same(plain, _pool(load_graph(path), 5, 2)[0])


def test_sets_scored_ahead_by_two_processes_make_the_same_pool(tmp_path, monkeypatch, forks):
    """Every level scored half in a forked child (from one set up) gives the pool scored
    in one process, whole and resumed."""
    from ruleengine import procs

    path = save(layers(["Sigmoid", "Tanh"], gelu=True), tmp_path / "m.onnx")
    monkeypatch.setattr(procs, "forkable", lambda _jobs: False)
    alone = [_pool(load_graph(path), budget, 4)[0] for budget in (13, 10**6)]
    monkeypatch.setattr(procs, "forkable", lambda _jobs: True)
    monkeypatch.setattr(partition, "AHEAD_FROM_SETS", 1)
    forked = []
    for budget in (13, 10**6):
        forked.append(_pool(load_graph(path), budget, 4)[0])
    graph = load_graph(path)
    edges = coverage.fusable_edges(graph)
    resumed = [_pool(graph, budget, 4, edges)[0] for budget in (13, 10**6)]
    assert len(forks) > 4  # a child per level
    for a, b, c in zip(alone, forked, resumed, strict=True):
        _same(a, b)
        _same(a, c)
