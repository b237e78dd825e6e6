"""Conflict resolution: pick non-overlapping candidates that keep the graph acyclic.

``resolve(graph, scored, solver="exact")`` solves each independent component (candidates
linked by shared nodes, or by a cycle they would form together) on its own: by
enumeration when it is tiny, by interval scheduling when every candidate is a contiguous
run, by dynamic programming over cuts when it is a long chain of layers (``segments.py``),
else with CP-SAT (``exact.py``). After each round the chosen
groups are contracted and checked for a cycle; a cycle adds a no-good cut, merges the
components it touches, and that component is solved again, until none is left.
``solver="greedy"`` is the graph-autofusion reference: by net benefit, descending.

The exact solver stops on ``time_limit_s`` of wall time (``fuse --time-limit``), or, given
``deterministic_s`` (or within ``deterministic_budget``), on that much of CP-SAT's
deterministic time summed over the resolve's solves, the wall limit then only a far
safety net: the same answer whatever the machine's load (``suggest``'s measurements).

Modules: ``resolver`` (the entry point), ``rounds`` (components and cycle cuts),
``component_solver`` (one component, by the cheapest exact method), ``components``
(union-find), ``subsets``, ``intervals``, ``segments``, ``exact`` (CP-SAT, the only
module importing OR-Tools), ``greedy`` and ``greedy_hint``, ``budget``, ``lost``.
"""

from ruleengine.resolve.budget import DETERMINISTIC_WALL_FACTOR, deterministic_budget
from ruleengine.resolve.lost import LostCandidates
from ruleengine.resolve.model import Resolution
from ruleengine.resolve.resolver import SOLVERS, resolve

__all__ = [
    "DETERMINISTIC_WALL_FACTOR",
    "SOLVERS",
    "LostCandidates",
    "Resolution",
    "deterministic_budget",
    "resolve",
]
