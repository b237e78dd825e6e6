"""Suggest stage: draft rules for the fusable traffic that no rule captures.

analyze each model with the given rules -> regions the chosen groups leave unfused
(``regions``) -> canonical form and clusters across layers and models (``canon``) ->
one drafted rule per cluster (``drafting``: ``fitting`` writes it, ``emit`` spells it,
``draft_tests`` tests it) -> coverage before and after, measured by running the real
pipeline again with the drafted rules added (``measuring``, ``pruning``) -> further
rounds where the rules reach less than their drafting (``rounds``) -> each model's
other spelling checked (``spelled_checks``).

Modules, in the order a run uses them:

- ``rounds``: ``suggest`` and the rounds after the first drafting.
- ``drafting``: analyses, region search, clusters, one tested draft per cluster.
- ``regions``, ``partition``, ``twins``: the regions no chosen group covers.
- ``canon``: a region's canonical form (the cluster key).
- ``fitting``, ``emit``: a cluster's drafts within the matcher's clause budget.
- ``draft_tests``, ``ruletests``: the drafts' generated rule tests.
- ``analyses``, ``measuring``, ``pruning``: coverage with the drafts; drafts that lower it.
- ``spelled``, ``spelled_checks``: a model's other spelling and the bridges for it.
- ``solves``: the run's cache of CP-SAT solves (a problem met again is not solved again).
- ``model``: the records.
"""

from ruleengine.suggest.model import (
    Cluster,
    DraftRule,
    Instance,
    ModelBaseline,
    ModelCoverage,
    Progress,
    Region,
    SpelledCoverage,
    Suggestion,
)
from ruleengine.suggest.rounds import RESOLVE_SECONDS, suggest

__all__ = [
    "RESOLVE_SECONDS",
    "Cluster",
    "DraftRule",
    "Instance",
    "ModelBaseline",
    "ModelCoverage",
    "Progress",
    "Region",
    "SpelledCoverage",
    "Suggestion",
    "suggest",
]
