"""Components whose candidates are contiguous runs of one node order (long elementwise
chains): set packing is then weighted interval scheduling, exact and O(n log n)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np


def as_intervals(members: Sequence[int], span: tuple) -> list[tuple[int, int, int]] | None:
    """(first, last, member) node positions when every candidate covers a contiguous run
    of the component's nodes in topological order (``span``: ``Components.spans``),
    else None. Then two candidates share a node exactly when their ranges overlap, so set
    packing is interval scheduling."""
    lo, hi, sizes, where = span
    covered = np.searchsorted(where, hi, "right") - np.searchsorted(where, lo, "left")
    if not (covered == sizes).all():
        return None
    return list(zip(lo.tolist(), hi.tolist(), members, strict=True))


def best_intervals(intervals: Sequence[tuple[int, int, int]], weights: list[int]) -> frozenset[int]:
    """Weighted interval scheduling: the heaviest set of non-overlapping ranges (exact).

    Ties keep the earlier-ending, lower-index choice, so the answer is deterministic.
    """
    ranked = sorted(intervals, key=lambda t: (t[1], t[0], t[2]))
    ends = [hi for _, hi, _ in ranked]
    best = [0] * (len(ranked) + 1)  # best[k]: optimum over the first k ranges
    take = [False] * len(ranked)
    prev = [0] * len(ranked)
    for k, (lo, _hi, i) in enumerate(ranked):
        prev[k] = bisect.bisect_left(ends, lo, 0, k)  # ranges ending before lo
        with_it = weights[i] + best[prev[k]]
        take[k] = with_it > best[k]
        best[k + 1] = with_it if take[k] else best[k]
    chosen = []
    k = len(ranked)
    while k > 0:
        if take[k - 1]:
            chosen.append(ranked[k - 1][2])
            k = prev[k - 1]
        else:
            k -= 1
    return frozenset(chosen)
