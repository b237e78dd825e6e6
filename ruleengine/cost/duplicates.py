"""Duplicates: viable candidates of several rules (or alternatives) with one node set.

The highest priority survives (then the least candidate key); every other becomes a
``DUPLICATE`` with the reason it lost. Node sets are compared as ints (``_set_keys``), so
no set is made per record on a stack of 10^5 candidates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import compress, repeat
from operator import attrgetter, is_

import numpy as np

from ruleengine.cost.lazy import relabel
from ruleengine.cost.model import ScoredCandidate, Verdict
from ruleengine.cost.traffic import topo_position
from ruleengine.graph.model import Graph
from ruleengine.match.model import TwinMap


def _set_keys(
    graph: Graph,
    nodes_of: Callable[[int], Sequence[str]],
    which: Sequence[int],
    twins: Mapping[int, tuple[int, int]],
) -> list[int]:
    """One int per candidate ``which[k]`` (a candidate index; ``nodes_of`` gives its
    nodes), equal for two candidates exactly when their node sets are equal: the least
    node position and the set's shape (positions minus the least, interned). A twin's
    shape is its source's and its least position the source's plus the offset
    (``MatchResult.twins``), so only the candidates that are no twin, and the sources,
    are read node by node."""
    pos = topo_position(graph)
    shapes: dict[tuple[int, ...], int] = {}

    def read(i: int) -> tuple[int, int]:
        ps = sorted(set(map(pos.__getitem__, nodes_of(i))))
        lo = ps[0]
        return lo, shapes.setdefault(tuple(p - lo for p in ps), len(shapes))

    n = len(which)
    lows = np.empty(n, dtype=np.int64)
    sids = np.empty(n, dtype=np.int64)
    at = np.asarray(which, dtype=np.int64)
    if isinstance(twins, TwinMap) and len(twins):
        k = np.minimum(twins.index.searchsorted(at), len(twins) - 1)
        is_twin = twins.index[k] == at
    else:
        k = np.zeros(n, dtype=np.int64)
        is_twin = np.zeros(n, dtype=bool)
    # no twin: read from the names (a few thousand: a stack's first and last layers)
    for t in np.flatnonzero(~is_twin).tolist():
        lows[t], sids[t] = read(which[t])
    rows = np.flatnonzero(is_twin)
    if len(rows):
        k = k[rows]
        sources, back = np.unique(twins.source[k], return_inverse=True)  # type: ignore[union-attr]
        table = np.asarray([read(j) for j in sources.tolist()], dtype=np.int64).reshape(-1, 2)
        lows[rows] = table[back.reshape(-1), 0] + twins.shift[k]  # type: ignore[union-attr]
        sids[rows] = table[back.reshape(-1), 1]
    return (lows * max(len(shapes), 1) + sids).tolist()


def _duplicate_reason(w_rule: str, w_priority: int, rule: str, priority: int) -> str:
    """Why a candidate lost to ``w_rule``'s with the same node set."""
    if rule == w_rule:
        return f"same nodes as another match of {w_rule}"
    if priority == w_priority:
        return (
            f"same nodes as {w_rule}, equal priority {priority}: "
            f"tie broken by rule name ({w_rule} < {rule})"
        )
    return f"same nodes as {w_rule} (priority {w_priority} > {priority})"


def duplicate_groups(
    graph: Graph,
    viable: Sequence[int],
    nodes_of: Callable[[int], Sequence[str]],
    twins: Mapping[int, tuple[int, int]],
) -> list[list[int]]:
    """The viable candidates (indices) sharing a node set with another, per set
    (``_set_keys``: no set made per record; node sets shared by several grouped by numpy)."""
    at = np.asarray(_set_keys(graph, nodes_of, viable, twins), dtype=np.int64)
    order = np.argsort(at, kind="stable")
    srt = at[order]
    edge = np.flatnonzero(srt[1:] != srt[:-1]) + 1
    starts, ends = np.r_[0, edge], np.r_[edge, len(srt)]
    many = np.flatnonzero(ends - starts > 1)
    pick = np.asarray(viable, dtype=np.int64)[order]
    return [
        pick[a:b].tolist() for a, b in zip(starts[many].tolist(), ends[many].tolist(), strict=True)
    ]


def duplicate_losers(
    groups: Iterable[list[int]],
    priority_of: Callable[[int], int],
    rule_of: Callable[[int], str],
    key_of: Callable[[int], tuple],
) -> Iterator[tuple[int, str]]:
    """Per group of viable candidates with one node set: every one but the highest
    priority's (then least key), with why it is a duplicate, as (index, reason)."""
    texts: dict[tuple, str] = {}  # one reason per (winner's rule and priority, loser's)
    for idxs in groups:
        if len(idxs) < 2:
            continue
        prio = {i: priority_of(i) for i in idxs}
        rule = {i: rule_of(i) for i in idxs}
        # ranked by (-priority, candidate key); the key starts with the rule name, so
        # when no two share priority and rule (the common case: 10^4 groups on a
        # stack) (-priority, rule) orders them alike without spelling a key
        heads = [(-prio[i], rule[i], i) for i in idxs]
        if len({h[:2] for h in heads}) == len(heads):
            ranked = [h[2] for h in sorted(heads)]
        else:
            ranked = sorted(idxs, key=lambda i: (-prio[i], key_of(i)))
        w = ranked[0]
        w_rule, w_priority = rule[w], prio[w]
        for i in ranked[1:]:
            told = (w_rule, w_priority, rule[i], prio[i])
            why = texts.get(told)
            if why is None:
                why = texts[told] = _duplicate_reason(*told)
            yield i, why


def reduce_duplicates(
    scored: list[ScoredCandidate],
    graph: Graph | None = None,
    twins: Mapping[int, tuple[int, int]] | None = None,
) -> list[ScoredCandidate]:
    """Among viable candidates with the same node set, the higher priority survives.
    ``scored`` is in candidate order; with ``graph`` the node sets are compared as
    ``_set_keys`` (no set made per record), else as sets."""
    # the verdicts compared by C-level maps (10^5-10^6 records on a stack)
    is_fuse = map(is_, map(attrgetter("verdict"), scored), repeat(Verdict.FUSE))
    viable = list(compress(range(len(scored)), is_fuse))
    groups: Iterable[list[int]]
    if graph is not None:
        groups = duplicate_groups(graph, viable, lambda i: scored[i].candidate.nodes, twins or {})
    else:
        records = map(scored.__getitem__, viable)
        keys = list(map(frozenset, map(attrgetter("candidate.nodes"), records)))
        shared = {h for h, n in Counter(keys).items() if n > 1}  # counted in C; few repeat
        by_nodes: dict[object, list[int]] = {}
        for i, h in zip(viable, keys, strict=True):
            if h in shared:
                by_nodes.setdefault(h, []).append(i)
        groups = by_nodes.values()
    out = list(scored)
    for i, why in duplicate_losers(
        groups,
        lambda i: scored[i].priority,
        lambda i: scored[i].candidate.rule,
        lambda i: scored[i].candidate.key,
    ):
        out[i] = relabel(scored[i], Verdict.DUPLICATE, "duplicate", why)
    return out
