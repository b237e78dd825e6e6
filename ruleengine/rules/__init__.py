"""Rule loading and linting: YAML -> schema -> semantic checks -> frozen ``Rule`` records.

Public entry points: ``load_rule_set`` (for the pipeline), ``lint_paths`` (for ``verify``
and ``check``), ``preset_names``/``preset_paths``. They are imported lazily so that
``ruleengine.rules.model`` can be imported by the op vocabulary without a cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOME = {
    "LintResult": "ruleengine.rules.lint",
    "lint_file": "ruleengine.rules.lint",
    "lint_paths": "ruleengine.rules.lint",
    "load_rule_set": "ruleengine.rules.lint",
    "preset_names": "ruleengine.rules.presets",
    "preset_paths": "ruleengine.rules.presets",
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        import importlib

        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'ruleengine.rules' has no attribute {name!r}")
