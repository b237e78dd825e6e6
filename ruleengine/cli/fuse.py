"""The compile-time command: fuse.

Parses flags (and the AUTOFUSION_RULES / AUTOFUSION_DISABLE environment variables), calls
``pipeline.fuse`` (which computes every output in memory), writes the files atomically,
renders the report and picks the exit code: 0 done, 1 verification failed, 2 error.
"""

from __future__ import annotations

import json
import os
from enum import StrEnum
from pathlib import Path

import typer

from ruleengine.cli.app import app
from ruleengine.cli.common import (
    EXIT_FINDINGS,
    EXIT_OK,
    PANEL_FUSE,
    Format,
    PlanDetail,
    Preset,
    Solver,
    examples,
    guarded,
    parse_dims,
    parse_input_shapes,
    progress_printer,
    warn_inputs,
)


class VerifyMode(StrEnum):
    auto = "auto"
    whole = "whole"
    per_group = "per-group"


ENV_ENABLE = "AUTOFUSION_RULES"
ENV_DISABLE = "AUTOFUSION_DISABLE"
TERMINAL_REJECTED_ROWS = 25  # report.txt lists every candidate not fused


def _env_names(var: str) -> list[str]:
    return [n.strip() for n in os.environ.get(var, "").split(",") if n.strip()]


@app.command(
    "fuse",
    rich_help_panel=PANEL_FUSE,
    epilog=examples(
        "autofusion fuse model.onnx -o out/",
        "autofusion fuse model.onnx --rules rules/ --target ascend910b -o out/",
        "autofusion fuse model.onnx --preset transformer --dim seq=512 --verify",
        "autofusion fuse model.onnx --safe --inputs sample.npz",
        "autofusion fuse llama.onnx --safe --verify-mode per-group -o out/",
        "autofusion fuse model.onnx --disable softmax --solver greedy -f json",
        "AUTOFUSION_DISABLE=softmax,gelu_erf autofusion fuse model.onnx",
    ),
)
def fuse_command(
    model: Path = typer.Argument(..., help="ONNX model to fuse (never modified)."),
    rules: list[Path] = typer.Option(
        [], "--rules", "-r", help="Rule file or directory (several allowed)."
    ),
    preset: Preset | None = typer.Option(
        None, "--preset", help="Bundled rule preset (default: all, when no --rules)."
    ),
    target: str = typer.Option("ascend910b", "--target", "-t", help="Target name or YAML."),
    solver: Solver = typer.Option(Solver.exact, "--solver", help="Conflict resolution."),
    enable: list[str] = typer.Option(
        [], "--enable", help=f"Only these rules (several allowed; env {ENV_ENABLE})."
    ),
    disable: list[str] = typer.Option(
        [], "--disable", help=f"Never these rules (several allowed; env {ENV_DISABLE})."
    ),
    dim: list[str] = typer.Option([], "--dim", help="Bind a symbolic dimension: name=value."),
    input_shape: list[str] = typer.Option(
        [], "--input-shape", help="Set a graph input's shape: NAME:d0,d1,... (several allowed)."
    ),
    outdir: Path = typer.Option(Path("out"), "--output", "-o", help="Output directory."),
    verify: bool | None = typer.Option(
        None,
        "--verify/--no-verify",
        help="Compare original and fused model in onnxruntime (default: on with --safe).",
    ),
    safe: bool = typer.Option(
        False, "--safe", help="Verify, find failing groups by bisection and drop them."
    ),
    inputs: Path | None = typer.Option(
        None, "--inputs", help="Verification inputs (.npz, one array per model input)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the random verification inputs."),
    verify_mode: VerifyMode = typer.Option(
        VerifyMode.auto,
        "--verify-mode",
        help="Verify the whole model at once, each group alone (bounded memory), or choose "
        "from the memory estimate (auto).",
    ),
    kernels: list[Path] = typer.Option(
        [], "--kernels", help="Kernel catalog folder added to the bundled one (several allowed)."
    ),
    copy_weights: bool = typer.Option(
        False,
        "--copy-weights",
        help="Copy external weight files into OUTDIR (default: hard link, or reference).",
    ),
    benefit_threshold: float | None = typer.Option(
        None, "--benefit-threshold", help="Minimum relative HBM gain for every rule."
    ),
    time_limit: float = typer.Option(30.0, "--time-limit", help="Exact solver limit (s)."),
    fmt: Format = typer.Option(Format.text, "--format", "-f", help="Report on stdout."),
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        "-j",
        min=1,
        help="Processes for matching, shape inference and the check (default: the cores).",
    ),
    plan_detail: PlanDetail = typer.Option(
        PlanDetail.compact,
        "--plan-detail",
        help="compact: a few rejected candidates per rule and verdict; full: all of them.",
    ),
) -> None:
    """Fuse MODEL: write the fused ONNX model, plan.json, report and DOT graph to OUTDIR."""

    def run() -> int:
        from ruleengine.paths import check_input_file
        from ruleengine.pipeline import fuse, write_outputs
        from ruleengine.rewrite.report import report_json, report_text
        from ruleengine.rewrite.writer import check_output_dir

        check_input_file(model, "model")
        if inputs is not None:
            check_input_file(inputs, "inputs")
        check_output_dir(outdir)  # before the work, not after it
        result = fuse(
            model,
            rules,
            preset=preset.value if preset else None,
            target=target,
            solver=solver.value,
            dims=parse_dims(dim),
            input_shapes=parse_input_shapes(input_shape),
            plan_detail=plan_detail.value,
            enable=[*enable, *_env_names(ENV_ENABLE)],
            disable=[*disable, *_env_names(ENV_DISABLE)],
            benefit_threshold=benefit_threshold,
            verify=verify,
            safe=safe,
            inputs=inputs,
            seed=seed,
            time_limit_s=time_limit,
            jobs=jobs,
            progress=progress_printer(),
            verify_mode=verify_mode.value,
            outdir=outdir,
            copy_weights=copy_weights,
            kernels=kernels,
        )
        warn_inputs(result.analysis.graph, result.analysis.rule_set)
        for diag in result.warnings:
            typer.echo(f"warning: {diag.code} {diag.message}", err=True)
            if diag.hint:
                typer.echo(f"  hint: {diag.hint}", err=True)
        write_outputs(result, outdir)
        linked = [p.new_location for p in result.placements if p.how == "link"]
        if linked:
            typer.echo(
                f"note: weights hard-linked into {outdir} ({', '.join(linked)}): onnxruntime "
                "loads the fused model; onnx.load/onnx.checker refuse hard-linked data, so "
                "pass --copy-weights for onnx tools",
                err=True,
            )
        names = list(result.files)
        if fmt is Format.json:
            typer.echo(json.dumps(report_json(result.plan, names), indent=2))
        else:
            text = report_text(
                result.plan, names, outdir=str(outdir), max_rejected=TERMINAL_REJECTED_ROWS
            )
            typer.echo(text, nl=False)
        v = result.plan.verification
        if v is not None and not v.ok:
            typer.echo(
                "error: the fused model does not compute what the original does "
                "(see Verification above)\n  hint: rerun with --safe to drop failing groups",
                err=True,
            )
            return EXIT_FINDINGS
        return EXIT_OK

    from ruleengine.runtime import paused_gc

    # The collector stays paused until the command's records are freed: re-enabled with
    # them alive, its first pass would walk every record the stages made (~10^7 objects
    # at 2048 layers, measured 5 s CPU at 1024) to find the few cycles matching left.
    with paused_gc():
        code = guarded(run)
    if code:
        raise typer.Exit(code)
