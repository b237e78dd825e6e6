"""The rounds of ``suggest``: a first drafting, then further rounds where the rules
written reach less than their drafting simulated, then the other-spelling checks.

A drafted rule matches its structure elsewhere too, and the selection tiles the model
with those groups: the rules written can reach less than the drafting partition's
simulated selection. Each further round drafts again (with the wider pool's first
drafts, with the drafted rules in use, with twins offered, smaller forms) and keeps what
it drafts only where coverage rises, or where it lowers no model's (carried over)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ruleengine.errors import UsageError
from ruleengine.suggest.analyses import (
    DraftPaths,
    Given,
    analyses_with,
    draft_files,
    held_analyses,
    scored_rule,
)
from ruleengine.suggest.beside import processes
from ruleengine.suggest.draft_tests import distinct, with_kernel, with_tests
from ruleengine.suggest.drafting import (
    WIDER_USED,
    alternatives_for,
    draft_rules,
    instance_of,
    ranked_clusters,
)
from ruleengine.suggest.measuring import measure_after
from ruleengine.suggest.model import (
    DraftRule,
    Instance,
    ModelBaseline,
    ModelCoverage,
    Progress,
    Suggestion,
)
from ruleengine.suggest.solves import cached_solves
from ruleengine.suggest.spelled_checks import spelled_checks

if TYPE_CHECKING:
    from ruleengine.graph.model import Graph
    from ruleengine.pipeline import Analysis

# Rounds of drafting again where the rules written reach less than the drafting
# partition's simulated selection (a drafted rule matches its structure elsewhere too and
# the selection tiles the model with those groups): the regions left once the rules
# written are in use are drafted too, and kept where coverage rises.
REDRAFT_ROUNDS = 2
REDRAFT_GAP = 0.0005  # coverage below reach by more than this (figures print to 0.1%)

# A drafted rule's match elsewhere that is no kernel for one of these reasons has a
# smaller form drafted too (``smaller_round``).
TRIMMED_VERDICTS = frozenset({"INTERMEDIATE_ESCAPES", "NOT_CONVEX"})

# Every selection stage suggest runs (``pipeline.analyze``'s and the pruning's own
# ``resolve``) stops its CP-SAT solves on this much deterministic time in all, as the
# partition solves do (``partition.SOLVE_SECONDS``): the drafts and figures must not
# depend on the machine's load (a wall limit cut short a solve of bart-tiny.ts run at a
# small share of a loaded machine: 90.25% and 26 rules against 90.23% and 24).
RESOLVE_SECONDS = 30.0

Dropped = list[tuple[str, str]]
# what a round that changes the drafts returns: (drafts, report, dropped)
Carried = tuple[list[DraftRule], tuple[ModelCoverage, ...], Dropped]


def suggest(
    models: Sequence[str | Path],
    rules: Sequence[str | Path] = (),
    *,
    preset: str | None = None,
    target: str = "ascend910b",
    dims: Mapping[str, int] | None = None,
    min_bytes: int = 0,
    max_rules: int | None = None,
    progress: Progress | None = None,
    jobs: int | None = None,
) -> Suggestion:
    """Draft rules for what the given rules leave unfused in ``models`` and measure them.

    Deterministic: every solve is bounded by CP-SAT's deterministic time, not wall time
    (``RESOLVE_SECONDS``, ``partition.SOLVE_SECONDS``); a problem met again is not
    solved again (``solves.cached_solves``), a model measured again with the same drafts
    not analysed again (``analyses.held_analyses``), a rule matched on a model once
    (``match.kept.kept_matches``) and loaded from one file per text
    (``analyses.draft_files``). ``jobs``: the processes it may use (default: the cores;
    the same result for any number, ``beside``)."""
    from ruleengine.match.kept import kept_matches
    from ruleengine.pipeline import DEFAULT_PRESET
    from ruleengine.resolve import deterministic_budget

    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise UsageError(f"jobs {jobs!r}: the number of processes is a positive integer")
    if not rules and preset is None:
        preset = DEFAULT_PRESET
    given = Given(rules, preset, target, dims)
    with (
        processes(jobs),
        deterministic_budget(RESOLVE_SECONDS),
        cached_solves(),
        held_analyses(),
        kept_matches(),
        draft_files(),
    ):
        return _suggest(models, given, min_bytes, max_rules, progress or _quiet)


@dataclass
class _State:
    """What the rounds have reached: carried from one round to the next."""

    baseline: list[ModelBaseline]
    drafts: list[DraftRule]
    dropped: Dropped
    report: tuple[ModelCoverage, ...]
    graphs: dict[str, Graph]


def _quiet(_message: str) -> None:
    """No progress reported."""


def _suggest(
    models: Sequence[str | Path],
    given: Given,
    min_bytes: int,
    max_rules: int | None,
    note: Progress,
) -> Suggestion:
    """The first drafting and its measure; the further rounds (without --max-rules);
    the other-spelling checks."""
    memo: dict = {}  # the first drafting's analyses and searches, for the twin round
    baseline, drafts, dropped, graphs = draft_rules(
        models, given, min_bytes, max_rules, note, memo=memo
    )
    drafts, pruned, report = measure_after(baseline, drafts, given, note, graphs)
    state = _State(baseline, drafts, [*dropped, *pruned], report, graphs)
    if max_rules is None:
        _further_rounds(state, models, given, min_bytes, note, memo)
    drafts, report = spelled_checks(models, state.report, state.drafts, given, note)
    return Suggestion(tuple(drafts), tuple(state.dropped), report, given.target)


def _further_rounds(
    state: _State,
    models: Sequence[str | Path],
    given: Given,
    min_bytes: int,
    note: Progress,
    memo: dict,
) -> None:
    """The wider pool's first drafts, drafting again per model, twins, smaller forms."""
    s = state
    if s.drafts and memo.get(WIDER_USED):
        first = first_pool_round(
            models, s.baseline, s.drafts, s.report, given, min_bytes, note, memo
        )
        if first is not None:
            s.drafts, s.report, more_dropped = first
            s.dropped += more_dropped
    _redraft_rounds(s, models, given, min_bytes, note)
    if s.drafts and any(m.after + REDRAFT_GAP < m.reach for m in s.report):
        twin = twin_round(models, s.baseline, s.drafts, s.report, given, min_bytes, note, memo)
        if twin is not None:
            s.baseline, s.drafts, s.dropped, s.report, s.graphs = twin
    if s.drafts:
        smaller = smaller_round(s.baseline, s.drafts, s.report, given, note, s.graphs)
        if smaller is not None:
            s.drafts, s.report, more_dropped = smaller
            s.dropped += more_dropped


