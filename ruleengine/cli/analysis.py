"""Analysis commands: explain (the benefit analysis per candidate) and compare (solvers).

Both run ``pipeline.analyze``; the functions below only turn its records into text or
JSON, so tests and notebooks can call them without the CLI.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import typer

from ruleengine.cli.app import app
from ruleengine.cli.common import (
    PANEL_ANALYSIS,
    Format,
    Preset,
    Solver,
    examples,
    guarded,
    parse_dims,
    parse_input_shapes,
    warn_inputs,
)
from ruleengine.cost.model import ScoredCandidate, Target, Verdict
from ruleengine.cost.scoring import human_bytes, kb
from ruleengine.errors import UsageError
from ruleengine.resolve.model import Resolution

VERDICT_TEXT = {
    Verdict.FUSE: "Fuse",
    Verdict.NO_BENEFIT: "No benefit",
    Verdict.LOW_BENEFIT: "Low benefit",
    Verdict.UB_OVERFLOW: "UB overflow",
    Verdict.CONSTRAINT_FAILED: "Constraint failed",
    Verdict.PARAM_MISMATCH: "Param mismatch",
    Verdict.PATTERN_MISMATCH: "Pattern mismatch",
    Verdict.CONST_VALUE: "Constant value",
    Verdict.INTERMEDIATE_ESCAPES: "Intermediate escapes",
    Verdict.DYNAMIC_SHAPE: "Dynamic shape",
    Verdict.NOT_CONVEX: "Not convex",
    Verdict.TOO_MANY_INPUTS: "Too many inputs",
    Verdict.CONTRACT_MISMATCH: "Contract mismatch",
    Verdict.DUPLICATE: "Duplicate",
    Verdict.LOST_CONFLICT: "Lost conflict",
    Verdict.DROPPED_BY_VERIFICATION: "Dropped by verification",
}


def final_verdicts(
    scored: tuple[ScoredCandidate, ...], resolution: Resolution
) -> list[tuple[ScoredCandidate, int | None]]:
    """Every scored candidate as the resolver left it, with its group number (1-based)."""
    group = {sc.candidate: i for i, sc in enumerate(resolution.chosen, 1)}
    lost = {sc.candidate: sc for sc, _ in resolution.lost}
    out = []
    for sc in scored:
        if sc.viable and sc.candidate in lost:
            out.append((lost[sc.candidate], None))
        else:
            out.append((sc, group.get(sc.candidate) if sc.viable else None))
    return out


def _cost_json(sc: ScoredCandidate) -> dict | None:
    c = sc.cost
    if c is None:
        return None
    buffers = sc.details.get("ub_buffers", ())
    return {
        "hbm_accesses_before": c.accesses_before,
        "hbm_accesses_after": c.accesses_after,
        "bytes_before": c.bytes_before,
        "bytes_after": c.bytes_after,
        "bytes_saved": c.bytes_saved,
        "overhead_bytes": c.overhead_bytes,
        "net_bytes": c.net_bytes,
        "relative_gain": round(c.relative_gain, 6),
        "flops": c.flops,
        "ub_bytes": c.ub_bytes,
        "ub_limit": c.ub_limit,
        "ub_fits": c.ub_bytes <= c.ub_limit,
        "tile": list(c.tile),
        "ub_buffers": [{"tensor": t, "bytes": b} for t, b in buffers],  # type: ignore[union-attr]
        "launches_saved": c.launches_saved,
        "time_saved_s": c.time_saved_s,
    }


def _target_json(t: Target) -> dict:
    return {
        "name": t.name,
        "ub_bytes": t.ub_bytes,
        "ub_usable_bytes": t.ub_usable_bytes,
        "hbm_bandwidth": t.hbm_bandwidth,
        "max_fused_inputs": t.max_fused_inputs,
    }


def _resolution_json(r: Resolution) -> dict:
    return {
        "name": r.solver,
        "status": r.status,
        "objective": r.objective,
        "bound": r.bound,
        "gap": round(r.gap, 6),
        "seconds": round(r.seconds, 6),
        "components": r.components,
    }


def _near_set(analysis) -> frozenset:
    return frozenset(nm.candidate for nm in getattr(analysis.match, "near_misses", ()))


def _lost_to_json(lost) -> dict | None:
    if lost is None:
        return None
    return {
        "group": lost.group,
        "rule": lost.rule,
        "shared_nodes": lost.shared_nodes,
        "winner_net_bytes": lost.winner_net,
        "net_bytes": lost.loser_net,
        "margin_bytes": lost.margin,
        "inside_group": lost.inside,
    }


def explain_json(analysis, model: str) -> dict:
    """The JSON document of ``autofusion explain`` (schema_version 1). Candidates in natural
    order (rule, then node names with numbers compared as numbers); a candidate that lost a
    conflict names the group it lost to and the bytes compared (``lost_to``)."""
    from ruleengine.cli.explain_view import build_story, natural_key, nodes_key

    rows = final_verdicts(analysis.scored, analysis.resolution)
    near = _near_set(analysis)
    story = build_story(rows, near, analysis.resolution.chosen)
    rows = sorted(
        rows,
        key=lambda r: (natural_key(r[0].candidate.rule), nodes_key(r[0].candidate.nodes)),
    )
    return {
        "schema_version": 1,
        "model": model,
        "target": _target_json(analysis.target),
        "solver": _resolution_json(analysis.resolution),
        "candidates": [
            {
                "rule": sc.candidate.rule,
                "alternative": sc.candidate.alternative,
                "priority": sc.priority,
                "nodes": list(sc.candidate.nodes),
                "inputs": list(sc.details.get("inputs", sc.candidate.inputs)),
                "outputs": list(sc.details.get("outputs", sc.candidate.outputs)),
                "verdict": sc.verdict.value,
                "code": sc.code,
                "reason": sc.reason,
                "group": group,
                "near_miss": sc.candidate in near,
                "lost_to": _lost_to_json(story.lost_to.get(id(sc))),
                "cost": _cost_json(sc),
            }
            for sc, group in rows
        ],
        "summary": _summary(rows, analysis.resolution),
    }


def _summary(rows: list[tuple[ScoredCandidate, int | None]], r: Resolution) -> dict:
    from ruleengine.cli.explain_view import totals

    return {
        "candidates": len(rows),
        "groups": len(r.chosen),
        **totals(r.chosen),
        "verdicts": dict(sorted(Counter(sc.verdict.value for sc, _ in rows).items())),
    }


def _us(seconds: float) -> str:
    if abs(seconds) < 5e-9:
        return "0 us"
    return f"{seconds * 1e6:.2f} us" if abs(seconds) < 1e-3 else f"{seconds * 1e3:.2f} ms"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def explain_text(analysis, model: str, *, show_all: bool = False) -> str:
    """The benefit analysis for a person: totals, groups per rule, each chosen group with
    what lost to it, then what was not fused and the near misses (see explain_view)."""
    from ruleengine.cli.explain_view import render_text, totals

    t, r = analysis.target, analysis.resolution
    rows = final_verdicts(analysis.scored, r)
    time_saved = sum(sc.cost.time_saved_s for sc in r.chosen if sc.cost)
    tot = totals(r.chosen)
    header = [
        f"Benefit analysis of {model} on {t.name} "
        f"(UB {kb(t.ub_bytes)}, {kb(t.ub_usable_bytes)} usable; "
        f"HBM {t.hbm_bandwidth / 1e12:.2f} TB/s)",
        f"solver {r.solver}: {r.status}, {_plural(len(r.chosen), 'group')}, "
        f"net {human_bytes(tot['net_bytes_saved'])} saved "
        f"(gross {human_bytes(tot['gross_bytes_saved'])} - overhead "
        f"{human_bytes(tot['overhead_bytes'])}; est. {_us(time_saved)}), {r.seconds:.3f} s",
    ]
    return render_text(
        header,
        rows,
        t.ub_bytes,
        VERDICT_TEXT,
        show_all=show_all,
        near_misses=_near_set(analysis),
        winners=r.chosen,
    )


def compare_json(
    exact: Resolution, greedy: Resolution, model: str | None = None, target: str | None = None
) -> dict:
    """Both solvers' groups and bytes (net and gross named as such) and the gap."""
    from ruleengine.cli.explain_view import totals

    def side(r: Resolution) -> dict:
        return {
            "groups": len(r.chosen),
            **totals(r.chosen),
            "status": r.status,
            "bound": r.bound,
            "seconds": round(r.seconds, 6),
        }

    diff = exact.objective - greedy.objective
    return {
        "schema_version": 1,
        "model": model,
        "target": target,
        "exact": side(exact),
        "greedy": side(greedy),
        "gap": {
            "net_bytes": diff,
            "relative": round(diff / greedy.objective, 6) if greedy.objective else 0.0,
        },
    }


