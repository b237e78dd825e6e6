"""Rule-author commands: verify, check, rule-codes, rule-schema, convert.

Parse -> run the lint stage -> render with a reporter -> exit 0 (clean), 1 (findings) or
2 (could not run). Findings go to stdout in the chosen format; --verbose progress and
"could not run" errors go to stderr.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ruleengine.cli.app import app
from ruleengine.cli.common import (
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_OK,
    PANEL_RULES,
    examples,
    guarded,
    report_error,
)
from ruleengine.diagnostics.codes import BY_NAME as CODES_BY_NAME
from ruleengine.diagnostics.codes import CODES, lookup
from ruleengine.diagnostics.reporters import Summary, render

if TYPE_CHECKING:
    from ruleengine.diagnostics.model import Diagnostic
    from ruleengine.rules.model import Rule


class OutputFormat(StrEnum):
    text = "text"
    json = "json"
    github = "github"
    sarif = "sarif"


def _run_lint(
    paths: list[str] | None,
    *,
    set_checks: bool,
    strict: bool,
    fmt: str,
    verbose: bool,
    preset: str | None = None,
    kernels: list[Path] | None = None,
    require_contracts: bool = False,
) -> int:
    from dataclasses import replace

    from ruleengine.diagnostics.model import Diagnostic
    from ruleengine.errors import AutofusionError, UsageError
    from ruleengine.rules import lint_paths, preset_paths
    from ruleengine.rules.lint import collect_files, only_files

    try:
        targets = list(paths or [])
        asked = collect_files(targets) if targets else None
        if preset is not None:
            targets += [p.as_posix() for p in preset_paths(preset)]
        if not targets:
            raise UsageError("no rule files given: pass rule paths or --preset NAME")
        result = lint_paths(targets, set_checks=set_checks)
        if set_checks or require_contracts:  # the rewrites against the kernel catalog
            found = _contract_findings(result.rules, kernels, set_checks, require_contracts)
            diags = sorted(set(result.diagnostics) | set(found), key=Diagnostic.sort_key)
            result = replace(result, diagnostics=tuple(diags))
        if asked is not None and preset is not None:
            result = only_files(result, asked)  # the preset's own findings are not yours
    except AutofusionError as exc:
        # could not run: still valid output of the format asked for (an empty SARIF
        # upload would read as "no findings"), and the error on stderr
        failed = Summary(files=0, rules=0, strict=strict, failure=exc.message)
        typer.echo(render(fmt, exc.diagnostics, failed), nl=False)
        report_error(exc)
        return EXIT_ERROR
    if verbose:
        for f in result.files:
            names = ", ".join(f.rules) if f.rules else "no rules loaded"
            typer.echo(f"checked {f.path}: {names}", err=True)
    summary = Summary(files=len(result.files), rules=len(result.rules), strict=strict)
    typer.echo(render(fmt, result.diagnostics, summary), nl=False)
    return result.exit_code(strict)


def _contract_findings(
    rules: Sequence[Rule], kernels: list[Path] | None, every: bool, require: bool
) -> list[Diagnostic]:
    """Each rule's rewrite against the kernel catalog (docs/kernels.md): every finding
    (``every``, check) or only the missing entries (verify). A missing entry (AF402) is
    a note, so a team's own rule passes --strict; ``require`` (--require-contracts)
    makes it an error."""
    from dataclasses import replace

    from ruleengine.diagnostics.model import Severity
    from ruleengine.kernels.catalog import catalog_for
    from ruleengine.kernels.lint import lint_rules

    no_contract = CODES_BY_NAME["no-contract"].code
    found = lint_rules(rules, catalog_for(kernels or []))
    if not every:
        found = [d for d in found if d.code == no_contract]
    if require:
        found = [replace(d, severity=Severity.ERROR) if d.code == no_contract else d for d in found]
    return found


REQUIRE_CONTRACTS_HELP = (
    "Every target_op must have a kernel catalog entry: a missing one (AF402, a note "
    "otherwise) is an error."
)


@app.command(
    "verify",
    rich_help_panel=PANEL_RULES,
    epilog=examples(
        "autofusion verify my_rule.yaml",
        "autofusion verify rules/ --strict",
        "autofusion verify 'rules/**/*.yaml' --format json",
        "autofusion verify rules/ --require-contracts --kernels my_kernels/",
    ),
)
def verify(
    files: list[str] = typer.Argument(..., help="Rule files (YAML), directories or globs."),
    fmt: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f", help="Output format."),
    strict: bool = typer.Option(False, "--strict", help="Warnings fail too (exit 1)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="List each file and rule."),
    require_contracts: bool = typer.Option(
        False, "--require-contracts", help=REQUIRE_CONTRACTS_HELP
    ),
    kernels: list[Path] = typer.Option(
        [],
        "--kernels",
        help="Kernel catalog folder added to the bundled one, for --require-contracts.",
    ),
) -> None:
    """Check rule files one by one: YAML, schema and semantics (exit 0 clean, 1 findings)."""
    code = guarded(
        lambda: _run_lint(
            files,
            set_checks=False,
            strict=strict,
            fmt=fmt.value,
            verbose=verbose,
            kernels=kernels,
            require_contracts=require_contracts,
        )
    )
    raise typer.Exit(code)


@app.command(
    "check",
    rich_help_panel=PANEL_RULES,
    epilog=examples(
        "autofusion check rules/ --strict",
        "autofusion check rules/ --strict --format github",
        "autofusion check rules/ --format sarif > autofusion.sarif",
        "autofusion check my_rules/ --preset all",
        "autofusion check my_rules/ --kernels my_kernels/ --strict",
        "autofusion check my_rules/ --strict --require-contracts",
    ),
)
def check(
    paths: list[str] | None = typer.Argument(
        None, help="Rule files, directories (recursed) or globs."
    ),
    strict: bool = typer.Option(False, "--strict", help="Warnings fail too (exit 1)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="List each file and rule."),
    fmt: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f", help="Output format."),
    preset: str | None = typer.Option(
        None, "--preset", help="Also check a bundled preset (cnn, transformer, all)."
    ),
    kernels: list[Path] = typer.Option(
        [], "--kernels", help="Kernel catalog folder added to the bundled one (several allowed)."
    ),
    require_contracts: bool = typer.Option(
        False, "--require-contracts", help=REQUIRE_CONTRACTS_HELP
    ),
) -> None:
    """Lint a rule set: verify, plus conflicts, unknown params and useless patterns.

    Beyond what verify checks per file: duplicate rule names, rules of equal priority
    matching the same ops, params the op does not have, patterns that save no HBM
    traffic and patterns that can never match, and each rewrite against its kernel's
    contract (kernel catalog; a target_op without an entry is a note unless
    --require-contracts). Exit 0 clean, 1 findings, 2 could not run.
    """
    code = guarded(
        lambda: _run_lint(
            paths,
            set_checks=True,
            strict=strict,
            fmt=fmt.value,
            verbose=verbose,
            preset=preset,
            kernels=kernels,
            require_contracts=require_contracts,
        )
    )
    raise typer.Exit(code)


def _code_doc(code: str) -> str:
    info = CODES[code]
    lines = [
        f"{info.code} {info.name} ({info.severity}, reported by `{info.command}`)",
        "",
        info.summary,
        "",
        info.explanation,
        "",
    ]
    if info.example:
        lines += ["Example that triggers it:", ""]
        lines += ["    " + ln for ln in info.example.rstrip("\n").split("\n")]
    elif info.example_note:
        lines += [f"Example: {info.example_note}"]
    return "\n".join(lines) + "\n"


@app.command(
    "rule-codes",
    rich_help_panel=PANEL_RULES,
    epilog=examples(
        "autofusion rule-codes",
        "autofusion rule-codes AF303",
        "autofusion rule-codes unknown-param",
    ),
)
def rule_codes(
    code: str | None = typer.Argument(None, help="A code (AF303) or name (unknown-param)."),
) -> None:
    """List every diagnostic code, or document one code."""
    if code is None:
        for info in CODES.values():
            typer.echo(f"{info.code}  {info.name:<26} {info.severity:<8} {info.summary}")
        raise typer.Exit(EXIT_OK)
    info = lookup(code)
    if info is None:
        typer.echo(f"error: unknown diagnostic code {code!r}", err=True)
        typer.echo("  hint: `autofusion rule-codes` lists every code", err=True)
        raise typer.Exit(EXIT_ERROR)
    typer.echo(_code_doc(info.code), nl=False)
    raise typer.Exit(EXIT_OK)


@app.command(
    "rule-schema",
    rich_help_panel=PANEL_RULES,
    epilog=examples("autofusion rule-schema > rule.schema.json", "autofusion rule-schema --path"),
)
def rule_schema(
    path_only: bool = typer.Option(False, "--path", help="Print the schema file's path."),
) -> None:
    """Print the rule JSON Schema (for editors: `# yaml-language-server: $schema=...`)."""
    from ruleengine.resources import schema_path

    p = schema_path("rule")
    if path_only:
        typer.echo(str(p))
    else:
        typer.echo(p.read_text(encoding="utf-8"), nl=False)
    raise typer.Exit(EXIT_OK)


def _convert(source: str, out_dir: str | None, force: bool) -> int:
    from ruleengine.rules import lint_file
    from ruleengine.rules.convert import convert_file

    converted = convert_file(source)
    problems = 0
    for conv in converted:
        res = lint_file(Path(conv.filename), display=conv.filename, text=conv.text)
        for d in res.diagnostics:
            problems += 1
            typer.echo(f"{d.location}: {d.severity} {d.code} {d.name}: {d.message}", err=True)
        for u in conv.unmapped:
            typer.echo(f"{conv.name}: not mapped (kept as a comment): {u}", err=True)
    if out_dir is None:
        typer.echo("---\n".join(c.text for c in converted), nl=False)
    else:
        from ruleengine.rewrite.writer import write_set
        from ruleengine.rules.convert import output_files

        write_set(Path(out_dir), output_files(converted, Path(out_dir), force=force))
        written = [Path(out_dir) / c.filename for c in converted]
        for w in written:
            typer.echo(f"wrote {w.as_posix()}")
    return EXIT_FINDINGS if problems else EXIT_OK


@app.command(
    "convert",
    rich_help_panel=PANEL_RULES,
    epilog=examples(
        "autofusion convert fusion_rules.json",
        "autofusion convert fusion_rules.json -o rules/ --force",
    ),
)
def convert(
    source: str = typer.Argument(..., help="Compact JSON rule file (pattern/output_op)."),
    output: str | None = typer.Option(
        None, "--output", "-o", help="Directory for one YAML file per rule (default: stdout)."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite existing files."),
) -> None:
    """Convert compact JSON rules (pattern, output_op, conditions) into YAML rule files."""
    code = guarded(lambda: _convert(source, output, force))
    raise typer.Exit(code)
