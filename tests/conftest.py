"""Suite-wide setup: the shared models and seed rules are required, never skipped."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"


def pytest_sessionstart(session: pytest.Session) -> None:
    """The end-to-end tests run on ../shared (models and seed rules beside the checkout, as
    in CI). Without it the suite stops with this message instead of skipping them."""
    missing = [d for d in ("models", "seed-rules") if not (SHARED / d).is_dir()]
    if missing:
        raise pytest.UsageError(
            f"{SHARED.resolve()} lacks {', '.join(missing)}/: the tests need the project's "
            "shared folder beside the checkout (../shared)"
        )


@pytest.fixture
def corrupt_rules(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Make in-process CLI runs corrupt the named rules' groups (the test-only hook of
    ``pipeline.fuse``; the installed CLI cannot reach it). Call it with rule names."""
    import ruleengine.pipeline as pipeline

    real = pipeline.fuse

    def bind(*names: str) -> None:
        monkeypatch.setattr(pipeline, "fuse", functools.partial(real, corrupt_rules=list(names)))

    return bind
