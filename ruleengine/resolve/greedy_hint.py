"""The greedy choice as the exact solver uses it: CP-SAT's hint for a component solved
whole, and the floor of an answer the time limit cut short."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from functools import cached_property

from ruleengine.cost.model import ScoredCandidate
from ruleengine.cost.scored import RecordView
from ruleengine.graph.model import Graph
from ruleengine.resolve.greedy import greedy_at, select_greedy


class GreedyChoice:
    """The greedy choice, made on first use: the exact solver needs it only as CP-SAT's
    hint for a component solved whole and as the floor of an answer the time limit cut
    short (a component cut into segments, an enumerated or interval one do without it)."""

    def __init__(self, graph: Graph, viable: Sequence[ScoredCandidate], jobs: int = 1) -> None:
        from ruleengine.procs import Forked, forkable

        self.graph, self.viable = graph, viable
        # On the cost stage's records (``RecordView``) with a second core, the choice
        # (~0.55 s CPU at 2048 layers) is made in a forked child from the start, sent
        # back as indices; a child never asked for is killed with this object.
        self._child = (
            Forked(_greedy_bytes, graph, viable)
            if isinstance(viable, RecordView) and forkable(jobs)
            else None
        )

    @cached_property
    def at(self) -> list[int]:
        """``greedy_at``'s choice, as indices of ``viable`` (a ``RecordView``)."""
        child, self._child = self._child, None
        if child is not None:
            try:
                return pickle.loads(child.result())
            except Exception:  # any fault of the child: chosen here
                pass
        viable = self.viable
        assert isinstance(viable, RecordView)
        return greedy_at(self.graph, viable)

    @cached_property
    def chosen(self) -> list[ScoredCandidate]:
        """The greedy choice's records."""
        if isinstance(self.viable, RecordView):  # ``select_greedy`` on the same choice
            return list(map(self.viable.__getitem__, self.at))
        return select_greedy(self.graph, self.viable)

    @cached_property
    def ids(self) -> frozenset[int]:
        """The chosen records' ids (records not made from the cost stage's arrays)."""
        return frozenset(map(id, self.chosen))

    @cached_property
    def positions(self) -> frozenset[int]:
        """The chosen's positions in the cost stage's records (``RecordView``)."""
        viable = self.viable
        assert isinstance(viable, RecordView)
        return frozenset(viable.positions[self.at].tolist())

    def hint(self, cands: Sequence[ScoredCandidate], members: Sequence[int]) -> tuple[int, ...]:
        """Which of ``members`` (indices of ``cands``) the greedy choice takes."""
        if isinstance(cands, RecordView) and isinstance(self.viable, RecordView):
            taken = self.positions
            at = cands.positions[list(members)].tolist()
            return tuple(k for k, p in enumerate(at) if p in taken)
        ids = self.ids
        return tuple(k for k, g in enumerate(members) if id(cands[g]) in ids)


def _greedy_bytes(graph: Graph, viable: RecordView) -> bytes:
    """The forked child's work: ``greedy_at``'s indices, pickled."""
    return pickle.dumps(greedy_at(graph, viable), protocol=pickle.HIGHEST_PROTOCOL)
