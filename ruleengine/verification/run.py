"""Running the verification: the fused model against the original on the same inputs,
in the mode chosen (``modes``); in safe mode, finding and dropping the groups that fail."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ruleengine.diagnostics.codes import make
from ruleengine.diagnostics.model import Location, Severity
from ruleengine.errors import UsageError
from ruleengine.graph.model import Graph
from ruleengine.rewrite.model import FusedGroup, GroupCheck, Verification
from ruleengine.rewrite.weights import WeightSurvey, external_buffers
from ruleengine.verification.model import ModeChoice, VerifyOutcome
from ruleengine.verification.modes import out_of_memory

if TYPE_CHECKING:
    import onnx


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
        outcome, v = _contract_failures(outcome, contract_failed, unbound, safe)
    v = replace(
        v,
        mode=choice.mode,
        mode_reason=choice.reason,
        estimate_bytes=choice.estimate_bytes,
        available_bytes=choice.available_bytes,
    )
    return replace(outcome, verification=v)


def _contract_failures(
    outcome: VerifyOutcome,
    contract_failed: tuple[FusedGroup, ...],
    unbound: Collection[int],
    safe: bool,
) -> tuple[VerifyOutcome, Verification]:
    """The outcome with the groups that do not fit their kernel's contract failed (in
    safe mode: dropped, found by "contract"), and its verification."""
    v = outcome.verification
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
        found = {**outcome.found, **{g.id: "contract" for g in contract_failed}}
        outcome = replace(outcome, dropped=(*contract_failed, *outcome.dropped), found=found)
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
    return outcome, v


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
    found = {g.id: "per-group check" for g in dropped}
    v = Verification(
        ok,
        source,
        (),
        runs=2 * len(checks),
        dropped_groups=tuple(sorted(g.id for g in dropped)),
        found_by="per-group check" if dropped else None,
        groups=checks,
    )
    return VerifyOutcome(kept, dropped, fused, v, found)


def _reference(path: Path, feeds: dict, source: str, inputs: str | Path | None) -> Any:
    """The original model's outputs on ``feeds`` (a MemoryError when onnxruntime ran out
    of memory; a UsageError with AF501 when it cannot run the model)."""
    from ruleengine.verification import numerics

    try:
        return numerics.run_model(path, feeds)
    except Exception as exc:  # the original model itself does not run
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
                make(
                    "unreadable-model", why, Location(str(path)), hint=hint, severity=Severity.ERROR
                ),
            ),
        ) from None


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
    reference = _reference(path, feeds, source, inputs)

    def check(model: onnx.ModelProto) -> Verification:
        return numerics.verify(reference, model, feeds, source, external=external)

    result = check(fused)
    runs = 1
    found_by: list[str] = []
    dropped: tuple[FusedGroup, ...] = ()
    kept = tuple(groups)
    isolated: tuple[FusedGroup, ...] = ()
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
    isolated_ids = (
        {g.id for g in isolated} if safe and found_by[:1] == ["isolation check"] else set()
    )
    found = {g.id: "isolation check" if g.id in isolated_ids else "bisection" for g in dropped}
    return VerifyOutcome(tuple(kept), tuple(dropped), fused, result, found)
