"""Rule tests: small graphs kept beside the rules, with the node sets each rule must match.

A rule file ``rules/x/my_rule.yaml`` is tested by the graphs in ``rules/x/my_rule.tests/``
(ONNX text, ``*.onnxtxt``), each stating what the rule must find in it:

    # match: conv,bn,relu        one line per candidate the rule must produce (node names)
    # no-match                   the rule must find nothing here
    # todo-match: a,b            should match but does not yet: reported, never fails
    # todo-no-match              should find nothing but does yet: reported, never fails
    # near-miss: intermediate-escapes   reasons the matcher must record (why it was rejected)
    # rule: my_rule              which rule of the file the lines are about (default: all)

``run_tests`` discovers and runs them (``autofusion test``); ``update_tests`` rewrites the
expectations to what matches now, for review. The way Semgrep's ``--test`` works for code.
"""

from __future__ import annotations

from ruleengine.ruletest.model import RuleFileResult, Status, TestOutcome, TestRun
from ruleengine.ruletest.run import run_tests
from ruleengine.ruletest.spec import Expectations, parse_expectations

__all__ = [
    "Expectations",
    "RuleFileResult",
    "Status",
    "TestOutcome",
    "TestRun",
    "parse_expectations",
    "run_tests",
]
