"""Paths a rule names for its outputs (kernel files, DOT graphs): made relative to the
output directory, never escaping it."""

from __future__ import annotations

from pathlib import PurePosixPath, PureWindowsPath

from ruleengine.diagnostics.codes import make
from ruleengine.diagnostics.model import Location, Severity
from ruleengine.errors import OutputError


def safe_relpath(path: str, what: str, location: Location | None = None) -> str:
    """Normalise a rule's output path relative to OUTDIR; refuse one that would escape it."""
    posix = path.replace("\\", "/")
    if PurePosixPath(posix).is_absolute() or PureWindowsPath(path).drive or path.startswith("~"):
        raise _escape_error(path, what, location, "it is absolute")
    parts: list[str] = []
    for part in PurePosixPath(posix).parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise _escape_error(path, what, location, "'..' leaves the output directory")
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts) or "."


def _escape_error(path: str, what: str, location: Location | None, why: str) -> OutputError:
    diag = make(
        "unsafe-path",  # AF208: the rule loader's code for the same finding
        f"{what} {path!r} escapes the output directory: {why}",
        location,
        hint="write output paths relative to the output directory, without '..' or a leading '/'",
        severity=Severity.ERROR,
    )
    return OutputError(f"{what} {path!r} escapes the output directory ({why})", (diag,))
