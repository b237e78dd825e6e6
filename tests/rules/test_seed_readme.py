"""../shared/seed-rules/README.md is the test: its table is read here and every
command with an exit code it states is run (issue 36: the seed rules behave as the
README says, and a test reads them from there).

What is read from each row's "expected" cell, clause by clause (``;`` separates them):
- "`CMD` exit N" / "`CMD` exits N": the command on the row's file exits N (a bare
  `--strict` adds the flag to the row's last command);
- "`CMD` warns": it exits 0 and reports a warning;
- a clause that states a finding (exit 1, warns) names, in backticks, what the output
  shows (`Relu`, `clip_max`; the duplicate keys and `---`); "naming each missing
  required field" names those of the "what it is" cell (a fragment without name or
  match); "naming both rules" the file's rule names;
- "with one priority raised, exit N": the same command on a copy with one priority +1;
- "`autofusion convert` turns it into YAML rules that pass `verify`".
Deeper checks of each file (parsed params, fuse-time winners) are in test_seed_rules.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.rules.helpers import SEED, run_cli

README = SEED / "README.md"
_EXIT = re.compile(r"`(?P<cmd>[^`]+)`\s+exits?\s+(?P<code>\d)")
_WARNS = re.compile(r"`(?P<cmd>[^`]+)`\s+warns\b")
_TICKED = re.compile(r"`([^`]+)`")
_COMMANDS = ("verify", "check")


@dataclass(frozen=True)
class Row:
    file: str
    what: str
    expected: str


def _rows() -> list[Row]:
    """The README's table rows (file, what it is, expected), header and rule skipped."""
    rows = []
    for line in README.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        rows.append(Row(cells[0].strip("`"), cells[1], cells[2]))
    return rows


ROWS = _rows() if README.exists() else []


def _argv(cmd: str, last: str) -> list[str]:
    """``check --strict`` -> [check, --strict]; a bare ``--strict`` goes with ``last``."""
    words = cmd.split()
    if words and words[0] == "autofusion":
        words = words[1:]
    return [last, *words] if words[0].startswith("--") else words


def _shown(clause: str, cmd: str, row: Row, file: Path) -> list[str]:
    """What a clause stating a finding says the output names."""
    words = [w for w in _TICKED.findall(clause) if w.split()[0] not in (*_COMMANDS, "--strict")]
    if "missing required field" in clause:
        missing = row.what.split("without", 1)[1]
        words += [w.strip(" .") for w in re.split(r",| or | and ", missing) if w.strip(" .")]
    if "naming both rules" in clause:
        words += re.findall(r'^name:\s*"?([^"\n]+)"?', file.read_text(), re.MULTILINE)
    del cmd
    return words


def _run(argv: list[str], file: Path):
    res = run_cli(*argv, file)
    return res, res.stdout + res.stderr


def _check_clause(clause: str, row: Row, file: Path, last: str, tmp_path: Path) -> tuple[str, int]:
    """Run what one clause states; returns the last command named (for a bare --strict)
    and how many commands ran."""
    ran = 0
    if "with one priority raised" in clause:
        raised = tmp_path / file.name
        text = file.read_text(encoding="utf-8")
        raised.write_text(
            re.sub(r"priority: (\d+)", lambda m: f"priority: {int(m[1]) + 1}", text, count=1)
        )
        code = int(re.search(r"exits? (\d)", clause)[1])
        res, out = _run([last], raised)
        assert res.exit_code == code, f"{row.file} ({clause}): {out}"
        return last, 1
    for m in _WARNS.finditer(clause):
        argv = _argv(m["cmd"], last)
        res, out = _run(argv, file)
        assert res.exit_code == 0 and " warning " in out, f"{row.file}: {argv}: {out}"
        for word in _shown(clause, m["cmd"], row, file):
            assert word in out, f"{row.file}: {argv} does not name {word!r}: {out}"
        last, ran = argv[0], ran + 1
    for m in _EXIT.finditer(clause):
        argv = _argv(m["cmd"], last)
        res, out = _run(argv, file)
        code = int(m["code"])
        assert res.exit_code == code, f"{row.file}: {argv} exits {res.exit_code}: {out}"
        if code == 1:
            for word in _shown(clause, m["cmd"], row, file):
                assert word in out, f"{row.file}: {argv} does not name {word!r}: {out}"
        last, ran = argv[0], ran + 1
    return last, ran


def _convert(row: Row, file: Path, tmp_path: Path) -> None:
    """ "`autofusion convert` turns it into YAML rules that pass `verify`"."""
    out = tmp_path / "converted"
    res = run_cli("convert", file, "-o", out)
    assert res.exit_code == 0, res.stdout + res.stderr
    made = sorted(out.glob("*.yaml"))
    assert made, f"{row.file}: convert wrote no rule"
    res = run_cli("verify", *made)
    assert res.exit_code == 0, res.stdout


def test_readme_table_is_read() -> None:
    assert len(ROWS) == 9, [r.file for r in ROWS]
    assert all((SEED / r.file).exists() for r in ROWS)
    # every row states at least one command and what it gives
    assert all(_EXIT.search(r.expected) or "convert" in r.expected for r in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[r.file for r in ROWS])
def test_seed_rule_behaves_as_the_readme_says(row: Row, tmp_path: Path) -> None:
    file = SEED / row.file
    if "`autofusion convert`" in row.expected:
        _convert(row, file, tmp_path)
        return
    last, ran = "verify", 0
    for clause in row.expected.split(";"):
        last, n = _check_clause(clause, row, file, last, tmp_path)
        ran += n
    assert ran >= 1, f"{row.file}: no command with an exit code read from {row.expected!r}"
