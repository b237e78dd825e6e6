"""The viable candidates that were not chosen, and why each lost (``Resolution.lost``).

A 2048-layer stack has ~2.4 x 10^5 of them while a compact plan shows ~3 per rule, so the
records (relabelled ``lost_conflict``) and their reasons are made on first read: the
sequence holds the losers as scored and the chosen groups, ``len`` and ``losers`` cost
nothing more, ``why(k)`` makes one reason, and iterating or indexing builds every
``(record, reason)`` pair once, exactly as an eager list would hold them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import compress
from operator import not_
from typing import Any

import numpy as np

from ruleengine.cost.lazy import relabel
from ruleengine.cost.model import ScoredCandidate, Verdict
from ruleengine.cost.scored import RecordView
from ruleengine.graph.model import Graph
from ruleengine.topology import Contraction


def describe(sc: ScoredCandidate, limit: int = 4) -> str:
    nodes = sc.candidate.nodes
    shown = ", ".join(nodes[:limit]) + (", ..." if len(nodes) > limit else "")
    return f"{sc.candidate.rule} group (nodes {shown})"


class LostCandidates(Sequence[tuple[ScoredCandidate, str]]):
    """``(record relabelled lost_conflict, reason)`` per viable candidate not chosen, in
    the order of ``viable``; equal to the tuple of those pairs."""

    def __init__(
        self,
        graph: Graph,
        viable: Sequence[ScoredCandidate],
        chosen: Sequence[ScoredCandidate],
        note: str,
    ) -> None:
        picked = set(map(id, chosen))  # ids compared by C-level maps (10^5 records)
        self._losers: Sequence[ScoredCandidate]
        if isinstance(viable, RecordView):
            # the records made so far (None where none is: no chosen one is unmade)
            made = viable.records.made(viable.positions)
            won = np.fromiter(map(picked.__contains__, map(id, made)), bool, len(made))
            self._losers = viable.view(np.flatnonzero(~won))
        else:
            self._losers = list(
                compress(viable, map(not_, map(picked.__contains__, map(id, viable))))
            )
        self._graph = graph
        self._chosen = tuple(chosen)
        self._note = note
        self._owner: dict[str, int] | None = None
        self._contraction: Contraction | None = None
        self._described: dict[tuple[int | None, ...], str] = {}  # one text per winner set
        self._all: tuple[tuple[ScoredCandidate, str], ...] | None = None

    def losers(self) -> Sequence[ScoredCandidate]:
        """The losers as scored (verdict still ``fuse``), in order: what the pairs
        relabel (a ``RecordView`` when resolve had the cost stage's ``ScoredRecords``)."""
        return self._losers

    def why(self, k: int) -> str:
        """The reason the ``k``-th loser lost."""
        sc = self._losers[k]
        owner = self._owner
        if owner is None:
            owner = self._owner = {
                n: i for i, g in enumerate(self._chosen) for n in g.candidate.nodes
            }
        # the winners owning its nodes, in node order
        key = tuple(dict.fromkeys(map(owner.get, sc.candidate.nodes)))
        if key != (None,):
            text = self._described.get(key)
            if text is None:
                text = "lost a conflict to " + "; ".join(
                    describe(self._chosen[i]) for i in key if i is not None
                )
                self._described[key] = text
            return text
        if self._contraction is None:
            self._contraction = Contraction(
                self._graph, [g.candidate.node_set for g in self._chosen]
            )
        cyc = self._contraction.closes_cycle(sc.candidate.node_set)
        if cyc is not None:
            return "would close a cycle with " + "; ".join(describe(self._chosen[i]) for i in cyc)
        return f"not selected {self._note}".strip()

    def all(self) -> tuple[tuple[ScoredCandidate, str], ...]:
        if self._all is None:
            out = []
            for k, sc in enumerate(self._losers):
                why = self.why(k)
                # relabel: replace() that leaves lazily computed details unread
                out.append((relabel(sc, Verdict.LOST_CONFLICT, "lost-conflict", why), why))
            self._all = tuple(out)
        return self._all

    def __len__(self) -> int:
        return len(self._losers)

    def __iter__(self) -> Iterator[tuple[ScoredCandidate, str]]:
        return iter(self.all())

    def __getitem__(self, index: Any) -> Any:
        return self.all()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return self.all() == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LostCandidates({len(self)} lost)"
