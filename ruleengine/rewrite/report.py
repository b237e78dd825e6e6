"""The fuse report: a table a person reads (report.txt, terminal) and the same as JSON.

Reporters only render the plan record; they compute nothing the plan does not hold.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ruleengine.rewrite.model import REPORT_SCHEMA_VERSION, Plan, Rejection, Verification
from ruleengine.rewrite.plan_json import verification_json
from ruleengine.rewrite.rejections import first_rejections, rejected_by_verdict


def fmt_bytes(n: int | float | None) -> str:
    """Human bytes in binary units: 512 B, 1.5 KiB, 12.3 MiB."""
    if n is None:
        return "?"
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{sign}{int(value)} {unit}" if unit == "B" else f"{sign}{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def fmt_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.2f} us"


def groups_per_rule(plan: Plan) -> dict[str, int]:
    counts: dict[str, int] = {}
    for g in plan.groups:
        counts[g.rule] = counts.get(g.rule, 0) + 1
    return dict(sorted(counts.items()))


def _percent(plan: Plan) -> float:
    return 100.0 * plan.bytes_saved / plan.hbm_bytes_before if plan.hbm_bytes_before else 0.0


def report_json(plan: Plan, files: Sequence[str] = (), *, timings: bool = True) -> dict[str, Any]:
    """report.json: totals, solver status, one line per group, rules, verification, files."""
    verdicts = rejected_by_verdict(plan.rejected)
    out: dict[str, Any] = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "model": plan.model,
        "target": plan.target,
        "totals": {
            "nodes_before": plan.nodes_before,
            "nodes_after": plan.nodes_after,
            "groups": len(plan.groups),
            "groups_per_rule": groups_per_rule(plan),
            "hbm_bytes_before": plan.hbm_bytes_before,
            "hbm_bytes_after": plan.hbm_bytes_after,
            "gross_bytes_saved": plan.gross_bytes_saved,
            "overhead_bytes": plan.overhead_bytes,
            "net_bytes_saved": plan.net_bytes_saved,
            "saved_percent": round(_percent(plan), 2),
            "launches_saved": plan.launches_saved,
            "time_saved_s": plan.time_saved_s,
            "unknown_size_tensors": plan.unknown_traffic_tensors,
            "unknown_size_min_bytes": plan.unknown_size_min_bytes,
            "compile_time_nodes": plan.compile_time_nodes,
        },
        "solver": {
            "name": plan.solver,
            "status": plan.status,
            "objective": plan.objective,
            "bound": plan.bound,
        },
        "groups": [
            {
                "id": g.id,
                "rule": g.rule,
                "kernel": g.kernel.kernel_name,
                "target_op": g.target_op,
                "nodes": len(g.nodes),
                "hbm_accesses_before": g.scored.cost.accesses_before if g.scored.cost else None,
                "hbm_accesses_after": g.scored.cost.accesses_after if g.scored.cost else None,
                "bytes_saved": g.scored.cost.bytes_saved if g.scored.cost else 0,
                "net_bytes": g.scored.cost.net_bytes if g.scored.cost else 0,
                "ub_bytes": g.scored.cost.ub_bytes if g.scored.cost else 0,
                "ub_limit": g.scored.cost.ub_limit if g.scored.cost else None,
                "verdict": g.scored.verdict.value,
            }
            for g in plan.groups
        ],
        "rejected": {"total": len(plan.rejected), "by_verdict": verdicts},
        "rules": [{"rule": s.rule, "matched": s.matched, "fused": s.fused} for s in plan.rules],
        "verification": verification_json(plan.verification, memory=True),
        "files": list(files),
    }
    if out["verification"] is not None:
        out["verification"]["not_checked"] = [
            {"groups": n, "reason": why} for n, why in unchecked_groups(plan)
        ]
    if timings:
        out["solver"]["seconds"] = round(plan.solver_seconds, 6)
        out["timings_s"] = {k: round(v, 6) for k, v in plan.timings}
        if plan.cpu_timings:
            out["cpu_s"] = {k: round(v, 6) for k, v in plan.cpu_timings}
    return out


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  " + "  ".join(parts).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def report_text(
    plan: Plan,
    files: Sequence[str] = (),
    *,
    outdir: str | None = None,
    timings: bool = True,
    max_rejected: int | None = None,
    detail: str = "full",
) -> str:
    """report.txt and the terminal output of ``autofusion fuse``.

    ``max_rejected`` shortens the list of candidates not fused (the terminal shows the
    first ones; report.txt has them all).
    """
    lines: list[str] = [
        f"autofusion fuse: {plan.model} (graph {plan.graph_name}), target {plan.target}",
        "",
    ]
    lines += _groups_text(plan)
    lines.append("")
    lines += _rejected_text(plan, max_rejected, detail)
    lines += _rule_stats_text(plan)
    lines.append("")
    lines += _totals_text(plan, timings)
    lines.append("")
    lines += _verification_text(plan.verification)
    lines += [f"  {n} group(s) not checked: {why}" for n, why in unchecked_groups(plan)]
    if files:
        lines.append("")
        lines.append(f"Files written{' to ' + outdir if outdir else ''}:")
        lines += [f"  {f}" for f in files]
    return "\n".join(lines) + "\n"


def _groups_text(plan: Plan) -> list[str]:
    """The table of fused groups."""
    lines: list[str] = []
    if plan.groups:
        lines.append(f"Fused groups ({len(plan.groups)})")
        rows = []
        for g in plan.groups:
            c = g.scored.cost
            hbm = f"{c.accesses_before} -> {c.accesses_after}" if c else "?"
            ub = f"{fmt_bytes(c.ub_bytes)} (fits {fmt_bytes(c.ub_limit)})" if c else "?"
            rows.append(
                [
                    str(g.id),
                    g.rule,
                    g.kernel.kernel_name,
                    str(len(g.nodes)),
                    hbm,
                    fmt_bytes(c.bytes_saved if c else 0),
                    fmt_bytes(c.net_bytes if c else 0),
                    ub,
                    "Fuse",
                ]
            )
        lines += _table(
            [
                "id",
                "rule",
                "kernel",
                "nodes",
                "HBM access",
                "gross saved",
                "net saved",
                "UB",
                "verdict",
            ],
            rows,
            {0, 3, 5, 6},
        )
    else:
        lines.append("Fused groups: none")
    return lines


def _natural_key(name: str) -> tuple:
    """``Conv.9`` before ``Conv.10``: digit runs compare as numbers (as ``match`` lists)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name))


