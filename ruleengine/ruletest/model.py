"""Records of a rule-test run: one outcome per test graph, grouped by rule file."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ruleengine.diagnostics.model import Diagnostic

NodeSet = tuple[str, ...]  # node names in the rule's op order (as a candidate lists them)


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"  # an expectation does not hold
    TODO = "todo"  # everything holds but a todo expectation is still pending
    ERROR = "error"  # the test (or its rule file) could not be read


@dataclass(frozen=True)
class TestOutcome:
    """One test graph run against the rules of its rule file."""

    __test__ = False  # not a pytest class

    test_file: str  # as displayed (relative to the working directory when under it)
    rules: tuple[str, ...]  # the rules the expectations are about
    status: Status
    expected: tuple[NodeSet, ...] = ()
    found: tuple[NodeSet, ...] = ()
    missing: tuple[NodeSet, ...] = ()  # expected, not found
    unexpected: tuple[NodeSet, ...] = ()  # found, not expected
    todo_pending: tuple[NodeSet, ...] = ()  # todo-match not matched yet
    todo_done: tuple[NodeSet, ...] = ()  # todo-match that matches now (promote it)
    near_miss_missing: tuple[str, ...] = ()  # near-miss codes the matcher did not record
    near_misses: tuple[str, ...] = ()  # near-miss codes recorded (for --update)
    messages: tuple[str, ...] = ()  # one line per problem, naming the rule
    diagnostics: tuple[Diagnostic, ...] = ()


@dataclass(frozen=True)
class RuleFileResult:
    """A rule file, whether its rules loaded, and the outcomes of its tests."""

    rule_file: str
    rules: tuple[str, ...]
    tests_dir: str
    outcomes: tuple[TestOutcome, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()  # errors that stopped the rule file loading

    @property
    def status(self) -> Status:
        if self.diagnostics:
            return Status.ERROR
        worst = (Status.ERROR, Status.FAIL, Status.TODO)
        for status in worst:
            if any(o.status is status for o in self.outcomes):
                return status
        return Status.PASS


@dataclass(frozen=True)
class TestRun:
    """Everything ``autofusion test`` found; reporters only render this."""

    __test__ = False

    files: tuple[RuleFileResult, ...]
    updated: tuple[str, ...] = ()  # test files rewritten by --update

    @property
    def outcomes(self) -> tuple[TestOutcome, ...]:
        return tuple(o for f in self.files for o in f.outcomes)

    def count(self, status: Status) -> int:
        return sum(1 for o in self.outcomes if o.status is status)

    @property
    def broken_files(self) -> tuple[RuleFileResult, ...]:
        return tuple(f for f in self.files if f.diagnostics)

    @property
    def untested(self) -> tuple[str, ...]:
        return tuple(f.rule_file for f in self.files if not f.outcomes and not f.diagnostics)

    @property
    def exit_code(self) -> int:
        """0 every test passes (todos allowed), 1 a test fails or a rule/test is broken."""
        bad = self.count(Status.FAIL) + self.count(Status.ERROR) + len(self.broken_files)
        return 1 if bad else 0
