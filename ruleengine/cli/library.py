"""Rule library commands: ``rules list``.

``autofusion rules list`` prints one line per bundled rule (preset, name, description);
``--preset NAME`` narrows it to one preset, paths list a rule repository of your own
instead. ``--format json`` gives the same as ``{"schema_version": 1, "rules": [...]}``.
"""

from __future__ import annotations

import json
import os
import sys
from enum import StrEnum

import typer

from ruleengine.cli.app import app
from ruleengine.cli.common import EXIT_OK, PANEL_RULES, examples, guarded

rules_app = typer.Typer(
    name="rules",
    help="The bundled rule library: list presets and their rules.",
    no_args_is_help=True,
)
app.add_typer(rules_app, name="rules", rich_help_panel=PANEL_RULES)


class ListFormat(StrEnum):
    text = "text"
    json = "json"


def _entries(paths: list[str], preset: str | None) -> list[dict[str, object]]:
    from ruleengine.rules import load_rule_set, preset_names, preset_paths

    entries: list[dict[str, object]] = []

    def add(group: str, rule_paths: list[str]) -> None:
        for rule in load_rule_set(rule_paths).rules:
            where = rule.location.file if rule.location is not None else None
            entries.append(
                {
                    "preset": group,
                    "name": rule.name,
                    "priority": rule.priority,
                    "enabled": rule.enabled,
                    "description": " ".join((rule.description or "").split()),
                    "file": str(where) if where else None,
                }
            )

    if paths:
        add("-", paths)
        return entries
    names = [n for n in preset_names() if n != "all"]
    if preset is not None and preset != "all":
        preset_paths(preset)  # raises UsageError naming the known presets
        names = [preset]
    # each rule under the folder it lives in (the generic folder is part of every preset)
    folders = dict.fromkeys(folder for name in names for folder in preset_paths(name))
    for folder in folders:
        add(folder.name, [folder.as_posix()])
    return entries


@rules_app.command(
    "list",
    epilog=examples(
        "autofusion rules list",
        "autofusion rules list --preset cnn",
        "autofusion rules list my_rules/ -f json",
    ),
)
def list_rules(
    paths: list[str] = typer.Argument(
        None, help="Rule files or folders to list instead of the bundled library."
    ),
    preset: str = typer.Option(
        None, "--preset", "-p", help="Only this bundled preset: cnn, transformer or all."
    ),
    fmt: ListFormat = typer.Option(ListFormat.text, "--format", "-f", help="Output format."),
) -> None:
    """List rules with their one-line descriptions (the bundled presets by default)."""

    def run() -> int:
        entries = _entries(list(paths or []), preset)
        if fmt is ListFormat.json:
            typer.echo(json.dumps({"schema_version": 1, "rules": entries}, indent=2))
            return EXIT_OK
        if not entries:
            typer.echo("no rules")
            return EXIT_OK
        pw = max(len(str(e["preset"])) for e in entries)
        nw = max(len(str(e["name"])) for e in entries)
        for e in entries:
            off = "" if e["enabled"] else " (disabled)"
            desc = e["description"] or "(no description)"
            typer.echo(f"{e['preset']:<{pw}}  {e['name']:<{nw}}  {desc}{off}")
        counts: dict[str, int] = {}
        for e in entries:
            counts[str(e["preset"])] = counts.get(str(e["preset"]), 0) + 1
        summary = ", ".join(f"{k} {v}" for k, v in counts.items() if k != "-")
        noun = "rule" if len(entries) == 1 else "rules"
        typer.echo(f"{len(entries)} {noun}" + (f" ({summary})" if summary else ""))
        return EXIT_OK

    def run_quietly_when_piped() -> int:
        try:
            return run()
        except BrokenPipeError:  # e.g. `autofusion rules list | head`: the reader left
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return EXIT_OK

    raise typer.Exit(guarded(run_quietly_when_piped))