def _natural_order(rejections: Sequence[Rejection]) -> list[Rejection]:
    """The rejections listed by rule, then node names in natural order, then code (each
    name's key made once: a full list repeats every node in many rejections)."""
    keys: dict[str, tuple] = {}

    def key(name: str) -> tuple:
        got = keys.get(name)
        if got is None:
            got = keys[name] = _natural_key(name)
        return got

    return sorted(rejections, key=lambda r: (key(r.rule), tuple(map(key, r.nodes)), r.code))


def _rejected_text(plan: Plan, max_rejected: int | None, detail: str) -> list[str]:
    """The candidates not fused (all, a few per rule and verdict, or the first ones)."""
    lines: list[str] = []
    if plan.rejected:
        summary = ", ".join(f"{k} {v}" for k, v in rejected_by_verdict(plan.rejected).items())
        noun = "candidate" if len(plan.rejected) == 1 else "candidates"
        lines.append(f"Not fused ({len(plan.rejected)} {noun}: {summary})")
        if max_rejected is None:  # report.txt: in full, or a few per (rule, verdict)
            from ruleengine.rewrite.rejections import shown_rejections

            shown = _natural_order(shown_rejections(plan, detail))
            rows = [[r.rule, _nodes_short(r.nodes), r.verdict, r.reason] for r in shown]
        else:  # a terminal: the first rows, each fitting a line or two
            shown = _natural_order(first_rejections(plan.rejected, max_rejected))
            rows = [
                [r.rule, _nodes_short(r.nodes, 2), r.verdict, _clip(r.reason, TERMINAL_REASON)]
                for r in shown
            ]
        lines += _table(["rule", "nodes", "verdict", "reason"], rows, set())
        if len(shown) < len(plan.rejected):
            where = "report.txt and plan.json" if max_rejected is not None else "this report"
            lines.append(
                f"  ... {len(plan.rejected) - len(shown)} more (listed in {where} with "
                "--plan-detail full; autofusion explain shows any one)"
            )
        lines.append("")
    return lines


def _rule_stats_text(plan: Plan) -> list[str]:
    """How often each rule matched and fused."""
    lines: list[str] = []
    active = [s for s in plan.rules if s.matched]
    silent = len(plan.rules) - len(active)
    lines.append("Per-rule statistics (matched / fused)")
    if active:
        lines += _table(
            ["rule", "matched", "fused"],
            [[s.rule, str(s.matched), str(s.fused)] for s in active],
            {1, 2},
        )
    if silent:
        lines.append(f"  ({silent} of {len(plan.rules)} rules matched nothing; see plan.json)")
    return lines


