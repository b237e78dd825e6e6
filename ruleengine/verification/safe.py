"""Safe mode's rounds: what each verification dropped, and the warning that says so.

``pipeline.fuse`` with ``--safe`` verifies the plan, drops the groups that fail, and asks
the solver again without their candidates (``resolve(..., exclude=...)``, on the same
scored records), so that overlapping candidates of other rules can take their place;
then it verifies again, until nothing fails or ``SAFE_ROUNDS`` rounds have run. This
module turns each round's outcome into a ``SafeRound`` record, folds the rounds into
the final ``Verification`` and words the stderr warning (AF525).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from ruleengine.diagnostics.codes import make
from ruleengine.diagnostics.model import Diagnostic
from ruleengine.rewrite.model import DroppedGroup, Plan, SafeRound, Verification
from ruleengine.verification.model import VerifyOutcome

SAFE_ROUNDS = 8  # verify-drop-solve rounds at most (FuseOptions.safe_rounds)


def safe_round(outcome: VerifyOutcome, number: int, net_bytes: int, next_step: str) -> SafeRound:
    """The record of one round: the groups ``outcome`` dropped, each with its reason."""
    v = outcome.verification
    errors = {c.group: c.error for c in v.groups if c.status == "failed" and c.error}
    how = v.found_by or "verification"
    dropped = tuple(
        DroppedGroup(
            g.id,
            g.rule,
            g.target_op,
            tuple(g.nodes),
            f"failed its {outcome.found.get(g.id, how)}"
            + (f": {errors[g.id]}" if g.id in errors else ""),
            outcome.found.get(g.id, how),
        )
        for g in sorted(outcome.dropped, key=lambda g: g.id)
    )
    groups = len(outcome.groups) + len(outcome.dropped)
    return SafeRound(number, groups, net_bytes, dropped, v.found_by, v.runs, next_step)


def with_rounds(verification: Verification, rounds: Sequence[SafeRound]) -> Verification:
    """The last round's verification, with every round listed: ``dropped_groups`` are
    all the groups dropped (each numbered as in its round), ``found_by`` every way they
    were found, ``runs`` the onnxruntime runs of all rounds."""
    if len(rounds) <= 1 and not any(r.next == "round limit" for r in rounds):
        return replace(verification, rounds=tuple(rounds))
    ways = [r.found_by for r in rounds if r.found_by]
    found: list[str] = []
    for way in ways:
        for part in way.split(" + "):
            if part not in found:
                found.append(part)
    return replace(
        verification,
        rounds=tuple(rounds),
        dropped_groups=tuple(d.group for r in rounds for d in r.dropped),
        found_by=" + ".join(found) or None,
        runs=sum(r.runs for r in rounds),
    )


def safe_warnings(plan: Plan) -> tuple[Diagnostic, ...]:
    """AF525: what ``--safe`` dropped, per rule and kernel, and the plan it ended with."""
    v = plan.verification
    if v is None or not v.rounds or not any(r.dropped for r in v.rounds):
        return ()
    per: Counter[tuple[str, str, str]] = Counter()
    for r in v.rounds:
        for d in r.dropped:
            per[d.rule, d.target_op, d.found_by or r.found_by or "verification"] += 1
    what = "; ".join(
        f"{n} group(s) of rule {rule} (kernel {op} failed its {how})"
        for (rule, op, how), n in sorted(per.items())
    )
    last = v.rounds[-1]
    solves = sum(r.next == "re-solved" for r in v.rounds)
    if last.next == "round limit":
        then = f"stopped at the limit of {len(v.rounds)} round(s) with failures still dropped"
    elif solves:
        then = f"re-solved {solves} time(s) without them"
    else:
        then = "re-solved: no other candidate takes their place"
    share = plan.bytes_saved / plan.hbm_bytes_before if plan.hbm_bytes_before else 0.0
    message = f"--safe dropped {what}; {then}, HBM saving {share:.1%}"
    hint = "see Verification in report.txt; fix the kernel or the rule, or --disable the rule"
    return (make("safe-mode-dropped", message, hint=hint),)
