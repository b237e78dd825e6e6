"""Command-line interface: wires the stages together; the only place that prints or exits."""

from __future__ import annotations

from ruleengine.cli import analysis, fuse, library, lint, matching  # noqa: F401  (registers)
from ruleengine.cli.app import app


def main() -> None:
    app()
