"""The independent components of the selection: candidates linked by shared nodes (or,
once merged, by a cycle they would form together) are decided together; a union-find
over candidate indices."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from itertools import chain
from typing import Any

import numpy as np

from ruleengine.resolve.segments import spans as segment_spans


def positions(order: Mapping[str, int] | range, nodes: Iterable[Any]) -> Iterable[int]:
    """The nodes' positions: looked up by name, or the nodes themselves when they are
    positions already (``order`` is ``range(len(graph.nodes))``)."""
    return nodes if isinstance(order, range) else map(order.__getitem__, nodes)


class Components:
    """Union-find over candidate indices."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))
        self.first = None  # numpy arrays made by link_overlapping(sets, position)

    def spans(self, members: Sequence[int], sets: Sequence[Collection[str]], position):
        """Per member of a component (numpy arrays): its first and last node position,
        its node count, and the sorted positions of the component's nodes."""
        if self.first is None:  # (link_pairs made the components): from the sets
            return segment_spans(members, sets, position)
        at = np.asarray(members, np.int64)
        roots = np.unique(self.root[at])
        a = np.searchsorted(self.node_roots, roots, "left")
        b = np.searchsorted(self.node_roots, roots, "right")
        where = np.sort(np.concatenate([self.node_where[i:j] for i, j in zip(a, b, strict=True)]))
        return self.first[at], self.last[at], self.sizes[at], where

    def find(self, i: int) -> int:
        """``i``'s root, halving the path on the way."""
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, i: int, j: int) -> None:
        """Join the components of ``i`` and ``j`` under the lesser root."""
        a, b = self.find(i), self.find(j)
        if a != b:
            self.parent[max(a, b)] = min(a, b)

    def link_overlapping(
        self, sets: Sequence[Collection[str]], position: Mapping[str, int] | None = None
    ) -> None:
        """Union every two members sharing an element: the connected components of the
        member-element graph, by min-label hooking and pointer jumping over numpy arrays
        (a few passes over the ~10^6 (member, element) pairs of a 2048-layer stack, not a
        Python step per pair). Every member then points at its component's smallest
        member, the root ``union`` keeps. With ``position`` (a node's topological
        index) it also keeps what ``spans`` reads."""
        n = len(sets)
        if n < 2:
            return
        count = sum(map(len, sets))
        if position is not None:
            # elements numbered by node position (one lookup per pair, no dict of names):
            # which number an element gets changes no root (a member's is its least member)
            at_all = np.fromiter(positions(position, chain.from_iterable(sets)), np.int32, count)
            used = np.zeros(int(at_all.max()) + 1, dtype=bool)
            used[at_all] = True
            where = np.flatnonzero(used)  # the element numbered n + k is at where[k]
            n_elements = len(where)
        else:
            elements = dict.fromkeys(chain.from_iterable(sets))
            index = dict(zip(elements, range(n, n + len(elements)), strict=True))
            n_elements = len(elements)
        dtype = np.int32 if n + n_elements < 1 << 31 else np.int64
        sizes = np.fromiter(map(len, sets), dtype, n)
        u = np.repeat(np.arange(n, dtype=dtype), sizes)
        if position is not None:
            v = (np.cumsum(used, dtype=np.int64) - 1 + n).astype(dtype)[at_all]
        else:
            v = np.fromiter(map(index.__getitem__, chain.from_iterable(sets)), dtype, count)
        parent = np.arange(n + n_elements, dtype=dtype)
        for _ in range(64):
            pu, pv = parent[u], parent[v]
            cross = pu != pv
            if not cross.any():
                break
            pu, pv = pu[cross], pv[cross]
            # every vertex points at a root: hook each larger root under the smallest
            # root next to it (pointers only decrease, so no cycle), then jump to roots
            np.minimum.at(parent, np.maximum(pu, pv), np.minimum(pu, pv))
            while True:
                up = parent[parent]
                if np.array_equal(up, parent):
                    break
                parent = up
            u, v = u[cross], v[cross]
        if cross.any():  # not settled in 64 rounds (never seen): one Python pass
            self.link_pairs(sets)
            return
        self.parent = parent[:n].tolist()  # a member's root is its component's least member
        if position is not None:
            # each member's first and last node position and each component's node
            # positions (by its root here) for `spans`: numpy passes, no Python step per pair
            at = at_all
            starts = np.r_[0, np.cumsum(sizes)[:-1]]
            self.first = np.minimum.reduceat(at, starts)
            self.last = np.maximum.reduceat(at, starts)
            self.sizes = sizes
            self.root = parent[:n]
            by_root = np.argsort(parent[n:], kind="stable")
            roots = parent[n:][by_root]
            self.node_roots = roots
            self.node_where = where[by_root]

    def link_pairs(self, sets: Sequence[Collection[str]]) -> None:
        """``link_overlapping`` in plain Python (no positions kept): each member joined
        to the first member holding each of its elements, one union per distinct such
        member (the segment tables call it thousands of times on a few hundred members)."""
        first: dict[str, int] = {}
        for i, nodes in enumerate(sets):
            for j in {first.setdefault(e, i) for e in nodes}:
                if j != i:
                    self.union(i, j)

    def groups(self) -> dict[int, list[int]]:
        """Members by root (the least member), roots and members in increasing order."""
        parent = np.array(self.parent, dtype=np.int64)
        while True:
            up = parent[parent]
            if np.array_equal(up, parent):
                break
            parent = up
        order = np.argsort(parent, kind="stable")
        roots = parent[order]
        cuts = np.flatnonzero(roots[1:] != roots[:-1]) + 1
        if not len(order):
            return {}
        starts = np.r_[0, cuts]
        return {
            int(roots[a]): members.tolist()
            for a, members in zip(starts, np.split(order, cuts), strict=True)
        }
