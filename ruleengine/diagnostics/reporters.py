"""Reporters: render diagnostics as text, JSON, GitHub annotations or SARIF 2.1.0.

A reporter only renders (no checking, no printing); ``REPORTERS`` maps the CLI's
``--format`` choices to them. Output is deterministic: diagnostics are sorted by file,
line, column, code and message, and nothing time- or machine-dependent is written.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from ruleengine.diagnostics.codes import CODES
from ruleengine.diagnostics.model import Diagnostic, Location, Severity
from ruleengine.version import __version__

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Summary:
    """What was checked, for the summary line / object. ``failure`` is set when the
    command could not run (exit 2): its message, with the findings saying why."""

    files: int
    rules: int
    strict: bool = False
    failure: str | None = None


def _sorted(diags: Sequence[Diagnostic]) -> list[Diagnostic]:
    return sorted(diags, key=Diagnostic.sort_key)


def _counts(diags: Sequence[Diagnostic]) -> tuple[int, int]:
    errors = sum(1 for d in diags if d.severity == Severity.ERROR)
    warnings = sum(1 for d in diags if d.severity == Severity.WARNING)
    return errors, warnings


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def render_text(diags: Sequence[Diagnostic], summary: Summary) -> str:
    lines = []
    for d in _sorted(diags):
        where = f"{d.location}: " if d.location else ""
        lines.append(f"{where}{d.severity} {d.code} {d.name}: {d.message}")
        if d.hint:
            lines.append(f"  hint: {d.hint}")
        for rel in d.related:
            lines.append(f"  related: {rel}")
    errors, warnings = _counts(diags)
    checked = f"{_plural(summary.files, 'file')}, {_plural(summary.rules, 'rule')} checked"
    if summary.failure is not None:
        return ""  # the error and its findings go to stderr; stdout stays empty
    if not errors and not warnings:
        notes = len(diags)  # notes (info) fail nothing
        checked += f", {_plural(notes, 'note')}" if notes else ""
        lines.append(f"All checks passed ({checked}).")
    else:
        tail = ""
        if warnings and not errors and not summary.strict:
            tail = " (warnings do not fail without --strict)"
        lines.append(
            f"Found {_plural(errors, 'error')} and {_plural(warnings, 'warning')} "
            f"({checked}){tail}."
        )
    return "\n".join(lines) + "\n"


def _loc_json(loc: Location | None) -> dict:
    if loc is None:
        return {"file": None, "line": None, "column": None}
    return {"file": loc.file, "line": loc.line, "column": loc.column}


def render_json(diags: Sequence[Diagnostic], summary: Summary) -> str:
    errors, warnings = _counts(diags)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "diagnostics": [
            {
                "code": d.code,
                "name": d.name,
                "severity": str(d.severity),
                "message": d.message,
                "hint": d.hint,
                **_loc_json(d.location),
                "related": [_loc_json(r) for r in d.related],
            }
            for d in _sorted(diags)
        ],
        "summary": {
            "files": summary.files,
            "rules": summary.rules,
            "errors": errors,
            "warnings": warnings,
            "strict": summary.strict,
        },
        "execution_successful": summary.failure is None,
    }
    if summary.failure is not None:
        doc["error"] = summary.failure
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _gh_escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_escape_prop(s: str) -> str:
    return _gh_escape_data(s).replace(":", "%3A").replace(",", "%2C")


def render_github(diags: Sequence[Diagnostic], summary: Summary) -> str:
    lines = []
    for d in _sorted(diags):
        level = {"error": "error", "warning": "warning"}.get(str(d.severity), "notice")
        props = []
        if d.location:
            props.append(f"file={_gh_escape_prop(d.location.file)}")
            if d.location.line is not None:
                props.append(f"line={d.location.line}")
            if d.location.column is not None:
                props.append(f"col={d.location.column}")
        props.append(f"title={_gh_escape_prop(f'{d.code} {d.name}')}")
        message = d.message + (f"\nhint: {d.hint}" if d.hint else "")
        lines.append(f"::{level} {','.join(props)}::{_gh_escape_data(message)}")
    errors, warnings = _counts(diags)
    if summary.failure is not None:
        lines.insert(
            0, f"::error title=autofusion could not run::{_gh_escape_data(summary.failure)}"
        )
    lines.append(
        f"{_plural(errors, 'error')}, {_plural(warnings, 'warning')} "
        f"({_plural(summary.files, 'file')}, {_plural(summary.rules, 'rule')} checked)"
    )
    return "\n".join(lines) + "\n"


_SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def _sarif_uri(file: str) -> str:
    """A SARIF artifact URI (a URI reference, RFC 3986): a relative path stays relative,
    an absolute one becomes file:///...; spaces, '#', '%', '?' and non-ASCII letters are
    percent-encoded, or code scanning reads ``a b#1.yaml`` as ``a b`` plus a fragment."""
    path = file.replace("\\", "/")
    if re.match(r"^[A-Za-z]:/", path):  # Windows drive
        return "file:///" + quote(path, safe="/:")
    if path.startswith("/"):
        return "file://" + quote(path, safe="/")
    return quote(path, safe="/")


