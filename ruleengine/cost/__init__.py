"""Cost stage: hardware targets, HBM traffic, UB working set, constraints, verdicts."""

from ruleengine.cost.model import Cost, ScoredCandidate, Target, Verdict
from ruleengine.cost.scoring import score_candidates
from ruleengine.cost.targets import DEFAULT_TARGET, known_targets, load_target

__all__ = [
    "DEFAULT_TARGET",
    "Cost",
    "ScoredCandidate",
    "Target",
    "Verdict",
    "known_targets",
    "load_target",
    "score_candidates",
]
