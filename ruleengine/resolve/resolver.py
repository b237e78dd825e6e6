"""``resolve``: choose the fused groups among the viable candidates, exactly
(``rounds``) or greedily (the graph-autofusion reference), and say what was lost."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from itertools import compress, repeat
from operator import attrgetter, is_, is_not

import numpy as np

from ruleengine.cost.model import ScoredCandidate, Verdict
from ruleengine.cost.scored import ScoredRecords
from ruleengine.cost.traffic import topo_position
from ruleengine.errors import UsageError
from ruleengine.graph.model import Graph
from ruleengine.resolve.budget import DETERMINISTIC_WALL_FACTOR, enclosing_budget
from ruleengine.resolve.greedy import select_greedy
from ruleengine.resolve.greedy_hint import GreedyChoice
from ruleengine.resolve.lost import LostCandidates
from ruleengine.resolve.model import Resolution
from ruleengine.resolve.rounds import solve_exact
from ruleengine.runtime import paused_gc
from ruleengine.topology import graph_topology

SOLVERS = ("exact", "greedy")


def resolve(
    graph: Graph,
    scored: Sequence[ScoredCandidate],
    *,
    solver: str = "exact",
    time_limit_s: float = 30.0,
    seed: int = 0,
    jobs: int = 1,
    deterministic_s: float | None = None,
    exclude: Collection[tuple] = (),
    revive: Sequence[ScoredCandidate] = (),
) -> Resolution:
    """Choose the fused groups among the viable (``verdict == FUSE``) candidates.

    ``exclude``: candidate keys (``Candidate.key``) never to choose, as if not viable;
    ``revive``: viable records to choose among as well (``fuse --safe`` solves again
    without the candidates whose groups failed verification, on the same scored records,
    nothing matched or costed again, and revives the duplicates they had beaten).

    ``jobs`` > 1: the greedy choice (CP-SAT's hint) is made in a forked child while the
    components are formed and solved here (the same choice). ``deterministic_s`` (default:
    the enclosing ``deterministic_budget``'s, else none): CP-SAT's solves stop once they
    have spent that much deterministic time in all, and the wall limit becomes at least
    ``DETERMINISTIC_WALL_FACTOR`` times it."""
    if deterministic_s is None:
        deterministic_s = enclosing_budget()
    if deterministic_s is not None:
        time_limit_s = max(time_limit_s, DETERMINISTIC_WALL_FACTOR * deterministic_s)
    with paused_gc():
        return _resolve(
            graph,
            scored,
            solver,
            time_limit_s,
            seed,
            jobs,
            deterministic_s,
            (frozenset(exclude), tuple(revive)),
        )


def _resolve(
    graph: Graph,
    scored: Sequence[ScoredCandidate],
    solver: str,
    time_limit_s: float,
    seed: int,
    jobs: int = 1,
    deterministic_s: float | None = None,
    changes: tuple[frozenset[tuple], tuple[ScoredCandidate, ...]] = (frozenset(), ()),
) -> Resolution:
    if solver not in SOLVERS:
        raise UsageError(f"unknown solver {solver!r}; choose one of {', '.join(SOLVERS)}")
    start = time.perf_counter()
    viable: Sequence[ScoredCandidate]
    nets: list[int] | None = None
    sets: list[tuple[int, ...]] | None = None
    exclude, revive = changes
    if isinstance(scored, ScoredRecords) and not revive and solver != "greedy" and _indexed(graph):
        # the cost stage's arrays: verdicts, costs, net bytes; each candidate's nodes as
        # node positions (a twin's from its source's), a record made only for what is
        # chosen (or read)
        at = _kept(scored, scored.viable(), exclude)
        viable = scored.view(at)
        nets = scored.nets[at].tolist()
        sets = scored.node_positions(at, topo_position(graph))
    elif isinstance(scored, ScoredRecords):
        viable = scored.view(_kept(scored, scored.viable(), exclude))
    else:
        # the verdicts compared by C-level maps (10^5-10^6 records on a stack), the few
        # viable ones then checked for a cost
        fuse = list(
            compress(scored, map(is_, map(attrgetter("verdict"), scored), repeat(Verdict.FUSE)))
        )
        viable = list(compress(fuse, map(is_not, map(attrgetter("cost"), fuse), repeat(None))))
        if exclude:
            viable = [s for s in viable if s.candidate.key not in exclude]
    if revive:
        viable = [*viable, *(s for s in revive if s.candidate.key not in exclude)]
    if solver == "greedy":
        chosen = _order_chosen(graph, select_greedy(graph, viable))
        return Resolution(
            "greedy",
            "GREEDY",
            chosen,
            LostCandidates(graph, viable, chosen, ""),
            sum(_net(s) for s in chosen),
            None,
            time.perf_counter() - start,
            0,
        )
    greedy = GreedyChoice(graph, viable, jobs)
    chosen, status, bound, components = solve_exact(
        graph, viable, greedy, time_limit_s, seed, nets, sets, deterministic_s
    )
    objective = sum(_net(s) for s in chosen)
    if status != "OPTIMAL":  # an optimum is never below greedy's choice, which is feasible
        greedy_objective = sum(_net(s) for s in greedy.chosen)
        if objective < greedy_objective:  # the time limit cut a search short
            chosen, objective, status = list(greedy.chosen), greedy_objective, "FEASIBLE"
    ordered = _order_chosen(graph, chosen)
    note = "within the time limit" if status != "OPTIMAL" else ""
    return Resolution(
        "exact",
        status,
        ordered,
        LostCandidates(graph, viable, ordered, note),
        objective,
        max(bound, objective),
        time.perf_counter() - start,
        components,
    )


def _kept(scored: ScoredRecords, at: np.ndarray, exclude: frozenset[tuple]) -> np.ndarray:
    """The positions ``at`` less those whose candidate key is in ``exclude``."""
    if not exclude:
        return at
    return at[[scored.candidate(int(p)).key not in exclude for p in at]]


def _net(sc: ScoredCandidate) -> int:
    """The record's net bytes saved (0 without a cost)."""
    return sc.cost.net_bytes if sc.cost else 0


def _indexed(graph: Graph) -> bool:
    """Whether every node's topological index is its position in ``graph.nodes`` (the
    loader's order): then node positions stand for node names in the solvers."""
    return all(n.index == i for i, n in enumerate(graph.nodes))


def _order_chosen(graph: Graph, chosen: Sequence[ScoredCandidate]) -> tuple[ScoredCandidate, ...]:
    """The chosen groups by their first node's topological position, then key."""
    pos = graph_topology(graph).pos
    return tuple(
        sorted(chosen, key=lambda s: (min(pos[n] for n in s.candidate.nodes), s.candidate.key))
    )
