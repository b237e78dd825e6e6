"""Verification as a stage of ``fuse``: the fused model against the input model.

``pipeline.fuse`` calls ``verify_rewrite`` after the rewrite when --verify or --safe is
given (the mode was chosen before any work, ``choose_mode``), and ``with_check_failure``
when onnx.checker then refuses the fused model of a failed verification.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ruleengine.graph.model import Graph
from ruleengine.rewrite.model import FusedGroup, GroupCheck, Verification
from ruleengine.rewrite.weights import WeightSurvey
from ruleengine.verification import ModeChoice, VerifyOutcome, verify_fused

if TYPE_CHECKING:
    import onnx

    from ruleengine.rewrite.onnx_rewrite import RewriteError


def verify_rewrite(
    *,
    path: Path,
    original: onnx.ModelProto,
    fused: onnx.ModelProto,
    graph: Graph,
    groups: Sequence[FusedGroup],
    calls: Mapping[int, Any],
    corrupt_rules: Collection[str],
    weights: WeightSurvey,
    choice: ModeChoice,
    inputs: str | Path | None,
    seed: int,
    safe: bool,
    unbound: Collection[int],
    progress: Callable[[str], None] | None = None,
    bodies: Callable[[onnx.ModelProto], onnx.ModelProto] | None = None,
    body_groups: Sequence[FusedGroup] = (),
) -> VerifyOutcome:
    """Run both models in onnxruntime (safe mode: drop failing groups, found by
    bisection, rewriting ``original`` again without them). ``bodies`` puts the groups
    inside control-flow bodies back into each rebuild (``rewrite.bodies``): ``groups``
    are the top level's, a body group is verified by the whole-model run; in per-group
    mode ``body_groups`` are listed as not run alone, never counted as passed."""
    from ruleengine.rewrite.onnx_rewrite import rewrite_model

    if progress is not None:
        progress(f"verification mode: {choice.mode} ({choice.reason})")

    def build(subset: Sequence[FusedGroup]) -> onnx.ModelProto:
        out = rewrite_model(original, graph, subset, corrupt_rules=corrupt_rules, calls=calls)
        return out if bodies is None else bodies(out)

    outcome = verify_fused(
        path=path,
        original=original,
        fused=fused,
        graph=graph,
        groups=groups,
        build=build,
        weights=weights,
        choice=choice,
        inputs=inputs,
        seed=seed,
        safe=safe,
        progress=progress,
        unbound=unbound,
    )
    return _body_groups_not_run(outcome, body_groups)


def _body_groups_not_run(
    outcome: VerifyOutcome, body_groups: Sequence[FusedGroup]
) -> VerifyOutcome:
    """Per-group mode isolates top-level groups only: a group inside an If/Loop/Scan body
    is said to be unchecked rather than left out of the counts (whole mode runs it)."""
    v = outcome.verification
    if not body_groups or v.mode != "per-group":
        return outcome
    why = "inside a control-flow body: only a whole-model run (--verify-mode whole) checks it"
    unchecked = tuple(GroupCheck(g.id, g.rule, "not_run", error=why) for g in body_groups)
    return replace(outcome, verification=replace(v, groups=(*v.groups, *unchecked)))


def with_check_failure(verification: Verification | None, exc: RewriteError) -> Verification:
    """A kernel bound to the wrong tensors fails the checker too: part of a failed
    verification (exit 1, files written for study), not a bug of the rewriter, which
    is raised when nothing failed verification."""
    if verification is None or verification.ok:
        raise exc
    return replace(
        verification,
        error=f"{verification.error or 'verification failed'}; {exc.message[:300]}",
    )
