"""Cost stage: hardware targets, HBM traffic, UB working set, constraints, verdicts."""

from ruleengine.cost.display import human_bytes, kb
from ruleengine.cost.duplicates import reduce_duplicates
from ruleengine.cost.group_memo import GroupMemo
from ruleengine.cost.lazy import relabel
from ruleengine.cost.model import Cost, ScoredCandidate, Target, Verdict
from ruleengine.cost.scoring import score_candidates
from ruleengine.cost.targets import DEFAULT_TARGET, known_targets, load_target
from ruleengine.cost.verdicts import score_one

__all__ = [
    "DEFAULT_TARGET",
    "Cost",
    "GroupMemo",
    "ScoredCandidate",
    "Target",
    "Verdict",
    "human_bytes",
    "kb",
    "known_targets",
    "load_target",
    "reduce_duplicates",
    "relabel",
    "score_candidates",
    "score_one",
]
