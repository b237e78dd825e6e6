"""The exact selection model, solved with OR-Tools CP-SAT. The only module importing ortools.

One component of overlapping candidates at a time; the caller adds lazy cycle cuts.

The model is written straight into CP-SAT's model proto (``cp_model_helper``: 0.05 s and
~26 MiB to import) rather than through ``cp_model``, whose import pulls pandas (0.4 s of
CPU and ~64 MiB of RSS per process). The proto is the one ``cp_model`` builds, field for
field (``tests/resolve/test_fast_paths.py`` compares them), so the answers are the same;
the extra ``floors`` rows (suggest) still go through ``cp_model``.

``memoized`` is the hook a caller caches solves through (suggest's ``solves.SolveCache``):
``solve_component`` asks the innermost memo installed; ``solve_uncached`` always solves.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ruleengine.runtime import run_interruptibly


@dataclass(frozen=True)
class ComponentSolution:
    selected: frozenset[int]  # indices into the component's candidates
    status: str  # OPTIMAL, FEASIBLE or UNKNOWN (no solution within the time limit)
    objective: int
    bound: int
    seconds: float
    # CP-SAT's deterministic time spent (the same on every run of the same model: what a
    # budget that must not depend on the machine's load is counted in)
    deterministic: float = 0.0


# The memos ``memoized`` installed, innermost last (``solve_component`` asks the last).
_MEMOS: list[Callable[..., ComponentSolution]] = []


@contextmanager
def memoized(
    memo: Callable[..., ComponentSolution],
) -> Iterator[Callable[..., ComponentSolution]]:
    """Within, every ``solve_component`` call, whoever makes it, is answered by ``memo``
    (called with ``solve_component``'s arguments; it calls ``solve_uncached`` for a problem
    it does not hold): the hook a caller that meets the same problem many times (suggest)
    caches solves through, without replacing this module's function."""
    _MEMOS.append(memo)
    try:
        yield memo
    finally:
        _MEMOS.remove(memo)


def current_memo() -> Callable[..., ComponentSolution] | None:
    """The innermost memo ``memoized`` installed, or None."""
    return _MEMOS[-1] if _MEMOS else None


def solve_component(
    weights: Sequence[int],
    node_sets: Sequence[frozenset[str]] | Sequence[frozenset[int]],
    cuts: Sequence[frozenset[int]],
    **options: Any,
) -> ComponentSolution:
    """``solve_uncached``'s answer (its arguments and options), through the innermost memo
    ``memoized`` installed, if any."""
    if _MEMOS:
        return _MEMOS[-1](weights, node_sets, cuts, **options)
    return solve_uncached(weights, node_sets, cuts, **options)


def solve_uncached(
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
    floor_groups: Sequence[Sequence[int]] = (),
    floor_terms: Sequence[Sequence[tuple[int, int]]] = (),
    light_presolve: bool = False,
) -> ComponentSolution:
    """Maximise the total weight of chosen candidates, no node twice, no cut fully chosen;
    per (skip, floor) of ``floors``, the chosen outside ``skip`` have at least ``floor``
    total ``floor_values`` (suggest's selectable ceiling), plus, per (group, value) of the
    floor's ``floor_terms`` entry (where given), ``value`` where any candidate of
    ``floor_groups[group]`` is chosen (suggest's ceiling under twins).
    ``deterministic_s``: also stop after that much of CP-SAT's deterministic time (the
    same answer whatever the load). ``light_presolve``: no probing or inclusion search
    in CP-SAT's presolve (``LIGHT_PRESOLVE``)."""
    # Data: which candidates cover each node.
    # (nodes in sorted order: the model, hence the optimum CP-SAT returns among equal
    # ones, must not depend on set iteration order, which varies with string hashing)
    covering: dict[Hashable, list[int]] = {}
    for i, nodes in enumerate(node_sets):
        for n in sorted(nodes):
            covering.setdefault(n, []).append(i)
    if floors or not any(weights):
        return _solve_cp_model(
            weights,
            covering,
            cuts,
            hint,
            time_limit_s,
            seed,
            workers,
            floors,
            floor_values,
            deterministic_s,
            floor_groups,
            floor_terms,
            light_presolve,
        )
    from ortools.sat.python import cp_model_helper as cmh

    proto = model_proto(weights, covering, cuts, hint)
    params = cmh.SatParameters()
    _set_parameters(params, time_limit_s, seed, workers, deterministic_s, light_presolve)
    wrapper = cmh.SolveWrapper()
    wrapper.set_parameters(params)
    response = run_interruptibly(lambda: wrapper.solve(proto), wrapper.stop_search)
    return _solution(response, weights)


