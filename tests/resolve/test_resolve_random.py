"""Exact selection against brute force on seeded random DAGs, and crafted cases.

The random graphs are built as records directly (no ONNX): ``n`` Sum nodes, each reading
some earlier outputs. Candidates are random connected, convex node sets that overlap and
can form cycles with each other once contracted. The brute force enumerates every subset
of candidates and checks disjointness and acyclicity with its own Kahn's algorithm.
"""

from __future__ import annotations

import itertools
import random
from types import MappingProxyType

import pytest

import ruleengine.resolve.component_solver as resolve_module
from ruleengine.cost.model import Cost, ScoredCandidate, Verdict
from ruleengine.graph.model import Graph, Node, Tensor
from ruleengine.match.model import Candidate
from ruleengine.resolve import resolve
from ruleengine.topology import is_convex


def dag(n: int, edges: set[tuple[int, int]]) -> Graph:
    """Nodes n0..n{n-1} in topological order; an edge (i, j) feeds t_i into n_j."""
    preds = {j: sorted(i for i, k in edges if k == j) for j in range(n)}
    nodes = []
    consumers: dict[str, list[tuple[str, int]]] = {}
    for j in range(n):
        ins = tuple(f"t{i}" for i in preds[j]) or ("x",)
        for port, t in enumerate(ins):
            consumers.setdefault(t, []).append((f"n{j}", port))
        nodes.append(Node(f"n{j}", "Sum", inputs=ins, outputs=(f"t{j}",), index=j))
    tensors = {
        "x": Tensor(
            "x", "float32", (4,), consumers=tuple(consumers.get("x", ())), is_graph_input=True
        )
    }
    for j in range(n):
        t = f"t{j}"
        tensors[t] = Tensor(
            t,
            "float32",
            (4,),
            producer=f"n{j}",
            producer_port=0,
            consumers=tuple(consumers.get(t, ())),
            is_graph_output=not consumers.get(t),
        )
    outs = tuple(t for t, v in tensors.items() if v.is_graph_output)
    return Graph(
        "g",
        tuple(nodes),
        MappingProxyType(tensors),
        ("x",),
        outs,
        17,
        _node_index=MappingProxyType({nd.name: nd for nd in nodes}),
    )


def scored(rule: str, nodes: tuple[str, ...], net: int, priority: int = 0) -> ScoredCandidate:
    cost = Cost(net + 10, 10, net, 0, net, 2, 1, 0, 0, 1)
    cand = Candidate(rule, 0, tuple((n,) for n in nodes), (), ())
    return ScoredCandidate(cand, priority, Verdict.FUSE, "fuse", "fuse", cost)


def acyclic_after_contraction(graph: Graph, groups: list[frozenset[str]]) -> bool:
    owner = {n: f"g{i}" for i, g in enumerate(groups) for n in g}
    rep = {nd.name: owner.get(nd.name, nd.name) for nd in graph.nodes}
    succ: dict[str, set[str]] = {v: set() for v in rep.values()}
    for nd in graph.nodes:
        for t in nd.outputs:
            for c, _ in graph.tensors[t].consumers:
                if rep[c] != rep[nd.name]:
                    succ[rep[nd.name]].add(rep[c])
    indeg = {v: 0 for v in succ}
    for v in succ:
        for w in succ[v]:
            indeg[w] += 1
    ready = [v for v, d in indeg.items() if d == 0]
    seen = 0
    while ready:
        v = ready.pop()
        seen += 1
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    return seen == len(succ)


def brute_force(graph: Graph, cands: list[ScoredCandidate]) -> tuple[int, int]:
    """(best total over disjoint acyclic subsets, best over disjoint subsets ignoring cycles)."""
    best = best_ignoring_cycles = 0
    for r in range(1, len(cands) + 1):
        for combo in itertools.combinations(cands, r):
            sets = [c.candidate.node_set for c in combo]
            if sum(map(len, sets)) != len(frozenset().union(*sets)):
                continue
            total = sum(c.cost.net_bytes for c in combo)  # type: ignore[union-attr]
            best_ignoring_cycles = max(best_ignoring_cycles, total)
            if total > best and acyclic_after_contraction(graph, sets):
                best = total
    return best, best_ignoring_cycles


