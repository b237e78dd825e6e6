"""Discover rule tests beside the rules and run each against its own rule file.

``run_tests(paths)`` takes rule files, folders of rules, ``<rule>.tests/`` folders or
single test files. Every rule file is loaded on its own (as ``verify`` would); a rule file
that does not load fails, naming it. Each test graph is matched with that rule file's rules
only, and its expectations are compared with the candidates found.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Diagnostic, Location, Severity, display_path
from ruleengine.errors import AutofusionError, UsageError
from ruleengine.ruletest.model import RuleFileResult, Status, TestOutcome, TestRun
from ruleengine.ruletest.spec import (
    TEST_SUFFIX,
    TESTS_DIR_SUFFIX,
    Expectations,
    build_model,
    parse_expectations,
    rewrite_expectations,
)

if TYPE_CHECKING:
    from ruleengine.rules.model import RuleSet

RULE_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class _Target:
    rule_file: Path
    tests_dir: Path
    only: tuple[Path, ...] | None  # None: every test in tests_dir


def tests_dir_of(rule_file: Path) -> Path:
    """``rules/x/my_rule.yaml`` -> ``rules/x/my_rule.tests``."""
    return rule_file.with_name(rule_file.stem + TESTS_DIR_SUFFIX)


def _rule_file_of(tests_dir: Path) -> Path:
    stem = tests_dir.name[: -len(TESTS_DIR_SUFFIX)]
    for suffix in RULE_SUFFIXES:
        candidate = tests_dir.with_name(stem + suffix)
        if candidate.is_file():
            return candidate
    return tests_dir.with_name(stem + RULE_SUFFIXES[0])  # missing: reported as an orphan


def _in_tests_dir(p: Path) -> bool:
    return any(part.endswith(TESTS_DIR_SUFFIX) for part in p.parts[:-1])


def discover(paths: Sequence[str | Path]) -> list[_Target]:
    """What to run for each command-line path; raises ``UsageError`` for a path that
    names nothing to test."""
    targets: dict[str, _Target] = {}
    missing: list[Diagnostic] = []

    def add(rule_file: Path, only: Path | None = None) -> None:
        key = os.path.normcase(os.path.abspath(rule_file))
        old = targets.get(key)
        if only is None or (old is not None and old.only is None):
            targets[key] = _Target(rule_file, tests_dir_of(rule_file), None)
        else:
            before = old.only if old is not None and old.only is not None else ()
            targets[key] = _Target(rule_file, tests_dir_of(rule_file), (*before, only))

    for raw in paths:
        p = Path(raw)
        if p.is_dir() and p.name.endswith(TESTS_DIR_SUFFIX):
            add(_rule_file_of(p))
        elif p.is_dir():
            found = sorted(
                (
                    q
                    for q in p.rglob("*")
                    if q.suffix in RULE_SUFFIXES and q.is_file() and not _in_tests_dir(q)
                ),
                key=lambda q: q.as_posix(),
            )
            dirs = sorted(
                (d for d in p.rglob("*" + TESTS_DIR_SUFFIX) if d.is_dir()),
                key=lambda q: q.as_posix(),
            )
            for q in found:
                add(q)
            for d in dirs:  # tests whose rule file is gone are reported, not skipped
                add(_rule_file_of(d))
            if not found and not dirs:
                missing.append(_not_found(str(raw), f"no rule files in directory {raw}"))
        elif p.is_file() and p.suffix in RULE_SUFFIXES:
            add(p)
        elif p.is_file() and p.suffix == TEST_SUFFIX and p.parent.name.endswith(TESTS_DIR_SUFFIX):
            add(_rule_file_of(p.parent), p)
        elif p.exists():
            missing.append(
                _not_found(
                    str(raw),
                    f"{raw} is neither a rule file (*.yaml), a folder, a <rule>.tests "
                    f"folder nor a test (<rule>.tests/*{TEST_SUFFIX})",
                )
            )
        else:
            missing.append(_not_found(str(raw), f"no such file or directory: {raw}"))
    if missing:
        raise UsageError(
            "nothing to test at: " + ", ".join(d.location.file for d in missing if d.location),
            tuple(missing),
        )
    return sorted(targets.values(), key=lambda t: t.rule_file.as_posix())


def _not_found(where: str, message: str) -> Diagnostic:
    return codes.make(
        "path-not-found",
        message,
        Location(where),
        hint="pass rule files, folders of rules, <rule>.tests folders or test files",
    )


def run_tests(paths: Sequence[str | Path], *, update: bool = False) -> TestRun:
    """Run every rule test under ``paths``; with ``update`` rewrite the expectations of
    each test that does not pass to what matches now (files written atomically)."""
    if not paths:
        raise UsageError("no paths given: pass rule files or folders (e.g. rules/)")
    results: list[RuleFileResult] = []
    updated: list[str] = []
    for target in discover(paths):
        result, rewrites = _run_rule_file(target, update)
        results.append(result)
        for path, text in rewrites:
            _write_atomic(path, text)
            updated.append(display_path(path))
    return TestRun(tuple(results), tuple(updated))


def _test_files(target: _Target) -> list[Path]:
    if target.only is not None:
        return sorted(set(target.only), key=lambda q: q.as_posix())
    if not target.tests_dir.is_dir():
        return []
    return sorted(
        (q for q in target.tests_dir.rglob("*" + TEST_SUFFIX) if q.is_file()),
        key=lambda q: q.as_posix(),
    )


def _run_rule_file(target: _Target, update: bool) -> tuple[RuleFileResult, list[tuple[Path, str]]]:
    from ruleengine.rules import load_rule_set

    shown = display_path(target.rule_file)
    tests = _test_files(target)
    tests_dir = display_path(target.tests_dir)
    if not target.rule_file.is_file():
        diag = codes.make(
            "rule-test-orphan",
            f"tests for a rule file that does not exist: {shown}",
            Location(tests_dir),
            hint=f"rename the folder after its rule file (<rule>{TESTS_DIR_SUFFIX} beside "
            "<rule>.yaml) or delete it",
        )
        return RuleFileResult(shown, (), tests_dir, (), (diag,)), []
    try:
        rule_set = load_rule_set([target.rule_file])
    except AutofusionError as exc:
        errors = tuple(d for d in exc.diagnostics if d.severity is Severity.ERROR)
        return RuleFileResult(shown, (), tests_dir, (), errors or exc.diagnostics), []
    names = tuple(r.name for r in rule_set.rules)
    outcomes: list[TestOutcome] = []
    rewrites: list[tuple[Path, str]] = []
    for test in tests:
        outcome, new_text = _run_one(test, rule_set, names, update)
        outcomes.append(outcome)
        if new_text is not None:
            rewrites.append((test, new_text))
    return RuleFileResult(shown, names, tests_dir, tuple(outcomes)), rewrites


def _error(where: str, rules: tuple[str, ...], diags: Sequence[Diagnostic]) -> TestOutcome:
    messages = tuple(f"{d.location}: {d.code} {d.message}" for d in diags)
    return TestOutcome(where, rules, Status.ERROR, messages=messages, diagnostics=tuple(diags))


def _fmt(nodes: Sequence[str]) -> str:
    return ",".join(nodes)


def _run_one(
    test: Path, rule_set: RuleSet, names: tuple[str, ...], update: bool
) -> tuple[TestOutcome, str | None]:
    from ruleengine.graph.loader import graph_from_model
    from ruleengine.match import find_candidates

    where = display_path(test)
    try:
        text = test.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        diag = codes.make(
            "rule-test-syntax",
            f"cannot read the test: {exc}",
            Location(where),
            hint="a rule test is a UTF-8 text file in the ONNX text format",
        )
        return _error(where, names, [diag]), None
    exp, diags = parse_expectations(text, where)
    unknown = [r for r in exp.rules if r not in names]
    if unknown:
        diags.append(
            codes.make(
                "rule-test-directive",
                f"'# rule:' names {', '.join(unknown)}, not a rule of this file "
                f"(its rules: {', '.join(names) or 'none'})",
                Location(where, 1, 1),
                hint="name a rule of the rule file the test folder belongs to",
            )
        )
    if diags and not (update and _only_missing_expectation(diags)):
        return _error(where, names, diags), None
    under_test = exp.rules or names
    try:
        model = build_model(text, where)
        graph = graph_from_model(model, where=where)
    except ValueError as exc:
        diag = exc.args[1] if len(exc.args) > 1 else None
        if not isinstance(diag, Diagnostic):
            raise
        return _error(where, under_test, [diag]), None
    except AutofusionError as exc:
        found_diags = exc.diagnostics or (
            codes.make("rule-test-syntax", exc.message, Location(where)),
        )
        return _error(where, under_test, found_diags), None
    result = find_candidates(graph, rule_set)
    found = tuple(c.nodes for c in result.candidates if c.rule in under_test)
    near = tuple(sorted({nm.code for nm in result.near_misses if nm.candidate.rule in under_test}))
    outcome = _compare(where, under_test, exp, found, near)
    new_text = None
    stale = outcome.status is Status.FAIL or not exp.states_anything
    if update and stale and not exp.todo_no_match:
        todo = {frozenset(t) for t in exp.todo_match}
        keep = tuple(f for f in found if frozenset(f) not in todo)
        new_near = near if (outcome.near_miss_missing or (not keep and near)) else None
        new_text = rewrite_expectations(text, keep, new_near)
    return outcome, new_text


def _only_missing_expectation(diags: Sequence[Diagnostic]) -> bool:
    return all(d.name == "rule-test-no-expectation" for d in diags)


def _compare(
    where: str,
    rules: tuple[str, ...],
    exp: Expectations,
    found: tuple[tuple[str, ...], ...],
    near: tuple[str, ...],
) -> TestOutcome:
    found_sets = {frozenset(f): f for f in found}
    expected = {frozenset(e): e for e in exp.match}
    todo = {frozenset(t): t for t in exp.todo_match}
    missing = tuple(e for k, e in expected.items() if k not in found_sets)
    unexpected = tuple(f for k, f in found_sets.items() if k not in expected and k not in todo)
    todo_pending = tuple(t for k, t in todo.items() if k not in found_sets)
    todo_done = tuple(t for k, t in todo.items() if k in found_sets)
    spelt, old = _canonical_codes(exp.near_miss, where)
    near_missing = tuple(c for c in spelt if c not in near)
    who = ", ".join(rules)
    messages: list[str] = []
    if exp.todo_no_match and not exp.match:
        # the rule should find nothing here but does, for now: report, never fail
        todo_pending += unexpected
        unexpected = ()
    for e in missing:
        messages.append(f"{who}: expected match {_fmt(e)} not found")
    for f in unexpected:
        messages.append(f"{who}: unexpected match {_fmt(f)}")
    for c in near_missing:
        got = ", ".join(near) or "none"
        messages.append(f"{who}: expected near miss {c} not recorded (recorded: {got})")
    if missing or unexpected or near_missing:
        status = Status.FAIL
    elif todo_pending:
        status = Status.TODO
    else:
        status = Status.PASS
    notes = [f"{who}: todo {_fmt(t)} still pending" for t in todo_pending]
    notes += [f"{who}: todo-match {_fmt(t)} matches now: make it a match line" for t in todo_done]
    return TestOutcome(
        test_file=where,
        rules=rules,
        status=status,
        expected=tuple(expected.values()),
        found=found,
        missing=missing,
        unexpected=unexpected,
        todo_pending=todo_pending,
        todo_done=todo_done,
        near_miss_missing=near_missing,
        near_misses=near,
        messages=tuple(messages + notes),
        diagnostics=old,
    )


def _canonical_codes(
    written: Sequence[str], where: str
) -> tuple[tuple[str, ...], tuple[Diagnostic, ...]]:
    """Near-miss codes in their one spelling (kebab-case, as ``match --near-misses``,
    explain, plan.json's ``code`` and docs/codes.md write them); the old snake_case
    spelling (a verdict's, e.g. ``intermediate_escapes``) is still read, with AF605."""
    spelt, old = [], []
    for code in written:
        canon = code.replace("_", "-")
        spelt.append(canon)
        if canon != code:
            old.append(
                codes.make(
                    "rule-test-old-spelling",
                    f"near-miss code '{code}' is spelt with underscores (deprecated); "
                    f"the code is '{canon}'",
                    Location(where),
                    hint=f"write '# near-miss: {canon}'",
                )
            )
    return tuple(spelt), tuple(old)


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
