"""suggest's pool solves run CP-SAT with a light presolve (``exact.LIGHT_PRESOLVE``): it
changes how fast the optimum is proven, never which objective is proven optimal."""

from __future__ import annotations

import random
from functools import partial

import pytest

from ruleengine import coverage
from ruleengine.graph import load_graph

from .graphs import layers, save


def _pool(tmp_path, n: int):
    """The kernel pool of a stack of ``n`` layers (decomposed GELU: long chains whose
    groups overlap, the shape of a transformer's pool)."""
    from ruleengine.cost import load_target
    from ruleengine.suggest.partition import kernel_pool

    acts = ["Tanh", "Sigmoid", "Relu", "Softplus"]
    graph = load_graph(
        save(layers([acts[i % 4] for i in range(n)], gelu=True), tmp_path / "s.onnx")
    )
    target = load_target("ascend910b")
    return graph, kernel_pool(graph, target, coverage.fusable_edges(graph))


def _weighted(pool, value, graph):
    scale = 8 * (len(graph.nodes) + 1)
    return [max(0, value(k)) * scale + 1 for k in pool.kernels]


@pytest.mark.parametrize("value", ["captured", "net_bytes"])
def test_layered_pool_same_optimum_as_the_default_presolve(tmp_path, value: str) -> None:
    """The partition suggest packs (light presolve) has the objective CP-SAT's default
    presolve proves optimal on the same pool, for both values the drafting packs by."""
    from ruleengine.resolve import exact
    from ruleengine.suggest.partition import best_partition, bounded_solve, cut_cycles

    graph, pool = _pool(tmp_path, 3)
    assert len(pool.kernels) > 50
    of = lambda k: getattr(k, value)  # noqa: E731
    light = best_partition(graph, pool.kernels, value=of)
    assert bounded_solve(30.0).keywords["light_presolve"] is True
    full = cut_cycles(
        graph,
        pool.kernels,
        partial(bounded_solve(30.0), light_presolve=False),
        complete=True,
        value=of,
    )
    assert light.status == full.status == "OPTIMAL"
    assert sum(map(of, light.kernels)) == sum(map(of, full.kernels))
    weights = _weighted(pool, of, graph)
    sets = [k.nodes for k in pool.kernels]
    a = exact.solve_component(weights, sets, [], seed=0, workers=1, light_presolve=True)
    b = exact.solve_component(weights, sets, [], seed=0, workers=1)
    assert a.status == b.status == "OPTIMAL" and a.objective == b.objective


def _random_packing(rng: random.Random, nodes: int, sets: int):
    """Overlapping windows of a node order with random weights (a pool's shape)."""
    out, weights = [], []
    for _ in range(sets):
        start = rng.randrange(nodes - 1)
        width = rng.randint(2, 6)
        out.append(frozenset(range(start, min(nodes, start + width))))
        weights.append(rng.randint(1, 50))
    return weights, out


@pytest.mark.parametrize("seed", range(6))
def test_random_packings_same_objective(seed: int) -> None:
    """Random packings, with cuts and with a floor row (the selectable ceiling's model):
    light and default presolve prove the same objective."""
    from ruleengine.resolve import exact

    rng = random.Random(seed)
    weights, sets = _random_packing(rng, 40, 300)
    cuts = [frozenset(rng.sample(range(300), 3)) for _ in range(4)]
    floors = {"floors": [((), 60)], "floor_values": [rng.randint(0, 9) for _ in weights]}
    for extra in ({}, floors):
        got = [
            exact.solve_component(
                weights, sets, cuts, seed=0, workers=1, light_presolve=light, **extra
            )
            for light in (False, True)
        ]
        assert {s.status for s in got} == {"OPTIMAL"}
        assert got[0].objective == got[1].objective
        assert len(set().union(*(sets[i] for i in got[1].selected))) == sum(
            len(sets[i]) for i in got[1].selected
        )
