"""Records of twins made from a template (``MatchResult.twins``).

A candidate the matcher found by translating another has the same local structure, so
the same verdict, code and numbers: it takes its source's record as a template
(``TwinScored.like``, made when read), unless its rule differs or the names of tied
anchor candidates sort otherwise by length there (``ub_need`` picks the anchor among
equal-sized outputs by name length); those are scored on their own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from ruleengine.cost.group_memo import GroupMemo
from ruleengine.cost.lazy import TwinScored, relabel
from ruleengine.cost.model import ScoredCandidate, Target, Verdict
from ruleengine.cost.opinfo import VIEW, node_kinds, size_table
from ruleengine.cost.traffic import GroupIO, topo_position
from ruleengine.graph.model import Graph
from ruleengine.match.model import Candidate, TwinMap
from ruleengine.rules.model import Rule


class RecordBook:
    """The cost stage's records by candidate index: made now (``made``: the candidates
    that are no twin, and the twins whose names pick another anchor), or made from a
    template when read (``template[i]`` indexes ``templates``: priority, verdict, code,
    cost, given reason and what ``TwinScored`` recomputes its words with)."""

    def __init__(self, candidates: Sequence[Candidate]) -> None:
        self.candidates = candidates
        self.made: dict[int, ScoredCandidate] = {}
        self.template = np.full(len(candidates), -1, dtype=np.int64)
        self.templates: list[tuple] = []
        # a twin that is a duplicate takes a template of its own (one per template and
        # reason: ``relabel``'s record, made when read)
        self._duplicates: dict[tuple[int, str], int] = {}

    def get(self, i: int) -> ScoredCandidate:
        """Candidate ``i``'s record (made from its template when it has one)."""
        rec = self.made.get(i)
        if rec is not None:
            return rec
        return TwinScored.like(self.candidates[i], self.templates[int(self.template[i])])

    def priority_of(self, i: int) -> int:
        """Candidate ``i``'s priority, read without making its record."""
        rec = self.made.get(i)
        return rec.priority if rec is not None else self.templates[int(self.template[i])][0]

    def mark_duplicate(self, i: int, why: str) -> None:
        """Candidate ``i`` becomes a duplicate (``relabel``), for the reason ``why``."""
        rec = self.made.get(i)
        if rec is not None:
            self.made[i] = relabel(rec, Verdict.DUPLICATE, "duplicate", why)
            return
        t = int(self.template[i])
        d = self._duplicates.get((t, why))
        if d is None:
            priority, _v, _c, cost, _given, again = self.templates[t]
            self.templates.append((priority, Verdict.DUPLICATE, "duplicate", cost, why, again))
            d = self._duplicates[t, why] = len(self.templates) - 1
        self.template[i] = d


class TwinSources:
    """Per twin source, made on first use: its tied anchor outputs (node position,
    port), which of them the source picks (by name length), its rule and the template
    its twins take."""

    def __init__(
        self,
        graph: Graph,
        rules: Mapping[str, Rule],
        target: Target,
        benefit_threshold: float | None,
        memo: GroupMemo,
    ) -> None:
        self.graph, self.rules, self.target = graph, rules, target
        self.benefit_threshold, self.memo = benefit_threshold, memo
        self._ties: dict[int, tuple[tuple[tuple[int, int], ...], int, str, int]] = {}
        self._by_port: dict[int, Any] = {}  # output port -> each node's output name length
        self._redo: dict[str, tuple] = {}  # per rule: what TwinScored recomputes words with
        self._pos = topo_position(graph)
        self._nodes = graph.nodes

    def out_len(self, q: int) -> Any:
        """Per node (by position), the length of its output ``q``'s name (2^30: none)."""
        got = self._by_port.get(q)
        if got is None:
            nodes = self._nodes
            got = self._by_port[q] = np.fromiter(
                (len(n.outputs[q]) if q < len(n.outputs) else 1 << 30 for n in nodes),
                dtype=np.int64,
                count=len(nodes),
            )
        return got

    def source(self, j: int, book: RecordBook) -> tuple[tuple[tuple[int, int], ...], int, str, int]:
        """Source ``j``'s tied anchor outputs, the one it picks, its rule and template."""
        hit = self._ties.get(j)
        if hit is not None:
            return hit
        graph = self.graph
        base = book.made[j]
        tied = _anchor_ties(graph, self.memo.analyse(base.candidate.nodes)[0])
        at = tuple(
            (self._pos[graph.tensors[t].producer], graph.tensors[t].producer_port or 0)
            for t in tied
        )
        rule_name = base.candidate.rule
        again = self._redo.get(rule_name)
        if again is None:
            again = self._redo[rule_name] = (
                graph,
                self.rules.get(rule_name),
                self.target,
                self.benefit_threshold,
                self.memo,
            )
        book.templates.append(TwinScored.like_template(base, again))
        nodes = self._nodes
        hit = self._ties[j] = (
            at,
            _first_shortest([nodes[k].outputs[q] for k, q in at]) if at else 0,
            rule_name,
            len(book.templates) - 1,
        )
        return hit


