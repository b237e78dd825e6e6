"""Render a rule-test run as text, JSON or JUnit XML (one reporter per ``--format``).

Each reporter also renders "could not run" (exit 2) as valid output of its format, so a CI
step that parses it never gets an empty or half-written file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from xml.etree import ElementTree as ET

from ruleengine.diagnostics.model import Diagnostic
from ruleengine.ruletest.model import RuleFileResult, Status, TestOutcome, TestRun

SCHEMA_VERSION = 1
_LABEL = {Status.PASS: "PASS", Status.FAIL: "FAIL", Status.TODO: "TODO", Status.ERROR: "ERROR"}


def _diag_line(d: Diagnostic) -> str:
    where = f"{d.location}: " if d.location else ""
    hint = f"\n      hint: {d.hint}" if d.hint else ""
    return f"{where}{d.code} {d.message}{hint}"


def _summary(run: TestRun) -> dict[str, int]:
    return {
        "rule_files": len(run.files),
        "tests": len(run.outcomes),
        "passed": run.count(Status.PASS),
        "failed": run.count(Status.FAIL),
        "todo": run.count(Status.TODO),
        "errors": run.count(Status.ERROR) + len(run.broken_files),
        "untested_rule_files": len(run.untested),
    }


def render_text(run: TestRun, verbose: bool = False) -> str:
    out: list[str] = []
    for f in run.files:
        if f.diagnostics:
            out.append(f"ERROR {f.rule_file}: the rule file does not load")
            out += [f"    {_diag_line(d)}" for d in f.diagnostics]
            continue
        for o in f.outcomes:
            if o.status is Status.PASS and not (verbose or o.todo_done):
                continue
            out.append(f"{_LABEL[o.status]:<5} {o.test_file}")
            out += [f"    {m}" for m in o.messages]
            if o.status is Status.FAIL:
                found = "; ".join(",".join(n) for n in o.found) or "none"
                out.append(f"    found now: {found}")
    s = _summary(run)
    parts = [f"{s['passed']} passed"]
    parts += [f"{s[k]} {k}" for k in ("failed", "todo") if s[k]]
    if s["errors"]:
        parts.append(_plural(s["errors"], "error"))
    line = f"{_plural(s['tests'], 'test')} of {_plural(s['rule_files'], 'rule file')}: "
    line += ", ".join(parts)
    if run.untested:
        line += f"; {_plural(len(run.untested), 'rule file')} without tests"
        if verbose:
            out += [f"no tests: {u}" for u in run.untested]
    out.append(line)
    for path in run.updated:
        out.append(f"updated {path}: review the new expectations (git diff)")
    return "\n".join(out) + "\n"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _outcome_json(o: TestOutcome) -> dict[str, object]:
    return {
        "test": o.test_file,
        "rules": list(o.rules),
        "status": str(o.status),
        "expected": [list(n) for n in o.expected],
        "found": [list(n) for n in o.found],
        "missing": [list(n) for n in o.missing],
        "unexpected": [list(n) for n in o.unexpected],
        "todo_pending": [list(n) for n in o.todo_pending],
        "todo_done": [list(n) for n in o.todo_done],
        "near_misses": list(o.near_misses),
        "near_miss_missing": list(o.near_miss_missing),
        "messages": list(o.messages),
        "diagnostics": [_diag_json(d) for d in o.diagnostics],
    }


def _diag_json(d: Diagnostic) -> dict[str, object]:
    loc = d.location
    return {
        "code": d.code,
        "name": d.name,
        "severity": str(d.severity),
        "message": d.message,
        "file": loc.file if loc else None,
        "line": loc.line if loc else None,
        "column": loc.column if loc else None,
        "hint": d.hint,
    }


def _file_json(f: RuleFileResult) -> dict[str, object]:
    return {
        "rule_file": f.rule_file,
        "rules": list(f.rules),
        "tests_dir": f.tests_dir,
        "status": str(f.status),
        "diagnostics": [_diag_json(d) for d in f.diagnostics],
        "tests": [_outcome_json(o) for o in f.outcomes],
    }


def render_json(run: TestRun, verbose: bool = False) -> str:
    doc = {
        "schema_version": SCHEMA_VERSION,
        "summary": _summary(run),
        "exit_code": run.exit_code,
        "rule_files": [_file_json(f) for f in run.files],
        "untested": list(run.untested),
        "updated": list(run.updated),
    }
    return json.dumps(doc, indent=2) + "\n"


def render_junit(run: TestRun, verbose: bool = False) -> str:
    """JUnit XML: one testsuite per rule file, one testcase per test graph; a todo is
    ``skipped``, a rule file that does not load is one ``error`` testcase."""
    s = _summary(run)
    root = ET.Element(
        "testsuites",
        name="autofusion test",
        tests=str(s["tests"] + len(run.broken_files)),
        failures=str(s["failed"]),
        errors=str(s["errors"]),
        skipped=str(s["todo"]),
    )
    for f in run.files:
        suite = ET.SubElement(root, "testsuite", name=f.rule_file)
        cases = 0
        failures = errors = skipped = 0
        if f.diagnostics:
            case = ET.SubElement(
                suite, "testcase", classname=", ".join(f.rules) or f.rule_file, name="load"
            )
            case.set("file", f.rule_file)
            err = ET.SubElement(case, "error", message="the rule file does not load")
            err.text = "\n".join(_diag_line(d) for d in f.diagnostics)
            cases, errors = 1, 1
        for o in f.outcomes:
            cases += 1
            case = ET.SubElement(
                suite, "testcase", classname=", ".join(o.rules), name=_case_name(o)
            )
            case.set("file", o.test_file)
            detail = "\n".join(o.messages)
            if o.status is Status.FAIL:
                failures += 1
                el = ET.SubElement(case, "failure", message=o.messages[0] if o.messages else "")
                el.text = detail
            elif o.status is Status.ERROR:
                errors += 1
                el = ET.SubElement(case, "error", message=o.messages[0] if o.messages else "")
                el.text = detail
            elif o.status is Status.TODO:
                skipped += 1
                ET.SubElement(case, "skipped", message=detail)
        for key, value in (
            ("tests", cases), ("failures", failures), ("errors", errors), ("skipped", skipped)
        ):  # fmt: skip
            suite.set(key, str(value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def _case_name(o: TestOutcome) -> str:
    return o.test_file.rsplit("/", 1)[-1]


def render_error(fmt: str, message: str, diagnostics: Sequence[Diagnostic]) -> str:
    """'Could not run' (exit 2) in the format asked for: text for people, a JSON document
    with ``error``, or JUnit XML with one errored testcase."""
    if fmt == "json":
        doc = {
            "schema_version": SCHEMA_VERSION,
            "exit_code": 2,
            "error": {"message": message, "diagnostics": [_diag_json(d) for d in diagnostics]},
            "rule_files": [],
        }
        return json.dumps(doc, indent=2) + "\n"
    if fmt == "junit":
        root = ET.Element("testsuites", name="autofusion test", tests="1", failures="0", errors="1")
        suite = ET.SubElement(
            root, "testsuite", name="autofusion test", tests="1", failures="0", errors="1"
        )
        case = ET.SubElement(suite, "testcase", classname="autofusion", name="run")
        err = ET.SubElement(case, "error", message=message)
        err.text = "\n".join(_diag_line(d) for d in diagnostics)
        ET.indent(root)
        return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, "unicode") + "\n"
    return ""  # text: the error goes to stderr only


REPORTERS: dict[str, Callable[[TestRun, bool], str]] = {
    "text": render_text,
    "json": render_json,
    "junit": render_junit,
}
