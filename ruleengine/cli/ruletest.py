"""``autofusion test``: run the rule tests kept beside the rules (Semgrep's ``--test``).

Exit 0 every test passes (todo expectations may be pending), 1 a test fails or a rule or
test file is broken, 2 nothing could run (no such path, nothing to test). Every format
renders exit 2 as valid output of that format too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

import typer

from ruleengine.cli.app import app
from ruleengine.cli.common import EXIT_ERROR, PANEL_RULES, examples, report_error
from ruleengine.diagnostics.model import Severity
from ruleengine.errors import AutofusionError

if TYPE_CHECKING:
    from ruleengine.diagnostics.model import Diagnostic


class TestFormat(StrEnum):
    __test__ = False

    text = "text"
    json = "json"
    junit = "junit"


@app.command(
    "test",
    rich_help_panel=PANEL_RULES,
    epilog=examples(
        "autofusion test rules/",
        "autofusion test rules/cnn/conv_bn_relu.yaml -v",
        "autofusion test rules/ -f junit > rule-tests.xml",
        "autofusion test my_rule.tests/new_case.onnxtxt --update",
    ),
)
def test_command(
    paths: list[str] = typer.Argument(
        ...,
        help="Rule files, folders of rules, <rule>.tests folders or single test files.",
    ),
    fmt: TestFormat = typer.Option(TestFormat.text, "--format", "-f", help="Output format."),
    update: bool = typer.Option(
        False,
        "--update",
        help="Rewrite the match/no-match lines of every failing test (and of tests with "
        "none) to what matches now, for review with git diff.",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="List passing tests too."),
) -> None:
    """Run rule tests: the graphs in <rule>.tests/ beside each rule, and the node sets the
    rule must (not) match in them."""
    from ruleengine.ruletest import run_tests
    from ruleengine.ruletest.report import REPORTERS, render_error

    def could_not_run(message: str, diagnostics: Sequence[Diagnostic] = ()) -> typer.Exit:
        typer.echo(render_error(fmt.value, message, diagnostics), nl=False)
        report_error(AutofusionError(message, tuple(diagnostics)))
        return typer.Exit(EXIT_ERROR)

    try:
        run = run_tests(list(paths), update=update)
    except AutofusionError as exc:
        raise could_not_run(exc.message, exc.diagnostics) from None
    except Exception as exc:  # valid output of the format, never a traceback
        if os.environ.get("AUTOFUSION_DEBUG"):
            raise
        raise could_not_run(
            f"internal error: {type(exc).__name__}: {exc} (a bug in autofusion; rerun with "
            "AUTOFUSION_DEBUG=1 for the traceback and report it)"
        ) from None
    if not run.outcomes and not run.broken_files:
        raise could_not_run(
            "no rule tests found: put graphs in <rule>.tests/*.onnxtxt beside each rule "
            "(see docs/rule-tests.md)"
        )
    typer.echo(REPORTERS[fmt.value](run, verbose), nl=False)
    for outcome in run.outcomes:  # deprecations (AF605): the test still runs
        for d in outcome.diagnostics:
            if d.severity is not Severity.ERROR:
                typer.echo(f"warning: {d.code} {d.location}: {d.message}", err=True)
    raise typer.Exit(run.exit_code)