def assign_twins(
    book: RecordBook,
    sources: TwinSources,
    twins: Mapping[int, tuple[int, int]],
    score: Callable[[int], ScoredCandidate],
) -> None:
    """Give each twin its source's template, or its own record (``score``) where its
    rule differs or its names pick another of the tied anchor outputs."""
    candidates = book.candidates
    template = book.template
    for j, idx, shifts in by_source(twins):
        refs, picked, rule_name, t = sources.source(j, book)
        rules_of = rules_at(candidates, idx)
        if not refs and all(map(rule_name.__eq__, rules_of)):
            # the common case: every twin of this source takes its record
            template[idx] = t
            continue
        # where the source's anchor is one of equal-sized outputs picked by name
        # length, each twin whose names pick the same one (``_first_shortest`` at
        # every offset at once: the first least length per column)
        same = [True] * len(idx)
        if refs:
            at = np.asarray(shifts, dtype=np.int64)
            lengths = np.stack([sources.out_len(q)[k + at] for k, q in refs])
            same = (lengths.argmin(axis=0) == picked).tolist()
        for i, rule_i, alike in zip(idx, rules_of, same, strict=True):
            if alike and rule_name == rule_i:
                template[i] = t
                continue
            book.made[i] = score(i)


def _anchor_ties(graph: Graph, io: GroupIO) -> tuple[str, ...]:
    """The outputs of equal largest size among which ``ub_need`` picks its anchor by
    name length (the one place a name decides a number), in its order; () when the
    largest is unique."""
    table = size_table(graph)
    kinds = node_kinds(graph)
    compute = [n for n in io.nodes if not kinds[n.name] & VIEW]
    if not compute:
        return ()

    def sized(ts: Sequence[str]) -> list[tuple[str, int]]:
        return [
            (t, math.prod(table[t][0])) for t in ts if t and t in table and table[t][0] is not None
        ]

    found = sized(io.outputs) or sized(compute[-1].outputs)
    if not found:
        return ()
    top = max(n for _, n in found)
    tied = tuple(t for t, n in found if n == top)
    return tied if len(tied) > 1 else ()


def _first_shortest(names: Sequence[str]) -> int:
    """The index of the first of the shortest names."""
    lengths = [len(t) for t in names]
    return lengths.index(min(lengths))


def not_twins(twins: Mapping[int, tuple[int, int]], n: int) -> list[int]:
    """The candidate indices below ``n`` that are no twin, ascending."""
    if isinstance(twins, TwinMap):
        own = np.ones(n, dtype=bool)
        own[twins.index] = False
        return np.flatnonzero(own).tolist()
    return [i for i in range(n) if i not in twins]


def by_source(
    twins: Mapping[int, tuple[int, int]],
) -> Iterator[tuple[int, list[int], list[int]]]:
    """The twins grouped by the candidate they translate: (source, their indices, their
    offsets), sources ascending, indices ascending within each."""
    if isinstance(twins, TwinMap):
        if not len(twins):
            return
        order = np.argsort(twins.source, kind="stable")
        src = twins.source[order]
        cuts = np.flatnonzero(src[1:] != src[:-1]) + 1
        for rows in np.split(order, cuts):
            yield int(twins.source[rows[0]]), twins.index[rows].tolist(), twins.shift[rows].tolist()
        return
    groups: dict[int, tuple[list[int], list[int]]] = {}
    for i, (j, shift) in sorted(twins.items()):
        idx, shifts = groups.setdefault(j, ([], []))
        idx.append(i)
        shifts.append(shift)
    for j in sorted(groups):
        yield j, *groups[j]


def rules_at(candidates: Sequence[Candidate], idx: list[int]) -> list[str]:
    """The rules of candidates ``idx``: from the memo's rows when it has them (no record
    made: ``_CandRows.rule_at``), else read."""
    rule_at = getattr(candidates, "rule_at", None)
    if rule_at is not None:
        return rule_at(idx)
    return list(map(attrgetter("rule"), map(candidates.__getitem__, idx)))