def gap_line(exact: Resolution, greedy: Resolution) -> str:
    diff = exact.objective - greedy.objective
    rel = diff / greedy.objective if greedy.objective else 0.0
    status = exact.status
    if exact.status != "OPTIMAL" and exact.bound is not None:
        status += f", bound {human_bytes(exact.bound)}, gap {exact.gap:.2%}"
    return f"gap: exact saves {human_bytes(diff)} net more than greedy ({rel:+.2%}; exact {status})"


def compare_text(exact: Resolution, greedy: Resolution, model: str, target: str) -> str:
    from ruleengine.cli.explain_view import totals

    te, tg = totals(exact.chosen), totals(greedy.chosen)
    rows = [
        ("", "exact", "greedy"),
        ("groups", str(len(exact.chosen)), str(len(greedy.chosen))),
        ("net saved", human_bytes(te["net_bytes_saved"]), human_bytes(tg["net_bytes_saved"])),
        (
            "gross saved",
            human_bytes(te["gross_bytes_saved"]),
            human_bytes(tg["gross_bytes_saved"]),
        ),
        ("status", exact.status, greedy.status),
        ("seconds", f"{exact.seconds:.3f}", f"{greedy.seconds:.3f}"),
    ]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    w2 = max(len(r[2]) for r in rows)
    lines = [f"Solvers on {model} ({target})"]
    lines += [f"  {a.ljust(w0)}  {b.rjust(w1)}  {c.rjust(w2)}" for a, b, c in rows]
    only_exact = {sc.candidate for sc in exact.chosen} - {sc.candidate for sc in greedy.chosen}
    only_greedy = {sc.candidate for sc in greedy.chosen} - {sc.candidate for sc in exact.chosen}
    if only_exact or only_greedy:
        lines.append(
            f"  groups only exact picks: {len(only_exact)}, only greedy: {len(only_greedy)}"
        )
    lines.append(gap_line(exact, greedy))
    return "\n".join(lines) + "\n"


