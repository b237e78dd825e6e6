"""The assembled command line: every command module attached to ``app``, help text
unwrapped, and ``main`` (the ``autofusion`` console script)."""

from __future__ import annotations

import importlib
import inspect

import typer

from ruleengine.cli.app import app

# Each module attaches its commands to ``app``; this order is the order of --help:
# writing rules, analysing a model, then the compile-time command.
COMMAND_MODULES = ("lint", "ruletest", "matching", "library", "suggest", "analysis", "view", "fuse")
for _module in COMMAND_MODULES:
    importlib.import_module(f"ruleengine.cli.{_module}")


def unwrapped_help(doc: str) -> str:
    """A docstring as --help text: each paragraph on one line, so rich wraps it to the
    terminal. typer keeps the single line breaks of every paragraph after the first, and
    a docstring wrapped at 88 columns came out ragged on an 80-column screen."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def _unwrap_docstrings(group: typer.Typer) -> None:
    for command in group.registered_commands:
        if command.help is None and command.callback is not None and command.callback.__doc__:
            command.help = unwrapped_help(command.callback.__doc__)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _unwrap_docstrings(sub.typer_instance)


_unwrap_docstrings(app)


def main() -> None:
    from ruleengine.cli.common import stopped
    from ruleengine.procs import supervise
    from ruleengine.runtime import (
        hold_stop_signals,
        install_signal_handlers,
        one_shot_process,
        release_stop_signals,
        stop_signal,
    )

    hold_stop_signals()
    supervise()  # the command runs in a child that a stop can kill (procs.supervise)
    install_signal_handlers()
    one_shot_process()
    try:
        release_stop_signals()  # held while ``python -m ruleengine`` imported us
        app()
    finally:
        # A stop outside a command body (parsing the flags): typer exits 130 silently
        if stop_signal() is not None:
            stopped(terminated=False)