def _redraft_rounds(
    state: _State, models: Sequence[str | Path], given: Given, min_bytes: int, note: Progress
) -> None:
    """Up to ``REDRAFT_ROUNDS`` rounds of ``redraft`` for each model below its reach,
    one model at a time: drafts that lower another model's coverage do not hold back
    the drafts of the rest."""
    s = state
    for _ in range(REDRAFT_ROUNDS):
        rose = False
        for k, model in enumerate(models):
            m = s.report[k]
            if not s.drafts or m.after + REDRAFT_GAP >= m.reach:
                continue
            note(f"drafting again for {m.model}: {m.after:.1%}, its drafting reached {m.reach:.1%}")
            again = redraft(
                model, m.model, s.baseline, s.drafts, s.report, given, min_bytes, note, s.graphs
            )
            if again is not None:
                s.baseline, s.graphs, s.drafts, s.report, more_dropped = again
                s.dropped += more_dropped
                rose = True
        if not rose:
            break


def first_pool_round(
    models: Sequence[str | Path],
    baseline: Sequence[ModelBaseline],
    drafts: list[DraftRule],
    report: Sequence[ModelCoverage],
    given: Given,
    min_bytes: int,
    note: Progress,
    memo: dict,
) -> Carried | None:
    """Where the wider pool was searched (``WIDER_BELOW``), also the drafts of the first
    search (``partition.MAX_POOL_SETS`` sets), carried over where they lower no model's
    coverage (``carry_over``, as the twin round carries earlier drafts): the wider
    search's drafts raise the model they are drafted from, the first search's may be the
    ones another export takes (stablelm ts -> dynamo: 87.8% with the first search's 7
    drafts, 84.7% with the wider search's 9). The new state (drafts, report, dropped),
    else None."""
    note("the first search's drafts too, where the wider pool was searched")
    drafted = {d.cluster.key for d in drafts}
    taken = {d.name for d in drafts}
    _, first, _, graphs = draft_rules(
        models, given, min_bytes, None, note, memo=memo, narrow=True, taken=taken
    )
    extra = [d for d in first if d.cluster.key not in drafted]
    both, alike = distinct([*drafts, *extra], given)
    more = both[len(drafts) :]
    if len(both) < len(drafts) or not more:
        return None
    why = "a draft of the first search not carried over: it lowers coverage"
    out = carried_round(baseline, drafts, more, report, given, note, graphs, why)
    return None if out is None else (out[0], out[1], [*alike, *out[2]])


