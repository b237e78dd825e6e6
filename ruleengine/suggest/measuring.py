"""Coverage after: the pipeline run again with the drafted rules, pruned where they
lower coverage."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ruleengine.suggest.analyses import Given, analyses_with
from ruleengine.suggest.model import DraftRule, ModelBaseline, ModelCoverage, Progress
from ruleengine.suggest.pruning import prune

if TYPE_CHECKING:
    from ruleengine.graph.model import Graph
    from ruleengine.pipeline import Analysis


def measure_after(
    baseline: Sequence[ModelBaseline],
    drafts: list[DraftRule],
    given: Given,
    note: Progress,
    graphs: Mapping[str, Graph] | None,
) -> tuple[list[DraftRule], list[tuple[str, str]], tuple[ModelCoverage, ...]]:
    """Run the pipeline again with the drafted rules beside the given ones; drafted rules
    that lower coverage (``pruning.prune``) are left out and the pipeline run again
    without them. Returns (drafts kept, dropped with why, per model coverage)."""
    analyses = analyses_with(baseline, drafts, given, note)
    kept, pruned = prune(drafts, analyses, [b[1] for b in baseline], graphs)
    # measured again when a rule was left out or narrowed (narrowing alone drops none:
    # the figures must be those of the rules written)
    changed = [d.text for d in kept] != [d.text for d in drafts]
    drafts = kept
    if changed:
        note("measuring again without the rules that lower coverage, or narrowed")
        analyses = analyses_with(baseline, drafts, given, note)
    suggested = {d.name for d in drafts}
    report = tuple(
        model_coverage(b, analysis, suggested)
        for b, analysis in zip(baseline, analyses, strict=True)
    )
    return drafts, pruned, report


def model_coverage(b: ModelBaseline, analysis: Analysis, suggested: set[str]) -> ModelCoverage:
    """One model's figures before (``b``) and after (``analysis``, with the drafts)."""
    from ruleengine import coverage

    _path, name, before, reach, ceilings, bound = b
    chosen = analysis.resolution.chosen
    after = coverage.measure(analysis.graph, [sc.candidate.nodes for sc in chosen])
    return ModelCoverage(
        name,
        before.fusable_bytes,
        before.coverage,
        after.coverage,
        reach,
        *ceilings,
        bound=bound,
        groups_after=len(chosen),
        suggested_groups=sum(1 for sc in chosen if sc.candidate.rule in suggested),
        unknown_edges=before.unknown_edges,
    )
