"""The pipeline run again with drafted rules beside the given ones.

Every figure suggest reports after drafting is the real pipeline's (``analyze``) on the
rules as written; the pruning also scores one rule's candidates alone."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

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


class RuleText(NamedTuple):
    """A rule's name and YAML text: what writing a draft needs of it."""

    name: str
    text: str


def write_drafts(folder: str | Path, drafts: Iterable[DraftRule | RuleText]) -> None:
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
    path: str | Path, drafts: Sequence[DraftRule], given: Given, paths: Callable[[], list[str]]
) -> Analysis:
    """``path`` analysed with the drafts (loaded from ``paths()``), held for reuse."""
    held = _HELD.get()
    key = _held_key(path, drafts, given) if held is not None else None
    if held is not None and key in held:
        held.move_to_end(key)
        return held[key]
    extra = paths() if drafts else []
    analysis = given.analyze(path, [*given.rules, *extra])
    if held is not None:
        held[key] = analysis
        while len(held) > HELD_ANALYSES:
            held.popitem(last=False)
    return analysis


# Within one suggest run (``draft_files``) each drafted rule is written once, at a path
# that depends on its name and text only, and every analysis loads it from there: the
# file is linted once (``rules.lint`` keeps files by name and text) and gives the same
# rule, whose matches on a model ``match.kept`` keeps. A temporary folder per analysis
# made each load a new file of a new rule (keepbn: 3,304 files linted, 864 drafts
# matched alone).
_FILES: ContextVar[Path | None] = ContextVar("suggest_draft_files", default=None)


@contextmanager
def draft_files() -> Iterator[None]:
    """Within it, drafts are loaded from one file per name and text (the enclosing run's
    folder where already inside)."""
    if _FILES.get() is not None:
        yield
        return
    with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX) as tmp:
        token = _FILES.set(Path(tmp))
        try:
            yield
        finally:
            _FILES.reset(token)


def _run_file(folder: Path, name: str, text: str) -> Path:
    """The file of the rule ``name`` with ``text`` in the run's ``folder``, written once."""
    digest = hashlib.blake2b(f"{name}\0{text}".encode(), digest_size=10).hexdigest()
    path = folder / digest / f"{name}.yaml"
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return path


class DraftPaths:
    """The drafts' files, one per draft in order: within ``draft_files`` the run's,
    else in a temporary folder made on first use."""

    def __init__(self, drafts: Iterable[DraftRule | RuleText]) -> None:
        self.drafts = drafts
        self.tmp: tempfile.TemporaryDirectory | None = None

    def __call__(self) -> list[str]:
        run = _FILES.get()
        if run is not None:
            return [str(_run_file(run, d.name, d.text)) for d in self.drafts]
        if self.tmp is None:
            self.tmp = tempfile.TemporaryDirectory(prefix=TEMP_PREFIX)
            write_drafts(self.tmp.name, self.drafts)
        return [str(Path(self.tmp.name) / f"{d.name}.yaml") for d in self.drafts]

    def __enter__(self) -> DraftPaths:
        return self

    def __exit__(self, *_: object) -> None:
        if self.tmp is not None:
            self.tmp.cleanup()


def analysis_with_drafts(path: str | Path, drafts: Sequence[DraftRule], given: Given) -> Analysis:
    """The analysis of ``path`` with the drafted rules beside the given ones."""
    with DraftPaths(drafts) as paths:
        return _analyze_held(path, drafts, given, paths)


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
    with DraftPaths(drafts) as paths:
        for path, name, *_ in baseline:
            note(f"measuring {name} with the suggested rules")
            out.append(_analyze_held(path, drafts, given, paths))
    return out


def scored_rule(name: str, text: str, analysis: Analysis) -> list[ScoredCandidate]:
    """The scored candidates of one rule (YAML ``text``) on an analysis's graph."""
    from ruleengine.cost import score_candidates
    from ruleengine.match.parallel import find_candidates_parallel
    from ruleengine.rules.lint import load_rule_set

    with DraftPaths([RuleText(name, text)]) as paths:
        rule_set = load_rule_set(paths())
    match = find_candidates_parallel(analysis.graph, rule_set, 1)
    return list(score_candidates(analysis.graph, match, rule_set, analysis.target))
