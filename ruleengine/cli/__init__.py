"""Command-line interface: wires the stages together; the only place that prints or exits."""

from __future__ import annotations

import importlib

from ruleengine.cli.app import app

# Each module attaches its commands to ``app``; this order is the order of --help:
# writing rules, analysing a model, then the compile-time command.
COMMAND_MODULES = ("lint", "ruletest", "matching", "library", "suggest", "analysis", "fuse")
for _module in COMMAND_MODULES:
    importlib.import_module(f"ruleengine.cli.{_module}")


def main() -> None:
    from ruleengine.runtime import install_signal_handlers, one_shot_process

    install_signal_handlers()
    one_shot_process()
    app()
