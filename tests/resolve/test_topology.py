"""Convexity and contracted-cycle checks against naive definitions on random DAGs."""

from __future__ import annotations

import itertools
import random

from test_resolve_random import acyclic_after_contraction, dag

from ruleengine.topology import Contraction, find_cycle, is_convex


def naive_convex(graph, nodes: frozenset[str]) -> bool:
    """No path from the set to the set through an outside node (plain reachability)."""
    succ = {n.name: set() for n in graph.nodes}
    for n in graph.nodes:
        for t in n.outputs:
            succ[n.name] |= {c for c, _ in graph.tensors[t].consumers}
    outside_reach: set[str] = set()
    stack = [s for n in nodes for s in succ[n] if s not in nodes]
    while stack:
        u = stack.pop()
        if u in outside_reach:
            continue
        outside_reach.add(u)
        stack.extend(succ[u])
    return not (outside_reach & nodes)


def test_convexity_matches_reachability() -> None:
    rng = random.Random(11)
    for _ in range(150):
        n = rng.randint(4, 9)
        edges = {(i, j) for j in range(1, n) for i in range(j) if rng.random() < 0.35}
        graph = dag(n, edges)
        for size in (2, 3):
            for combo in itertools.islice(itertools.combinations(range(n), size), 15):
                nodes = frozenset(f"n{i}" for i in combo)
                assert is_convex(graph, nodes) == naive_convex(graph, nodes), (edges, combo)


def test_cycle_checks_match_kahn_on_the_contracted_graph() -> None:
    rng = random.Random(12)
    checked = cyclic = 0
    for _ in range(300):
        n = rng.randint(5, 10)
        edges = {(i, j) for j in range(1, n) for i in range(j) if rng.random() < 0.3}
        graph = dag(n, edges)
        free = list(range(n))
        rng.shuffle(free)
        groups: list[frozenset[str]] = []
        while len(free) >= 2 and len(groups) < 4:
            size = rng.randint(2, 3)
            g = frozenset(f"n{i}" for i in free[:size])
            free = free[size:]
            if is_convex(graph, g):
                groups.append(g)
        if len(groups) < 2:
            continue
        checked += 1
        acyclic = acyclic_after_contraction(graph, groups)
        cyclic += not acyclic
        found = find_cycle(graph, groups)
        assert (found is None) == acyclic
        if found is not None:  # the groups reported do form a cycle on their own
            assert not acyclic_after_contraction(graph, [groups[i] for i in found])
        # Adding the last group to the others: the incremental check agrees.
        *others, last = groups
        closes = Contraction(graph, others).closes_cycle(last)
        prefix_acyclic = acyclic_after_contraction(graph, others)
        if prefix_acyclic:
            assert (closes is None) == acyclic
            if closes is not None:
                assert not acyclic_after_contraction(graph, [last, *(others[i] for i in closes)])
    assert checked > 100 and cyclic > 10
