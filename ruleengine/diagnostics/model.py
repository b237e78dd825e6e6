"""Diagnostics are data: one record per finding, rendered by every reporter alike."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, order=True)
class Location:
    """A place in a source file; line and column are 1-based (None when unknown)."""

    file: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        parts = [self.file]
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        return ":".join(parts)


@dataclass(frozen=True)
class Diagnostic:
    """One finding: a stable code (e.g. ``AF201``), its kebab-case name, where, and a fix hint."""

    code: str
    name: str
    severity: Severity
    message: str
    location: Location | None = None
    hint: str | None = None
    related: tuple[Location, ...] = field(default=())

    def sort_key(self) -> tuple:
        loc = self.location or Location("")
        return (loc.file, loc.line or 0, loc.column or 0, self.code, self.message)


def display_path(path: str | os.PathLike[str]) -> str:
    """A path as findings show it: relative to the working directory when it lies under it
    (what CI annotations and SARIF need), absolute otherwise, always with ``/``."""
    text = os.fspath(path)
    if text in ("-", "<stdin>") or text.startswith("<"):
        return text
    absolute = os.path.abspath(text)
    try:
        rel = os.path.relpath(absolute, os.getcwd())
    except ValueError:  # another drive on Windows
        return Path(absolute).as_posix()
    if rel == os.curdir:
        return "."
    if rel.startswith(os.pardir):
        return Path(absolute).as_posix()
    return Path(rel).as_posix()
