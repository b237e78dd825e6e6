"""The pipeline run again with drafted rules beside the given ones.

Every figure suggest reports after drafting is the real pipeline's (``analyze``) on the
rules as written; the pruning also scores one rule's candidates alone."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ruleengine.suggest.model import DraftRule, ModelBaseline, Progress

if TYPE_CHECKING:
    from ruleengine.cost.model import ScoredCandidate
    from ruleengine.pipeline import Analysis

TEMP_PREFIX = "autofusion-suggest-"


@dataclass(frozen=True)
class Given:
    """What suggest drafts beside: the rules in use, and the preset, target and bound
    dims every analysis it runs is run with."""

    rules: Sequence[str | Path]
    preset: str | None = None
    target: str = "ascend910b"
    dims: Mapping[str, int] | None = None

    def analyze(self, path: str | Path, rules: Sequence[str | Path] | None = None) -> Analysis:
        """``path`` analysed with ``rules`` (the given ones unless named)."""
        from ruleengine.pipeline import analyze

        rules = self.rules if rules is None else rules
        return analyze(path, rules, preset=self.preset, target=self.target, dims=self.dims)


def write_drafts(folder: str | Path, drafts: Iterable[DraftRule]) -> None:
    """Write each drafted rule as ``<name>.yaml`` into ``folder``."""
    for d in drafts:
        (Path(folder) / f"{d.name}.yaml").write_text(d.text, encoding="utf-8")


def analysis_with_drafts(path: str | Path, drafts: Sequence[DraftRule], given: Given) -> Analysis:
    """The analysis of ``path`` with the drafted rules beside the given ones."""
    with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX) as tmp:
        write_drafts(tmp, drafts)
        extra = [tmp] if drafts else []
        return given.analyze(path, [*given.rules, *extra])


def covered(analysis: Analysis) -> float:
    """The share of fusable bytes the analysis's chosen groups capture."""
    from ruleengine import coverage

    chosen = analysis.resolution.chosen
    return coverage.measure(analysis.graph, [sc.candidate.nodes for sc in chosen]).coverage


def analyses_with(
    baseline: Sequence[ModelBaseline], drafts: Sequence[DraftRule], given: Given, note: Progress
) -> list[Analysis]:
    """Every model of ``baseline`` analysed with the drafted rules beside the given ones."""
    out = []
    with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX) as tmp:
        write_drafts(tmp, drafts)
        extra = [tmp] if drafts else []
        for path, name, *_ in baseline:
            note(f"measuring {name} with the suggested rules")
            out.append(given.analyze(path, [*given.rules, *extra]))
    return out


def scored_rule(name: str, text: str, analysis: Analysis) -> list[ScoredCandidate]:
    """The scored candidates of one rule (YAML ``text``) on an analysis's graph."""
    from ruleengine.cost import score_candidates
    from ruleengine.match.parallel import find_candidates_parallel
    from ruleengine.rules.lint import load_rule_set

    with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX) as tmp:
        (Path(tmp) / f"{name}.yaml").write_text(text, encoding="utf-8")
        rule_set = load_rule_set([tmp])
    match = find_candidates_parallel(analysis.graph, rule_set, 1)
    return list(score_candidates(analysis.graph, match, rule_set, analysis.target))
