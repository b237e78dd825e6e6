"""A figure suggest reports, computed in a forked child beside the drafting.

``suggest`` runs on one core: its CP-SAT solves use one worker (the same answer whatever
the load). Some of what it computes is a reported figure no later step reads until the
report is made: the ceiling under twins (``twins.twin_ceiling``) feeds only the bar's
column, and on regnety-narrow.ts-keepbn it was a third of the run. ``beside`` runs such a
call in a forked child (``procs.Forked``: it inherits the parent's state copy-on-write)
while the parent goes on drafting, pruning and measuring, and hands its value over where
it is first read.

The value is the one the parent would have computed: the child starts from the parent's
state at the call, and every CP-SAT answer is the one solving again gives, whether the
solve cache (``solves.SolveCache``) holds it or not. The solves the child made join the
parent's cache when its value is read, so the parent does not make them again; ``settle``
reads every value still outstanding (another region search settles first). Where no
child may be forked (``processes(1)``, one core, another thread running), the call runs
at once, in the parent.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

from ruleengine import procs

T = TypeVar("T")

_OUTSTANDING: dict[int, Later[Any]] = {}  # by id: a Later compares as its value
_JOBS: ContextVar[int | None] = ContextVar("suggest_jobs", default=None)


@contextmanager
def processes(jobs: int | None) -> Iterator[None]:
    """Within, suggest's work runs in at most ``jobs`` processes (None: the cores). A
    value still computed beside when it ends (a run stopped by an error) is let go: its
    child is killed once nothing holds it, and no later run reads it."""
    token = _JOBS.set(jobs)
    before = set(_OUTSTANDING)
    try:
        yield
    finally:
        _JOBS.reset(token)
        for key in set(_OUTSTANDING) - before:
            del _OUTSTANDING[key]


def may_fork() -> bool:
    """Whether a child may be forked beside this process now (``processes``)."""
    jobs = _JOBS.get()
    return procs.forkable(procs.cores() if jobs is None else jobs)


class Later(Generic[T]):
    """A value read when first needed, then kept: computed by ``beside`` in a forked
    child, given (``ready``) or derived from others (``Later(thunk)``)."""

    def __init__(self, thunk: Callable[[], T], here: Callable[[], T] | None = None) -> None:
        self._thunk: Callable[[], T] | None = thunk
        self._value: T | None = None
        self._here = here  # the same value computed in this process (``put_off``)

    @classmethod
    def ready(cls, value: T) -> Later[T]:
        later = cls(lambda: value)
        later.get()
        return later

    def put_off(self) -> None:
        """No longer wanted soon: a child computing it is let go (killed once nothing
        holds it) and, where the value is read after all, it is computed in this
        process then (the same value: ``beside``)."""
        if self._thunk is not None and self._here is not None:
            self._thunk, self._here = self._here, None
            _OUTSTANDING.pop(id(self), None)

    def get(self) -> T:
        """The value (computed, or read from its child, on the first call)."""
        thunk = self._thunk
        if thunk is not None:
            self._thunk = self._here = None  # (neither holds its arguments any longer)
            self._value = thunk()
        return self._value  # type: ignore[return-value]

    # it reads as its value: unpacked, indexed, compared (a tuple of figures stays one)
    def __iter__(self) -> Iterator[Any]:
        return iter(self.get())  # type: ignore[call-overload]

    def __getitem__(self, index: Any) -> Any:
        return self.get()[index]  # type: ignore[index]

    def __len__(self) -> int:
        return len(self.get())  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        return self.get() == (other.get() if isinstance(other, Later) else other)

    def __hash__(self) -> int:
        return hash(self.get())

    def __repr__(self) -> str:
        return f"Later({self.get()!r})"


def beside(fn: Callable[..., Any], *args: Any, then: Callable[[Any], T] = lambda v: v) -> Later[T]:
    """``then(fn(*args))``: ``fn`` in a forked child where one may be forked (``then`` in
    the parent, when the value is read), else at once."""
    if not may_fork():
        return Later.ready(then(fn(*args)))
    forked = procs.Forked(_in_child, fn, args)

    def read() -> T:
        _OUTSTANDING.pop(id(later), None)
        value, solves = pickle.loads(forked.result())
        _join_solves(*solves)
        return then(value)

    later = Later(read, lambda: then(fn(*args)))
    _OUTSTANDING[id(later)] = later
    return later


def settle() -> None:
    """Read every value still computed beside (their solves join the cache)."""
    for later in list(_OUTSTANDING.values()):
        later.get()


def _in_child(fn: Callable[..., Any], args: tuple) -> bytes:
    """The call's value and the solves it added to the cache, pickled."""
    _OUTSTANDING.clear()  # the parent's children: never read here
    cache = _solve_cache()
    before = set(cache.held) if cache is not None else set()
    calls = cache.calls if cache is not None else 0
    value = fn(*args)
    added: dict = {}
    made = (0, 0)
    if cache is not None:
        added = {k: v for k, v in cache.held.items() if k not in before}
        made = (cache.calls - calls, len(added))
    return pickle.dumps((value, (added, *made)), protocol=pickle.HIGHEST_PROTOCOL)


def _join_solves(added: dict, calls: int, solved: int) -> None:
    cache = _solve_cache()
    if cache is None:
        return
    for key, held in added.items():
        cache.held.setdefault(key, held)
    cache.calls += calls
    cache.solved += solved


def _solve_cache() -> Any:
    from ruleengine.resolve import exact
    from ruleengine.suggest.solves import SolveCache

    current = exact.current_memo()
    return current if isinstance(current, SolveCache) else None
