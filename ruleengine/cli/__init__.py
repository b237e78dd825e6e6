"""Command-line interface: wires the stages together; the only place that prints or exits."""

from ruleengine.cli.app import app
from ruleengine.cli.entry import COMMAND_MODULES, main, unwrapped_help

__all__ = ["COMMAND_MODULES", "app", "main", "unwrapped_help"]
