"""The marked YAML reader: locations, YAML 1.2 scalars, duplicate keys, hostile input."""

from __future__ import annotations

from pathlib import Path

import pytest

from ruleengine.rules import lint_file
from ruleengine.yamlio import MAX_FILE_BYTES, read_documents, resolve_plain
from tests.rules.helpers import MINIMAL


def _read(tmp_path: Path, text: str | bytes):
    p = tmp_path / "r.yaml"
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")
    return read_documents(p, "r.yaml")


def _lint(text: str):
    return lint_file(Path("r.yaml"), "r.yaml", text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1e-5", 1e-5),
        ("1E+3", 1000.0),
        ("-2.5", -2.5),
        (".5", 0.5),
        ("42", 42),
        ("0x1F", 31),
        ("0o17", 15),
        ("true", True),
        ("False", False),
        ("~", None),
        ("null", None),
        ("", None),
        (".inf", float("inf")),
        ("yes", "yes"),
        ("off", "off"),
        ("1_000", "1_000"),
        ("1:20", "1:20"),
        ("none", "none"),
    ],
)
def test_plain_scalars_follow_yaml_1_2(text: str, value):
    assert resolve_plain(text) == value


def test_marks_point_at_keys_and_values(tmp_path: Path):
    docs, diags = _read(tmp_path, "name: a\nmatch:\n  ops:\n    - type: Relu\n")
    assert diags == []
    m = docs[0].marks
    assert (m.key(("match",)).line, m.key(("match",)).column) == (2, 1)
    loc = m.value(("match", "ops", 0, "type"))
    assert (loc.line, loc.column) == (4, 13)
    # an absent path falls back to the nearest enclosing value
    assert m.value(("match", "ops", 0, "params", "x")).line == 4


def test_multiple_documents_and_empty_ones(tmp_path: Path):
    text = MINIMAL + "---\n---\n" + MINIMAL.replace("name: r", "name: s").replace("Relu", "Elu")
    docs, diags = _read(tmp_path, text)
    assert diags == []
    assert [d.data and d.data["name"] for d in docs] == ["r", None, "s"]
    assert [r.name for r in _lint(text).rules] == ["r", "s"]


def test_quoted_scalars_stay_strings():
    res = _lint(MINIMAL.replace("- type: Relu", '- type: Elu\n      params: {alpha: "1e-5"}'))
    assert res.rules[0].ops[0].params["alpha"] == "1e-5"


def test_yes_no_coerced_where_boolean_expected_with_a_warning():
    res = _lint(MINIMAL + "enabled: no\noutput:\n  debug_symbols: on\n")
    assert res.rules[0].enabled is False
    assert res.rules[0].output.debug_symbols is True
    assert [d.code for d in res.diagnostics] == ["AF010", "AF010"]
    assert [d.location.line for d in res.diagnostics] == [7, 9]


def test_yes_in_params_is_a_boolean():
    text = MINIMAL.replace(
        "- type: Relu", "- type: LayerNorm\n      params: {elementwise_affine: yes}"
    )
    res = _lint(text)
    assert res.rules[0].ops[0].params["elementwise_affine"] is True
    assert [d.code for d in res.diagnostics] == ["AF010"]


def test_yes_where_string_expected_stays_a_string():
    res = _lint(MINIMAL + "description: yes\n")
    assert res.rules[0].description == "yes" and res.diagnostics == ()


def test_quoted_number_where_integer_expected():
    res = _lint(MINIMAL + 'priority: "7"\n')
    assert res.rules[0].priority == 7
    assert [d.code for d in res.diagnostics] == ["AF011"]


def test_every_duplicate_key_reported(tmp_path: Path):
    docs, diags = _read(tmp_path, "a: 1\nb: 2\na: 3\nb: 4\na: 5\n")
    assert [(d.code, d.location.line) for d in diags] == [("AF005", 3), ("AF005", 4), ("AF005", 5)]
    assert docs[0].has_errors


def test_nested_duplicate_key_hint_is_generic(tmp_path: Path):
    _, diags = _read(tmp_path, "x:\n  k: 1\n  k: 2\n")
    assert "---" not in diags[0].hint