def _totals_text(plan: Plan, timings: bool) -> list[str]:
    """The plan's totals: nodes, groups, traffic, launches, time, solver."""
    lines: list[str] = []
    per_rule = ", ".join(f"{k} {v}" for k, v in groups_per_rule(plan).items()) or "none"
    bw = plan.hbm_bandwidth / 1e12
    solver = f"{plan.solver}, {plan.status}"
    if plan.bound is not None and plan.bound != plan.objective:
        solver += f" (bound {fmt_bytes(plan.bound)})"
    if timings:
        solver += f", {fmt_seconds(plan.solver_seconds)}"
    lines += [
        "Totals",
        f"  nodes:                {plan.nodes_before} -> {plan.nodes_after}",
        f"  fused groups:         {len(plan.groups)} ({per_rule})",
        f"  HBM traffic:          {fmt_bytes(plan.hbm_bytes_before)} -> "
        f"{fmt_bytes(plan.hbm_bytes_after)} (gross saved {fmt_bytes(plan.gross_bytes_saved)}, "
        f"{_percent(plan):.1f}%)",
        f"  net saved:            {fmt_bytes(plan.net_bytes_saved)} (gross - fusion overhead "
        f"{fmt_bytes(plan.overhead_bytes)})",
        f"  kernel launches saved: {plan.launches_saved}",
        f"  est. time saved:      {fmt_seconds(plan.time_saved_s)} at {bw:.2f} TB/s HBM",
        f"  solver:               {solver}",
    ]
    if plan.compile_time_nodes:
        lines.append(
            f"  compile-time nodes:   {plan.compile_time_nodes} (folded by the compiler: "
            "no kernel, no traffic, never fused)"
        )
    if plan.unknown_traffic_tensors:
        lines.append(
            f"  note: {plan.unknown_traffic_tensors} tensors of unknown size"
            " not counted in HBM traffic"
        )
    return lines


# contract statuses whose fused function is the group's own subgraph, with no reference
# to compare it with: verification compares the subgraph with itself
_UNCHECKED = {
    "no-contract": "no kernel entry (their function is their own subgraph)",
    "no-reference": "their kernel entry has no form or structure to check against (their "
    "function is their own subgraph)",
}


def unchecked_groups(plan: Plan) -> list[tuple[int, str]]:
    """(count, why) of the fused groups a verification run did not really check: PASSED
    says nothing about them."""
    if plan.verification is None:
        return []
    counts: dict[str, int] = {}
    for g in plan.groups:
        status = g.contract.status if g.contract is not None else None
        if status in _UNCHECKED:
            counts[status] = counts.get(status, 0) + 1
    return [(counts[s], why) for s, why in _UNCHECKED.items() if s in counts]


def _verification_text(v: Verification | None) -> list[str]:
    """The verification's verdict, per group and per output."""
    lines: list[str] = []
    if v is None:
        lines.append("Verification: not run (use --verify or --safe)")
    else:
        verdict = "PASSED" if v.ok else "FAILED"
        lines.append(
            f"Verification (onnxruntime CPU, {v.mode}, inputs {v.inputs_source}): {verdict}"
        )
        if v.mode_reason:
            lines.append(f"  mode: {v.mode} ({v.mode_reason})")
        if v.groups:
            counts = {
                s: sum(c.status == s for c in v.groups) for s in ("passed", "failed", "not_run")
            }
            lines.append(
                f"  groups: {counts['passed']} passed, {counts['failed']} failed, "
                f"{counts['not_run']} not run alone"
            )
            for c in v.groups:
                if c.status != "passed":
                    lines.append(
                        f"    group {c.group} ({c.rule}): {c.status}: {c.error or 'outputs differ'}"
                    )
        if v.error:
            lines.append(f"  error: {v.error}")
        if v.outputs:
            lines += _table(
                ["output", "cosine", "max abs err", "ok"],
                [
                    [o.name, f"{o.cosine:.6f}", f"{o.max_abs_error:.3g}", "yes" if o.ok else "NO"]
                    for o in v.outputs
                ],
                {1, 2},
            )
        if v.dropped_groups:
            lines.append(
                "  safe mode dropped group(s) "
                + ", ".join(str(i) for i in v.dropped_groups)
                + f" (found by {v.found_by}; {v.runs} onnxruntime runs)"
            )
        lines += _rounds_text(v)
    return lines


_NEXT = {
    "passed": "every group passed",
    "re-solved": "solved again without the dropped candidates",
    "kept": "solved again: the remaining groups stand (no other candidate takes their place)",
    "round limit": "round limit reached: failures dropped, not solved again",
}


def _rounds_text(v: Verification) -> list[str]:
    """Safe mode's rounds, when one dropped a group: per round the plan verified, each
    group dropped (its round's number, rule, kernel, first node) and why, and what next."""
    if not any(r.dropped for r in v.rounds):
        return []
    lines = ["  safe mode rounds (group numbers as in their round):"]
    for r in v.rounds:
        lines.append(
            f"    round {r.round}: {r.groups} group(s), net saved {fmt_bytes(r.net_bytes)}, "
            f"{len(r.dropped)} dropped; {_NEXT.get(r.next, r.next)}"
        )
        lines += [
            f"      dropped group {d.group} ({d.rule} -> {d.target_op}, {_nodes_short(d.nodes, 2)})"
            f": {d.reason}"
            for d in r.dropped
        ]
    return lines


TERMINAL_REASON = 90  # characters of a reason shown on a terminal (report.txt has all)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _nodes_short(nodes: Sequence[str], limit: int = 4) -> str:
    if len(nodes) <= limit:
        return ", ".join(nodes)
    return ", ".join(nodes[:limit]) + f", ... ({len(nodes)} nodes)"
