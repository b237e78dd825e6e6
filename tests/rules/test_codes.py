"""A minimal failing input per diagnostic code, discovered from the registry.

A new code needs an ``example`` in the registry (or a builder here) or this test fails.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from ruleengine.diagnostics.codes import CODES, lookup
from tests.rules.helpers import MINIMAL, run_cli


def _nul(tmp: Path) -> list[str]:
    p = tmp / "bad.yaml"
    p.write_bytes(b"name: a\x00\n")
    return [str(p)]


def _huge(tmp: Path) -> list[str]:
    p = tmp / "huge.yaml"
    p.write_text(MINIMAL + "# " + "x" * (1 << 20) + "\n")
    return [str(p)]


def _missing(tmp: Path) -> list[str]:
    return [str(tmp / "does-not-exist.yaml")]


# Codes whose trigger is not a plain rule file.
BUILDERS: dict[str, Callable[[Path], list[str]]] = {
    "AF001": _missing,
    "AF002": _nul,
    "AF003": _huge,
}


def _inputs(code: str, tmp: Path) -> list[str]:
    if code in BUILDERS:
        return BUILDERS[code](tmp)
    p = tmp / "rule.yaml"
    p.write_text(CODES[code].example, encoding="utf-8")
    return [str(p)]


RULE_CODES = sorted(c for c, i in CODES.items() if i.command in ("verify", "check"))


@pytest.mark.parametrize("code", RULE_CODES)
def test_every_code_has_a_trigger(code: str):
    assert CODES[code].example or code in BUILDERS, f"{code} has no example and no builder"


@pytest.mark.parametrize("code", RULE_CODES)
def test_minimal_example_triggers_exactly_its_code(code: str, tmp_path: Path):
    info = CODES[code]
    paths = _inputs(code, tmp_path)
    res = run_cli(info.command, "--format", "json", *paths)
    if code == "AF001":  # could not run: still a JSON document, saying so
        assert res.exit_code == 2
        doc = json.loads(res.stdout)
        assert code in res.stderr and doc["execution_successful"] is False
        assert [d["code"] for d in doc["diagnostics"]] == [code]
        return
    assert res.exit_code == 1 or info.severity in ("warning", "info"), res.stdout
    found = {d["code"] for d in json.loads(res.stdout)["diagnostics"]}
    assert code in found, res.stdout
    strict = run_cli(info.command, "--strict", *paths)
    assert strict.exit_code == (0 if info.severity == "info" else 1)
    if code == "AF402":  # a note, unless the team requires every contract
        assert run_cli(info.command, "--require-contracts", *paths).exit_code == 1


def test_codes_are_stable_and_well_formed():
    for code, info in CODES.items():
        assert re.fullmatch(r"AF\d{3}", code)
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", info.name)
        assert info.summary and info.explanation
        assert info.example or info.example_note
        assert info.command in ("verify", "check", "match", "explain", "test", "fuse")
    assert len({i.name for i in CODES.values()}) == len(CODES)


def test_lookup_by_code_or_name():
    assert lookup("af303").name == "unknown-param"
    assert lookup("unknown-param").code == "AF303"
    assert lookup("AF999") is None


def test_rule_codes_lists_and_documents():
    res = run_cli("rule-codes")
    assert res.exit_code == 0 and res.stderr == ""
    assert len(res.stdout.strip().splitlines()) == len(CODES)
    one = run_cli("rule-codes", "AF304")
    assert one.exit_code == 0
    assert one.stdout.startswith("AF304 no-hbm-saving (warning")
    assert "Example that triggers it" in one.stdout
    bad = run_cli("rule-codes", "AF999")
    assert bad.exit_code == 2 and bad.stdout == "" and "unknown diagnostic code" in bad.stderr


def test_docs_codes_md_is_generated_from_the_registry():
    from ruleengine.diagnostics.codes import render_markdown

    docs = Path(__file__).resolve().parents[2] / "docs" / "codes.md"
    assert docs.read_text(encoding="utf-8") == render_markdown(), (
        "regenerate: python -m ruleengine.diagnostics.codes > docs/codes.md"
    )


def test_every_code_the_tool_emits_is_registered():
    """A code written anywhere in the package must be documented by `rule-codes`."""
    package = Path(__file__).resolve().parents[2] / "ruleengine"
    used = {
        m
        for f in package.rglob("*.py")
        for m in re.findall(r"\bAF\d{3}\b", f.read_text(encoding="utf-8"))
    }
    assert used - set(CODES) == set()


def test_graph_loader_codes_match_the_registry():
    from ruleengine.graph.problems import CODES as LOADER_CODES

    for code, name in LOADER_CODES.values():
        assert CODES[code].name == name
