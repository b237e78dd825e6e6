"""The bundled library as a whole: lint-clean under --strict, described, listed by presets."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ruleengine.cli import app
from ruleengine.rules import lint_paths, load_rule_set, preset_names, preset_paths

from .fixturelib import RULES

RULE_FILES = sorted(RULES.glob("*/*.yaml"))


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_library_size_and_presets():
    assert {"cnn", "transformer", "all"} <= set(preset_names())
    cnn = load_rule_set([], preset="cnn").rules
    transformer = load_rule_set([], preset="transformer").rules
    everything = load_rule_set([], preset="all").rules
    assert len(everything) >= 24
    assert {r.name for r in everything} == {r.name for r in cnn} | {r.name for r in transformer}
    assert [p.name for p in preset_paths("all")] == ["cnn", "generic", "transformer"]
    # the rules written by op class belong to every preset
    generic = {r.name for r in load_rule_set([], preset="generic").rules}
    assert {"cube_epilogue", "norm_epilogue", "attention_core"} <= generic
    assert generic <= {r.name for r in cnn} and generic <= {r.name for r in transformer}


def test_check_strict_is_clean():
    res = run("check", str(RULES), "--strict")
    assert res.exit_code == 0, res.output
    assert "All checks passed" in res.output


@pytest.mark.parametrize("path", RULE_FILES, ids=[p.stem for p in RULE_FILES])
def test_rule_file(path):
    result = lint_paths([path], set_checks=False)
    assert not result.diagnostics, [str(d) for d in result.diagnostics]
    (rule,) = load_rule_set([path]).rules
    assert rule.name == path.stem, "a bundled rule lives in <rule name>.yaml"
    assert rule.description and len(rule.description.split()) >= 5
    assert "\n" not in rule.description.strip(), "descriptions are one line (rules list)"
    assert rule.output.kernel_name, "every rule names its kernel for the plan"


def test_priorities_are_distinct():
    rules = load_rule_set([], preset="all").rules
    by_priority: dict[int, list[str]] = {}
    for r in rules:
        by_priority.setdefault(r.priority, []).append(r.name)
    assert {p: n for p, n in by_priority.items() if len(n) > 1} == {}


def test_rules_list_text():
    res = run("rules", "list")
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    rules = load_rule_set([], preset="all").rules
    assert len(lines) == len(rules) + 1
    assert lines[-1].startswith(f"{len(rules)} rules (cnn ")
    conv = next(line for line in lines if line.split()[1] == "conv_bn_relu")
    assert conv.split()[0] == "cnn"
    assert "Conv (+ BatchNormalization) + Relu" in conv


def test_rules_list_preset_and_json():
    res = run("rules", "list", "--preset", "transformer", "--format", "json")
    assert res.exit_code == 0
    data = json.loads(res.stdout)
    assert data["schema_version"] == 1
    names = [r["name"] for r in data["rules"]]
    assert "sdpa" in names and "conv_bn" not in names
    assert all(
        r["preset"] in ("transformer", "generic") and r["description"] for r in data["rules"]
    )


def test_rules_list_paths(tmp_path):
    (tmp_path / "r.yaml").write_text(
        "name: mine\ndescription: my rule\nmatch:\n  ops:\n    - type: Relu\n"
        "rewrite:\n  target_op: R\n"
    )
    res = run("rules", "list", str(tmp_path))
    assert res.exit_code == 0
    assert res.stdout.splitlines() == ["-  mine  my rule", "1 rule"]


def test_rules_list_unknown_preset():
    res = run("rules", "list", "--preset", "nope")
    assert res.exit_code == 2
    assert res.stdout == ""
    assert "unknown preset 'nope'" in res.stderr
    assert "cnn, generic, transformer, all" in res.stderr