def _run_analysis(
    model,
    rules,
    preset,
    target,
    solver,
    dim,
    benefit_threshold,
    time_limit,
    input_shape=(),
    kernels=(),
):
    from ruleengine.paths import check_input_file
    from ruleengine.pipeline import analyze

    check_input_file(model, "model")
    analysis = analyze(
        model,
        rules,
        preset=preset.value if preset else None,
        target=target,
        solver=solver,
        dims=parse_dims(dim),
        input_shapes=parse_input_shapes(list(input_shape)),
        benefit_threshold=benefit_threshold,
        time_limit_s=time_limit,
        kernels=list(kernels),
    )
    warn_inputs(analysis.graph, analysis.rule_set)
    return analysis


_RULES = typer.Option([], "--rules", "-r", help="Rule file or directory (several allowed).")
_PRESET = typer.Option(
    None, "--preset", help="Bundled rule preset (default: all, when no --rules)."
)
_TARGET = typer.Option("ascend910b", "--target", "-t", help="Target name or YAML file.")
_DIM = typer.Option([], "--dim", help="Bind a symbolic dimension: name=value.")
_INPUT_SHAPE = typer.Option(
    [], "--input-shape", help="Set a graph input's shape: NAME:d0,d1,... (several allowed)."
)
_THRESHOLD = typer.Option(None, "--benefit-threshold", help="Minimum relative HBM gain.")
_TIME = typer.Option(30.0, "--time-limit", help="Exact solver time limit (s).")
_FORMAT = typer.Option(Format.text, "--format", "-f", help="Output format.")
_KERNELS = typer.Option(
    [],
    "--kernels",
    help="Kernel catalog folder added to the bundled one (several allowed): a candidate no "
    "form of its kernel accepts is contract_mismatch.",
)


