"""Wall and CPU seconds per pipeline stage, kept apart from the stages themselves.

``pipeline`` wraps each stage in ``Laps.stage`` (progress line before, lap after); the
stages never see a clock. report.json gives the laps as ``timings_s`` and ``cpu_s``: on a
shared machine the CPU time tells a stage's own work from waiting for a core. A forked
child's CPU counts in the stage that reaps it, unless ``reaped`` moves it back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from ruleengine.procs import cpu_seconds, tally

Progress = Callable[[str], None]
_T = TypeVar("_T")


class Laps:
    """The laps of one run: ``stage`` blocks, each timed from the end of the one before
    (work between two blocks counts in the next one)."""

    def __init__(
        self,
        wall: Sequence[tuple[str, float]] = (),
        cpu: Sequence[tuple[str, float]] = (),
        progress: Progress | None = None,
    ) -> None:
        self.wall, self.cpu = list(wall), list(cpu)
        self.progress = progress
        self._wall, self._cpu = time.perf_counter(), cpu_seconds()

    def note(self, message: str) -> None:
        """A progress line, when the caller asked for them."""
        if self.progress is not None:
            self.progress(message)

    @contextmanager
    def stage(self, name: str, message: str | None = None) -> Iterator[None]:
        """Say ``message`` (if any), run the block, then end the lap ``name`` (a block
        that raises ends no lap: the run is over)."""
        if message is not None:
            self.note(message)
        yield
        self.lap(name)

    def lap(self, stage: str) -> None:
        wall, cpu = time.perf_counter(), cpu_seconds()
        self.wall.append((stage, wall - self._wall))
        self.cpu.append((stage, cpu - self._cpu))
        self._wall, self._cpu = wall, cpu

    def moved(self, stage: str, wall: float, cpu: float) -> None:
        """Move seconds of ``stage``'s work that this process did inside the current lap
        (wall and CPU) from the current lap to ``stage``."""
        self.wall = [(s, w + wall if s == stage else w) for s, w in self.wall]
        self.cpu = [(s, c + cpu if s == stage else c) for s, c in self.cpu]
        self._wall += wall
        self._cpu += cpu

    def beside(self, stage: str, wall: float, cpu: float) -> None:
        """Add the seconds of ``stage``'s work done by a forked child beside the current
        stage (reaped now: its CPU leaves the current lap)."""
        self.wall = [(s, w + wall if s == stage else w) for s, w in self.wall]
        self.cpu = [(s, c + cpu if s == stage else c) for s, c in self.cpu]
        self._cpu += cpu

    def reaped(
        self,
        stage: str,
        finish: Callable[[], _T],
        child_seconds: Callable[[], tuple[float, float]],
    ) -> _T:
        """``finish()`` inside the current lap, all of it counted in the earlier
        ``stage``: this process's own finishing (wall and CPU), the whole CPU of the
        children it reaps (fork, pickling and exit included), and the wall of the child
        that did ``stage``'s work (``child_seconds()`` once finished) less the time
        waited for it, which is in the move already."""
        wall, cpu = time.perf_counter(), time.process_time()
        with tally() as reaped:
            value = finish()
        self.moved(stage, time.perf_counter() - wall, time.process_time() - cpu)
        self.beside(stage, max(0.0, child_seconds()[0] - reaped.wait), reaped.cpu)
        return value

    def timings(self) -> tuple[tuple[tuple[str, float], ...], tuple[tuple[str, float], ...]]:
        """(wall, CPU) laps so far, as the records keep them."""
        return tuple(self.wall), tuple(self.cpu)
