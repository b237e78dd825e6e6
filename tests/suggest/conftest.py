"""Fixtures of the suggest tests."""

from __future__ import annotations

import pytest

from ruleengine import procs


@pytest.fixture
def forks(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The arguments of every child forked (``procs.Forked``) while the test runs."""
    made: list[tuple] = []
    real = procs.Forked

    def counted(*args: object) -> procs.Forked:
        made.append(args)
        return real(*args)

    monkeypatch.setattr(procs, "Forked", counted)
    return made
