"""How long the exact solver may search: a wall deadline, and optionally a budget of
CP-SAT's deterministic time, which gives the same answer whatever the machine's load."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# With a deterministic budget, the wall limit is at least this many times the budget: a
# far safety net (CP-SAT spends about a wall second per deterministic second on an idle
# core; a process given a small share of a loaded machine gets far less).
DETERMINISTIC_WALL_FACTOR = 40

_BUDGET: ContextVar[float | None] = ContextVar("deterministic_budget", default=None)


@contextmanager
def deterministic_budget(seconds: float) -> Iterator[None]:
    """Within it, every ``resolve`` not given its own ``deterministic_s`` stops its
    solves on ``seconds`` of CP-SAT's deterministic time: for callers that reach the
    selection stage through ``pipeline.analyze`` (``suggest``), whose answers must not
    depend on the machine's load; ``fuse`` keeps its wall ``--time-limit``."""
    token = _BUDGET.set(seconds)
    try:
        yield
    finally:
        _BUDGET.reset(token)


def enclosing_budget() -> float | None:
    """The enclosing ``deterministic_budget``'s seconds, None outside one."""
    return _BUDGET.get()


class SolveBudget:
    """What is left to the CP-SAT solves of one ``resolve``: wall time until a deadline
    and, given ``deterministic_s``, deterministic time summed over the solves (each
    solve gets what is left, in the order they run, which does not depend on the load)."""

    def __init__(self, time_limit_s: float, deterministic_s: float | None) -> None:
        self.deadline = time.perf_counter() + time_limit_s
        self.deterministic_s = deterministic_s
        self.spent = 0.0  # deterministic time of the solves so far

    def exhausted(self) -> bool:
        """Whether the deterministic budget is spent or the deadline has passed."""
        if self.deterministic_s is not None and self.spent >= self.deterministic_s:
            return True
        return time.perf_counter() > self.deadline

    def wall_left(self) -> float:
        """Seconds until the deadline (negative once it has passed)."""
        return self.deadline - time.perf_counter()

    def deterministic_left(self) -> float | None:
        """Deterministic seconds left, None without a deterministic budget."""
        return None if self.deterministic_s is None else self.deterministic_s - self.spent

    def charge(self, deterministic: float) -> None:
        """Count a solve's deterministic time against the budget."""
        self.spent += deterministic
