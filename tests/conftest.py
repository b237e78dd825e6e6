"""Suite-wide setup: the shared models and seed rules are required, never skipped."""

from __future__ import annotations

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
