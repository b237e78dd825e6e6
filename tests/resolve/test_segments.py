"""The chain decomposition (``resolve/segments.py``) gives the optimum of the whole
component.

Small layered graphs are built with onnx.helper: each layer a few elementwise ops whose
last one is a residual Add read by the next layer, so candidates of consecutive layers
overlap and the whole stack is one component. Candidates are seeded random convex node
sets within a sliding window of the topological order (some spanning two layers, some
forming cycles with each other once contracted). Each case is solved three ways: by the
chain decomposition (``CHAIN_FROM`` lowered, small windows so there are many cuts), by
CP-SAT on the whole component (``CHAIN_FROM`` out of reach), and for small cases by
brute force; the objectives must agree.
"""

from __future__ import annotations

import random

import onnx
import pytest
from onnx import TensorProto, helper
from test_resolve_random import acyclic_after_contraction, brute_force, scored

import ruleengine.resolve.component_solver as resolve_pkg
import ruleengine.resolve.segments as segments
from ruleengine.cost.model import ScoredCandidate
from ruleengine.graph import graph_from_model
from ruleengine.graph.model import Graph
from ruleengine.resolve import resolve
from ruleengine.topology import is_convex


def layered(layers: int, width: int = 4, diamond: bool = False) -> onnx.ModelProto:
    """``layers`` layers, each ending in a residual Add of the layer's input. A chain
    layer: ``width - 1`` ops (Mul, then Relu/Sigmoid alternating, op 2 an Add that also
    reads op 0), then the residual Add. A diamond layer: o0 = Mul, o1 = Relu(o0), o2 =
    Sigmoid(o0), o3 = Add(o1, o2), o4 = Mul(o1, o2), res = Sum(o3, o4, x): the groups
    {o1, o3} and {o2, o4} are each convex but form a cycle together."""
    nodes = []
    x = "x"
    for i in range(layers):
        outs: list[str] = []
        if diamond:
            o = [f"l{i}o{k}" for k in range(5)]
            nodes += [
                helper.make_node("Mul", [x, "c"], [o[0]], name=o[0]),
                helper.make_node("Relu", [o[0]], [o[1]], name=o[1]),
                helper.make_node("Sigmoid", [o[0]], [o[2]], name=o[2]),
                helper.make_node("Add", [o[1], o[2]], [o[3]], name=o[3]),
                helper.make_node("Mul", [o[1], o[2]], [o[4]], name=o[4]),
            ]
            name = f"l{i}res"
            nodes.append(helper.make_node("Sum", [o[3], o[4], x], [name], name=name))
            x = name
            continue
        prev = x
        for k in range(width - 1):
            name = f"l{i}o{k}"
            if k == 0:
                nodes.append(helper.make_node("Mul", [prev, "c"], [name], name=name))
            elif k == 2:
                nodes.append(helper.make_node("Add", [prev, outs[0]], [name], name=name))
            else:
                op = "Relu" if k % 2 else "Sigmoid"
                nodes.append(helper.make_node(op, [prev], [name], name=name))
            outs.append(name)
            prev = name
        name = f"l{i}res"
        nodes.append(helper.make_node("Add", [prev, x], [name], name=name))
        x = name
    graph = helper.make_graph(
        nodes,
        "layered",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 8])],
        initializer=[helper.make_tensor("c", TensorProto.FLOAT, [1], [2.0])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def random_candidates(
    graph: Graph, rng: random.Random, count: int, window: int = 6
) -> list[ScoredCandidate]:
    names = [n.name for n in graph.nodes]
    out: list[ScoredCandidate] = []
    seen: set[frozenset[str]] = set()
    for _ in range(50 * count):
        if len(out) == count:
            break
        start = rng.randrange(len(names) - 1)
        pool = names[start : start + window]
        group = frozenset(rng.sample(pool, rng.randint(2, min(4, len(pool)))))
        if group in seen or not is_convex(graph, group):
            continue
        seen.add(group)
        ordered = tuple(n for n in names if n in group)
        out.append(scored(f"r{len(out)}", ordered, rng.randint(1, 60)))
    return out


NOGOODS: list[int] = []  # cycle cuts the chain solves saw, per call


def solve_both(
    graph: Graph, cands: list[ScoredCandidate], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, int, int]:
    """(chain objective, whole-component objective, chain segments solved)."""
    calls = []
    real = segments.solve_chain

    def counted(plan, sets, weights, order, nogoods, *args):
        calls.append(len(plan.crossing))
        NOGOODS.append(len(nogoods))
        return real(plan, sets, weights, order, nogoods, *args)

    with monkeypatch.context() as m:
        m.setattr(resolve_pkg, "CHAIN_FROM", 8)
        m.setattr(resolve_pkg, "solve_chain", counted)
        m.setattr(segments, "WINDOW", 2)
        chained = resolve(graph, cands, solver="exact", time_limit_s=20.0)
    with monkeypatch.context() as m:
        m.setattr(resolve_pkg, "CHAIN_FROM", 10**9)
        whole = resolve(graph, cands, solver="exact", time_limit_s=20.0)
    assert chained.status == whole.status == "OPTIMAL"
    for res in (chained, whole):
        sets = [c.candidate.node_set for c in res.chosen]
        assert sum(map(len, sets)) == len(frozenset().union(*sets))
        assert acyclic_after_contraction(graph, sets)
        assert res.objective == sum(c.cost.net_bytes for c in res.chosen)
    return chained.objective, whole.objective, sum(calls)


def test_chain_equals_whole_component_and_brute_force_on_small_stacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(20261201)
    used_cuts = 0
    NOGOODS.clear()
    for _ in range(25):
        diamond = rng.random() < 0.5
        graph = graph_from_model(layered(rng.randint(2, 3), rng.choice((3, 4)), diamond))
        cands = random_candidates(graph, rng, rng.randint(10, 14))
        chained, whole, cuts = solve_both(graph, cands, monkeypatch)
        assert chained == whole
        assert chained == brute_force(graph, cands)[0]
        used_cuts += cuts
    assert used_cuts > 0  # the decomposition did run, ...
    assert any(NOGOODS)  # ... with cycle cuts too


def test_chain_equals_whole_component_on_longer_stacks_with_cycles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(11)
    NOGOODS.clear()
    for layers in (6, 10):
        graph = graph_from_model(layered(layers, 5, diamond=layers > 6))
        cands = random_candidates(graph, rng, 9 * layers, window=7)
        chained, whole, cuts = solve_both(graph, cands, monkeypatch)
        assert cuts > 0
        assert chained == whole
    assert any(NOGOODS)


@pytest.mark.parametrize("across", [7, 9, 12])
def test_the_boundary_choice_matters(across: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two layers of o0 -> o1 -> o2 -> res. "across" holds layer 0's residual Add and
    # layer 1's first op: it crosses the layer boundary, where the cuts are. Without it
    # the best is head + end + start + tail (4 + 5 + 5 + 4 = 18); with it, end and start
    # are excluded and each layer's best is a three-op group (5 + 5): across + 10.
    graph = graph_from_model(layered(2, 4))
    cands = [
        scored("head", ("l0o0", "l0o1"), 4),
        scored("end", ("l0o2", "l0res"), 5),
        scored("across", ("l0res", "l1o0"), across),
        scored("start", ("l1o0", "l1o1"), 5),
        scored("tail", ("l1o2", "l1res"), 4),
        scored("mid", ("l0o1", "l0o2"), 2),
        scored("mid1", ("l1o1", "l1o2"), 2),
        scored("all0", ("l0o0", "l0o1", "l0o2"), 5),
        scored("all1", ("l1o1", "l1o2", "l1res"), 5),
    ]
    chained, whole, cuts = solve_both(graph, cands, monkeypatch)
    assert cuts > 0
    assert chained == whole == max(18, across + 10)
    with monkeypatch.context() as m:
        m.setattr(resolve_pkg, "CHAIN_FROM", 8)
        m.setattr(segments, "WINDOW", 2)
        chosen = {c.candidate.rule for c in resolve(graph, cands).chosen}
    if across + 10 > 18:
        assert chosen == {"across", "all0", "all1"}
    else:
        assert chosen == {"head", "end", "start", "tail"}


def test_identical_layers_are_solved_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same per-layer candidates on 8 and 16 layers: CP-SAT runs as often for both
    # (the segment tables of identical layers are reused), and the objective doubles.
    import ruleengine.resolve.exact as exact_module

    real = exact_module.solve_component
    calls: list[int] = []

    def counted(weights, *args, **kwargs):
        calls.append(len(weights))
        return real(weights, *args, **kwargs)

    monkeypatch.setattr(exact_module, "solve_component", counted)
    monkeypatch.setattr(resolve_pkg, "CHAIN_FROM", 8)
    monkeypatch.setattr(resolve_pkg, "ENUMERATE_UP_TO", 0)  # every part to CP-SAT
    results = []
    for layers in (8, 16):
        graph = graph_from_model(layered(layers, 4))
        cands = []
        for i in range(layers):
            o = [f"l{i}o{k}" for k in range(3)] + [f"l{i}res"]
            nxt = f"l{i + 1}o0" if i + 1 < layers else None
            cands += [
                scored(f"a{i}", (o[0], o[1]), 7),
                scored(f"b{i}", (o[1], o[2]), 6),
                scored(f"c{i}", (o[0], o[1], o[2]), 12),
                scored(f"d{i}", (o[2], o[3]), 5),
            ]
            if nxt:
                cands.append(scored(f"e{i}", (o[3], nxt), 6))
        calls.clear()
        res = resolve(graph, cands)
        results.append((res.objective, res.status, len(calls)))
    (small, s1, n_small), (large, s2, n_large) = results
    assert s1 == s2 == "OPTIMAL"
    assert n_small == n_large > 0
    with monkeypatch.context() as m:
        m.setattr(resolve_pkg, "CHAIN_FROM", 10**9)
        assert resolve(graph, cands).objective == large


def test_a_component_without_a_usable_cut_is_solved_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every window of 3 crosses nearly every gap when all of them are candidates with
    # overlapping spans; with MAX_CROSSING 1 no cut is usable and CP-SAT solves it whole.
    graph = graph_from_model(layered(2, 4))
    rng = random.Random(3)
    cands = random_candidates(graph, rng, 12)
    monkeypatch.setattr(segments, "MAX_CROSSING", 0)
    calls = []
    monkeypatch.setattr(resolve_pkg, "solve_chain", lambda *a, **k: calls.append(1))
    monkeypatch.setattr(resolve_pkg, "CHAIN_FROM", 8)
    res = resolve(graph, cands)
    assert not calls and res.status == "OPTIMAL"
    assert res.objective == brute_force(graph, cands)[0]


def test_greedy_is_unchanged_by_the_chain_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = graph_from_model(layered(3, 4))
    cands = random_candidates(graph, random.Random(5), 14)
    before = resolve(graph, cands, solver="greedy")
    monkeypatch.setattr(resolve_pkg, "CHAIN_FROM", 2)
    after = resolve(graph, cands, solver="greedy")
    assert [c.candidate.key for c in before.chosen] == [c.candidate.key for c in after.chosen]


def test_a_free_interior_is_solved_once_when_proven() -> None:
    calls: list[tuple] = []

    def solve_part(free, cuts):
        calls.append((free, cuts))
        return frozenset(free[:1]), "OPTIMAL" if free[0] % 2 == 0 else "FEASIBLE", 1

    part = segments._proven_once(solve_part)
    for _ in range(3):
        assert part((2, 3), ()) == (frozenset({2}), "OPTIMAL", 1)
        assert part((1, 3), ()) == (frozenset({1}), "FEASIBLE", 1)
    assert part((2, 3), (frozenset({3}),))[1] == "OPTIMAL"  # other cuts: another problem
    # the proven part once; the one cut short every time (the budget left may differ)
    assert calls.count(((2, 3), ())) == 1
    assert calls.count(((1, 3), ())) == 3
    assert len(calls) == 5