@app.command(
    "explain",
    rich_help_panel=PANEL_ANALYSIS,
    epilog=examples(
        "autofusion explain model.onnx --preset cnn",
        "autofusion explain model.onnx --target ascend310p --verdict ub_overflow",
        "autofusion explain model.onnx --rules my_rules/ --rule my_rule -f json",
        "autofusion explain model.onnx --target my_chip.yaml --dim seq=2048",
        "autofusion explain model.onnx --preset cnn --rules my_rules/ --kernels my_kernels/",
    ),
)
def explain_command(
    model: Path = typer.Argument(..., help="ONNX model to analyse."),
    rules: list[Path] = _RULES,
    preset: Preset | None = _PRESET,
    target: str = _TARGET,
    solver: Solver = typer.Option(Solver.exact, "--solver", help="Conflict resolution."),
    dim: list[str] = _DIM,
    input_shape: list[str] = _INPUT_SHAPE,
    benefit_threshold: float | None = _THRESHOLD,
    time_limit: float = _TIME,
    rule: list[str] = typer.Option([], "--rule", help="Show only these rules (several)."),
    verdict: list[str] = typer.Option(
        [], "--verdict", help="Show only these verdicts (several), e.g. fuse, ub_overflow."
    ),
    fmt: Format = _FORMAT,
    show_all: bool = typer.Option(
        False,
        "--all",
        help="Every candidate in full (the default text stays within about 300 lines).",
    ),
    html: Path | None = typer.Option(
        None, "--html", help="Also write the report page (report.html) of the analysis to FILE."
    ),
    kernels: list[Path] = _KERNELS,
) -> None:
    """Why each candidate was fused or skipped: HBM bytes, overhead, UB need, verdict."""

    def run() -> None:
        known_verdicts = [v.value for v in Verdict]
        bad = sorted(set(verdict) - set(known_verdicts))
        if bad:
            raise UsageError(
                f"--verdict names unknown verdict(s): {', '.join(bad)}; "
                f"known: {', '.join(known_verdicts)}"
            )
        analysis = _run_analysis(
            model,
            rules,
            preset,
            target,
            solver.value,
            dim,
            benefit_threshold,
            time_limit,
            input_shape,
            kernels,
        )
        if html is not None:  # the whole analysis, before --rule/--verdict narrow it
            from ruleengine.report.files import write_explain_html

            write_explain_html(html, analysis, model)
        if verdict:
            rows = final_verdicts(analysis.scored, analysis.resolution)
            keep = tuple(
                s
                for s, (shown, _) in zip(analysis.scored, rows, strict=True)
                if shown.verdict.value in verdict
            )
            analysis = replace(analysis, scored=keep)
        if rule:
            names = {r.name for r in analysis.rule_set.rules}
            unknown = sorted(set(rule) - names)
            if unknown:
                raise UsageError(
                    f"--rule names unknown rule(s): {', '.join(unknown)}; "
                    f"known: {', '.join(sorted(names))}"
                )
            keep = tuple(s for s in analysis.scored if s.candidate.rule in set(rule))
            analysis = replace(analysis, scored=keep)
        _echo_explain(analysis, str(model), fmt, show_all, rule, rules)

    guarded(run)


def _echo_explain(
    analysis, model: str, fmt: Format, show_all: bool, focus: list[str], rules: list[Path]
) -> None:
    """Print explain's document, with why-not records for the rules without candidates
    (``_explain_whys``): in full for ``--rule``, one line each otherwise."""
    from ruleengine.cli.matching import echo_why_not_lines, with_why_not

    whys, rest = _explain_whys(analysis, focus, rules)
    if fmt is Format.json:
        typer.echo(json.dumps(with_why_not(explain_json(analysis, model), whys), indent=2))
        return
    typer.echo(explain_text(analysis, model, show_all=show_all), nl=False)
    if whys or rest:
        typer.echo("")
    if focus:
        from ruleengine.match.whynot_text import whynot_text

        typer.echo("\n".join(line for w in whys for line in whynot_text(w)))
    else:
        echo_why_not_lines(whys, rest)


