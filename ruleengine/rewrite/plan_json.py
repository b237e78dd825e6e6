"""The plan as JSON (plan.json): the groups, their contracts, the verification and the
rejections a plan detail level lists."""

from __future__ import annotations

import math
from typing import Any

from ruleengine.kernels.model import FUSED_DOMAIN
from ruleengine.rewrite.model import (
    PLAN_SCHEMA_VERSION,
    FusedGroup,
    OutputCheck,
    Plan,
    Verification,
)
from ruleengine.rewrite.rejections import rejected_by_verdict, shown_rejections

PLAN_DETAILS = ("compact", "full")


def group_json(g: FusedGroup) -> dict[str, Any]:
    cost = g.scored.cost
    return {
        "id": g.id,
        "rule": g.rule,
        "alternative": g.scored.candidate.alternative,
        "target_op": g.target_op,
        "node": g.node_name,
        "function": {"domain": FUSED_DOMAIN, "name": g.target_op, "overload": g.overload},
        "nodes": list(g.nodes),
        "op_types": list(g.op_types),
        "inputs": list(g.inputs),
        "outputs": list(g.outputs),
        "bytes_before": cost.bytes_before if cost else None,
        "bytes_after": cost.bytes_after if cost else None,
        "bytes_saved": cost.bytes_saved if cost else 0,
        "net_bytes": cost.net_bytes if cost else 0,
        "hbm_accesses_before": cost.accesses_before if cost else None,
        "hbm_accesses_after": cost.accesses_after if cost else None,
        "ub_bytes": cost.ub_bytes if cost else 0,
        "ub_limit": cost.ub_limit if cost else None,
        "attributes": g.attributes or {},
        "tensor_layout": g.tensor_layout,
        "kernel_config": g.kernel_config or {},
        "port_map": [dict(p) for p in g.port_map],
        "contract": contract_json(g.contract),
        "kernel": {
            "kernel_name": g.kernel.kernel_name,
            "file_path": g.kernel.file_path,
            "compiler": g.kernel.compiler,
            "build_config": g.kernel.build_config or {},
            "debug_symbols": g.kernel.debug_symbols,
            "gen_dot_graph": g.kernel.gen_dot_graph,
            "dot_graph_path": g.kernel.dot_graph_path,
        },
    }


def contract_json(c: Any) -> dict[str, Any] | None:
    """The group's kernel contract: catalog entry, version, form, bound ports, how verified."""
    if c is None:
        return None
    return {
        "entry": c.entry,
        "version": c.version,
        "status": c.status,
        "form": c.form,
        "ports": {p: t for p, t in c.ports},
        "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in c.attributes},
        "verified": c.verified,
        "reason": c.reason,
    }


def _finite(x: float) -> float | None:
    """JSON has no inf/NaN: a missing or mis-shaped output is reported as null."""
    return x if math.isfinite(x) else None


def verification_json(v: Verification | None, *, memory: bool = False) -> dict[str, Any] | None:
    """The verification record as JSON. ``memory`` adds the estimate and the memory
    available behind the mode choice (report.json; plan.json stays reproducible)."""
    if v is None:
        return None
    extra: dict[str, Any] = {}
    if memory:
        extra = {
            "mode_reason": v.mode_reason,
            "estimate_bytes": v.estimate_bytes,
            "available_bytes": v.available_bytes,
        }
    return {
        "ok": v.ok,
        "inputs": v.inputs_source,
        "threshold": v.threshold,
        "runs": v.runs,
        "error": v.error,
        "dropped_groups": list(v.dropped_groups),
        "found_by": v.found_by,
        "mode": v.mode,
        **extra,
        "groups": [
            {
                "group": c.group,
                "rule": c.rule,
                "status": c.status,
                "error": c.error,
                "outputs": [_output_json(o) for o in c.outputs],
            }
            for c in v.groups
        ],
        "outputs": [_output_json(o) for o in v.outputs],
        "rounds": [
            {
                "round": r.round,
                "groups": r.groups,
                "net_bytes": r.net_bytes,
                "found_by": r.found_by,
                "runs": r.runs,
                "next": r.next,
                "dropped": [
                    {
                        "group": d.group,
                        "rule": d.rule,
                        "target_op": d.target_op,
                        "nodes": list(d.nodes),
                        "reason": d.reason,
                        "found_by": d.found_by,
                    }
                    for d in r.dropped
                ],
            }
            for r in v.rounds
        ],
    }


def _output_json(o: OutputCheck) -> dict[str, Any]:
    return {
        "name": o.name,
        "cosine": _finite(o.cosine),
        "max_abs_error": _finite(o.max_abs_error),
        "max_rel_error": _finite(o.max_rel_error),
        "ok": o.ok,
    }


def plan_json(plan: Plan, detail: str = "compact") -> dict[str, Any]:
    """plan.json (schemas/plan.schema.json): the contract with the kernel generator.
    ``detail`` "compact" lists a few rejections per (rule, verdict) and counts them all;
    "full" lists every one (``--plan-detail full``)."""
    return {
        "schema_version": PLAN_SCHEMA_VERSION,
        "model": plan.model,
        "model_sha256": plan.model_sha256,
        "graph": plan.graph_name,
        "target": plan.target,
        "summary": {
            "nodes_before": plan.nodes_before,
            "nodes_after": plan.nodes_after,
            "groups": len(plan.groups),
            "hbm_bytes_before": plan.hbm_bytes_before,
            "hbm_bytes_after": plan.hbm_bytes_after,
            "gross_bytes_saved": plan.gross_bytes_saved,
            "overhead_bytes": plan.overhead_bytes,
            "net_bytes_saved": plan.net_bytes_saved,
            "launches_saved": plan.launches_saved,
            "time_saved_s": plan.time_saved_s,
            "solver": plan.solver,
            "status": plan.status,
            "objective": plan.objective,
            "bound": plan.bound,
            "compile_time_nodes": plan.compile_time_nodes,
            "unknown_size_tensors": plan.unknown_traffic_tensors,
            "unknown_size_min_bytes": plan.unknown_size_min_bytes,
        },
        "groups": [group_json(g) for g in plan.groups],
        "rejected": [
            {
                "rule": r.rule,
                "nodes": list(r.nodes),
                "verdict": r.verdict,
                "code": r.code,
                "reason": r.reason,
            }
            for r in shown_rejections(plan, detail)
        ],
        "detail": detail,
        "rejected_by_verdict": rejected_by_verdict(plan.rejected),
        "rules": [{"rule": s.rule, "matched": s.matched, "fused": s.fused} for s in plan.rules],
        "verification": verification_json(plan.verification),
    }