def test_alias_bomb_refused(tmp_path: Path):
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        refs = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    docs, diags = _read(tmp_path, "\n".join(lines) + "\n")
    assert docs == [] and [d.code for d in diags] == ["AF006"]


def test_recursive_anchor_refused(tmp_path: Path):
    docs, diags = _read(tmp_path, "a: &x [1, *x]\n")
    assert docs == [] and [d.code for d in diags] == ["AF006"]


def test_deep_nesting_refused(tmp_path: Path):
    docs, diags = _read(tmp_path, "a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert docs == [] and diags[0].code in ("AF006", "AF004")


def test_small_aliases_are_fine(tmp_path: Path):
    text = (
        "name: r\nmatch:\n  ops:\n    - type: Conv\n      params: &p {group: 1}\n"
        "  branches:\n    - ops:\n        - type: Conv\n          params: *p\n"
        "rewrite:\n  target_op: R\n"
    )
    res = _lint(text)
    assert res.diagnostics == ()
    assert res.rules[0].alternatives[1].ops[0].params == {"group": 1}


def test_merge_keys(tmp_path: Path):
    docs, diags = _read(tmp_path, "base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  y: 3\n")
    assert diags == [] and docs[0].data["d"] == {"x": 1, "y": 3}


@pytest.mark.parametrize(
    "text",
    [
        "name: !!python/object/apply:os.system ['true']\n",
        "name: !custom x\n",
        "a: !!set {x}\n",
        "a: !!binary aGVsbG8=\n",
    ],
)
def test_unsafe_or_unknown_tags_refused(tmp_path: Path, text: str):
    _, diags = _read(tmp_path, text)
    assert diags and diags[0].code in ("AF008", "AF004")


def test_standard_tags_are_honoured(tmp_path: Path):
    docs, diags = _read(tmp_path, "a: !!str 1\nb: !!float 1\nc: !!int '7'\nd: !!bool yes\n")
    assert diags == []
    assert docs[0].data == {"a": "1", "b": 1.0, "c": 7, "d": True}


def test_binary_file_refused(tmp_path: Path):
    docs, diags = _read(tmp_path, b"\x08\x07\x12\x00\x01onnx")
    assert docs == [] and diags[0].code == "AF002" and "binary" in diags[0].message


def test_non_utf8_refused(tmp_path: Path):
    docs, diags = _read(tmp_path, "name: caf\u00e9\n".encode("latin-1"))
    assert docs == [] and diags[0].code == "AF002" and "UTF-8" in diags[0].message


def test_utf8_bom_accepted(tmp_path: Path):
    docs, diags = _read(tmp_path, "\ufeff" + MINIMAL)
    assert diags == [] and docs[0].data["name"] == "r"


def test_oversized_file_refused_before_parsing(tmp_path: Path):
    docs, diags = _read(tmp_path, "a: [" + "1," * (MAX_FILE_BYTES // 2) + "1]\n")
    assert docs == [] and diags[0].code == "AF003"


def test_syntax_error_located(tmp_path: Path):
    docs, diags = _read(tmp_path, "name: a\nmatch:\n  ops: [\n    - x\n")
    assert docs == [] and diags[0].code == "AF004" and diags[0].location.line >= 3


def test_non_scalar_key(tmp_path: Path):
    _, diags = _read(tmp_path, "? [a, b]\n: 1\n")
    assert diags[0].code == "AF004"


def test_non_mapping_document():
    res = _lint("- a\n- b\n")
    assert [d.code for d in res.diagnostics] == ["AF007"]
    res = _lint("just a string\n")
    assert [d.code for d in res.diagnostics] == ["AF007"]


def test_numeric_keys_become_strings():
    res = _lint(MINIMAL.replace("target_op: R", "target_op: R\n  attributes: {1: a, true: b}"))
    assert res.diagnostics == ()
    assert dict(res.rules[0].rewrite.attributes) == {"1": "a", "true": "b"}


def test_device_files_are_not_read():
    docs, diags = read_documents(Path("/dev/zero"))
    assert docs == [] and diags[0].code == "AF002" and "regular file" in diags[0].message
