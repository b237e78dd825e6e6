"""Reading rule files into rules plus findings: what ``verify``, ``check`` and
``load_rule_set`` share.

``lint_paths`` accumulates a ``LintResult`` (rules, diagnostics, files) and never raises
for problems in rule files; only a path that does not exist (nothing to run on) raises
``UsageError``. ``load_rule_set`` raises ``RuleLoadError`` when any error was found.
"""

from __future__ import annotations

import glob
import os
import stat
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Diagnostic, Location, Severity, display_path
from ruleengine.errors import RuleLoadError, UsageError
from ruleengine.rules import checks
from ruleengine.rules.build import check_and_build, provisional_ops, semantic_findings
from ruleengine.rules.model import Rule, RuleSet
from ruleengine.rules.schema import validate_document
from ruleengine.yamlio import MAX_FILE_BYTES, Document, read_documents

RULE_SUFFIXES = (".yaml", ".yml")
_GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class FileReport:
    """One file that was read: its path as shown and the names of the rules in it."""

    path: str
    rules: tuple[str, ...] = ()


@dataclass(frozen=True)
class LintResult:
    """Everything a lint run found; reporters only render this."""

    rules: tuple[Rule, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    files: tuple[FileReport, ...] = ()

    @property
    def errors(self) -> int:
        return sum(1 for d in self.diagnostics if d.severity == Severity.ERROR)

    @property
    def warnings(self) -> int:
        return sum(1 for d in self.diagnostics if d.severity == Severity.WARNING)

    def exit_code(self, strict: bool = False) -> int:
        """0 clean, 1 findings (errors; warnings too with ``strict``)."""
        return 1 if self.errors or (strict and self.warnings) else 0


def _display(path: Path) -> str:
    """Relative to the working directory when under it (CI annotations need that)."""
    return display_path(path)


def collect_files(paths: Sequence[str | Path]) -> list[Path]:
    """Expand directories (recursively, *.yaml/*.yml) and globs; keep explicit files.

    Raises ``UsageError`` (exit 2) naming every path that matched nothing.
    """
    out: list[Path] = []
    seen: set[str] = set()
    missing: list[Diagnostic] = []

    def add(p: Path) -> None:
        key = os.path.normcase(os.path.abspath(p))
        if key not in seen:
            seen.add(key)
            out.append(p)

    for raw in paths:
        text = str(raw)
        if text == "":
            continue
        if text == "-":  # the rule text on standard input
            add(Path("-"))
            continue
        try:
            _expand(text, add, missing)
        except (OSError, ValueError) as exc:  # NUL in a path, permission denied, ...
            missing.append(
                codes.make(
                    "path-not-found",
                    f"cannot read {text!r}: {getattr(exc, 'strerror', None) or exc}",
                    Location(text),
                    hint="check the path and its permissions",
                )
            )
    if missing:
        raise UsageError(  # not always "not found": an empty folder, a glob matching nothing
            "no rule files at: " + ", ".join(d.location.file for d in missing if d.location),
            tuple(missing),
        )
    return out


def _expand(text: str, add: Callable[[Path], None], missing: list[Diagnostic]) -> None:
    """Add the rule files one command-line path stands for; note it when there are none."""
    p = Path(text)
    if p.is_dir():
        found = sorted(
            (q for q in p.rglob("*") if q.suffix in RULE_SUFFIXES and q.is_file()),
            key=lambda q: q.as_posix(),
        )
        if not found:
            missing.append(
                codes.make(
                    "path-not-found",
                    f"no *.yaml or *.yml rule files in directory {text}",
                    Location(text),
                    hint="point at a directory that contains rule files",
                )
            )
        for q in found:
            add(q)
    elif p.exists():
        add(p)
    elif _GLOB_CHARS & set(text):
        matches = sorted(glob.glob(text, recursive=True))
        files = [Path(m) for m in matches if Path(m).is_file()]
        for d in (Path(m) for m in matches if Path(m).is_dir()):
            files += sorted(
                (q for q in d.rglob("*") if q.suffix in RULE_SUFFIXES and q.is_file()),
                key=lambda q: q.as_posix(),
            )
        if not files:
            missing.append(
                codes.make(
                    "path-not-found",
                    f"glob {text!r} matched no rule files",
                    Location(text),
                    hint="check the pattern (quote it so the shell does not expand it)",
                )
            )
        for q in files:
            add(q)
    else:
        missing.append(
            codes.make(
                "path-not-found",
                f"no such file or directory: {text}",
                Location(text),
                hint="check the path",
            )
        )


# Files linted in this process, by name as shown and content: ``suggest`` loads the same
# bundled library (and the same drafts) once per analysis it runs, hundreds of times. A
# file's findings and rules depend on its name and text only (the op tables they are
# checked against are bundled data, read once per process). The most recent KEPT_FILES.
KEPT_FILES = 4096
_LINTED: OrderedDict[tuple, LintResult] = OrderedDict()


def _file_bytes(path: Path) -> bytes | None:
    """A regular file's bytes, None where it is not one, is too large or unreadable."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            return None
        return path.read_bytes()
    except OSError:
        return None


def lint_file(
    path: Path, display: str | None = None, text: str | None = None, *, set_checks: bool = False
) -> LintResult:
    """Read, validate and check one file (``text``: its text, already read). Only
    documents without errors become rules; the params of a document with errors are
    still checked (AF303), so they show while it has other errors too. Reused where the
    same name and text were linted before in this process (``_LINTED``)."""
    display = display if display is not None else _display(path)
    content = ("text", text) if text is not None else ("file", _file_bytes(path))
    if content[1] is None:  # unreadable, too large or not a file: linting says so
        return _lint_one(path, display, text)
    key = (display, *content)
    found = _LINTED.get(key)
    if found is None:
        found = _LINTED[key] = _lint_one(path, display, text)
        while len(_LINTED) > KEPT_FILES:
            _LINTED.popitem(last=False)
    else:
        _LINTED.move_to_end(key)
    return found


def _lint_one(path: Path, display: str, text: str | None) -> LintResult:
    docs, diags = read_documents(path, display, text)
    rules: list[Rule] = []
    if not diags and not any(d.data is not None for d in docs):
        diags.append(
            codes.make(
                "empty-file",
                "file holds no rule",
                Location(display, 1, 1),
                hint="write a rule (name, match, rewrite) or delete the file",
            )
        )
    for doc in docs:
        if doc.data is None or doc.has_errors:
            continue
        if not isinstance(doc.data, dict):
            diags.append(
                codes.make(
                    "not-a-mapping",
                    f"YAML document {doc.index + 1} is a "
                    f"{'list' if isinstance(doc.data, list) else 'plain value'}, not a rule",
                    doc.marks.value(()),
                    hint="a rule is a mapping of fields (name:, match:, rewrite:); separate "
                    "rules with `---` lines, not list items",
                )
            )
            continue
        found = validate_document(doc)
        diags.extend(found)
        if any(d.severity == Severity.ERROR for d in found):
            diags.extend(semantic_findings(doc))  # more findings in one run, best effort
            diags.extend(_provisional_params(doc))
            continue
        rule, more = check_and_build(doc)
        diags.extend(more)
        # a param the op does not have never holds: spelt like one it has, an error
        # (AF217: the rule is refused by verify, check and every command loading it);
        # otherwise a warning (AF303), the rule loads and its op never matches
        unknown = checks.check_unknown_params(rule) if rule is not None else []
        diags.extend(unknown)
        if rule is not None and not any(d.severity == Severity.ERROR for d in unknown):
            rules.append(rule)
        elif rule is None:
            diags.extend(_provisional_params(doc))
    return LintResult(
        tuple(rules),
        tuple(sorted(diags, key=Diagnostic.sort_key)),
        (FileReport(display, tuple(r.name for r in rules)),),
    )


def _provisional_params(doc: Document) -> list[Diagnostic]:
    """Unknown params (AF303) of a document that has other errors, best effort: never a
    crash, at worst no finding."""
    try:
        return [d for op in provisional_ops(doc) for d in checks.unknown_params(op, op.location)]
    except Exception:  # the errors already found are what the user sees
        return []


def _lint_stdin(set_checks: bool = False) -> LintResult:
    import sys

    data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1) if hasattr(sys.stdin, "buffer") else b""
    if len(data) > MAX_FILE_BYTES or b"\x00" in data:
        what = "file-too-large" if len(data) > MAX_FILE_BYTES else "unreadable-file"
        diag = codes.make(
            what,
            "standard input is larger than 1 MiB"
            if what == "file-too-large"
            else "standard input is binary (contains NUL bytes)",
            Location("<stdin>"),
            hint="pipe a YAML rule file",
        )
        return LintResult((), (diag,), (FileReport("<stdin>"),))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        diag = codes.make(
            "unreadable-file",
            "standard input is not UTF-8 text",
            Location("<stdin>"),
            hint="pipe a UTF-8 YAML rule file",
        )
        return LintResult((), (diag,), (FileReport("<stdin>"),))
    return lint_file(Path("-"), "<stdin>", text, set_checks=set_checks)


def lint_paths(paths: Sequence[str | Path], *, set_checks: bool) -> LintResult:
    """Lint every rule file under ``paths``.

    ``set_checks=False`` (``verify``): each file on its own (schema, semantics, duplicate
    names within the file). ``set_checks=True`` (``check``): also the lint warnings and
    the checks across the whole set (duplicate names, priority conflicts).
    """
    files = collect_files(paths)
    return _lint_files(files, set_checks=set_checks)


def _lint_files(files: Sequence[Path], *, set_checks: bool) -> LintResult:
    rules: list[Rule] = []
    diags: list[Diagnostic] = []
    reports: list[FileReport] = []
    for f in files:
        res = _lint_stdin(set_checks) if str(f) == "-" else lint_file(f)
        rules.extend(res.rules)
        diags.extend(res.diagnostics)
        reports.extend(res.files)
        if not set_checks:
            diags.extend(checks.check_duplicate_names(res.rules))
    if set_checks:
        for rule in rules:
            diags.extend(checks.lint_rule(rule))
        diags.extend(checks.lint_set(rules))
    diags = sorted(set(diags), key=Diagnostic.sort_key)
    return LintResult(tuple(rules), tuple(diags), tuple(reports))


def only_files(result: LintResult, files: Sequence[Path]) -> LintResult:
    """The findings of ``result`` about ``files`` only (``check mine/ --preset all``: the
    bundled rules are checked with the user's, but findings are the user's files' own).

    A finding about a pair (a priority tie, a duplicate name) located in another file but
    related to one of ``files`` is moved to that file, with the other as related.
    """
    asked = {_display(f) for f in files}
    kept: list[Diagnostic] = []
    for d in result.diagnostics:
        if d.location is None or d.location.file in asked:
            kept.append(d)
            continue
        mine = [r for r in d.related if r.file in asked]
        if mine:
            others = tuple(r for r in d.related if r is not mine[0])
            kept.append(replace(d, location=mine[0], related=(d.location, *others)))
    ours = tuple(f for f in result.files if f.path in asked)
    names = {n for f in ours for n in f.rules}
    rules = tuple(r for r in result.rules if r.name in names)
    return LintResult(rules, tuple(sorted(set(kept), key=Diagnostic.sort_key)), ours)


def load_rule_set(paths: Sequence[str | Path], *, preset: str | None = None) -> RuleSet:
    """Load rules from files/directories/globs and/or a bundled preset.

    Raises ``RuleLoadError`` carrying every error diagnostic; warnings do not stop it and
    are kept in ``RuleSet.diagnostics``. Rules are sorted by name.
    """
    from ruleengine.rules.presets import preset_paths

    if isinstance(paths, str | Path):
        paths = [paths]
    files = collect_files(paths) if paths else []
    if preset is not None:
        known = {os.path.normcase(os.path.abspath(f)) for f in files}
        for folder in preset_paths(preset):
            for q in sorted(folder.rglob("*"), key=lambda q: q.as_posix()):
                key = os.path.normcase(os.path.abspath(q))
                if q.suffix in RULE_SUFFIXES and q.is_file() and key not in known:
                    known.add(key)
                    files.append(q)
    result = _lint_files(files, set_checks=False)
    dup = checks.check_duplicate_names(result.rules)
    diags = sorted(set(result.diagnostics) | set(dup), key=Diagnostic.sort_key)
    errors = tuple(d for d in diags if d.severity == Severity.ERROR)
    if errors:
        n = len(errors)
        raise RuleLoadError(f"{n} error{'s' if n != 1 else ''} in the rules", errors)
    # What `check` would say about the loaded set (an unknown param, a pattern that never
    # matches, a priority tie) travels with it, so match/explain/fuse can tell the user.
    linted = [d for rule in result.rules for d in checks.lint_rule(rule)]
    linted += checks.lint_set(result.rules)
    diags = sorted(set(diags) | set(linted), key=Diagnostic.sort_key)
    return RuleSet(
        rules=tuple(sorted(result.rules, key=lambda r: r.name)),
        diagnostics=tuple(diags),
        files=tuple(f.path for f in result.files),
    )
