"""Matching commands: match, explain-rule."""

from __future__ import annotations

from pathlib import Path

import typer

from ruleengine.cli.app import app
from ruleengine.cli.common import (
    EXIT_OK,
    PANEL_ANALYSIS,
    PANEL_RULES,
    Format,
    Preset,
    examples,
    guarded,
    warn_inputs,
)


def parse_input_shapes(values: list[str]) -> dict[str, tuple[int, ...]]:
    from ruleengine.cli.common import parse_input_shapes as parse

    return parse(values)


def _dims(values: list[str]) -> dict[str, int]:
    from ruleengine.cli.common import parse_dims

    return parse_dims(values)


def candidates_json(result, *, near_misses: bool = False) -> dict:
    """The JSON document of ``autofusion match`` (schema_version 1)."""
    doc: dict = {
        "schema_version": 1,
        "candidates": [
            {
                "rule": c.rule,
                "nodes": list(c.nodes),
                "inputs": list(c.inputs),
                "outputs": list(c.outputs),
                "alternative": c.alternative,
                "bindings": [list(g) for g in c.bindings],
            }
            for c in result.candidates
        ],
    }
    if near_misses:
        doc["near_misses"] = [
            {
                "rule": n.candidate.rule,
                "nodes": list(n.candidate.nodes),
                "code": n.code,
                "reason": n.reason,
            }
            for n in result.near_misses
        ]
    return doc


