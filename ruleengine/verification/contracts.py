"""Verification and the kernel contracts: warnings for groups that do not fit theirs
(AF406), and how each group's contract was verified."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ruleengine.diagnostics.codes import make
from ruleengine.diagnostics.model import Diagnostic, Location, Severity
from ruleengine.rewrite.model import FusedGroup, Verification

_LISTED = 5  # group ids named in one AF406 warning


def unbound_warnings(groups: Sequence[FusedGroup], path: Path) -> tuple[Diagnostic, ...]:
    """AF406 when nothing verifies: groups that do not fit their kernel's contract. One
    warning per rule, kernel and reason: a repeated layer's 4,096 groups are one line."""
    by_cause: dict[tuple[str, str, str], list[FusedGroup]] = {}
    for g in groups:
        by_cause.setdefault((g.rule, g.target_op, g.contract.reason or ""), []).append(g)
    out = []
    for (rule, kernel, reason), same in by_cause.items():
        ids = [str(g.id) for g in same[:_LISTED]]
        more = f" and {len(same) - _LISTED} more" if len(same) > _LISTED else ""
        which = (
            f"group {ids[0]}" if len(same) == 1 else f"{len(same)} groups ({', '.join(ids)}{more})"
        )
        out.append(
            make(
                "contract-unbound",  # AF406
                f"{which} of rule {rule} do{'es' if len(same) == 1 else ''} not fit kernel "
                f"{kernel}: {reason}",
                Location(str(path)),
                hint="fuse with --safe to drop them, or fix the rule's target_op or the catalog "
                "entry",
                severity=Severity.WARNING,
            )
        )
    return tuple(out)


def mark_verified(groups: Sequence[FusedGroup], v: Verification | None) -> tuple[FusedGroup, ...]:
    """Record in each group's contract how it was verified against its kernel."""
    if v is None:
        return tuple(groups)
    passed = {c.group for c in v.groups if c.status == "passed"}
    out = []
    for g in groups:
        c = g.contract
        if c is None or c.status not in ("bound", "structural"):
            out.append(g)
            continue
        how = "not at all"
        if v.mode == "per-group" and g.id in passed:
            how = "per group"
        elif v.mode == "whole" and v.ok:
            how = "whole model"
        out.append(replace(g, contract=replace(c, verified=how)))
    return tuple(out)


def contract_only_failures(v: Verification) -> int:
    """How many groups failed only their kernel contract (AF406) when every number
    agreed (0: some output or group differs, onnxruntime failed, or none did): then the
    fused model computes what the original does, and saying otherwise would be false."""
    contract = [c for c in v.groups if c.status == "failed" and _by_contract(c.error)]
    numeric = [c for c in v.groups if c.status == "failed" and not _by_contract(c.error)]
    if not contract or numeric or not all(o.ok for o in v.outputs):
        return 0
    if v.error is not None and "(AF406)" not in v.error:
        return 0  # onnxruntime could not run a model: nothing was compared
    return len(contract)


def _by_contract(error: str | None) -> bool:
    return (error or "").startswith("contract: ")
