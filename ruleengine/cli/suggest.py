"""suggest: draft rules for the fusable traffic the given rules leave unfused.

Parses flags, calls ``ruleengine.suggest.suggest``, writes the drafted rules (and their
tests) atomically under -o DIR and renders the summary: coverage per model before and
after adding the drafted rules.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ruleengine.cli.app import app
from ruleengine.cli.common import (
    PANEL_RULES,
    Format,
    Preset,
    examples,
    guarded,
    parse_dims,
    progress_printer,
)
from ruleengine.cost.scoring import human_bytes
from ruleengine.errors import UsageError
from ruleengine.suggest import ModelCoverage, Suggestion

SUMMARY_FILE = "suggest-summary.json"
RULES_DIR = "rules"  # DIR/rules/<name>.yaml and <name>.tests/: `check`, `test`, `--rules`
KERNELS_DIR = "kernels"  # DIR/kernels/<TargetOp>.yaml: `--kernels` (not rules: apart)
BAR = 0.9  # issue 16: 90% coverage, or the ceiling where that is lower
TOLERANCE = 0.0005  # figures are compared as printed (to 0.1%)


def meets_bar(m: ModelCoverage) -> bool:
    """Coverage after reaches 90%, or the ceiling where that is lower."""
    return m.after + TOLERANCE >= min(BAR, m.ceiling)


def summary_json(s: Suggestion) -> dict:
    """The summary as JSON data (also written to DIR/suggest-summary.json)."""
    return {
        "schema_version": 3,
        "target": s.target,
        "rules": [
            {
                "name": d.name,
                "file": f"{RULES_DIR}/{d.name}.yaml",
                "priority": d.priority,
                "instances": len(d.cluster.instances),
                "models": list(d.cluster.models),
                "bytes_saved": d.cluster.bytes_saved,
                "ops": len(d.cluster.instances[0].units),
                "tests": [f"{RULES_DIR}/{d.name}.tests/{f}" for f in d.tests],
                "kernel": f"{KERNELS_DIR}/{d.target_op}.yaml",
            }
            for d in s.rules
        ],
        "dropped": [{"pattern": p, "reason": r} for p, r in s.dropped],
        "coverage": [
            {
                "model": m.model,
                "fusable_bytes": m.fusable_bytes,
                "before": round(m.before, 4),
                "after": round(m.after, 4),
                "reach": round(m.reach, 4),
                "ceiling": round(m.ceiling, 4),
                "ceiling_exact": m.ceiling_exact,
                "partition_max": round(m.partition_max, 4),
                "partition_max_exact": m.partition_max_exact,
                "bound": round(m.bound, 4),
                "bar": round(min(BAR, m.ceiling), 4),
                "meets_bar": meets_bar(m),
                "groups_after": m.groups_after,
                "suggested_groups": m.suggested_groups,
                "unknown_edges": m.unknown_edges,
                "spelled": None
                if m.spelled is None
                else {
                    "before": round(m.spelled.before, 4),
                    "after": round(m.spelled.after, 4),
                    "lowered_by": [
                        {"rule": r, "displaces": list(v)} for r, v in m.spelled.lowered_by
                    ],
                },
            }
            for m in s.coverage
        ],
    }


def render_text(s: Suggestion, outdir: Path) -> str:
    lines = [
        f"{len(s.rules)} rule(s) drafted in {outdir}/{RULES_DIR}/, their kernel entries in "
        f"{outdir}/{KERNELS_DIR}/ (target {s.target})"
    ]
    for d in s.rules:
        c = d.cluster
        lines.append(
            f"  {d.name}.yaml  {len(c.instances)} region(s) in {', '.join(c.models)}, "
            f"{len(c.instances[0].units)} ops, saves {human_bytes(c.bytes_saved)}, "
            f"priority {d.priority}"
        )
    if s.dropped:
        lines.append(f"{len(s.dropped)} cluster(s) without a rule (see --min-bytes/--max-rules)")
    head = (
        f"{'model':40} {'fusable':>9} {'before':>7} {'after':>7} {'reach':>7} "
        f"{'ceiling':>8} {'any-sel':>8} {'bound':>7} bar"
    )
    lines += ["", "coverage of fusable intermediate traffic", head, "-" * len(head)]
    for m in s.coverage:
        lines.append(
            f"{m.model:40} {human_bytes(m.fusable_bytes):>9} {m.before:>7.1%} "
            f"{m.after:>7.1%} {m.reach:>7.1%} {m.ceiling:>7.1%}{' ' if m.ceiling_exact else '+'} "
            f"{m.partition_max:>7.1%}{' ' if m.partition_max_exact else '+'} {m.bound:>7.1%} "
            f"{'met' if meets_bar(m) else 'no'}"
        )
    unknown = [m for m in s.coverage if m.unknown_edges]
    for m in unknown:
        lines.append(
            f"{m.model}: {m.unknown_edges} edge(s) of unknown size are not counted "
            "(bind symbolic dims with --dim name=value)"
        )
    for m in s.coverage:
        sp = m.spelled
        if sp is None:
            continue
        fell = sp.after + TOLERANCE < sp.before
        lines.append(
            f"{m.model} with its composites written out (as another exporter spells them): "
            f"{sp.before:.1%} -> {sp.after:.1%}{': LOWER' if fell else ''}"
        )
        for rule, displaced in sp.lowered_by:
            lines.append(f"  {rule} takes ops of the groups of {', '.join(displaced)} there")
    lines.append(
        "before: the given rules; after: with the drafted rules added; reach: what the "
        "selection picks once the drafted groups are offered (simulated); ceiling: the most "
        "captured by a partition into kernels within UB, convexity and the input limit that "
        "the selection could pick once rules are added (it saves at least the net bytes the "
        "given rules save; +: best found, not proven); any-sel: the same for any partition, "
        "selection ignored; bound: edges whose smallest convex group alone fits; bar: after "
        ">= min(90%, ceiling)"
    )
    return "\n".join(lines)


@app.command(
    "suggest",
    rich_help_panel=PANEL_RULES,
    epilog=examples(
        "autofusion suggest model.onnx -o suggested/",
        "autofusion suggest a.onnx b.onnx --rules rules/ -o suggested/",
        "autofusion suggest model.onnx --preset cnn --max-rules 5 -o out/",
        "autofusion suggest model.onnx --min-bytes 65536 -f json -o out/",
        "autofusion suggest model.onnx --dim batch=1 --dim seq=128 -o out/",
    ),
)
def suggest_command(
    models: list[Path] = typer.Argument(..., help="ONNX models to learn from (never modified)."),
    output: Path = typer.Option(..., "--output", "-o", help="Directory for the drafted rules."),
    rules: list[Path] = typer.Option(
        [], "--rules", "-r", help="Rules already in use (several allowed)."
    ),
    preset: Preset | None = typer.Option(
        None, "--preset", help="Bundled rule preset in use (default: all, when no --rules)."
    ),
    target: str = typer.Option("ascend910b", "--target", "-t", help="Target name or YAML."),
    dim: list[str] = typer.Option(
        [], "--dim", help="Bind a symbolic input dim: name=value (several allowed)."
    ),
    min_bytes: int = typer.Option(
        0, "--min-bytes", min=0, help="Skip clusters saving fewer HBM bytes in total."
    ),
    max_rules: int | None = typer.Option(
        None, "--max-rules", min=1, help="Draft at most this many rules (largest saving first)."
    ),
    fmt: Format = typer.Option(Format.text, "--format", "-f", help="Summary format."),
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        "-j",
        min=1,
        help="Processes suggest may use (default: the cores); the drafts are the same.",
    ),
) -> None:
    """Draft rules for the fusable traffic that no rule captures, with coverage before/after.

    Finds the fusable regions the given rules leave unfused (within the target's UB,
    convex), clusters them by structure across layers and models, and writes one rule
    per cluster (ranked by HBM bytes at stake) into the output directory.
    """

    def run() -> None:
        from ruleengine.rewrite.emit import write_atomically
        from ruleengine.suggest import suggest

        missing = [str(m) for m in models if not m.is_file()]
        if missing:
            raise UsageError(f"model not found: {', '.join(missing)}")
        result = suggest(
            models,
            rules,
            preset=preset.value if preset else None,
            target=target,
            dims=parse_dims(dim),
            min_bytes=min_bytes,
            max_rules=max_rules,
            progress=progress_printer(),
            jobs=jobs,
        )
        data = summary_json(result)
        files = {f"{RULES_DIR}/{d.name}.yaml": d.text.encode() for d in result.rules}
        for d in result.rules:
            tests = d.tests.items()
            files.update({f"{RULES_DIR}/{d.name}.tests/{f}": t.encode() for f, t in tests})
            files[f"{KERNELS_DIR}/{d.target_op}.yaml"] = d.kernel.encode()
        files[SUMMARY_FILE] = (json.dumps(data, indent=2) + "\n").encode()
        write_atomically(output, files, protect=tuple(models))
        if fmt is Format.json:
            typer.echo(json.dumps(data, indent=2))
        else:
            typer.echo(render_text(result, output))

    guarded(run)
