"""Bundled rule presets: one folder per preset under the bundled ``rules/`` directory.

``cnn`` and ``transformer`` are folders (``rules/cnn/``, ``rules/transformer/``); ``all``
means every preset folder. New presets are new folders; nothing here lists them. The
``generic`` folder holds rules written by op class (a cube op with its epilogue, a norm
with its prologue/epilogue, attention whatever sits around its Softmax): they belong to
every architecture, so every preset includes it.
"""

from __future__ import annotations

from pathlib import Path

from ruleengine.errors import UsageError
from ruleengine.resources import data_dir

ALL = "all"
GENERIC = "generic"  # rules by op class: part of every preset


def _folders() -> dict[str, Path]:
    try:
        root = data_dir("rules")
    except FileNotFoundError:
        return {}
    return {
        p.name: p
        for p in sorted(root.iterdir())
        if p.is_dir() and not p.name.startswith((".", "_"))
    }


def preset_names() -> list[str]:
    """Every preset name, sorted, plus ``all``."""
    return [*_folders(), ALL]


def preset_paths(name: str) -> list[Path]:
    """The folders of a preset (``all`` = every preset folder)."""
    folders = _folders()
    if name == ALL:
        return list(folders.values())
    if name in folders:
        extra = [folders[GENERIC]] if GENERIC in folders and name != GENERIC else []
        return [folders[name], *extra]
    raise UsageError(
        f"unknown preset {name!r}; known presets: {', '.join(preset_names())}",
    )
