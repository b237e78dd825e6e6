"""Every command's --help ends with examples (README: 'Every command has --help with
examples of its options'), and the options the examples use exist."""

from __future__ import annotations

import inspect
import re

import pytest
from typer.testing import CliRunner

from ruleengine.cli import app

COMMANDS = [
    ["verify"],
    ["check"],
    ["rule-codes"],
    ["rule-schema"],
    ["convert"],
    ["explain-rule"],
    ["rules", "list"],
    ["test"],
    ["suggest"],
    ["match"],
    ["explain"],
    ["compare"],
    ["targets"],
    ["view"],
    ["fuse"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_shows_examples_that_use_real_options(command):
    res = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0
    assert "Examples:" in res.output, f"autofusion {' '.join(command)} --help has no examples"
    examples = res.output.split("Examples:", 1)[1]
    lines = [ln.strip() for ln in examples.splitlines() if ln.strip().startswith("$ ")]
    assert lines and all(
        f"autofusion {' '.join(command)}" in ln or "autofusion" in ln for ln in lines
    )
    options = res.output.split("Examples:", 1)[0]
    own = [ln for ln in lines if f"autofusion {' '.join(command)} " in ln + " "]
    for flag in {f for ln in own for f in re.findall(r"\s(--?[a-z][a-z-]*)", ln)}:
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", options), flag


def _commands(group=app, prefix=()):
    for command in group.registered_commands:
        yield [*prefix, command.name], command.callback
    for sub in group.registered_groups:
        yield from _commands(sub.typer_instance, (*prefix, sub.name))


def test_every_command_is_in_the_examples_test():
    assert sorted(name for name, _ in _commands()) == sorted(COMMANDS)


@pytest.mark.parametrize(
    "command,callback", [pytest.param(n, cb, id=" ".join(n)) for n, cb in _commands()]
)
def test_help_paragraphs_are_reflowed_not_broken_where_the_docstring_wrapped(command, callback):
    """A wide terminal shows each docstring paragraph on one line: the docstring's own
    line breaks (wrapped for the source file) must not reach the help screen."""
    res = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "400"})
    assert res.exit_code == 0
    shown = [ln.strip(" │") for ln in res.output.splitlines()]
    for paragraph in inspect.cleandoc(callback.__doc__).split("\n\n"):
        one_line = " ".join(ln.strip() for ln in paragraph.splitlines())
        assert one_line in shown, (command, one_line)