def model_proto(
    weights: Sequence[int],
    covering: dict[Hashable, list[int]],
    cuts: Sequence[frozenset[int]],
    hint: frozenset[int],
) -> Any:
    """The CpModelProto ``cp_model`` makes of this model (no floors, some weight not 0):
    a 0-1 variable ``x{i}`` per candidate, ``at_most_one`` per shared node, a linear row
    per cut (its variables sorted, as cp_model's flattening orders them), the objective
    negated with scaling -1 over the non-zero weights, the hint."""
    from ortools.sat.python import cp_model_helper as cmh

    proto = cmh.CpModelProto()
    for i in range(len(weights)):
        var = proto.variables.add()
        var.name = f"x{i}"
        var.domain.extend([0, 1])
    for users in covering.values():
        if len(users) > 1:
            proto.constraints.add().at_most_one.literals.extend(users)
    for cut in cuts:
        row = proto.constraints.add().linear
        row.vars.extend(sorted(cut))
        row.coeffs.extend([1] * len(cut))
        row.domain.extend([_INT64_MIN, len(cut) - 1])
    objective = proto.objective
    terms = [(i, int(w)) for i, w in enumerate(weights) if int(w) != 0]
    objective.vars.extend(i for i, _ in terms)
    objective.scaling_factor = -1.0
    objective.offset = 0
    objective.coeffs.extend(-w for _, w in terms)
    proto.solution_hint.vars.extend(range(len(weights)))
    proto.solution_hint.values.extend(1 if i in hint else 0 for i in range(len(weights)))
    return proto


_INT64_MIN = -(1 << 63)

# CP-SAT's presolve settings for ``light_presolve``. On suggest's kernel pools (12,000
# overlapping groups over ~160 nodes: a few huge at-most-one rows) the default presolve
# took ~90% of each solve, mostly probing and the search for included rows, each
# repeated per presolve round (gemma-tiny's pool: 6.8 s CPU, 8.7 deterministic; with
# these 0.7 s and 0.09, the same proven optimum). A setting of how the optimum is found:
# a solve proven optimal has the same objective either way.
LIGHT_PRESOLVE = {
    "cp_model_probing_level": 0,
    "presolve_inclusion_work_limit": 0,
    "max_presolve_iterations": 1,
}


def _set_parameters(
    params: Any,
    time_limit_s: float,
    seed: int,
    workers: int | None,
    deterministic_s: float | None,
    light_presolve: bool = False,
) -> None:
    # Solve: start from the greedy choice; fixed seed; one worker unless asked; a time
    # limit. One worker is what makes the answer the same on every run: two free-running
    # workers race, and which of several equal optima comes back changed from run to run
    # (OPT's TorchScript export, one component of 336 candidates: three different plans
    # in six runs). Interleaving two workers is deterministic too but took 5x the CPU of
    # one worker on a 600-candidate component, and one worker was also faster on large
    # ones (4,000 candidates: 2.7 s CPU vs 5.6 s; 20,000: optimal in 13 s where two
    # workers stopped at the 30 s limit; ring-shaped set packing, 2-core machine).
    params.max_time_in_seconds = max(0.01, time_limit_s)
    if deterministic_s is not None:
        params.max_deterministic_time = max(0.0, deterministic_s)
    params.random_seed = seed
    params.num_workers = workers or 1
    # OR-Tools would catch Ctrl-C itself and then reset SIGINT to the default (kill, no
    # clean-up); ours stay installed and stop the search instead.
    params.catch_sigint_signal = False
    if light_presolve:
        for name, value in LIGHT_PRESOLVE.items():
            setattr(params, name, value)


