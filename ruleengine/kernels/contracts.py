"""fuse's refusal of rules whose rewrite contradicts their kernel's contract.

``check`` reports the same findings (``lint.lint_rules``) one by one; ``fuse`` stops on
them before any work, since such a rule's fused node could never run.
"""

from __future__ import annotations

from ruleengine.diagnostics.model import Severity
from ruleengine.errors import RuleLoadError
from ruleengine.kernels.lint import lint_rules
from ruleengine.kernels.model import Catalog
from ruleengine.rules.model import RuleSet


def check_rule_contracts(rule_set: RuleSet, catalog: Catalog) -> None:
    """Raise ``RuleLoadError`` with every contract error of the rules' rewrites."""
    errors = tuple(d for d in lint_rules(rule_set.rules, catalog) if d.severity == Severity.ERROR)
    if errors:
        n = len(errors)
        raise RuleLoadError(
            f"{n} rule rewrite{'s' if n != 1 else ''} contradict the kernel catalog", errors
        )
