"""The exact selection model, solved with OR-Tools CP-SAT. The only module importing ortools.

One component of overlapping candidates at a time; the caller adds lazy cycle cuts.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ruleengine.runtime import run_interruptibly

SINGLE_WORKER_BELOW = 200  # candidates in a component


@dataclass(frozen=True)
class ComponentSolution:
    selected: frozenset[int]  # indices into the component's candidates
    status: str  # OPTIMAL, FEASIBLE or UNKNOWN (no solution within the time limit)
    objective: int
    bound: int
    seconds: float


def solve_component(
    weights: Sequence[int],
    node_sets: Sequence[frozenset[str]] | Sequence[frozenset[int]],
    cuts: Sequence[frozenset[int]],
    *,
    hint: frozenset[int] = frozenset(),
    time_limit_s: float = 30.0,
    seed: int = 0,
    workers: int | None = None,
    floors: Sequence[tuple[Sequence[int], int]] = (),
    floor_values: Sequence[int] = (),
    deterministic_s: float | None = None,
) -> ComponentSolution:
    """Maximise the total weight of chosen candidates, no node twice, no cut fully chosen;
    per (skip, floor) of ``floors``, the chosen outside ``skip`` have at least ``floor``
    total ``floor_values`` (suggest's selectable ceiling). ``deterministic_s``: also stop
    after that much of CP-SAT's deterministic time (the same answer whatever the load)."""
    # Data: which candidates cover each node.
    # (nodes in sorted order: the model, hence the optimum CP-SAT returns among equal
    # ones, must not depend on set iteration order, which varies with string hashing)
    covering: dict[Hashable, list[int]] = {}
    for i, nodes in enumerate(node_sets):
        for n in sorted(nodes):
            covering.setdefault(n, []).append(i)

    model = cp_model.CpModel()

    # Variables: x[i] = 1 when candidate i is fused.
    x = [model.new_bool_var(f"x{i}") for i in range(len(weights))]

    # Constraints: every node is in at most one chosen candidate.
    for users in covering.values():
        if len(users) > 1:
            model.add_at_most_one(x[i] for i in users)
    # Constraints: lazy cycle cuts; the groups of one contracted cycle are never all chosen.
    for cut in cuts:
        model.add(sum(x[i] for i in cut) <= len(cut) - 1)
    for skip, floor in floors:
        out = set(skip)
        model.add(sum(int(v) * x[i] for i, v in enumerate(floor_values) if i not in out) >= floor)

    # Objective: total net HBM bytes saved (integers).
    model.maximize(sum(int(w) * x[i] for i, w in enumerate(weights)))

    # Solve: start from the greedy choice; fixed seed; one worker for the usual small
    # component (deterministic, and threads only add overhead there), two for large
    # ones (CI machines are small); a time limit.
    for i in range(len(weights)):
        model.add_hint(x[i], 1 if i in hint else 0)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, time_limit_s)
    if deterministic_s is not None:
        solver.parameters.max_deterministic_time = deterministic_s
    solver.parameters.random_seed = seed
    solver.parameters.num_workers = workers or (1 if len(weights) < SINGLE_WORKER_BELOW else 2)
    # OR-Tools would catch Ctrl-C itself and then reset SIGINT to the default (kill, no
    # clean-up); ours stay installed and stop the search instead.
    solver.parameters.catch_sigint_signal = False
    status = run_interruptibly(lambda: solver.solve(model), solver.stop_search)

    # Status: OPTIMAL, FEASIBLE (with the bound) or nothing found.
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        chosen = frozenset(i for i in range(len(weights)) if solver.boolean_value(x[i]))
        return ComponentSolution(
            chosen,
            "OPTIMAL" if status == cp_model.OPTIMAL else "FEASIBLE",
            round(solver.objective_value),
            round(solver.best_objective_bound),
            solver.wall_time,
        )
    return ComponentSolution(
        frozenset(),
        "UNKNOWN",
        0,
        sum(w for w in weights if w > 0),
        solver.wall_time,
    )
