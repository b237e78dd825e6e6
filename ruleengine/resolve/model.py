"""Records produced by conflict resolution."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ruleengine.cost.model import ScoredCandidate


@dataclass(frozen=True)
class Resolution:
    """The chosen non-conflicting set, and why every other viable candidate lost."""

    solver: str  # "exact" or "greedy"
    status: str  # OPTIMAL, FEASIBLE (with bound/gap), or GREEDY
    chosen: tuple[ScoredCandidate, ...]
    # Viable candidates not chosen, each with a reason (e.g. "lost a conflict to group 3");
    # ``resolve`` gives a ``LostCandidates``, which makes them on first read.
    lost: Sequence[tuple[ScoredCandidate, str]]
    objective: int  # total net HBM bytes saved by ``chosen``
    bound: int | None = None  # best proven bound (exact solver)
    seconds: float = 0.0
    components: int = 0

    @property
    def gap(self) -> float:
        if self.bound is None or self.bound == 0:
            return 0.0
        return max(0.0, (self.bound - self.objective) / self.bound)