def candidates_text(result, *, near_misses: bool = False) -> str:
    """A plain table: rule, node count, first and last node, outputs."""
    rows = [("RULE", "ALT", "NODES", "FIRST -> LAST", "OUTPUTS")]
    for c in result.candidates:
        span = c.nodes[0] if len(c.nodes) == 1 else f"{c.nodes[0]} -> {c.nodes[-1]}"
        rows.append((c.rule, str(c.alternative), str(len(c.nodes)), span, ", ".join(c.outputs)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
    by_rule: dict[str, int] = {}
    for c in result.candidates:
        by_rule[c.rule] = by_rule.get(c.rule, 0) + 1
    lines.append("")
    lines.append(
        f"{len(result.candidates)} candidate(s) from {len(by_rule)} rule(s); "
        f"{len(result.near_misses)} near miss(es); {result.facts} facts; "
        f"{result.seconds * 1000:.0f} ms"
    )
    if near_misses and result.near_misses:
        lines.append("")
        lines.append("near misses:")
        for n in result.near_misses:
            lines.append(f"  {n.candidate.rule} [{n.code}] {', '.join(n.candidate.nodes)}")
            lines.append(f"      {n.reason}")
    return "\n".join(lines)


@app.command(
    "match",
    rich_help_panel=PANEL_ANALYSIS,
    epilog=examples(
        "autofusion match model.onnx",
        "autofusion match model.onnx --rules my_rules/ --near-misses",
        "autofusion match model.onnx --preset transformer --dim seq=128 -f json",
    ),
)
def match_command(
    model: Path = typer.Argument(..., help="ONNX model to match rules against."),
    rules: list[Path] = typer.Option(
        [], "--rules", "-r", help="Rule file or directory (several allowed)."
    ),
    preset: Preset | None = typer.Option(
        None, "--preset", help="Bundled rule preset (default: all, when no --rules)."
    ),
    dim: list[str] = typer.Option([], "--dim", help="Bind a symbolic dimension: name=value."),
    input_shape: list[str] = typer.Option(
        [], "--input-shape", help="Set a graph input's shape: NAME:d0,d1,... (several allowed)."
    ),
    fmt: Format = typer.Option(Format.text, "--format", "-f", help="Output format."),
    near: bool = typer.Option(
        False, "--near-misses", help="Also list bindings a check rejected, with the reason."
    ),
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        "-j",
        min=1,
        help="Processes for matching and shape inference (default: the cores).",
    ),
) -> None:
    """List every candidate subgraph of every rule (overlapping ones included)."""

    def run() -> int:
        from ruleengine.graph import load_graph
        from ruleengine.match import find_candidates
        from ruleengine.paths import check_input_file
        from ruleengine.procs import FORK_FROM_NODES, cores
        from ruleengine.rules.pending import PendingRules, rules_jobs

        check_input_file(model, "model")
        chosen = preset.value if preset else (None if rules else "all")
        n_jobs = cores() if jobs is None else jobs
        # with a core to spare, the rules load in a forked child while the model is read
        # (``rules_jobs``; their errors first)
        pending = PendingRules([str(p) for p in rules], chosen, rules_jobs(model, n_jobs))
        rule_set = None if pending.forked else pending.result()
        try:
            graph = load_graph(model, _dims(dim), parse_input_shapes(input_shape), jobs=n_jobs)
        except Exception:
            if rule_set is None:
                pending.result()
            raise
        if rule_set is None:
            rule_set = pending.result()
        warn_inputs(graph, rule_set)
        # the Datalog queries of a large graph shared among processes (the same result)
        result = find_candidates(
            graph, rule_set, jobs=n_jobs if len(graph.nodes) >= FORK_FROM_NODES else 1
        )
        if fmt is Format.json:
            from ruleengine.jsontext import json_bytes

            # large documents one record per line through json's C encoder (indent=2
            # makes json use its pure-Python encoder: 1.3 s at 1024 layers)
            typer.echo(json_bytes(candidates_json(result, near_misses=near)).decode().rstrip("\n"))
        else:
            typer.echo(candidates_text(result, near_misses=near))
        return EXIT_OK

    raise typer.Exit(guarded(run))


@app.command(
    "explain-rule",
    rich_help_panel=PANEL_RULES,
    epilog=examples(
        "autofusion explain-rule my_rule.yaml",
        "autofusion explain-rule my_rule.yaml --datalog",
        "autofusion explain-rule my_rule.yaml --model model.onnx --dim batch=1",
    ),
)
def explain_rule_command(
    rule_files: list[Path] = typer.Argument(..., help="Rule file(s) or directories."),
    datalog: bool = typer.Option(
        False, "--datalog", help="Print the compiled Datalog program (facts and clauses)."
    ),
    model: Path | None = typer.Option(
        None, "--model", "-m", help="Also match against this model: candidates, near misses."
    ),
    dim: list[str] = typer.Option([], "--dim", help="Bind a symbolic dimension: name=value."),
    input_shape: list[str] = typer.Option(
        [], "--input-shape", help="Set a graph input's shape: NAME:d0,d1,... (several allowed)."
    ),
) -> None:
    """Show how rules are matched: what each op type stands for, or the Datalog program."""

    def run() -> int:
        from ruleengine.match import compiled_program
        from ruleengine.match.compile import fact_schema, program_text
        from ruleengine.rules import load_rule_set

        rule_set = load_rule_set([str(p) for p in rule_files])
        prog = compiled_program(rule_set)
        if datalog:
            typer.echo(fact_schema(prog), nl=False)
            typer.echo(program_text(prog, comments=True), nl=False)
        else:
            typer.echo(_explain_text(rule_set, prog))
        if model is not None:
            from ruleengine.graph import load_graph
            from ruleengine.match import find_candidates

            graph = load_graph(model, _dims(dim), parse_input_shapes(input_shape))
            warn_inputs(graph)
            result = find_candidates(graph, rule_set)
            typer.echo("")
            typer.echo(candidates_text(result, near_misses=True))
        return EXIT_OK

    raise typer.Exit(guarded(run))


def _explain_text(rule_set, prog) -> str:
    from ruleengine.match.compile import resolve_type
    from ruleengine.match.matcher import default_aliases

    aliases = default_aliases()
    lines: list[str] = []
    for rule in rule_set.rules:
        _head, _arity, combos = prog.rules[rule.name]
        lines.append(f"rule {rule.name}: {len(combos)} Datalog clause(s)")
        for a, alt in enumerate(rule.alternatives):
            label = "match.ops" if a == 0 else f"branch {a - 1}"
            lines.append(f"  alternative {a} ({label}):")
            for op in alt.ops:
                spec = resolve_type(op.type, aliases)
                parts = []
                if spec.types:
                    shown = sorted(spec.types)
                    parts.append(
                        "ONNX " + (", ".join(shown) if len(shown) <= 8 else f"{len(shown)} types")
                    )
                if spec.forms:
                    parts.append("composite forms " + ", ".join(f.name for f in spec.forms))
                rep = (
                    f" x{op.repeat_min}..{op.repeat_max}"
                    if (op.repeat_min, op.repeat_max) != (1, 1)
                    else ""
                )
                lines.append(
                    f"    op {op.index}: {op.type}{rep} -> {'; '.join(parts) or 'nothing'}"
                )
    return "\n".join(lines)