def random_case(rng: random.Random) -> tuple[Graph, list[ScoredCandidate]]:
    n = rng.randint(5, 8)
    edges = {(i, j) for j in range(1, n) for i in range(j) if rng.random() < 0.3}
    for j in range(1, n):  # keep it connected enough to be interesting
        if not any(k == j for _, k in edges):
            edges.add((rng.randrange(j), j))
    graph = dag(n, edges)
    adj = {i: {j for a, j in edges if a == i} | {a for a, j in edges if j == i} for i in range(n)}
    cands: list[ScoredCandidate] = []
    seen: set[frozenset[str]] = set()
    for k in range(rng.randint(4, 9) * 3):
        size = rng.randint(2, 4)
        start = rng.randrange(n)
        group = {start}
        while len(group) < size:
            # Mostly grow along edges; sometimes jump anywhere, which makes convex groups
            # that are not connected and so more likely to form cycles with each other.
            if rng.random() < 0.6:
                group.add(rng.randrange(n))
                continue
            frontier = sorted({j for i in group for j in adj[i]} - group)
            if not frontier:
                break
            group.add(rng.choice(frontier))
        names = frozenset(f"n{i}" for i in group)
        if len(names) < 2 or names in seen or not is_convex(graph, names):
            continue
        seen.add(names)
        ordered = tuple(sorted(names, key=lambda s: int(s[1:])))
        cands.append(scored(f"r{k}", ordered, rng.randint(1, 100), rng.randint(0, 2)))
        if len(cands) >= 9:
            break
    return graph, cands


