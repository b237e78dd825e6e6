"""Mistakes a new rule author makes, each told the way it is fixed: a tab, a line that
lines up with nothing, a Latin-1 byte, an empty file, three rules pasted without `---`,
and a rule's warnings shown while it still has errors."""

from __future__ import annotations

import json
from pathlib import Path

from tests.rules.helpers import MINIMAL, run_cli

RULE = "name: a\nmatch:\n  ops:\n    - type: Relu\nrewrite:\n  target_op: A\n"


def _findings(tmp_path: Path, name: str, data: bytes | str, command: str = "verify") -> list:
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    res = run_cli(command, p, "-f", "json")
    assert res.exit_code == 1, res.stdout
    return json.loads(res.stdout)["diagnostics"]


def test_a_tab_in_the_indentation_is_named(tmp_path):
    (d,) = _findings(tmp_path, "tab.yaml", RULE.replace("  ops:", "\tops:"))
    assert d["code"] == "AF004" and (d["line"], d["column"]) == (3, 1)
    assert d["message"].startswith("a tab indents this line; YAML indents with spaces only")
    assert "replace the tab with spaces" in d["hint"]


def test_a_misindented_line_says_what_it_lines_up_with(tmp_path):
    (d,) = _findings(tmp_path, "indent.yaml", RULE.replace("rewrite:", "   rewrite:"))
    assert d["code"] == "AF004" and d["line"] == 5
    assert "indented 3 spaces, which lines up with no block above" in d["message"]
    assert "(the lines above are indented 0, 2, 4)" in d["message"]


def test_an_unclosed_bracket_names_where_it_opened(tmp_path):
    (d,) = _findings(tmp_path, "flow.yaml", "name: a\nmatch: [Relu\nrewrite:\n  target_op: A\n")
    assert "a bracket opened at line 2, column 8 is not closed" in d["message"]


def test_a_non_utf8_byte_is_located_by_line_and_column(tmp_path):
    data = RULE.replace("name: a\n", "name: a\n# caf\xe9 au lait\n").encode("latin-1")
    (d,) = _findings(tmp_path, "latin.yaml", data)
    assert d["code"] == "AF002" and (d["line"], d["column"]) == (2, 6)
    assert "byte 0xe9 at line 2, column 6" in d["message"] and "offset" not in d["message"]


def test_an_empty_rule_file_fails_verify(tmp_path):
    for text in ("", "# only a comment\n", "---\n"):
        (d,) = _findings(tmp_path, "empty.yaml", text)
        assert (d["code"], d["severity"]) == ("AF009", "error")


def test_three_rules_pasted_without_separators_are_one_finding(tmp_path):
    text = RULE + RULE.replace("name: a", "name: b") + RULE.replace("name: a", "name: c")
    (d,) = _findings(tmp_path, "paste.yaml", text)
    assert d["code"] == "AF005" and d["line"] == 7
    assert "3 rules in one YAML document (`name:` at lines 1, 7, 13)" in d["message"]
    assert d["hint"] == "add a `---` line before line 7 and line 13"


def test_a_genuine_duplicate_key_is_still_reported_per_key(tmp_path):
    text = RULE.replace("    - type: Relu\n", "    - type: Relu\n      type: Sigmoid\n")
    (d,) = _findings(tmp_path, "dup.yaml", text)
    assert d["code"] == "AF005" and "duplicate key 'type'" in d["message"]


def test_warnings_of_a_rule_show_while_it_has_errors(tmp_path):
    text = MINIMAL.replace("name: r", "name: r\npriority: high").replace(
        "    - type: Relu\n", "    - type: Conv\n      params: {grop: 1}\n"
    )
    found = _findings(tmp_path, "both.yaml", text, command="check")
    assert {d["code"] for d in found} == {"AF103", "AF217"}
    (warn,) = [d for d in found if d["code"] == "AF217"]
    assert "'grop'" in warn["message"] and "did you mean 'group'" in warn["hint"]
