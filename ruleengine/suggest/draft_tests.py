"""Drafts kept only where their generated rule tests pass, once per pattern.

A draft that does not find its own region is no rule; a negative that matches is cut
elsewhere (``ruletests``); two drafts alike once generalized keep the better-ranked one.
The drafts kept get the kernel catalog entry of their target_op."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ruleengine.diagnostics.model import display_path
from ruleengine.suggest.analyses import TEMP_PREFIX, DraftPaths, Given
from ruleengine.suggest.fitting import lint_findings
from ruleengine.suggest.model import DraftRule, Progress

if TYPE_CHECKING:
    from ruleengine.graph.model import Graph
    from ruleengine.ruletest.model import TestOutcome


def with_tests(
    alternatives: list[list[DraftRule]],
    graphs: Mapping[str, Graph],
    note: Progress | None = None,
) -> tuple[list[DraftRule], list[tuple[str, str]]]:
    """Per cluster, the first of its drafts (most general first) whose rule tests pass,
    each test run by the rule-test runner: a draft that does not find its own region is
    no rule; a negative that matches is cut elsewhere; a draft for which no near
    structure stays unmatched gives way to a less general one (or, when none has a
    negative, the least general draft that finds its region is kept with its positive).
    Drafts with pinned attribute values (last) are only narrowings for the pruning."""
    out: list[DraftRule] = []
    failed: list[tuple[str, str]] = []
    for drafts in alternatives:
        chosen = _first_tested(drafts, graphs, note)
        if chosen is None:
            failed.append((drafts[0].name, "its generated tests do not pass"))
        else:
            after = drafts[chosen[1] + 1 :]
            out.append(replace(chosen[0], narrower=tuple((d.cluster, d.text) for d in after)))
    return out, failed


def _first_tested(
    drafts: Sequence[DraftRule], graphs: Mapping[str, Graph], note: Progress | None
) -> tuple[DraftRule, int] | None:
    """The first draft with a negative among its passing tests, else the last one whose
    positive passes; with its index. Pinned drafts end the search."""
    fallback = None
    for k, d in enumerate(drafts):
        if d.pinned:  # what the pruning may narrow a draft to, never where it starts
            break
        tested_draft = tested(d, graphs, fewer=True)
        if tested_draft is None:
            continue
        if tested_draft.text != d.text and note is not None:
            note(f"{d.name}: drafted with fewer branches (one does not find its region)")
        if len(tested_draft.tests) > 1:
            return tested_draft, k
        fallback = (tested_draft, k)
    return fallback


def distinct(
    drafts: list[DraftRule], given: Given
) -> tuple[list[DraftRule], list[tuple[str, str]]]:
    """Drafts that two clusters made alike once generalized (the set checks of `check`
    find them as AF302: the same pattern at one priority): the better-ranked one stays,
    the other is left out (the one kept matches its regions too)."""
    from ruleengine.rules.presets import preset_paths

    in_use = [*given.rules, *(preset_paths(given.preset) if given.preset else ())]
    dropped: list[tuple[str, str]] = []
    while True:
        clash = _first_clash(drafts, in_use)
        if clash is None:
            return drafts, dropped
        kept, twin = drafts[clash[0]], drafts[clash[1]]
        dropped.append((twin.name, f"the same pattern as {kept.name} once generalized"))
        drafts = [d for k, d in enumerate(drafts) if k != clash[1]]


def _first_clash(
    drafts: Sequence[DraftRule], in_use: Sequence[str | Path]
) -> tuple[int, int] | None:
    """The ranks of the first two drafts the set checks find alike (AF302), if any."""
    from ruleengine.rules.lint import lint_paths

    with DraftPaths(drafts) as paths:
        found = lint_paths([*paths(), *in_use], set_checks=True).diagnostics if drafts else ()
        rank = {display_path(f): k for k, f in enumerate(paths())}
        for diag in found:
            if diag.code != "AF302" or diag.location is None:
                continue
            files = [diag.location.file, *(r.file for r in diag.related)]
            ours = sorted(rank[f] for f in files if f in rank)
            if len(ours) >= 2:
                return ours[0], ours[-1]
    return None


def with_kernel(d: DraftRule, graphs: Mapping[str, Graph]) -> DraftRule:
    """The draft with the kernel catalog entry of its target_op."""
    from ruleengine.suggest.emit import kernel_entry

    op_types = {
        graphs[inst.model].node(n).op_type
        for inst in d.cluster.instances
        for n in inst.region.nodes
    }
    return replace(d, kernel=kernel_entry(d.text, d.cluster, op_types))


def tested(d: DraftRule, graphs: Mapping[str, Graph], fewer: bool = False) -> DraftRule | None:
    """The draft with its passing tests (positive, and a negative where one is found;
    the same per branch it writes): None where a positive fails. With ``fewer``, where
    a branch's positive fails, the same draft with fewer branches (none last) whose
    tests pass: a branch that does not find its region as its export has it costs the
    draft that branch, not its generality (the pruning keeps ``fewer`` off: it measured
    the text it asks for)."""
    region = region_tested(d, graphs)
    if region is None or region.branches == ((), ()):
        return region
    branch = branch_tested(d, graphs)
    if branch is not None:
        return replace(region, tests={**region.tests, **branch})
    for text in d.fewer_branches.get(d.text, ()) if fewer else ():
        if text != d.fewer_branches[d.text][-1] and lint_findings(text):
            continue  # a branch leaving a finding is not written (none: as before)
        other = tested(replace(d, text=text), graphs)
        if other is not None:
            return other
    return None


def branch_tested(d: DraftRule, graphs: Mapping[str, Graph]) -> dict[str, str] | None:
    """The branch tests of a draft (``ruletests.branch_tests``) that pass; None where a
    branch's positive fails: the branch does not find the region as the export it is
    written for has it. Other node sets it matches there (overlapping: a generalized
    chain one op shorter) are expected too, as in the region's positive; a negative
    that matches is left out (a near structure the branch still takes)."""
    from ruleengine.ruletest.model import Status
    from ruleengine.ruletest.run import run_tests
    from ruleengine.suggest.ruletests import branch_tests

    graph = graphs[d.cluster.instances[0].model]
    tests = branch_tests(graph, d)
    outcomes = run_draft_tests(d, tests, run_tests)
    also = {
        name: tuple(o.unexpected)
        for name, o in outcomes.items()
        if name.startswith("positive") and o.unexpected and not o.missing
    }
    if also:
        tests = branch_tests(graph, d, also)
        outcomes = run_draft_tests(d, tests, run_tests)
    passed = {k for k, o in outcomes.items() if o.status is Status.PASS}
    if any(k.startswith("positive") and k not in passed for k in tests):
        return None
    return {k: v for k, v in tests.items() if k in passed}


def region_tested(d: DraftRule, graphs: Mapping[str, Graph]) -> DraftRule | None:
    """The draft with its passing region tests (positive, and a negative where one is
    found)."""
    from ruleengine.ruletest.model import Status
    from ruleengine.ruletest.run import run_tests
    from ruleengine.suggest.ruletests import MAX_CUT_ATTEMPTS, rule_tests

    graph = graphs[d.cluster.instances[0].model]
    also: tuple = ()
    attempt = 0
    while attempt < MAX_CUT_ATTEMPTS:
        tests = rule_tests(graph, d, attempt, also)
        outcomes = run_draft_tests(d, tests, run_tests)
        positive = outcomes.get("positive_region.onnxtxt")
        if positive is None or positive.missing:
            return None  # the rule does not find its own region: no rule
        if positive.unexpected and not also:
            also = tuple(positive.unexpected)  # overlapping matches: expected too
            continue
        if positive.status is Status.PASS and all(
            o.status is Status.PASS for o in outcomes.values()
        ):
            return replace(d, tests=tests) if len(outcomes) == len(tests) else None
        attempt += 1
    # no negative stayed unmatched: the positive alone, if it passes
    tests = {k: v for k, v in rule_tests(graph, d, 0, also).items() if k.startswith("positive")}
    outcomes = run_draft_tests(d, tests, run_tests)
    ok = all(o.status is Status.PASS for o in outcomes.values()) and len(outcomes) == 1
    return replace(d, tests=tests) if ok else None


def run_draft_tests(
    d: DraftRule, tests: Mapping[str, str], run_tests: Callable
) -> dict[str, TestOutcome]:
    """Run ``tests`` of draft ``d`` with the rule-test runner: file name -> outcome."""
    with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX) as tmp:
        folder = Path(tmp)
        (folder / f"{d.name}.yaml").write_text(d.text, encoding="utf-8")
        (folder / f"{d.name}.tests").mkdir()
        for fname, text in tests.items():
            (folder / f"{d.name}.tests" / fname).write_text(text, encoding="utf-8")
        run = run_tests([folder])
    return {Path(o.test_file).name: o for o in run.outcomes}
