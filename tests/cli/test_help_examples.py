"""Every command's --help ends with examples (README: 'Every command has --help with
examples of its options'), and the options the examples use exist."""

from __future__ import annotations

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
    ["match"],
    ["explain"],
    ["compare"],
    ["targets"],
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
