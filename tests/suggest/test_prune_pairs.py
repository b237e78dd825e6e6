"""The pruning's pair step (``pruning.prune``): where no single change raises coverage,
two drafted rules whose generalized matches tile a stretch of layers between them are
left out together. On regnety-narrow.ts-keepbn, with the 50 rules suggest drafted there
before the step existed (tests/data/suggest/regnety_keepbn_drafts/), each of the two
alone lowers coverage when left out, and both together raise it to the model's proven
ceiling: measured by the real selection stage and again by the whole pipeline."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from ruleengine import coverage
from ruleengine.pipeline import analyze
from ruleengine.resolve import resolve
from ruleengine.suggest.model import Cluster, DraftRule
from ruleengine.suggest.pruning import prune, without_rules

HERE = Path(__file__).resolve().parent
MODEL = HERE.parents[1] / ".." / "shared" / "models" / "families" / "regnety-narrow.ts-keepbn.onnx"
DRAFTS = HERE.parent / "data" / "suggest" / "regnety_keepbn_drafts"
PAIR = (
    "suggested_relu_reducemean_conv_add_10ops",
    "suggested_conv_batchnormalization_relu_conv_8ops_2",
)
CEILING = 0.8683  # the model's proven ceiling (bench/results/suggest.txt), to 0.01%


def _draft(name: str) -> DraftRule:
    """The drafted rule, its cluster without regions: every group it has chosen is one
    it was not drafted for (a stray), so the pair step considers it."""
    text = (DRAFTS / f"{name}.yaml").read_text(encoding="utf-8")
    return DraftRule(name, text, Cluster((name,), ()), yaml.safe_load(text)["priority"])


def _coverage(analysis, scored) -> float:
    chosen = resolve(analysis.graph, scored).chosen
    return coverage.measure(analysis.graph, [sc.candidate.nodes for sc in chosen]).coverage


def test_two_rules_each_needed_alone_are_left_out_together(tmp_path):
    analysis = analyze(MODEL, [DRAFTS], preset="all")
    with_both = coverage.measure(
        analysis.graph, [sc.candidate.nodes for sc in analysis.resolution.chosen]
    ).coverage
    assert round(with_both, 4) == 0.8670
    for name in PAIR:  # each alone: leaving it out lowers coverage (no single change)
        assert _coverage(analysis, without_rules(analysis.scored, frozenset({name}))) < with_both

    kept, dropped = prune([_draft(n) for n in PAIR], [analysis], [MODEL.name])

    assert kept == []
    assert sorted(name for name, _ in dropped) == sorted(PAIR)
    for name, why in dropped:
        other = next(n for n in PAIR if n != name)
        assert f"lowers coverage with {other}" in why
    # the whole pipeline without the two reaches the ceiling
    rules = tmp_path / "rules"
    shutil.copytree(DRAFTS, rules, ignore=shutil.ignore_patterns(*(f"{n}.yaml" for n in PAIR)))
    after = analyze(MODEL, [rules], preset="all")
    groups = [sc.candidate.nodes for sc in after.resolution.chosen]
    assert round(coverage.measure(after.graph, groups).coverage, 4) == CEILING