def _solution(response: Any, weights: Sequence[int]) -> ComponentSolution:
    """Status: OPTIMAL, FEASIBLE (with the bound) or nothing found."""
    from ortools.sat.python import cp_model_helper as cmh

    status = response.status
    if status in (cmh.CpSolverStatus.OPTIMAL, cmh.CpSolverStatus.FEASIBLE):
        values = response.solution
        return ComponentSolution(
            frozenset(i for i in range(len(weights)) if values[i]),
            "OPTIMAL" if status == cmh.CpSolverStatus.OPTIMAL else "FEASIBLE",
            round(response.objective_value),
            round(response.best_objective_bound),
            response.wall_time,
            response.deterministic_time,
        )
    return ComponentSolution(
        frozenset(),
        "UNKNOWN",
        0,
        sum(w for w in weights if w > 0),
        response.wall_time,
        response.deterministic_time,
    )


def cp_model_of(
    weights: Sequence[int],
    covering: dict[Hashable, list[int]],
    cuts: Sequence[frozenset[int]],
    hint: frozenset[int],
    floors: Sequence[tuple[Sequence[int], int]] = (),
    floor_values: Sequence[int] = (),
    floor_groups: Sequence[Sequence[int]] = (),
    floor_terms: Sequence[Sequence[tuple[int, int]]] = (),
) -> Any:
    """The same model through ``cp_model`` (floors too: ``solve_component``)."""
    from ortools.sat.python import cp_model

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
    # y[g] = 1 where any candidate of floor group g is chosen (at least: the floors below
    # only ever want it 0)
    y = [model.new_bool_var(f"y{g}") for g in range(len(floor_groups))]
    for g, members in enumerate(floor_groups):
        for i in members:
            model.add_implication(x[i], y[g])
    # (rows as weighted sums: a Python sum over ~48,000 terms per row took ~1 s per model
    # on a 32-layer stack's pool; the same row, term for term)
    for k, (skip, floor) in enumerate(floors):
        out = set(skip)
        kept = [i for i in range(len(floor_values)) if i not in out]
        terms = floor_terms[k] if k < len(floor_terms) else ()
        saved = cp_model.LinearExpr.weighted_sum(
            [*(x[i] for i in kept), *(y[g] for g, _ in terms)],
            [*(int(floor_values[i]) for i in kept), *(-int(v) for _, v in terms)],
        )
        model.add(saved >= floor)

    # Objective: total net HBM bytes saved (integers).
    model.maximize(cp_model.LinearExpr.weighted_sum(x, [int(w) for w in weights]))
    for i in range(len(weights)):
        model.add_hint(x[i], 1 if i in hint else 0)
    return model


def _solve_cp_model(
    weights: Sequence[int],
    covering: dict[Hashable, list[int]],
    cuts: Sequence[frozenset[int]],
    hint: frozenset[int],
    time_limit_s: float,
    seed: int,
    workers: int | None,
    floors: Sequence[tuple[Sequence[int], int]],
    floor_values: Sequence[int],
    deterministic_s: float | None,
    floor_groups: Sequence[Sequence[int]] = (),
    floor_terms: Sequence[Sequence[tuple[int, int]]] = (),
    light_presolve: bool = False,
) -> ComponentSolution:
    from ortools.sat.python import cp_model

    model = cp_model_of(
        weights, covering, cuts, hint, floors, floor_values, floor_groups, floor_terms
    )
    solver = cp_model.CpSolver()
    _set_parameters(solver.parameters, time_limit_s, seed, workers, deterministic_s, light_presolve)
    status = run_interruptibly(lambda: solver.solve(model), solver.stop_search)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _solution(solver.response_proto, weights)
    return ComponentSolution(
        frozenset(),
        "UNKNOWN",
        0,
        sum(w for w in weights if w > 0),
        solver.wall_time,
        solver.deterministic_time,
    )