def smaller_round(
    baseline: Sequence[ModelBaseline],
    drafts: list[DraftRule],
    report: Sequence[ModelCoverage],
    given: Given,
    note: Progress,
    graphs: dict[str, Graph],
) -> Carried | None:
    """Draft the largest smaller form of every drafted rule's match that is no kernel.

    A drafted rule matches its structure at other occurrences too (another layer here,
    the same layer in another export). Where such a match is not viable because an
    intermediate is read outside it (a residual sum the next layer also reads) or it
    leaves and re-enters itself (not convex), the rule gives nothing there, and the same
    end differs in the other exports of the architecture (bloom: the 11-op draft's
    residual sum escapes in the dynamo export, where an 8-op form used to fuse). So each
    such match's largest trim that the cost model fuses (``regions.largest_viable_form``)
    is drafted as a region of its own, and these drafts are carried over where they
    lower no model's coverage (``carry_over``; they may fuse nothing in the models given).
    The new state (drafts, report, dropped), else None."""
    analyses = analyses_with(baseline, drafts, given, note)
    clusters, priorities = _smaller_clusters(baseline, analyses, drafts, note)
    if not clusters:
        return None
    taken = set(priorities) | {d.name for d in drafts}
    alternatives = []
    for c in ranked_clusters(clusters):
        _, drafted = alternatives_for(c, taken, priorities, given.target, graphs)
        if drafted:
            alternatives.append(drafted)
    note("generating and running the rule tests of the smaller forms")
    more, failed = with_tests(alternatives, graphs, note)
    both, alike = distinct([*drafts, *more], given)
    more = [with_kernel(d, graphs) for d in both[len(drafts) :]]
    if len(both) < len(drafts) or not more:
        return None
    why = "a smaller form not carried over: it lowers coverage"
    out = carried_round(baseline, drafts, more, report, given, note, graphs, why, analyses)
    return None if out is None else (out[0], out[1], [*failed, *alike, *out[2]])


def _smaller_clusters(
    baseline: Sequence[ModelBaseline],
    analyses: Sequence[Analysis],
    drafts: Sequence[DraftRule],
    note: Progress,
) -> tuple[dict[tuple, list[Instance]], dict[str, int]]:
    """The smaller forms of the drafted matches that are no kernel, by structure; the
    priorities of the rules in use."""
    names = {d.name for d in drafts}
    drafted = {d.cluster.key for d in drafts}
    clusters: dict[tuple, list[Instance]] = {}
    priorities: dict[str, int] = {}
    for (_path, name, *_), analysis in zip(baseline, analyses, strict=True):
        priorities.update({r.name: r.priority for r in analysis.rule_set.rules})
        misses = {
            sc.candidate.node_set
            for sc in analysis.scored
            if sc.candidate.rule in names and sc.verdict.name in TRIMMED_VERDICTS
        }
        if not misses:
            continue
        note(f"smaller forms of {len(misses)} drafted match(es) not viable in {name}")
        _add_smaller_forms(clusters, name, analysis, misses, drafted)
    return clusters, priorities


def _add_smaller_forms(
    clusters: dict[tuple, list[Instance]],
    name: str,
    analysis: Analysis,
    misses: set[frozenset[str]],
    drafted: set[tuple],
) -> None:
    """Add each miss's largest viable form to the clusters of its structure, unless a
    drafted rule has that structure already."""
    from ruleengine import coverage
    from ruleengine.cost.scoring import GroupMemo
    from ruleengine.suggest.canon import canonicalize, composite_instances
    from ruleengine.suggest.regions import largest_viable_form

    graph = analysis.graph
    edges = coverage.fusable_edges(graph)
    composites = composite_instances(graph)
    memo = GroupMemo(graph, analysis.target)
    chosen = analysis.resolution.chosen
    seen: set[tuple[str, ...]] = set()
    for miss in sorted(misses, key=sorted):
        region = largest_viable_form(graph, miss, analysis.target, edges, {miss}, memo)
        if region is None or region.nodes in seen:
            continue
        seen.add(region.nodes)
        canon = canonicalize(graph, region.nodes, composites)
        if canon.key in drafted:
            continue
        clusters.setdefault(canon.key, []).append(instance_of(name, graph, region, canon, chosen))


def carried_round(
    baseline: Sequence[ModelBaseline],
    drafts: list[DraftRule],
    more: Sequence[DraftRule],
    report: Sequence[ModelCoverage],
    given: Given,
    note: Progress,
    graphs: dict[str, Graph],
    why: str,
    analyses: Sequence[Analysis] | None = None,
) -> Carried | None:
    """The drafts of ``more`` carried over beside ``drafts`` (``carry_over``) and the
    whole set measured again: (kept, report, dropped with ``why`` or the pruning's
    reason), or None where nothing is carried or the measured set lowers a model (a
    round that carries drafts over must never cost coverage)."""
    carried = carry_over(baseline, drafts, more, report, given, note, analyses)
    if not carried:
        return None
    kept, pruned, trial = measure_after(baseline, [*drafts, *carried], given, note, graphs)
    if any(t.after + 1e-9 < m.after for t, m in zip(trial, report, strict=True)):
        return None
    left = [(d.name, why) for d in more if d not in carried]
    return kept, trial, [*left, *pruned]


