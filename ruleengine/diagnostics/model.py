"""Diagnostics are data: one record per finding, rendered by every reporter alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


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
