"""Where the bundled data (schemas, rules, targets, op tables, examples) lives.

In a checkout it sits at the top of the repository; in an installed wheel it is copied
under ``ruleengine/_bundled/``. Every stage asks here instead of guessing paths.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_KINDS = ("schemas", "rules", "targets", "ops", "examples", "kernels")


@cache
def data_dir(kind: str) -> Path:
    """Directory of one kind of bundled data: schemas, rules, targets, ops or examples."""
    if kind not in _KINDS:
        raise ValueError(f"unknown bundled data kind {kind!r}; expected one of {_KINDS}")
    checkout = _PACKAGE_DIR.parent
    # A checkout (or editable install) reads the live files; a wheel reads its copy.
    search = (checkout / kind, _PACKAGE_DIR / "_bundled" / kind)
    if not (checkout / "pyproject.toml").is_file():
        search = search[::-1]
    for candidate in search:
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"bundled {kind}/ directory not found next to {_PACKAGE_DIR}; is the package installed?"
    )


def schema_path(name: str) -> Path:
    """Path of a bundled JSON Schema, e.g. ``schema_path("rule")`` -> schemas/rule.schema.json."""
    return data_dir("schemas") / f"{name}.schema.json"
