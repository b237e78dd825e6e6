"""The pipeline run again with drafted rules beside the given ones.

Every figure suggest reports after drafting is the real pipeline's (``analyze``) on the
rules as written; the pruning also scores one rule's candidates alone."""

from __future__ import annotations

import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ruleengine.suggest.model import DraftRule, ModelBaseline, Progress

if TYPE_CHECKING:
    from ruleengine.cost.model import ScoredCandidate
    from ruleengine.pipeline import Analysis

TEMP_PREFIX = "autofusion-suggest-"

# Analyses with drafts kept for reuse within one suggest run (``held_analyses``): the
# pipeline is deterministic (its solves bounded by deterministic time), and the rounds
# measure the same drafts again (the smaller forms and the carrying over start from the
# drafts the last measure ran with). The most recent HELD_ANALYSES are kept.
HELD_ANALYSES = 4
_HELD: ContextVar[OrderedDict | None] = ContextVar("suggest_analyses", default=None)


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


@contextmanager
def held_analyses() -> Iterator[None]:
    """Within it, ``analyses_with`` and ``analysis_with_drafts`` reuse an analysis of the
    same model file with the same drafts and given rules (the most recent
    ``HELD_ANALYSES``)."""
    token = _HELD.set(OrderedDict())
    try:
        yield
    finally:
        _HELD.reset(token)


def _held_key(path: str | Path, drafts: Sequence[DraftRule], given: Given) -> tuple:
    """What an analysis with drafts depends on: the model file (as it is now), the given
    rules, preset, target and dims, and the drafts' names and texts."""
    st = os.stat(path)
    return (
        str(path),
        st.st_mtime_ns,
        st.st_size,
        tuple(map(str, given.rules)),
        given.preset,
        given.target,
        tuple(sorted((given.dims or {}).items())),
        tuple((d.name, d.text) for d in drafts),
    )


def _analyze_held(
    path: str | Path, drafts: Sequence[DraftRule], given: Given, folder: Callable[[], str]
) -> Analysis:
    """``path`` analysed with the drafts (written into ``folder()``), held for reuse."""
    held = _HELD.get()
    key = _held_key(path, drafts, given) if held is not None else None
    if held is not None and key in held:
        held.move_to_end(key)
        return held[key]
    extra = [folder()] if drafts else []
    analysis = given.analyze(path, [*given.rules, *extra])
    if held is not None:
        held[key] = analysis
        while len(held) > HELD_ANALYSES:
            held.popitem(last=False)
    return analysis


class _Drafts:
    """A temporary folder with the drafts written, made on first use."""

    def __init__(self, drafts: Iterable[DraftRule]) -> None:
        self.drafts = drafts
        self.tmp: tempfile.TemporaryDirectory | None = None

    def __call__(self) -> str:
        if self.tmp is None:
            self.tmp = tempfile.TemporaryDirectory(prefix=TEMP_PREFIX)
            write_drafts(self.tmp.name, self.drafts)
        return self.tmp.name

    def __enter__(self) -> _Drafts:
        return self

    def __exit__(self, *_: object) -> None:
        if self.tmp is not None:
            self.tmp.cleanup()


def analysis_with_drafts(path: str | Path, drafts: Sequence[DraftRule], given: Given) -> Analysis:
    """The analysis of ``path`` with the drafted rules beside the given ones."""
    with _Drafts(drafts) as folder:
        return _analyze_held(path, drafts, given, folder)


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
    with _Drafts(drafts) as folder:
        for path, name, *_ in baseline:
            note(f"measuring {name} with the suggested rules")
            out.append(_analyze_held(path, drafts, given, folder))
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