def _explain_whys(analysis, focus: list[str], rules: list[Path]) -> tuple:
    """Why-not records (``match.whynot``) for the rules ``--rule`` names and the rules of
    ``--rules`` that have no candidate (``--rule`` asks even a rule that has some), and
    the names of the rules without candidates left out (``WHY_NOT_MAX``)."""
    from ruleengine.cli.matching import user_rule_names, why_not_records

    if focus:
        from ruleengine.match.whynot import why_not

        return why_not(analysis.graph, analysis.rule_set, focus, result=analysis.match), []
    names = user_rule_names(analysis.rule_set, rules)
    return why_not_records(analysis.graph, analysis.rule_set, analysis.match, names)


@app.command(
    "compare",
    rich_help_panel=PANEL_ANALYSIS,
    epilog=examples(
        "autofusion compare model.onnx",
        "autofusion compare model.onnx --preset transformer --time-limit 5 -f json",
        "autofusion compare model.onnx --preset cnn --rules my_rules/ --kernels my_kernels/",
    ),
)
def compare_command(
    model: Path = typer.Argument(..., help="ONNX model to analyse."),
    rules: list[Path] = _RULES,
    preset: Preset | None = _PRESET,
    target: str = _TARGET,
    dim: list[str] = _DIM,
    input_shape: list[str] = _INPUT_SHAPE,
    benefit_threshold: float | None = _THRESHOLD,
    time_limit: float = _TIME,
    fmt: Format = _FORMAT,
    kernels: list[Path] = _KERNELS,
) -> None:
    """Exact (CP-SAT) and greedy selection side by side: groups, bytes saved, time, gap."""

    def run() -> None:
        from ruleengine.resolve import resolve

        analysis = _run_analysis(
            model,
            rules,
            preset,
            target,
            "exact",
            dim,
            benefit_threshold,
            time_limit,
            input_shape,
            kernels,
        )
        greedy = resolve(analysis.graph, analysis.scored, solver="greedy")
        if fmt is Format.json:
            doc = compare_json(analysis.resolution, greedy, str(model), analysis.target.name)
            typer.echo(json.dumps(doc, indent=2))
        else:
            typer.echo(
                compare_text(analysis.resolution, greedy, str(model), analysis.target.name),
                nl=False,
            )

    guarded(run)


def targets_rows() -> list[dict]:
    """Every bundled target with the figures the cost model uses."""
    from ruleengine.cost.targets import DEFAULT_TARGET, known_targets, load_target

    rows = []
    for name in known_targets():
        t = load_target(name)
        rows.append(
            {
                "name": t.name,
                "default": name == DEFAULT_TARGET,
                "ub_bytes": t.ub_bytes,
                "ub_usable_bytes": t.ub_usable_bytes,
                "l1_bytes": t.l1_bytes,
                "l0c_bytes": t.l0c_bytes,
                "cores": t.cores,
                "vector_cores": t.vector_cores,
                "hbm_bandwidth": t.hbm_bandwidth,
                "peak_flops": dict(t.peak_flops),
                "max_fused_inputs": t.max_fused_inputs,
                "description": t.description,
            }
        )
    return rows


@app.command(
    "targets",
    rich_help_panel=PANEL_ANALYSIS,
    epilog=examples(
        "autofusion targets",
        "autofusion targets -f json",
        "autofusion explain model.onnx --target ascend910b4",
    ),
)
def targets_command(fmt: Format = _FORMAT) -> None:
    """List the bundled hardware targets (use a name or a YAML file with --target)."""

    def run() -> None:
        rows = targets_rows()
        if fmt is Format.json:
            typer.echo(json.dumps({"schema_version": 1, "targets": rows}, indent=2))
            return
        head = ("target", "UB", "L1", "L0C", "cores", "fp16 peak", "HBM", "max inputs")
        table = [head] + [
            (
                r["name"] + (" (default)" if r["default"] else ""),
                kb(r["ub_bytes"]),
                kb(r["l1_bytes"]),
                kb(r["l0c_bytes"]),
                f"{r['cores']}/{r['vector_cores']}",
                f"{r['peak_flops'].get('float16', 0) / 1e12:.0f} TFLOPS",
                f"{r['hbm_bandwidth'] / 1e12:.1f} TB/s",
                str(r["max_fused_inputs"]),
            )
            for r in rows
        ]
        widths = [max(len(row[i]) for row in table) for i in range(len(head))]
        for row in table:
            typer.echo(
                "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            )

    guarded(run)
