"""Rule loading and linting: YAML -> schema -> semantic checks -> frozen ``Rule`` records.

Public entry points: ``load_rule_set`` (for the pipeline), ``lint_paths`` (for ``verify``
and ``check``), ``preset_names``/``preset_paths``.
"""

from ruleengine.rules.lint import LintResult, lint_file, lint_paths, load_rule_set
from ruleengine.rules.presets import preset_names, preset_paths

__all__ = [
    "LintResult",
    "lint_file",
    "lint_paths",
    "load_rule_set",
    "preset_names",
    "preset_paths",
]
