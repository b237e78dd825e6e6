"""Classes of nodes with translated neighbourhoods (Weisfeiler-Lehman, then verified).

A class's representative is matched; its members get the representative's bindings,
translated by their index offset (``match.window``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ruleengine.match.signatures import Structure

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def colours(st: Structure, rounds: int) -> np.ndarray:
    """Weisfeiler-Lehman colours after ``rounds`` rounds (neighbours weighted by their
    index offset, so the colouring respects translations)."""
    n = len(st.nbrs)
    src = np.fromiter((i for i, nb in enumerate(st.nbrs) for _ in nb), dtype=np.int64)
    dst = np.fromiter((j for nb in st.nbrs for j in nb), dtype=np.int64)
    with np.errstate(over="ignore"):
        salt = _mix((dst - src).astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15))
        col = _mix(st.sig.astype(np.uint64) + np.uint64(1))
        has = np.flatnonzero(
            np.diff(np.concatenate(([0], np.bincount(src, minlength=n).cumsum()))) > 0
        )
        starts = np.searchsorted(src, has)
        for _ in range(rounds):
            contrib = _mix(col[dst] + salt)
            acc = np.zeros(n, dtype=np.uint64)
            if len(contrib):
                acc[has] = np.add.reduceat(contrib, starts)
            col = _mix(col * np.uint64(31) + acc)
    return col


def ball(st: Structure, root: int, radius: int) -> list[int]:
    """Nodes within ``radius`` hops of ``root`` (breadth first, sorted)."""
    seen = {root}
    frontier = [root]
    nbrs = st.nbrs
    for _ in range(radius):
        nxt = []
        for v in frontier:
            for w in nbrs[v]:
                if w not in seen:
                    seen.add(w)
                    nxt.append(w)
        if not nxt:
            break
        frontier = nxt
    return sorted(seen)


@dataclass
class Classes:
    """Every node's representative (itself for a representative) and offset to it."""

    rep: np.ndarray  # int64: representative of each node
    reps: np.ndarray  # sorted representatives
    radius: int  # verified ball radius (rows radius + 1)


def classify(st: Structure, radius: int) -> Classes:
    """Group nodes whose radius-``radius`` neighbourhoods are translations of each other
    (verified node by node; a member that fails is its own representative)."""
    n = len(st.nbrs)
    col = colours(st, radius)
    order = np.lexsort((np.arange(n), col))
    sorted_col = col[order]
    bounds = np.flatnonzero(np.diff(sorted_col)) + 1
    rep = np.arange(n, dtype=np.int64)
    sig = st.sig
    for members in np.split(order, bounds):
        if len(members) < 2:
            continue
        r = int(members[0])  # lowest index (lexsort by index within a colour)
        offs = np.asarray(ball(st, r, radius), dtype=np.int64) - r
        others = members[1:].astype(np.int64)
        idx = others[:, None] + offs[None, :]
        inside = ((idx >= 0) & (idx < n)).all(axis=1)
        ok = np.zeros(len(others), dtype=bool)
        good = others[inside]
        if len(good):
            ok[inside] = (sig[idx[inside]] == sig[r + offs][None, :]).all(axis=1)
        rep[others[ok]] = r
    reps = np.flatnonzero(rep == np.arange(n))
    return Classes(rep, reps, radius)
