"""Interval components: weighted interval scheduling equals the exhaustive optimum."""

from __future__ import annotations

import random

import onnx
from onnx import TensorProto, helper

from ruleengine.pipeline import analyze
from ruleengine.resolve.intervals import best_intervals
from ruleengine.resolve.subsets import best_subset


def test_interval_scheduling_equals_brute_force_on_random_ranges() -> None:
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 12)
        intervals, sets, weights = [], [], []
        for i in range(n):
            lo = rng.randint(0, 15)
            hi = lo + rng.randint(0, 5)
            intervals.append((lo, hi, i))
            sets.append(frozenset(f"n{k}" for k in range(lo, hi + 1)))
            weights.append(rng.choice([0, 1, 5, 5, 10, rng.randint(1, 100)]))
        got = best_intervals(intervals, weights)
        want = best_subset(tuple(range(n)), sets, weights, [])
        assert sum(weights[i] for i in got) == sum(weights[i] for i in want)
        picked = [sets[i] for i in got]
        assert sum(map(len, picked)) == len(frozenset().union(*picked))  # disjoint


def test_long_elementwise_chain_is_solved_optimally(tmp_path, monkeypatch) -> None:
    """A 600-node Relu/Neg chain: one component of ~4k overlapping chain candidates,
    solved by interval scheduling (CP-SAT needed seconds on such chains)."""
    import ruleengine.resolve.component_solver as resolve_pkg

    calls = []
    real = resolve_pkg.best_intervals

    def counted(intervals, weights):
        calls.append(len(intervals))
        return real(intervals, weights)

    monkeypatch.setattr(resolve_pkg, "best_intervals", counted)
    nodes, prev = [], "x"
    for i in range(600):
        nodes.append(helper.make_node("Neg" if i % 2 else "Relu", [prev], [f"t{i}"], name=f"n{i}"))
        prev = f"t{i}"
    shape = [64, 64]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, shape)],
    )
    path = tmp_path / "chain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    exact = analyze(path, preset="all").resolution
    greedy = analyze(path, preset="all", solver="greedy").resolution
    assert exact.status == "OPTIMAL" and exact.objective == exact.bound
    assert exact.objective >= greedy.objective
    assert calls and max(calls) >= resolve_pkg.INTERVALS_FROM
    covered = [n for sc in exact.chosen for n in sc.candidate.nodes]
    assert len(covered) == len(set(covered))
