"""Choosing the verification mode from an estimate of onnxruntime's memory, and what
running out of memory becomes (AF522, AF523)."""

from __future__ import annotations

from ruleengine.diagnostics.codes import make
from ruleengine.diagnostics.model import Location, Severity
from ruleengine.errors import AutofusionError, UsageError
from ruleengine.graph.model import Graph
from ruleengine.rewrite.weights import WeightSurvey
from ruleengine.verification import memory
from ruleengine.verification.model import ModeChoice

MODES = ("auto", "whole", "per-group")


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
                    make(
                        "not-enough-memory",  # AF522
                        f"{message}; {memory.fmt(available)} available",
                        Location(where),
                        hint="use --verify-mode per-group (or auto): each group is verified "
                        "alone, in memory bounded by the largest group",
                        severity=Severity.ERROR,
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
        (
            make(
                "out-of-memory",  # AF523
                f"out of memory: {detail}",
                Location(where),
                hint=hint,
                severity=Severity.ERROR,
            ),
        ),
    )
