"""One component of the selection solved exactly, by the cheapest method that applies:
a lone candidate is taken; a tiny component is enumerated (``subsets``); a long run of
contiguous candidates is interval scheduling (``intervals``); a long chain of layers is
cut into segments (``segments``); anything else goes to CP-SAT (``exact``) in a
canonical form, so identical components are solved once."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain

from ruleengine.cost.model import ScoredCandidate
from ruleengine.resolve.budget import SolveBudget
from ruleengine.resolve.components import Components
from ruleengine.resolve.greedy_hint import GreedyChoice
from ruleengine.resolve.intervals import as_intervals, best_intervals
from ruleengine.resolve.segments import Solution, Table, plan_chain, solve_chain
from ruleengine.resolve.segments import spans as segment_spans
from ruleengine.resolve.subsets import best_subset

# Components with at most this many candidates are solved by exhaustive enumeration
# (at most 2**6 subsets, exact and far cheaper than building a CP-SAT model); larger
# ones go to CP-SAT. Tests set it to 0 to send every component to CP-SAT.
ENUMERATE_UP_TO = 6
# Components this large whose candidates are contiguous runs of one node order (long
# elementwise chains: ~14k overlapping candidates on a 2,000-node chain) are solved by
# weighted interval scheduling, exact and O(n log n); CP-SAT needed 8 s there.
INTERVALS_FROM = 500
# Components this large are cut into segments where few candidates cross the
# topological order (``segments.py``: deep stacks whose layers overlap, exact and linear in
# the number of layers); one with no usable cut goes to CP-SAT whole.
CHAIN_FROM = 1000
# A chain plan whose largest segment keeps over 9/10 of the members, and at least this
# many, splits nothing: every pair of boundary states would solve that segment again,
# itself chained again (nested: exponential; bart-tiny with drafted rules: 1,445
# candidates, > 20 min, against 0.2 s for CP-SAT on the whole component).
UNSPLIT_FROM = 1000

# The stores ``shared_tables`` installed (per seed, the chain segments' tables by canonical
# form), innermost last; without one, each solve keeps its own.
_SHARED_TABLES: list[dict[int, dict[tuple, Table]]] = []


@contextmanager
def shared_tables() -> Iterator[None]:
    """Within, every solve keeps its chain segments' tables in one store (the enclosing
    one where already inside): a caller that runs the selection many times over nearly the
    same candidates (suggest's pruning: one rule left out per trial) solves each segment
    once, not once per run. A table is keyed by the segment's canonical form and the seed
    and kept only when every sub-solve was proven optimal, so a reuse changes no answer."""
    if _SHARED_TABLES:
        yield
        return
    _SHARED_TABLES.append({})
    try:
        yield
    finally:
        _SHARED_TABLES.pop()


@dataclass(frozen=True)
class Problem:
    """The selection's data: the candidates worth choosing (net bytes saved > 0), their
    weights, and their nodes as tuples (names, or node positions when ``order`` is a
    ``range``); ``names`` reads positions back as names (the cycle check)."""

    cands: Sequence[ScoredCandidate]
    sets: list[tuple[str, ...]] | list[tuple[int, ...]]
    weights: list[int]
    order: Mapping[str, int] | range
    names: Sequence[str] | None


class ComponentSolver:
    """Solves components of ``problem``, keeping what solves share: the canonical forms
    CP-SAT solved to optimality, the chain segments' tables, the greedy hint, the budget."""

    def __init__(
        self,
        problem: Problem,
        comps: Components,
        greedy: GreedyChoice,
        seed: int,
        budget: SolveBudget,
    ) -> None:
        self.problem, self.comps, self.greedy = problem, comps, greedy
        self.seed, self.budget = seed, budget
        self._solved: dict[tuple, Solution] = {}  # CP-SAT's optima by canonical form
        # chain segments by canonical form: this solve's, or the store shared_tables holds
        shared = _SHARED_TABLES[-1].setdefault(seed, {}) if _SHARED_TABLES else None
        self._tables: dict[tuple, Table] = {} if shared is None else shared

    def solve(self, members: tuple[int, ...], cuts: Sequence[frozenset[int]]) -> Solution:
        """A whole component (``comps`` knows it) under the cycle cuts inside it."""
        if cuts:
            member_set = set(members)
            local_cuts = [cut for cut in cuts if cut <= member_set]
        else:
            local_cuts = []
        return self._solve(members, local_cuts)

    def solve_parts(
        self, members: tuple[int, ...], nogoods: tuple[frozenset[int], ...]
    ) -> Solution:
        """A segment's interior (``segments``): its own components, each solved alone."""
        sets = self.problem.sets
        parts = Components(len(members))
        parts.link_pairs([sets[g] for g in members])
        at = {g: k for k, g in enumerate(members)}
        for cut in nogoods:
            ks = sorted(at[g] for g in cut)
            for k in ks[1:]:
                parts.union(ks[0], k)
        chosen: set[int] = set()
        statuses, bound = set(), 0
        for group in parts.groups().values():
            part = tuple(members[k] for k in group)
            part_set = set(part)
            got, status, top = self._solve(part, [c for c in nogoods if c <= part_set], True)
            chosen |= got
            statuses.add(status)
            bound += top
        return frozenset(chosen), "OPTIMAL" if statuses <= {"OPTIMAL"} else "FEASIBLE", bound

    def _solve(
        self, members: tuple[int, ...], local_cuts: Sequence[frozenset[int]], part: bool = False
    ) -> Solution:
        """``part``: a part of a component (not one ``comps`` knows)."""
        weights, sets = self.problem.weights, self.problem.sets
        if len(members) == 1 and not local_cuts:  # a lone group with net > 0 is taken
            i = members[0]
            return frozenset({i}), "OPTIMAL", weights[i]
        if len(members) <= ENUMERATE_UP_TO:
            small = {i: frozenset(sets[i]) for i in members}
            best = best_subset(members, small, weights, local_cuts)
            return best, "OPTIMAL", sum(weights[i] for i in best)
        if len(members) >= min(INTERVALS_FROM, CHAIN_FROM):
            got = self._solve_long(members, local_cuts, part)
            if got is not None:
                return got
        return self._solve_cp_sat(members, local_cuts, part)

    def _solve_long(
        self, members: tuple[int, ...], local_cuts: Sequence[frozenset[int]], part: bool
    ) -> Solution | None:
        """By interval scheduling or cut into chain segments, None when neither applies."""
        weights, sets, order = self.problem.weights, self.problem.sets, self.problem.order
        if part:
            span = segment_spans(members, sets, order)
        else:
            span = self.comps.spans(members, sets, order)
        if len(members) >= INTERVALS_FROM and not local_cuts:
            intervals = as_intervals(members, span)
            if intervals is not None:
                best = best_intervals(intervals, weights)
                return best, "OPTIMAL", sum(weights[i] for i in best)
        plan = plan_chain(members, sets, span, local_cuts) if len(members) >= CHAIN_FROM else None
        big = max(map(len, plan.interiors)) if plan is not None else 0
        if plan is not None and (big < UNSPLIT_FROM or 10 * big <= 9 * len(members)):
            return solve_chain(
                plan, sets, weights, order, local_cuts, self.solve_parts, self._tables
            )
        return None

    def _solve_cp_sat(
        self, members: tuple[int, ...], local_cuts: Sequence[frozenset[int]], part: bool
    ) -> Solution:
        """By CP-SAT, on the component in canonical form: nodes numbered by first use
        (members in order, each candidate's nodes in rule op order). CP-SAT sees only
        this form, so its answer never depends on node names or string hashing, and the
        identical components of a stack of identical layers are solved once."""
        weights, sets = self.problem.weights, self.problem.sets
        local = {g: k for k, g in enumerate(members)}
        node_lists = [sets[g] for g in members]
        first_use = dict.fromkeys(chain.from_iterable(node_lists))
        label = dict(zip(first_use, range(len(first_use)), strict=True))
        local_sets = tuple(tuple(map(label.__getitem__, ns)) for ns in node_lists)
        local_weights = tuple(weights[g] for g in members)
        local_cut_sets = tuple(sorted(tuple(sorted(local[g] for g in cut)) for cut in local_cuts))
        # the greedy choice as CP-SAT's hint, for a whole component (a segment's interior
        # part goes without: greedy's choice there may clash with the segment's boundary)
        hint = self.greedy.hint(self.problem.cands, members) if not part else ()
        key = (local_weights, local_sets, local_cut_sets, hint)
        hit = self._solved.get(key)
        if hit is None:
            # OR-Tools (and the pandas it imports, ~0.3 s) only when a component needs it
            from ruleengine.resolve.exact import solve_component

            sol = solve_component(
                local_weights,
                [frozenset(x) for x in local_sets],
                [frozenset(c) for c in local_cut_sets],
                hint=frozenset(hint),
                time_limit_s=self.budget.wall_left(),
                seed=self.seed,
                deterministic_s=self.budget.deterministic_left(),
            )
            self.budget.charge(sol.deterministic)
            hit = (sol.selected, sol.status, sol.bound)
            if sol.status == "OPTIMAL":  # a time-limited answer is not reused
                self._solved[key] = hit
        return frozenset(members[k] for k in hit[0]), hit[1], hit[2]
