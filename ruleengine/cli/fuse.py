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
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from ruleengine.pipeline import FuseResult


class WeightsMode(StrEnum):
    copy = "copy"
    share = "share"
    link = "link"


class VerifyMode(StrEnum):
    auto = "auto"
    whole = "whole"
    per_group = "per-group"


ENV_ENABLE = "AUTOFUSION_RULES"
ENV_DISABLE = "AUTOFUSION_DISABLE"
TERMINAL_REJECTED_ROWS = 25  # report.txt lists every candidate not fused


def _env_names(var: str) -> list[str]:
    return [n.strip() for n in os.environ.get(var, "").split(",") if n.strip()]


# The options of ``fuse`` (declared once here; the signature reads as a list of flags).
_RULES = typer.Option([], "--rules", "-r", help="Rule file or directory (several allowed).")
_PRESET = typer.Option(
    None, "--preset", help="Bundled rule preset (default: all, when no --rules)."
)
_TARGET = typer.Option("ascend910b", "--target", "-t", help="Target name or YAML.")
_SOLVER = typer.Option(Solver.exact, "--solver", help="Conflict resolution.")
_ENABLE = typer.Option(
    [], "--enable", help=f"Only these rules (several allowed; env {ENV_ENABLE})."
)
_DISABLE = typer.Option(
    [], "--disable", help=f"Never these rules (several allowed; env {ENV_DISABLE})."
)
_DIM = typer.Option([], "--dim", help="Bind a symbolic dimension: name=value.")
_INPUT_SHAPE = typer.Option(
    [], "--input-shape", help="Set a graph input's shape: NAME:d0,d1,... (several allowed)."
)
_OUTDIR = typer.Option(Path("out"), "--output", "-o", help="Output directory.")
_VERIFY = typer.Option(
    None,
    "--verify/--no-verify",
    help="Compare original and fused model in onnxruntime (default: on with --safe).",
)
_SAFE = typer.Option(
    False,
    "--safe",
    help="Verify; drop the groups that fail (isolation check, then bisection) and solve "
    "again without them, until the plan passes (AF525 says what was dropped).",
)
_INPUTS = typer.Option(
    None, "--inputs", help="Verification inputs (.npz, one array per model input)."
)
_SEED = typer.Option(0, "--seed", help="Seed of the random verification inputs.")
_VERIFY_MODE = typer.Option(
    VerifyMode.auto,
    "--verify-mode",
    help="Verify the whole model at once, each group alone (bounded memory), or choose "
    "from the memory estimate (auto).",
)
_KERNELS = typer.Option(
    [], "--kernels", help="Kernel catalog folder added to the bundled one (several allowed)."
)
_WEIGHTS = typer.Option(
    WeightsMode.copy,
    "--weights",
    help="External weight files outside OUTDIR: copy them in (reflink where the "
    "filesystem has one, else a sparse copy), share them where they lie (onnx loads the "
    "result only when OUTDIR holds them: -o the model's folder shares them at no cost), "
    "or hard-link them (onnx then refuses to load the result and the original). Files "
    "already inside OUTDIR are always shared.",
)
_COPY_WEIGHTS = typer.Option(
    False, "--copy-weights", hidden=True, help="Same as --weights copy (the default)."
)
_THRESHOLD = typer.Option(
    None, "--benefit-threshold", help="Minimum relative HBM gain for every rule."
)
_TIME_LIMIT = typer.Option(30.0, "--time-limit", help="Exact solver limit (s).")
_FORMAT = typer.Option(Format.text, "--format", "-f", help="Report on stdout.")
_JOBS = typer.Option(
    None,
    "--jobs",
    "-j",
    min=1,
    help="Processes for matching, shape inference and the check (default: the cores).",
)
_PLAN_DETAIL = typer.Option(
    PlanDetail.compact,
    "--plan-detail",
    help="compact: a few rejected candidates per rule and verdict; full: all of them.",
)


