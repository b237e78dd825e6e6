"""An exact solve of a long chained component, linear in its length: dynamic programming
over cuts.

A deep stack of layers whose candidates overlap from one layer to the next (a residual
Add in one layer's attention group and in the next layer's norm group) is ONE component:
solved whole, CP-SAT's time grows faster than the number of layers, and the per-component
memo of identical layers never applies. Such a component is a chain along the
topological order of its nodes:

* a **cut** is a gap between two consecutive nodes of that order; the candidates
  *crossing* it have nodes on both sides. A candidate on the left of a cut and one on its
  right share no node, so once the choice among the crossing candidates (the cut's
  **state**) is fixed, the two sides are independent problems;
* a cut is usable when its crossing candidates have few feasible choices (pairwise
  node-disjoint subsets with no cycle cut fully inside): at a residual Add every crossing
  candidate holds the Add, so at most one of them is chosen;
* the **segments** between consecutive cuts are solved once per pair of boundary states
  (their interior candidates minus those sharing a node with the chosen boundary ones,
  cycle cuts restricted to what the boundary leaves open), then a dynamic program over
  the cuts picks the best state sequence. The answer is the optimum of the whole
  component: every selection is one state per cut plus one feasible interior choice per
  segment, and every such combination is a selection.

Each segment is keyed in canonical form (boundary and interior candidates in index
order, nodes by topological position from the segment's first node, weights), so the
segments of identical layers are solved once
(their table of boundary-state pairs is reused): the work is one canonical key and one
small table step per segment. Cuts are chosen where the crossing count is a strict local
minimum over a window (``WINDOW`` gaps on each side) and small (``MAX_CROSSING``); a cut
with too many states (``MAX_STATES``) is dropped. A lazy cycle cut (a set of candidates
never all chosen) spanning several segments forbids the cuts between its candidates, so
that every cycle cut lies within one segment and its two boundaries. Without a usable cut
the caller solves the component whole.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

# A usable cut is crossed by at most this many candidates, ...
MAX_CROSSING = 16
# ... has at most this many states (feasible choices among them), ...
MAX_STATES = 32
# ... and its crossing count is the least within this many gaps on each side.
WINDOW = 10

# (chosen members, status, bound) as the caller's solver returns it
Solution = tuple[frozenset[int], str, int]
# A segment's table: per (left state, right state) that fit together, the best interior:
# (value, bound, chosen interior positions, every sub-solve proven optimal)
Table = dict[tuple[int, int], tuple[int, int, tuple[int, ...], bool]]


@dataclass(frozen=True)
class Chain:
    """Where a component is cut: per cut its crossing members and their states, per
    segment (one more than cuts) its interior members. Members are global indices."""

    crossing: tuple[tuple[int, ...], ...]
    states: tuple[tuple[frozenset[int], ...], ...]
    interiors: tuple[tuple[int, ...], ...]


def _at(order: Mapping[str, int] | range, nodes: Iterable[Any]) -> Iterable[int]:
    """The nodes' topological positions: looked up, or the nodes themselves when they are
    positions (``order`` is a ``range``: the resolver numbers nodes by position)."""
    return nodes if isinstance(order, range) else map(order.__getitem__, nodes)


def spans(members: Sequence[int], sets: Sequence[Collection[str]], order: Mapping[str, int]):
    """Per member (numpy arrays, in ``members`` order): its first and last node position
    in topological order and its node count; and the sorted positions of all their nodes."""
    import numpy as np

    n = len(members)
    lens = np.fromiter(map(len, map(sets.__getitem__, members)), np.int64, n)
    flat = np.fromiter(
        _at(order, chain.from_iterable(map(sets.__getitem__, members))),
        np.int64,
        int(lens.sum()),
    )
    starts = np.r_[0, np.cumsum(lens)[:-1]]
    lo, hi = np.minimum.reduceat(flat, starts), np.maximum.reduceat(flat, starts)
    return lo, hi, lens, np.unique(flat)


def plan_chain(
    members: Sequence[int],
    sets: Sequence[Collection[str]],
    span: tuple,
    nogoods: Sequence[frozenset[int]],
) -> Chain | None:
    """The cuts of a component (``members`` in increasing order, ``span`` their
    ``spans``), or None when it has no usable cut. ``nogoods``: cycle cuts."""
    import numpy as np

    lo, hi, _, where = span
    # positions among the component's nodes: gap g lies between its nodes g and g + 1
    lo, hi = np.searchsorted(where, lo), np.searchsorted(where, hi)
    gaps = len(where) - 1
    if gaps < 1:
        return None
    # crossing count of gap g: members with lo <= g < hi
    diff = np.zeros(gaps + 1, np.int64)
    np.add.at(diff, lo, 1)
    np.add.at(diff, hi, -1)
    count = np.cumsum(diff)[:gaps]
    big = MAX_CROSSING + 1
    if nogoods:
        local = {g: k for k, g in enumerate(members)}
        for cut in nogoods:
            ks = [local[g] for g in cut]
            first_end, last_start = min(hi[ks]), max(lo[ks])
            if last_start > first_end:  # no segment would hold them all: keep them together
                count[first_end:last_start] = big
    count = np.minimum(count, big)
    # strict local minima over the window: less than every gap WINDOW to the left, no
    # more than every gap WINDOW to the right (so chosen gaps are > WINDOW apart)
    pad = np.full(WINDOW, big + 1, np.int64)
    padded = np.r_[pad, count, pad]
    windows = np.lib.stride_tricks.sliding_window_view(padded, WINDOW)
    left_min = windows[:gaps]  # gaps g-WINDOW .. g-1
    right_min = windows[WINDOW + 1 : WINDOW + 1 + gaps]  # gaps g+1 .. g+WINDOW
    chosen = np.flatnonzero(
        (count <= MAX_CROSSING) & (count < left_min.min(axis=1)) & (count <= right_min.min(axis=1))
    )
    if not len(chosen):
        return None
    crossing = _crossing(chosen, lo, hi, members)
    keep = []
    states = []
    for k, cross in enumerate(crossing):
        found = _states(cross, sets, nogoods)
        if found is not None:
            keep.append(k)
            states.append(found)
    if not keep:
        return None
    cuts = chosen[keep]
    crossing = [crossing[k] for k in keep]
    # interior members: crossing no kept cut; segment k lies between cut k-1 and cut k
    first = np.searchsorted(cuts, lo, "left")  # first cut at or after lo
    past = np.searchsorted(cuts, hi, "left")  # first cut at or after hi
    inside = np.flatnonzero(first == past)
    seg = first[inside]
    by_seg = np.argsort(seg, kind="stable")
    bounds = np.searchsorted(seg[by_seg], np.arange(len(cuts) + 2))
    member_arr = np.asarray(members, np.int64)[inside[by_seg]]
    interiors = tuple(
        tuple(member_arr[bounds[k] : bounds[k + 1]].tolist()) for k in range(len(cuts) + 1)
    )
    return Chain(tuple(crossing), tuple(states), interiors)


def _crossing(cuts, lo, hi, members: Sequence[int]) -> list[tuple[int, ...]]:
    """Per cut (increasing gaps), the members crossing it, in increasing order."""
    import numpy as np

    a = np.searchsorted(cuts, lo, "left")  # cuts g >= lo ...
    b = np.searchsorted(cuts, hi, "left")  # ... and g < hi
    span = b - a
    total = int(span.sum())
    who = np.repeat(np.arange(len(members)), span)
    offset = np.repeat(np.cumsum(span) - span - a, span)
    where = np.arange(total) - offset  # the cut index of each (member, cut) pair
    by_cut = np.argsort(where, kind="stable")
    edges = np.searchsorted(where[by_cut], np.arange(len(cuts) + 1))
    member_arr = np.asarray(members, np.int64)[who[by_cut]]
    return [tuple(member_arr[edges[k] : edges[k + 1]].tolist()) for k in range(len(cuts))]


def _states(
    cross: Sequence[int], sets: Sequence[Collection[str]], nogoods: Sequence[frozenset[int]]
) -> tuple[frozenset[int], ...] | None:
    """The feasible choices among a cut's crossing members (pairwise disjoint, no cycle
    cut inside), in a fixed order (by the members' positions in ``cross``), or None when
    there are more than ``MAX_STATES``."""
    inner = [c for c in nogoods if c <= frozenset(cross)] if nogoods else []
    if len(cross) < 2 or frozenset(sets[cross[0]]).intersection(*map(sets.__getitem__, cross)):
        # one node common to all (a residual Add): none or one of them (a state holding
        # a whole cycle cut is refused by the segment tables)
        return (frozenset(), *(frozenset((g,)) for g in cross))
    out: list[frozenset[int]] = []
    stack: list[tuple[int, frozenset[int], frozenset[str]]] = [(0, frozenset(), frozenset())]
    while stack:
        k, picked, used = stack.pop()
        if k == len(cross):
            if not any(c <= picked for c in inner):
                out.append(picked)
                if len(out) > MAX_STATES:
                    return None
            continue
        g = cross[k]
        if used.isdisjoint(sets[g]):
            stack.append((k + 1, picked | {g}, used.union(sets[g])))
        stack.append((k + 1, picked, used))  # popped first: the empty choice comes first
    return tuple(out)


def solve_chain(
    plan: Chain,
    sets: Sequence[Sequence[str]],
    weights: Sequence[int],
    order: Mapping[str, int],
    nogoods: Sequence[frozenset[int]],
    solve_part: Callable[[tuple[int, ...], tuple[frozenset[int], ...]], Solution],
    tables: dict[tuple, Table],
) -> Solution:
    """The optimum of the component ``plan`` cuts. ``sets``: each member's nodes in rule
    op order; ``order``: a node's topological position; ``solve_part(members, nogoods)``:
    the best choice among ``members`` (increasing) under those cycle cuts; ``tables``: the
    memo of segment tables by canonical key, shared across calls."""
    cuts = len(plan.crossing)
    empty: tuple[frozenset[int], ...] = (frozenset(),)
    steps: list[tuple[Table, list[int]]] = []  # per segment: its table, its fresh weights
    optimal = True
    for k in range(cuts + 1):
        left_cross = plan.crossing[k - 1] if k else ()
        right_cross = plan.crossing[k] if k < cuts else ()
        interior = plan.interiors[k]
        local_nogoods: list[frozenset[int]] = []
        if nogoods:
            in_scope = frozenset(left_cross + right_cross + interior)
            local_nogoods = [c for c in nogoods if c <= in_scope]
        key = _segment_key(left_cross, right_cross, interior, sets, weights, order, local_nogoods)
        table = tables.get(key)
        right = plan.states[k] if k < cuts else empty
        if table is None:
            table, proven = _segment_table(
                plan.states[k - 1] if k else empty,
                right,
                left_cross,
                right_cross,
                interior,
                sets,
                weights,
                local_nogoods,
                solve_part,
            )
            if proven:
                tables[key] = table
            optimal = optimal and proven
        # the weight a right state adds: its members that do not cross the left cut
        if left_cross:
            left_set = frozenset(left_cross)
            fresh = [sum(weights[g] for g in s if g not in left_set) for s in right]
        else:
            fresh = [sum(map(weights.__getitem__, s)) for s in right]
        steps.append((table, fresh))
    value, back = _best_sequence(steps, 0)
    bound = value if optimal else _best_sequence(steps, 1)[0]
    # walk back from the single end state
    chosen: set[int] = set()
    j = 0
    for k in range(cuts, -1, -1):
        i = back[k][j]
        chosen.update(map(plan.interiors[k].__getitem__, steps[k][0][(i, j)][2]))
        if k:
            chosen.update(plan.states[k - 1][i])
        j = i
    return frozenset(chosen), "OPTIMAL" if optimal else "FEASIBLE", bound


def _best_sequence(steps: list[tuple[Table, list[int]]], field: int) -> tuple[int, list[list[int]]]:
    """The dynamic program over the cuts: the best total of ``field`` (0: value, 1:
    bound) and, per segment and right state, the left state it came from (ties keep the
    first left state)."""
    best = [0]
    back = []
    for table, fresh in steps:
        new = [-1] * len(fresh)
        step = [-1] * len(fresh)
        for (i, j), entry in table.items():
            if best[i] < 0:
                continue
            total = best[i] + entry[field]
            if total > new[j]:
                new[j], step[j] = total, i
        best = [v + f if v >= 0 else v for v, f in zip(new, fresh, strict=True)]
        back.append(step)
    return best[0], back


def _segment_key(
    left_cross: tuple[int, ...],
    right_cross: tuple[int, ...],
    interior: tuple[int, ...],
    nodes: Sequence[Sequence[str]],
    weights: Sequence[int],
    order: Mapping[str, int],
    nogoods: Sequence[frozenset[int]],
) -> tuple:
    """The segment in canonical form: its left-crossing, right-crossing and interior
    members in that order, by weight and node positions (topological, from the segment's
    first node; each member's nodes in rule op order), and its cycle cuts by member
    positions. Equal keys are the same problem up to node names: two identical layers."""
    import numpy as np

    scope = left_cross + right_cross + interior
    lists = list(map(nodes.__getitem__, scope))
    sizes = tuple(map(len, lists))
    where = np.fromiter(_at(order, chain.from_iterable(lists)), np.int64, sum(sizes))
    local_nogoods: tuple = ()
    if nogoods:
        at = {}
        for p, g in enumerate(scope):
            at.setdefault(g, p)
        local_nogoods = tuple(sorted(tuple(sorted(at[g] for g in c)) for c in nogoods))
    return (
        len(left_cross),
        len(right_cross),
        tuple(map(weights.__getitem__, scope)),
        sizes,
        (where - where.min()).tobytes() if len(where) else b"",
        local_nogoods,
    )


def _proven_once(
    solve_part: Callable[[tuple[int, ...], tuple[frozenset[int], ...]], Solution],
) -> Callable[[tuple[int, ...], tuple[frozenset[int], ...]], Solution]:
    """``solve_part`` with each proven answer kept: many pairs of boundary states leave
    the same interior members free (a boundary member blocks only its neighbours). An
    answer cut short is not kept (solving again may go further with the budget left)."""
    solved: dict[tuple, Solution] = {}

    def part(free: tuple[int, ...], cuts: tuple[frozenset[int], ...]) -> Solution:
        got = solved.get((free, cuts))
        if got is None:
            got = solve_part(free, cuts)
            if got[1] == "OPTIMAL":
                solved[free, cuts] = got
        return got

    return part


def _segment_table(
    left: Sequence[frozenset[int]],
    right: Sequence[frozenset[int]],
    left_cross: tuple[int, ...],
    right_cross: tuple[int, ...],
    interior: tuple[int, ...],
    sets: Sequence[Collection[str]],
    weights: Sequence[int],
    nogoods: Sequence[frozenset[int]],
    solve_part: Callable[[tuple[int, ...], tuple[frozenset[int], ...]], Solution],
) -> tuple[Table, bool]:
    """Per pair of boundary states that fit together, the best interior choice."""
    left_set, right_set = frozenset(left_cross), frozenset(right_cross)
    boundary = left_set | right_set
    position = {g: p for p, g in enumerate(interior)}
    table: Table = {}
    proven = True
    part = _proven_once(solve_part)  # many boundary pairs leave the same interior free
    for i, a in enumerate(left):
        for j, b in enumerate(right):
            if a & right_set != b & left_set:  # a member crossing both cuts: one choice
                continue
            picked = a | b
            blocked: set[str] = set()
            fits = True
            for g in picked:
                if not blocked.isdisjoint(sets[g]):
                    fits = False
                    break
                blocked.update(sets[g])
            if not fits:
                continue
            free = tuple(g for g in interior if blocked.isdisjoint(sets[g]))
            open_cuts: list[frozenset[int]] = []
            for c in nogoods:
                if not (c & boundary) <= picked:
                    continue  # a boundary member of it is not chosen: satisfied
                rest = c - boundary
                if not rest:
                    fits = False  # the boundary choice alone closes a cycle
                    break
                if all(g in position and blocked.isdisjoint(sets[g]) for g in rest):
                    open_cuts.append(rest)
            if not fits:
                continue
            if free:
                best, status, top = part(free, tuple(open_cuts))
            else:
                best, status, top = frozenset(), "OPTIMAL", 0
            done = status == "OPTIMAL"
            proven = proven and done
            value = sum(weights[g] for g in best)
            spots = tuple(sorted(position[g] for g in best))
            table[(i, j)] = (value, max(top, value), spots, done)
    return table, proven