def twin_round(
    models: Sequence[str | Path],
    baseline: Sequence[ModelBaseline],
    drafts: list[DraftRule],
    report: Sequence[ModelCoverage],
    given: Given,
    min_bytes: int,
    note: Progress,
    memo: dict | None = None,
) -> tuple | None:
    """Draft again from the rules given, each drafting partition judged with every *twin*
    of its groups offered (``twins``: node sets no rule can tell apart, which a rule
    drafted from one matches too) and the most captured partition that stays picked so
    (``twins.structural_partition``) one more option. Where the rules drafted first reach
    less than their drafting simulated (``after`` < ``reach``), the selection has tiled the
    model with their groups' other occurrences, shifted (regnety: by a block in a stage);
    a partition stable under its twins is not displaced that way. Kept where the coverage
    summed over the models rises; then the first round's drafts that lower no model's
    coverage beside the new ones are carried over (they may carry to other exports).
    The new state (baseline, drafts, dropped, report, graphs), else None."""
    note("drafting again, each partition judged with the twins of its groups offered")
    again, more, dropped, graphs = draft_rules(
        models, given, min_bytes, None, note, twins=True, memo=memo
    )
    if not more:
        return None
    more, pruned, trial = measure_after(again, more, given, note, graphs)
    if sum(m.after for m in trial) <= sum(m.after for m in report) + 1e-9:
        return None
    names, texts = {d.name for d in more}, {d.text for d in more}
    extra = [d for d in drafts if d.name not in names and d.text not in texts]
    carried = carry_over(again, more, extra, trial, given, note) if extra else []
    left = [
        (d.name, "not carried over: it lowers coverage beside the drafts for twins")
        for d in extra
        if d not in carried
    ]
    if carried:
        more, pruned2, trial = measure_after(again, [*more, *carried], given, note, graphs)
        pruned += pruned2
    return again, more, [*dropped, *pruned, *left], trial, graphs


def carry_over(
    baseline: Sequence[ModelBaseline],
    drafts: Sequence[DraftRule],
    extra: Sequence[DraftRule],
    report: Sequence[ModelCoverage],
    given: Given,
    note: Progress,
    analyses: Sequence[Analysis] | None = None,
) -> list[DraftRule]:
    """The drafts of ``extra`` that, added one at a time (in rank order) beside
    ``drafts``, lower no model's coverage (the selection stage run over the scored
    candidates, as ``pruning.prune`` runs it). ``analyses``: the models' with
    ``drafts``, where already run."""
    from ruleengine import coverage
    from ruleengine.cost.duplicates import reduce_duplicates
    from ruleengine.resolve import resolve

    if analyses is None:
        analyses = analyses_with(baseline, drafts, given, note)
    edges = [coverage.fusable_edges(a.graph) for a in analyses]
    scored = [list(a.scored) for a in analyses]
    now = [m.after for m in report]
    out = []
    for d in extra:
        note(f"carrying over {d.name}?")
        more = [scored_rule(d.name, d.text, a) for a in analyses]
        trial_scored = [
            sorted(reduce_duplicates([*s, *m]), key=lambda sc: sc.candidate.key)
            for s, m in zip(scored, more, strict=True)
        ]
        trial = [
            coverage.measure(
                a.graph, [sc.candidate.nodes for sc in resolve(a.graph, ts).chosen], e
            ).coverage
            for a, ts, e in zip(analyses, trial_scored, edges, strict=True)
        ]
        if all(t + 1e-9 >= n for t, n in zip(trial, now, strict=True)):
            out.append(d)
            scored, now = trial_scored, trial
    return out


def redraft(
    model: str | Path,
    name: str,
    baseline: Sequence[ModelBaseline],
    drafts: list[DraftRule],
    report: Sequence[ModelCoverage],
    given: Given,
    min_bytes: int,
    note: Progress,
    graphs: dict[str, Graph],
) -> tuple | None:
    """Draft again for one model with the drafted rules in use; everything measured and
    pruned together. The new state (baseline, graphs, drafts, report, dropped) when the
    coverage summed over the models rises, else None."""
    with DraftPaths(drafts) as paths:
        with_drafts = replace(given, rules=[*given.rules, *paths()])
        again, more, more_dropped, more_graphs = draft_rules(
            [model], with_drafts, min_bytes, None, note, names=[name]
        )
    if not more:
        return None
    # the figures stay those of the rules given; reach: the better of the two rounds
    reach = {b.name: b.reach for b in again}
    merged = [b._replace(reach=max(b.reach, reach.get(b.name, 0.0))) for b in baseline]
    graphs = {**graphs, **more_graphs}
    kept, pruned, trial = measure_after(merged, [*drafts, *more], given, note, graphs)
    if sum(m.after for m in trial) <= sum(m.after for m in report) + 1e-9:
        return None
    return merged, graphs, kept, trial, [*more_dropped, *pruned]
