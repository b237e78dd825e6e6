"""The exact selection: every component solved on its own, then rounds of lazy cycle
cuts. After each round the chosen groups are contracted and checked for a cycle; a cycle
adds a no-good cut, merges the components it touches, and that component is solved
again, until none is left or the budget is spent.

The steps follow a CP-SAT model's order: data, variables (the components decided
together), constraints (no node twice within a solve; no cycle, by cuts), objective
(net bytes saved), solve (the rounds), status branch.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, repeat
from operator import attrgetter, gt

from ruleengine.cost.model import ScoredCandidate
from ruleengine.cost.scored import RecordView
from ruleengine.graph.model import Graph
from ruleengine.resolve.budget import SolveBudget
from ruleengine.resolve.component_solver import ComponentSolver, Problem
from ruleengine.resolve.components import Components
from ruleengine.resolve.greedy_hint import GreedyChoice
from ruleengine.resolve.segments import Solution
from ruleengine.topology import find_cycle, graph_topology

# (chosen records, status, bound, number of components)
Outcome = tuple[list[ScoredCandidate], str, int, int]


def solve_exact(
    graph: Graph,
    viable: Sequence[ScoredCandidate],
    greedy: GreedyChoice,
    time_limit_s: float,
    seed: int,
    nets: list[int] | None = None,
    node_tuples: list[tuple[int, ...]] | None = None,
    deterministic_s: float | None = None,
) -> Outcome:
    """``nets`` and ``node_tuples``: the viable records' net bytes and nodes as node
    positions, when known without reading the records (``ScoredRecords``): the solvers
    then number nodes by position (the names are read back for the cycle check).
    ``deterministic_s``: the CP-SAT solves' deterministic time in all (each solve gets
    what is left, in the order they run, which does not depend on the load)."""
    budget = SolveBudget(time_limit_s, deterministic_s)
    # Data: the candidates worth choosing, their weights and nodes.
    problem = _problem(graph, viable, nets, node_tuples)
    # Variables: one choice per candidate, decided together within a component.
    comps = Components(len(problem.cands))
    comps.link_overlapping(problem.sets, problem.order)  # type: ignore[arg-type]
    # Constraints and objective: each component's solve takes no node twice and the
    # cuts inside it, and maximises its weights (``ComponentSolver``).
    solver = ComponentSolver(problem, comps, greedy, seed, budget)
    # Solve: rounds of cycle cuts.
    solved, selected, cycle = _cut_rounds(graph, problem, comps, solver, budget)
    # Status branch.
    statuses = {sol[1] for sol in solved.values()}
    status = "OPTIMAL" if statuses <= {"OPTIMAL"} else "FEASIBLE"
    bound = sum(sol[2] for sol in solved.values())
    if cycle is not None:  # out of time with a cycle left: fall back on greedy
        return list(greedy.chosen), "FEASIBLE", bound, len(solved)
    return [problem.cands[i] for i in selected], status, bound, len(solved)


def _problem(
    graph: Graph,
    viable: Sequence[ScoredCandidate],
    nets: list[int] | None,
    node_tuples: list[tuple[int, ...]] | None,
) -> Problem:
    """Only candidates that save something can be worth choosing (viable records all
    have a cost; C-level maps: 10^5 of them on a 2048-layer stack). Each candidate's
    nodes as its tuple (a node set per record is ~1 KB: 10^5 viable records on a
    2048-layer stack); sets are made where set semantics matter."""
    if nets is None:
        nets = list(map(attrgetter("cost.net_bytes"), viable))
    saves = list(map(gt, nets, repeat(0)))
    weights = list(compress(nets, saves))
    if isinstance(viable, RecordView) and node_tuples is not None:
        cands = viable.view(list(compress(range(len(viable)), saves)))
        sets = list(compress(node_tuples, saves))
        order = range(len(graph.nodes))  # a node's position is its number
        return Problem(cands, sets, weights, order, graph_topology(graph).names)
    listed = list(compress(viable, saves))
    named = list(map(attrgetter("candidate.nodes"), listed))
    by_name = {n.name: n.index for n in graph.nodes}  # node -> topological index
    return Problem(listed, named, weights, by_name, None)


def _cut_rounds(
    graph: Graph,
    problem: Problem,
    comps: Components,
    solver: ComponentSolver,
    budget: SolveBudget,
) -> tuple[dict[tuple[int, ...], Solution], list[int], tuple[int, ...] | None]:
    """Solve every component (a solution is kept while its component is unchanged),
    then cut a cycle the choice forms, until none is left or the budget is spent: the
    solutions by component, the chosen candidates and the cycle left (None)."""
    cuts: list[frozenset[int]] = []
    solved: dict[tuple[int, ...], Solution] = {}
    while True:
        current: dict[tuple[int, ...], Solution] = {}
        for members in comps.groups().values():
            key = tuple(members)
            current[key] = solved[key] if key in solved else solver.solve(key, cuts)
        solved = current
        selected = sorted(i for sol in solved.values() for i in sol[0])
        cycle = find_cycle(graph, _groups(problem, selected))
        if cycle is None or budget.exhausted():
            return solved, selected, cycle
        cut = frozenset(selected[k] for k in cycle)
        cuts.append(cut)
        members = sorted(cut)
        for i in members[1:]:
            comps.union(members[0], i)
        for key in [k for k in solved if set(k) & cut]:
            del solved[key]


def _groups(problem: Problem, selected: list[int]) -> list[frozenset[str]]:
    """The chosen candidates' node sets, by node name (what ``find_cycle`` reads)."""
    sets, names = problem.sets, problem.names
    if names is None:
        return [frozenset(sets[i]) for i in selected]  # type: ignore[misc]
    return [frozenset(map(names.__getitem__, sets[i])) for i in selected]
