"""The verdict of one candidate (``score_one``): its numbers, then each check in a fixed
order of precedence, the first that fails deciding the verdict, code and reason."""

from __future__ import annotations

from types import MappingProxyType

from ruleengine.cost.constraints import Context, evaluate
from ruleengine.cost.display import dynamic_reason, human_bytes, ub_reason
from ruleengine.cost.formula import compute_cost
from ruleengine.cost.group_memo import Analysis, GroupMemo
from ruleengine.cost.inputs import kernel_inputs
from ruleengine.cost.model import Cost, ScoredCandidate, Target, Verdict
from ruleengine.cost.traffic import group_io, traffic
from ruleengine.cost.ub import ub_need
from ruleengine.graph.model import Graph
from ruleengine.match.model import Candidate
from ruleengine.rules.model import Rule
from ruleengine.topology import is_convex

# (verdict, code, reason, cost) of one candidate
Judgement = tuple[Verdict, str, str, Cost | None]


def score_one(
    graph: Graph,
    candidate: Candidate,
    rule: Rule | None,
    target: Target,
    benefit_threshold: float | None = None,
    *,
    memo: GroupMemo | None = None,
) -> ScoredCandidate:
    """Cost and judge one candidate (verdicts in a fixed order of precedence).

    ``memo`` (one per graph and target) shares traffic and UB numbers between groups
    of identical local structure; the result is the same with or without it.
    """
    priority = rule.priority if rule else 0
    if memo is not None and memo.graph is graph and memo.target is target:
        found = memo.analyse(candidate.nodes)
    else:
        io = group_io(graph, candidate.nodes)
        found = (io, traffic(graph, io), None, None)
    io = found[0]
    details: dict[str, object] = {
        "inputs": io.inputs,
        "outputs": io.outputs,
        "intermediates": io.intermediates,
    }
    verdict, code, reason, cost = _judge(
        graph, candidate, rule, target, benefit_threshold, found, details
    )
    return ScoredCandidate(
        candidate, priority, verdict, reason, code, cost, MappingProxyType(dict(details))
    )


def _judge(
    graph: Graph,
    candidate: Candidate,
    rule: Rule | None,
    target: Target,
    benefit_threshold: float | None,
    found: Analysis,
    details: dict[str, object],
) -> Judgement:
    """The checks in order: static sizes, convexity, kernel inputs, the rule's
    constraints, UB fit, then the benefit. ``details`` gains what each check learns."""
    io, tr, ub_known, extra = found
    if tr.unknown:
        reason = dynamic_reason(graph, tr.unknown)
        return Verdict.DYNAMIC_SHAPE, "dynamic-shape", reason, None
    ub = ub_known if ub_known is not None else ub_need(graph, io, target)
    cost = extra[0] if extra is not None else compute_cost(graph, io, tr, ub, target)
    details["ub_buffers"] = ub.buffers
    details["ub_anchor"] = ub.anchor
    if not is_convex(graph, candidate.nodes):
        reason = "a path leaves the group and re-enters it; fusing it would create a cycle"
        return Verdict.NOT_CONVEX, "not-convex", reason, cost
    inputs = extra[1] if extra is not None else kernel_inputs(graph, io)
    details["kernel_inputs"] = inputs
    if len(inputs) > target.max_fused_inputs:
        reason = (
            f"{len(inputs)} external inputs > max_fused_inputs "
            f"{target.max_fused_inputs} of {target.name}"
        )
        return Verdict.TOO_MANY_INPUTS, "too-many-inputs", reason, cost
    ctx = Context(graph, io, target, ub, candidate.bindings)
    failure, notes = evaluate(ctx, rule.constraints if rule else ())
    if notes:
        details["notes"] = tuple(notes)
    if failure is not None:
        return Verdict.CONSTRAINT_FAILED, failure.code, failure.reason, cost
    if not ub.fits:
        return Verdict.UB_OVERFLOW, "ub-overflow", ub_reason(ub), cost
    threshold = (
        benefit_threshold
        if benefit_threshold is not None
        else (rule.benefit_threshold if rule else 0.0)
    )
    return _benefit(cost, threshold)


def _benefit(cost: Cost, threshold: float) -> Judgement:
    """Whether fusing pays: any saving, a saving above the overhead, a relative gain of
    at least the rule's (or the caller's) ``benefit_threshold``."""
    if cost.bytes_saved <= 0:
        reason = (
            "fusing removes no HBM traffic (no intermediate tensor stays on chip; "
            "view ops move no data)"
        )
        return Verdict.NO_BENEFIT, "no-benefit", reason, cost
    if cost.net_bytes <= 0:
        reason = (
            f"overhead {human_bytes(cost.overhead_bytes)} >= saving {human_bytes(cost.bytes_saved)}"
        )
        return Verdict.LOW_BENEFIT, "overhead-exceeds-saving", reason, cost
    if cost.relative_gain < threshold:
        reason = (
            f"net gain {cost.relative_gain:.1%} of unfused traffic is below the rule's "
            f"benefit_threshold {threshold:.0%}"
        )
        return Verdict.LOW_BENEFIT, "below-threshold", reason, cost
    reason = f"saves {human_bytes(cost.net_bytes)} net ({cost.relative_gain:.0%} of its traffic)"
    return Verdict.FUSE, "fuse", reason, cost
