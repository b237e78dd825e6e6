"""Matching: rules -> Datalog clauses, graph -> facts, pyDatalog -> candidates.

``find_candidates(graph, rule_set)`` is the stage entry point. pyDatalog itself is
imported only in ``backend``.
"""

from ruleengine.match.matcher import compiled_program, find_candidates
from ruleengine.match.model import Candidate, MatchResult, NearMiss

__all__ = ["Candidate", "MatchResult", "NearMiss", "compiled_program", "find_candidates"]
