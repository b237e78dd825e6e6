"""Tiny components (at most ``ENUMERATE_UP_TO`` candidates): every subset tried, exact
and far cheaper than building a CP-SAT model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def best_subset(
    members: tuple[int, ...],
    sets: Mapping[int, frozenset[str]] | Sequence[frozenset[str]],
    weights: list[int],
    cuts: list[frozenset[int]],
) -> frozenset[int]:
    """The best subset of a small component: disjoint node sets, no cut fully chosen."""
    best: frozenset[int] = frozenset()
    best_w = 0
    for mask in range(1, 1 << len(members)):
        pick = [members[k] for k in range(len(members)) if mask >> k & 1]
        total = sum(weights[i] for i in pick)
        if total <= best_w:
            continue
        nodes = [n for i in pick for n in sets[i]]
        if len(nodes) != len(set(nodes)):
            continue
        chosen = frozenset(pick)
        if any(cut <= chosen for cut in cuts):
            continue
        best, best_w = chosen, total
    return best