def _sarif_location(loc: Location) -> dict:
    region = {}
    if loc.line is not None:
        region["startLine"] = loc.line
        if loc.column is not None:
            region["startColumn"] = loc.column
    physical: dict = {"artifactLocation": {"uri": _sarif_uri(loc.file)}}
    if region:
        physical["region"] = region
    return {"physicalLocation": physical}


FINGERPRINT = "autofusionFinding/v1"


def _fingerprint(d: Diagnostic, seen: dict[str, int]) -> str:
    """Stable across edits that move the finding: code, file and message, not the line
    (a rule's findings name the rule and field); the n-th repeat gets its own print."""
    file = d.location.file if d.location else ""
    base = hashlib.sha256(f"{d.code}\0{file}\0{d.message}".encode()).hexdigest()[:32]
    n = seen.get(base, 0)
    seen[base] = n + 1
    return f"{base}:{n + 1}"


def render_sarif(diags: Sequence[Diagnostic], summary: Summary) -> str:
    ordered = _sorted(diags)
    used = sorted({d.code for d in ordered})
    rules = []
    for code in used:
        info = CODES.get(code)
        if info is None:
            rules.append({"id": code})
            continue
        rules.append(
            {
                "id": info.code,
                "name": info.name,
                "shortDescription": {"text": info.summary},
                "fullDescription": {"text": info.explanation},
                "help": {"text": f"autofusion rule-codes {info.code}"},
                "defaultConfiguration": {"level": _SARIF_LEVEL[str(info.severity)]},
            }
        )
    index = {code: i for i, code in enumerate(used)}
    results = []
    seen: dict[str, int] = {}
    notifications = []
    for d in ordered if summary.failure is not None else ():
        note: dict = {
            "level": _SARIF_LEVEL.get(str(d.severity), "note"),
            "message": {"text": d.message + (f" (hint: {d.hint})" if d.hint else "")},
            "descriptor": {"id": d.code},
        }
        if d.location:
            note["locations"] = [_sarif_location(d.location)]
        notifications.append(note)
    if summary.failure is not None and not notifications:
        notifications.append({"level": "error", "message": {"text": summary.failure}})
    for d in ordered if summary.failure is None else ():
        text = d.message + (f" (hint: {d.hint})" if d.hint else "")
        result: dict = {
            "ruleId": d.code,
            "ruleIndex": index[d.code],
            "level": _SARIF_LEVEL.get(str(d.severity), "note"),
            "message": {"text": text},
        }
        if d.location:
            result["locations"] = [_sarif_location(d.location)]
        if d.related:
            result["relatedLocations"] = [
                {"id": i, **_sarif_location(r)} for i, r in enumerate(d.related)
            ]
        result["partialFingerprints"] = {FINGERPRINT: _fingerprint(d, seen)}
        results.append(result)
    invocation: dict = {"executionSuccessful": summary.failure is None}
    if summary.failure is not None:
        invocation["exitCode"] = 2
        invocation["toolExecutionNotifications"] = notifications
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "autofusion",
                        "version": __version__,
                        "rules": rules,
                    }
                },
                "invocations": [invocation],
                "results": results,
            }
        ],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


REPORTERS: dict[str, Callable[[Sequence[Diagnostic], Summary], str]] = {
    "text": render_text,
    "json": render_json,
    "github": render_github,
    "sarif": render_sarif,
}


def render(fmt: str, diags: Sequence[Diagnostic], summary: Summary) -> str:
    """Render with the reporter named ``fmt`` (one of ``REPORTERS``)."""
    return REPORTERS[fmt](diags, summary)
