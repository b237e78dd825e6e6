"""A cache of CP-SAT solves for one ``suggest`` run, wrapped around the solve from outside.

``suggest`` solves the same problem many times over: the pruning runs the selection
stage once per trial and most of a model's components are untouched by the rule tried;
the drafting simulates the selection once per drafting option and compact offer, and
several options are often the same partition; every measure runs the whole pipeline
again. On a 32-layer decoder stack 87% of its CP-SAT solves repeated one already made.

The cache is installed through resolve's hook ``resolve.exact.memoized``
(``cached_solves``): ``solve_component``, the one function every CP-SAT solve goes through,
whoever calls it, asks it first. It is keyed by a digest of
the model CP-SAT is given (weights, the at-most-one rows in the order they are written,
cuts, hint, floor rows, seed, workers), not of node names, so the same problem met in
another layer or another call is solved once. CP-SAT with one worker is deterministic:
the same model and limits give the same answer, so a reuse changes no result. A solve
proven optimal is reused by a call whose deterministic limit it reached that optimum
within (under a smaller one, solving again stops short: that call solves again); one cut
short by its limits only by a call with the same limits (another budget may stop it
elsewhere). So every answer is what solving again would give, whichever solves came
first and in whichever process (``beside``). The answer carries the deterministic time
it took, so a caller that charges a budget with it charges the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

# (answer, wall limit, deterministic limit) per problem digest
_Held = tuple[Any, float, float | None]


def problem_digest(
    weights: Sequence[int],
    node_sets: Sequence[frozenset[Any]],
    cuts: Sequence[frozenset[int]],
    hint: frozenset[int],
    rest: dict[str, Any],
) -> bytes:
    """A digest of the CP-SAT model ``solve_component`` writes for these arguments: its
    rows as it orders them (each node's users, nodes met in candidate order and sorted
    within a candidate), not the node names, and every argument but the limits."""
    covering: dict[Hashable, list[int]] = {}
    for i, nodes in enumerate(node_sets):
        for n in sorted(nodes):
            covering.setdefault(n, []).append(i)
    h = hashlib.blake2b(digest_size=20)
    h.update(repr([int(w) for w in weights]).encode())
    h.update(repr([u for u in covering.values() if len(u) > 1]).encode())
    h.update(repr([sorted(c) for c in cuts]).encode())
    h.update(repr(sorted(hint)).encode())
    h.update(repr(sorted(rest.items())).encode())
    return h.digest()


@dataclass
class SolveCache:
    """``solve_component`` with each distinct problem solved once (``calls``: asked,
    ``solved``: handed to CP-SAT)."""

    solve: Callable[..., Any]
    held: dict[bytes, _Held] = field(default_factory=dict)
    calls: int = 0
    solved: int = 0

    def __call__(
        self,
        weights: Sequence[int],
        node_sets: Sequence[frozenset[Any]],
        cuts: Sequence[frozenset[int]],
        *,
        hint: frozenset[int] = frozenset(),
        time_limit_s: float = 30.0,
        deterministic_s: float | None = None,
        **rest: Any,
    ) -> Any:
        """The answer of ``solve`` (``solve_component``'s arguments), reused where the
        same problem was solved to optimality or under the same limits."""
        self.calls += 1
        key = problem_digest(weights, node_sets, cuts, hint, rest)
        got = self.held.get(key)
        if got is not None and _as_solved(got, time_limit_s, deterministic_s):
            return got[0]
        sol = self.solve(
            weights,
            node_sets,
            cuts,
            hint=hint,
            time_limit_s=time_limit_s,
            deterministic_s=deterministic_s,
            **rest,
        )
        self.solved += 1
        self.held[key] = (sol, time_limit_s, deterministic_s)
        return sol


def _as_solved(held: _Held, time_limit_s: float, deterministic_s: float | None) -> bool:
    """Whether the held answer is the one solving again would give: CP-SAT with one
    worker follows the same path under any limit, so a proven optimum reached within the
    call's deterministic limit is reached again, and an answer cut short is the same
    under the same limits. (A proven optimum that took longer than the call's limit is
    not: that call stops short; reusing it would make answers depend on which solves
    came first, or in which process: ``beside``.)"""
    sol, wall, det = held
    if sol.status == "OPTIMAL":
        return deterministic_s is None or sol.deterministic <= deterministic_s
    return (wall, det) == (time_limit_s, deterministic_s)


@contextmanager
def cached_solves() -> Iterator[SolveCache]:
    """Every CP-SAT solve made within, by any stage, through one ``SolveCache`` (the
    enclosing one where already inside), installed by resolve's own hook
    (``exact.memoized``); and the chain segments' tables kept across solves
    (``component_solver.shared_tables``)."""
    from ruleengine.resolve import exact
    from ruleengine.resolve.component_solver import shared_tables

    current = exact.current_memo()
    if isinstance(current, SolveCache):
        yield current
        return
    with exact.memoized(SolveCache(exact.solve_uncached)) as cache, shared_tables():
        yield cache
