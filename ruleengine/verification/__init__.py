"""The verification stage: the fused model against the original, in onnxruntime.

Two modes, chosen from an estimate of onnxruntime's memory (``memory``) or forced:

- ``whole``: original and fused model run on the same inputs; ``--safe`` then finds
  failing groups by an isolation check (each fused node alone, fed the original's values)
  and bisection for what fails only in combination;
- ``per-group``: each fused node alone against the original subgraph it replaces, on
  made-up inputs of the real shapes (``groups``); memory bounded by one group, so a model
  of any size is verified. ``--safe`` drops the groups that fail.

Out of memory is never a crash: a whole-model run the estimate says will not fit is
refused (AF522), and a MemoryError becomes AF523.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ruleengine.diagnostics.model import Diagnostic, Location, Severity
from ruleengine.errors import AutofusionError, UsageError
from ruleengine.graph.model import Graph
from ruleengine.rewrite.model import FusedGroup, GroupCheck, Verification
from ruleengine.rewrite.weights import WeightSurvey, external_buffers
from ruleengine.verification import memory

if TYPE_CHECKING:
    import onnx

MODES = ("auto", "whole", "per-group")


@dataclass(frozen=True)
class VerifyOutcome:
    """What verification leaves: the groups kept, the ones dropped, the fused model."""

    groups: tuple[FusedGroup, ...]
    dropped: tuple[FusedGroup, ...]
    fused: onnx.ModelProto
    verification: Verification


@dataclass(frozen=True)
class ModeChoice:
    mode: str
    reason: str
    estimate_bytes: int
    available_bytes: int | None


def _diag(code: str, name: str, message: str, where: str, hint: str) -> Diagnostic:
    return Diagnostic(code, name, Severity.ERROR, message, Location(where), hint)


def choose_mode(graph: Graph, weights: WeightSurvey, requested: str, where: str) -> ModeChoice:
    """Whole model or group by group: forced by ``requested``, else from the estimate."""
    if requested not in MODES:
        raise UsageError(f"unknown verify mode {requested!r}; choose one of {', '.join(MODES)}")
    estimate = memory.estimate_whole_bytes(graph, weights.total_bytes)
    available = memory.available_bytes()
    budget = None if available is None else int(available * memory.SHARE)
    says = (
        f"estimated {memory.fmt(estimate)} for a whole-model run, {memory.fmt(available)} available"
    )
    if requested == "per-group":
        return ModeChoice(
            "per-group", f"forced by --verify-mode per-group ({says})", estimate, available
        )
    if requested == "whole":
        if available is not None and estimate > available:
            message = f"a whole-model verification run would need about {memory.fmt(estimate)}"
            raise AutofusionError(
                f"{message}, more than the {memory.fmt(available)} available",
                (
                    _diag(
                        "AF522",
                        "not-enough-memory",
                        f"{message}; {memory.fmt(available)} available",
                        where,
                        "use --verify-mode per-group (or auto): each group is verified alone, "
                        "in memory bounded by the largest group",
                    ),
                ),
            )
        return ModeChoice("whole", f"forced by --verify-mode whole ({says})", estimate, available)
    if budget is None or estimate <= budget:
        return ModeChoice("whole", f"auto: {says}", estimate, available)
    return ModeChoice(
        "per-group",
        f"auto: {says}; a whole-model run may take {memory.SHARE:.0%} of that",
        estimate,
        available,
    )


def out_of_memory(where: str, exc: BaseException, mode: str) -> AutofusionError:
    """AF523: what a MemoryError (ours or onnxruntime's) becomes."""
    hint = (
        "use --verify-mode per-group, or bind smaller sizes with --dim"
        if mode == "whole"
        else "bind smaller sizes with --dim, or fuse without --verify/--safe"
    )
    text = str(exc).strip().splitlines()
    detail = text[0][:200] if text else "MemoryError"
    return AutofusionError(
        f"out of memory while verifying ({mode} mode)",
        (_diag("AF523", "out-of-memory", f"out of memory: {detail}", where, hint),),
    )


def verify_fused(
    *,
    path: Path,
    original: onnx.ModelProto,
    fused: onnx.ModelProto,
    graph: Graph,
    groups: Sequence[FusedGroup],
    build: Callable[[Sequence[FusedGroup]], onnx.ModelProto],
    weights: WeightSurvey,
    choice: ModeChoice,
    inputs: str | Path | None,
    seed: int,
    safe: bool,
    progress: Callable[[str], None] | None = None,
    unbound: Collection[int] = (),
) -> VerifyOutcome:
    """Verify ``fused`` against the model at ``path``; in safe mode drop failing groups.

    ``unbound`` groups do not fit their kernel's contract: they fail in either mode
    (safe mode drops them first, found by "contract").
    """
    from ruleengine.verification import numerics  # onnx and onnxruntime: only when verifying

    if inputs is not None:
        feeds = numerics.load_inputs(inputs, original)
        source = Path(inputs).name
    else:
        feeds = numerics.make_inputs(original, seed=seed, dims=graph.bound_dims)
        source = f"random (seed {seed})"
    contract_failed = tuple(g for g in groups if g.id in unbound)
    if contract_failed and safe:
        groups = tuple(g for g in groups if g.id not in unbound)
        fused = build(groups)
    try:
        if choice.mode == "per-group":
            outcome = _per_group(
                path, original, fused, graph, groups, build, feeds, source, seed, safe
            )
        else:
            outcome = _whole(
                path, original, fused, groups, build, weights, feeds, source, inputs, safe, progress
            )
    except MemoryError as exc:
        raise out_of_memory(str(path), exc, choice.mode) from None
    v = outcome.verification
    if contract_failed:
        failed = tuple(
            GroupCheck(g.id, g.rule, "failed", error=f"contract: {g.contract.reason}")
            for g in contract_failed
        )
        if safe:
            found = "contract" + (f" + {v.found_by}" if v.found_by else "")
            v = replace(
                v,
                dropped_groups=tuple(sorted((*v.dropped_groups, *(g.id for g in contract_failed)))),
                found_by=found,
                groups=tuple(
                    sorted(
                        (*(c for c in v.groups if c.group not in unbound), *failed),
                        key=lambda c: c.group,
                    )
                ),
            )
            outcome = replace(outcome, dropped=(*contract_failed, *outcome.dropped))
        else:
            v = replace(
                v,
                ok=False,
                groups=tuple(
                    sorted(
                        (*(c for c in v.groups if c.group not in unbound), *failed),
                        key=lambda c: c.group,
                    )
                ),
                error=v.error or f"{len(failed)} group(s) do not fit their kernel contract (AF406)",
            )
    v = replace(
        v,
        mode=choice.mode,
        mode_reason=choice.reason,
        estimate_bytes=choice.estimate_bytes,
        available_bytes=choice.available_bytes,
    )
    return replace(outcome, verification=v)


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
            Diagnostic(
                "AF406",
                "contract-unbound",
                Severity.WARNING,
                f"{which} of rule {rule} do{'es' if len(same) == 1 else ''} not fit kernel "
                f"{kernel}: {reason}",
                Location(str(path)),
                "fuse with --safe to drop them, or fix the rule's target_op or the catalog entry",
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


def _per_group(
    path: Path,
    original: onnx.ModelProto,
    fused: onnx.ModelProto,
    graph: Graph,
    groups: Sequence[FusedGroup],
    build: Callable[[Sequence[FusedGroup]], onnx.ModelProto],
    feeds: dict,
    source: str,
    seed: int,
    safe: bool,
) -> VerifyOutcome:
    from ruleengine.verification.groups import check_groups

    checks = check_groups(
        original, fused, graph, groups, model_dir=path.resolve().parent, feeds=feeds, seed=seed
    )
    failed = {c.group for c in checks if c.status == "failed"}
    kept, dropped = tuple(groups), ()
    if safe and failed:
        dropped = tuple(g for g in groups if g.id in failed)
        kept = tuple(g for g in groups if g.id not in failed)
        fused = build(kept)
    ok = not failed or safe
    v = Verification(
        ok,
        source,
        (),
        runs=2 * len(checks),
        dropped_groups=tuple(sorted(g.id for g in dropped)),
        found_by="per-group check" if dropped else None,
        groups=checks,
    )
    return VerifyOutcome(kept, dropped, fused, v)


def _whole(
    path: Path,
    original: onnx.ModelProto,
    fused: onnx.ModelProto,
    groups: Sequence[FusedGroup],
    build: Callable[[Sequence[FusedGroup]], onnx.ModelProto],
    weights: WeightSurvey,
    feeds: dict,
    source: str,
    inputs: str | Path | None,
    safe: bool,
    progress: Callable[[str], None] | None,
) -> VerifyOutcome:
    from ruleengine.verification import numerics

    external = external_buffers(weights)
    try:
        reference = numerics.run_model(path, feeds)
    except Exception as exc:  # noqa: BLE001 - the original model itself does not run
        if numerics.is_out_of_memory(exc):
            raise MemoryError(str(exc)) from None
        why = (
            f"onnxruntime cannot run the original model {path.name} on {source} inputs: "
            f"{numerics._short(exc)}"
        )
        hint = (
            "if the model needs particular input values (shapes, axes, indices), pass "
            "them with --inputs FILE.npz; or fuse without --verify/--safe"
            if inputs is None
            else "check the arrays in the inputs file, or fuse without --verify/--safe"
        )
        raise UsageError(
            f"onnxruntime cannot run the original model {path.name}, so nothing to verify against",
            (
                Diagnostic(
                    "AF501", "unreadable-model", Severity.ERROR, why, Location(str(path)), hint
                ),
            ),
        ) from None

    def check(model: onnx.ModelProto) -> Verification:
        return numerics.verify(reference, model, feeds, source, external=external)

    result = check(fused)
    runs = 1
    found_by: list[str] = []
    dropped: tuple[FusedGroup, ...] = ()
    kept = tuple(groups)
    if safe and not result.ok and kept:
        # 1. each fused node on its own, fed the original's values: exact and linear
        isolated, extra = numerics.isolate_failures(
            original, fused, kept, feeds, model_dir=path.resolve().parent, external=external
        )
        runs += extra
        if isolated:
            found_by.append("isolation check")
            if progress is not None:
                progress(f"safe mode: {len(isolated)} group(s) fail on their own")
            dropped = isolated
            kept = tuple(g for g in kept if g not in isolated)
            fused = build(kept)
            result = check(fused)
            runs += 1
        # 2. what fails only in combination: bisection over whole-model runs
        if not result.ok and kept:

            def passes(subset: Sequence[FusedGroup]) -> bool:
                return check(build(subset)).ok

            kept, more, extra = numerics.bisect_failures(kept, passes, progress)
            runs += extra
            found_by.append("bisection")
            dropped = (*dropped, *more)
            fused = build(kept)
            result = check(fused)
            runs += 1
    result = replace(
        result,
        runs=runs,
        dropped_groups=tuple(sorted(g.id for g in dropped)),
        found_by=" + ".join(found_by) or None,
    )
    return VerifyOutcome(tuple(kept), tuple(dropped), fused, result)
