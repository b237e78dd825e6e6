"""Shared helpers for the rule tests: where the seed rules are, running the CLI."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from ruleengine.cli import app

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
SEED = SHARED / "seed-rules"

# Stub catalog entries for the made-up target_ops of test rules (check --strict would
# otherwise warn AF402 no-contract on them).
TEST_KERNELS = str(Path(__file__).resolve().parents[1] / "data" / "kernels")

MINIMAL = "name: r\nmatch:\n  ops:\n    - type: Relu\nrewrite:\n  target_op: R\n"


def run_cli(*args: str):
    """Run the autofusion app in-process; stdout and stderr stay separate."""
    return CliRunner().invoke(app, [str(a) for a in args])


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p