@pytest.mark.parametrize("enumerate_up_to", [0, resolve_module.ENUMERATE_UP_TO])
def test_exact_equals_brute_force_and_never_below_greedy_on_random_dags(
    enumerate_up_to: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 0: every component goes to CP-SAT; the default: small ones are enumerated.
    monkeypatch.setattr(resolve_module, "ENUMERATE_UP_TO", enumerate_up_to)
    rng = random.Random(20261130)
    cases = 0
    strictly_better = cycles_mattered = 0
    while cases < 220:
        graph, cands = random_case(rng)
        if len(cands) < 2:
            continue
        cases += 1
        exact = resolve(graph, cands, solver="exact", time_limit_s=10.0)
        greedy = resolve(graph, cands, solver="greedy")
        best, best_ignoring_cycles = brute_force(graph, cands)
        cycles_mattered += best < best_ignoring_cycles
        assert exact.status == "OPTIMAL"
        assert exact.objective == best, (cases, [c.candidate.nodes for c in cands])
        assert exact.objective >= greedy.objective
        strictly_better += exact.objective > greedy.objective
        for res in (exact, greedy):
            sets = [c.candidate.node_set for c in res.chosen]
            assert sum(map(len, sets)) == len(frozenset().union(*sets)) if sets else True
            assert acyclic_after_contraction(graph, sets)
            assert len(res.chosen) + len(res.lost) == len(cands)
    # The random cases do exercise both the greedy gap and the cycle cuts.
    assert strictly_better > 0
    assert cycles_mattered > 0


def test_exact_strictly_beats_greedy_on_a_crafted_chain() -> None:
    # a -> b -> c -> d: greedy takes the single best pair {b, c} (10) and then nothing
    # fits; exact takes {a, b} + {c, d} (7 + 7 = 14).
    graph = dag(4, {(0, 1), (1, 2), (2, 3)})
    cands = [
        scored("bc", ("n1", "n2"), 10),
        scored("ab", ("n0", "n1"), 7),
        scored("cd", ("n2", "n3"), 7),
    ]
    exact = resolve(graph, cands, solver="exact")
    greedy = resolve(graph, cands, solver="greedy")
    assert greedy.objective == 10
    assert [c.candidate.rule for c in greedy.chosen] == ["bc"]
    assert exact.objective == 14
    assert [c.candidate.rule for c in exact.chosen] == ["ab", "cd"]
    assert exact.status == "OPTIMAL" and exact.gap == 0.0
    lost = {sc.candidate.rule: why for sc, why in exact.lost}
    assert lost == {"bc": "lost a conflict to ab group (nodes n0, n1); cd group (nodes n2, n3)"}


def test_two_convex_groups_forming_a_cycle_are_never_both_chosen() -> None:
    #   a1 = n0, b2 = n1, a2 = n2 (reads a1, b2), b1 = n3 (reads b2, a1)
    # G1 = {a1, a2}: a1 -> b1 leaves G1, b1 reaches nothing: convex.
    # G2 = {b2, b1}: b2 -> a2 leaves G2, a2 reaches nothing: convex.
    # Contracted: G1 -> G2 (a1 -> b1) and G2 -> G1 (b2 -> a2): a cycle.
    graph = dag(4, {(0, 2), (1, 2), (0, 3), (1, 3)})
    g1, g2 = ("n0", "n2"), ("n1", "n3")
    assert is_convex(graph, g1) and is_convex(graph, g2)
    assert not acyclic_after_contraction(graph, [frozenset(g1), frozenset(g2)])
    for w1, w2 in ((5, 5), (9, 3), (3, 9)):
        cands = [scored("G1", g1, w1), scored("G2", g2, w2)]
        for solver in ("exact", "greedy"):
            res = resolve(graph, cands, solver=solver)
            assert len(res.chosen) == 1
            assert res.objective == max(w1, w2)
            ((_, why),) = res.lost
            assert why.startswith("would close a cycle with")


def test_large_component_goes_to_cp_sat_and_matches_interval_dp() -> None:
    # A 30-node chain with every window of 2..4 nodes as a candidate: one component of
    # 84 overlapping candidates (CP-SAT, not enumeration). On a chain no cycle can form,
    # so the optimum is weighted interval scheduling, solved here by dynamic programming.
    n = 30
    graph = dag(n, {(i, i + 1) for i in range(n - 1)})
    rng = random.Random(7)
    windows = [(s, s + k) for k in (2, 3, 4) for s in range(n - k + 1)]
    weights = {w: rng.randint(1, 1000) for w in windows}
    cands = [
        scored(f"w{s}_{e}", tuple(f"n{i}" for i in range(s, e)), weights[(s, e)])
        for s, e in windows
    ]
    best = [0] * (n + 1)  # best[i]: optimum over the first i nodes
    for i in range(1, n + 1):
        best[i] = max([best[i - 1]] + [best[s] + w for (s, e), w in weights.items() if e == i])
    res = resolve(graph, cands, solver="exact")
    assert len(cands) > resolve_module.ENUMERATE_UP_TO and res.components == 1
    assert res.status == "OPTIMAL" and res.objective == best[n]
    assert res.objective >= resolve(graph, cands, solver="greedy").objective


def _crafted_chain() -> tuple[Graph, list[ScoredCandidate]]:
    # Pairs along a 12-node chain, odd pairs heavier: greedy takes the five odd pairs
    # (55), the optimum the six even ones (60). One component of 11: goes to CP-SAT.
    graph = dag(12, {(i, i + 1) for i in range(11)})
    cands = [scored(f"w{i}", (f"n{i}", f"n{i + 1}"), 11 if i % 2 else 10) for i in range(11)]
    return graph, cands


def test_time_limited_solve_reports_feasible_with_bound_and_gap(monkeypatch) -> None:
    import ruleengine.resolve.exact as exact_module

    real = exact_module.solve_component

    def stopped_early(weights, node_sets, cuts, **kw):
        sol = real(weights, node_sets, cuts, **kw)  # as if the limit hit before the proof
        return exact_module.ComponentSolution(
            sol.selected, "FEASIBLE", sol.objective, sol.objective + 20, sol.seconds
        )

    monkeypatch.setattr(exact_module, "solve_component", stopped_early)
    graph, cands = _crafted_chain()
    res = resolve(graph, cands, solver="exact")
    greedy = resolve(graph, cands, solver="greedy")
    assert (res.status, res.objective, greedy.objective) == ("FEASIBLE", 60, 55)
    assert res.bound == 80 and res.gap == 0.25


def test_a_deterministic_budget_bounds_the_solves_not_the_clock() -> None:
    """``deterministic_s`` (or the enclosing ``deterministic_budget``, as suggest sets it)
    stops CP-SAT on its deterministic time: none at all leaves greedy's choice (55, not
    proven), whatever the wall limit; outside the budget the optimum (60) is found."""
    from ruleengine.resolve import deterministic_budget

    graph, cands = _crafted_chain()
    cut = resolve(graph, cands, deterministic_s=0.0, time_limit_s=3600.0)
    assert (cut.status, cut.objective) == ("FEASIBLE", 55)
    with deterministic_budget(0.0):
        inside = resolve(graph, cands)
    assert (inside.status, inside.objective) == ("FEASIBLE", 55)
    assert [c.candidate.rule for c in inside.chosen] == [c.candidate.rule for c in cut.chosen]
    with deterministic_budget(30.0):
        assert resolve(graph, cands).objective == 60
    outside = resolve(graph, cands)
    assert (outside.status, outside.objective) == ("OPTIMAL", 60)


def test_no_solution_within_the_time_limit_falls_back_on_greedy(monkeypatch) -> None:
    import ruleengine.resolve.exact as exact_module

    def nothing(weights, node_sets, cuts, **kw):
        return exact_module.ComponentSolution(frozenset(), "UNKNOWN", 0, sum(weights), 0.0)

    monkeypatch.setattr(exact_module, "solve_component", nothing)
    graph, cands = _crafted_chain()
    res = resolve(graph, cands, solver="exact")
    greedy = resolve(graph, cands, solver="greedy")
    assert res.status == "FEASIBLE"
    assert [c.candidate.rule for c in res.chosen] == [c.candidate.rule for c in greedy.chosen]
    assert res.objective == greedy.objective == 55 and res.gap > 0