@app.command(
    "fuse",
    rich_help_panel=PANEL_FUSE,
    epilog=examples(
        "autofusion fuse model.onnx -o out/",
        "autofusion fuse model.onnx --rules rules/ --target ascend910b -o out/",
        "autofusion fuse model.onnx --preset transformer --dim seq=512 --verify",
        "autofusion fuse model.onnx --safe --inputs sample.npz",
        "autofusion fuse model.onnx --preset all --rules my_rules/ --kernels my_kernels/ --safe",
        "autofusion fuse llama.onnx --safe --verify-mode per-group -o out/",
        "autofusion fuse model.onnx --disable softmax --solver greedy -f json",
        "AUTOFUSION_DISABLE=softmax,gelu_erf autofusion fuse model.onnx",
    ),
)
def fuse_command(
    model: Path = typer.Argument(..., help="ONNX model to fuse (never modified)."),
    rules: list[Path] = _RULES,
    preset: Preset | None = _PRESET,
    target: str = _TARGET,
    solver: Solver = _SOLVER,
    enable: list[str] = _ENABLE,
    disable: list[str] = _DISABLE,
    dim: list[str] = _DIM,
    input_shape: list[str] = _INPUT_SHAPE,
    outdir: Path = _OUTDIR,
    verify: bool | None = _VERIFY,
    safe: bool = _SAFE,
    inputs: Path | None = _INPUTS,
    seed: int = _SEED,
    verify_mode: VerifyMode = _VERIFY_MODE,
    kernels: list[Path] = _KERNELS,
    weights: WeightsMode = _WEIGHTS,
    copy_weights: bool = _COPY_WEIGHTS,
    benefit_threshold: float | None = _THRESHOLD,
    time_limit: float = _TIME_LIMIT,
    fmt: Format = _FORMAT,
    jobs: int | None = _JOBS,
    plan_detail: PlanDetail = _PLAN_DETAIL,
    html: bool = typer.Option(
        True, "--html/--no-html", help="Write report.html beside report.txt (default: on)."
    ),
) -> None:
    """Fuse MODEL: write the fused ONNX model, plan.json, report and DOT graph to OUTDIR."""

    def run() -> int:
        return _fuse(
            model,
            fmt,
            rules,
            preset=preset.value if preset else None,
            target=target,
            solver=solver.value,
            dims=parse_dims(dim),
            input_shapes=parse_input_shapes(input_shape),
            plan_detail=plan_detail.value,
            html=html,
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
            weights=WeightsMode.copy.value if copy_weights else weights.value,
            kernels=kernels,
        )

    from ruleengine.runtime import paused_gc

    # The collector stays paused until the command's records are freed: re-enabled with
    # them alive, its first pass would walk every record the stages made (~10^7 objects
    # at 2048 layers, measured 5 s CPU at 1024) to find the few cycles matching left.
    with paused_gc():
        code = guarded(run)
    if code:
        raise typer.Exit(code)


def _fuse(model: Path, fmt: Format, rules: list[Path], **options: Any) -> int:
    """Check the paths, fuse (``pipeline.fuse``, looked up now: tests replace it), write
    the files and report; the exit code."""
    from ruleengine.paths import check_input_file
    from ruleengine.pipeline import fuse, write_outputs
    from ruleengine.rewrite.writer import check_output_dir

    outdir = options["outdir"]
    check_input_file(model, "model")
    if options["inputs"] is not None:
        check_input_file(options["inputs"], "inputs")
    check_output_dir(outdir)  # before the work, not after it
    result = fuse(model, rules, **options)
    warn_inputs(result.analysis.graph, result.analysis.rule_set)
    for diag in result.warnings:
        typer.echo(f"warning: {diag.code} {diag.message}", err=True)
        if diag.hint:
            typer.echo(f"  hint: {diag.hint}", err=True)
    write_outputs(result, outdir, progress=options["progress"])
    _weights_notes(result, outdir)
    return _report(result, outdir, fmt)


def _weights_notes(result: FuseResult, outdir: Path) -> None:
    """Say where the fused model's weights are when they are not a plain copy."""
    shared = [p.new_location for p in result.placements if p.how == "inside"]
    if shared:
        typer.echo(
            f"note: the fused model shares the weights in {outdir} ({', '.join(shared)}): "
            "nothing copied; keep them there",
            err=True,
        )
    linked = [p.new_location for p in result.placements if p.how == "link"]
    if linked:
        typer.echo(
            f"warning: weights hard-linked into {outdir} ({', '.join(linked)}): onnxruntime "
            "loads the fused model, but onnx.load/onnx.checker refuse both it and the "
            "original model while the link exists; use --weights copy (the default) or "
            "-o the model's folder for onnx tools",
            err=True,
        )


def _report(result: FuseResult, outdir: Path, fmt: Format) -> int:
    """The report on stdout; exit 1 when the fused model failed verification."""
    from ruleengine.rewrite.report import report_json, report_text
    from ruleengine.verification import contract_only_failures

    names = list(result.files)
    # the weights files after the fused model's own, as report.txt lists them
    at = 1 + max((i for i, n in enumerate(names) if n.startswith(result.fused_name)), default=-1)
    names[at:at] = [n for n in result.weight_files if n not in names]
    if fmt is Format.json:
        typer.echo(json.dumps(report_json(result.plan, names), indent=2))
    else:
        text = report_text(
            result.plan, names, outdir=str(outdir), max_rejected=TERMINAL_REJECTED_ROWS
        )
        typer.echo(text, nl=False)
    v = result.plan.verification
    if v is not None and not v.ok and (n := contract_only_failures(v)):
        typer.echo(
            "error: the fused model computes what the original does (every output agrees), "
            f"but {n} group(s) do not fit their kernel contract (AF406; see Verification "
            "above)\n  hint: rerun with --safe to drop them",
            err=True,
        )
        return EXIT_FINDINGS
    if v is not None and not v.ok:
        typer.echo(
            "error: the fused model does not compute what the original does "
            "(see Verification above)\n  hint: rerun with --safe to drop failing groups",
            err=True,
        )
        return EXIT_FINDINGS
    return EXIT_OK
