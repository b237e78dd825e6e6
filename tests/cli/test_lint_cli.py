"""CLI tests for verify/check/rule-codes/rule-schema/convert: exit code, stdout and stderr
asserted together; rendered findings compared with golden files in tests/golden/lint/.

Regenerate the golden files with ``AUTOFUSION_UPDATE_GOLDEN=1 pytest tests/cli/test_lint_cli.py``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ruleengine.cli import app
from tests.rules.helpers import TEST_KERNELS

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / ".." / "shared" / "seed-rules"
GOLDEN = ROOT / "tests" / "golden" / "lint"
GOLDEN_FILES = [
    "attention_fusion.yaml",
    "chunked_rewrite_fragment.yaml",
    "conv_bn_relu_fusion.yaml",
    "matmul_reshape_fusion.yaml",
    "priority_conflict.yaml",
]
MINIMAL = "name: r\nmatch:\n  ops:\n    - type: Relu\nrewrite:\n  target_op: R\n"


def run(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def seeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The seed rules copied into an empty working directory (paths print relative)."""
    for name in GOLDEN_FILES:
        shutil.copy(SEED / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("fmt", "suffix"), [("text", "txt"), ("json", "json"), ("github", "github"), ("sarif", "sarif")]
)
def test_check_output_matches_golden(seeds: Path, fmt: str, suffix: str):
    res = run("check", "--format", fmt, *GOLDEN_FILES)
    assert res.exit_code == 1
    assert res.stderr == ""
    golden = GOLDEN / f"check.{suffix}"
    if os.environ.get("AUTOFUSION_UPDATE_GOLDEN"):
        golden.write_text(res.stdout, encoding="utf-8")
    assert res.stdout == golden.read_text(encoding="utf-8")


def test_output_is_deterministic_whatever_the_argument_order(seeds: Path):
    a = run("check", "--format", "json", *GOLDEN_FILES)
    b = run("check", "--format", "json", *reversed(GOLDEN_FILES))
    c = run("check", "--format", "json", ".")
    assert a.stdout == b.stdout
    assert json.loads(a.stdout)["diagnostics"] == json.loads(c.stdout)["diagnostics"]


def test_sarif_is_structurally_valid(seeds: Path):
    doc = json.loads(run("check", "--format", "sarif", *GOLDEN_FILES).stdout)
    assert doc["version"] == "2.1.0"
    run0 = doc["runs"][0]
    ids = [r["id"] for r in run0["tool"]["driver"]["rules"]]
    for result in run0["results"]:
        assert ids[result["ruleIndex"]] == result["ruleId"]
        region = result["locations"][0]["physicalLocation"]["region"]
        assert region["startLine"] >= 1


def test_verify_clean_file(tmp_path: Path):
    f = tmp_path / "ok.yaml"
    f.write_text(MINIMAL)
    res = run("verify", f)
    assert (res.exit_code, res.stdout, res.stderr) == (
        0,
        "All checks passed (1 file, 1 rule checked).\n",
        "",
    )


def test_verify_missing_path_exits_2_on_stderr(tmp_path: Path):
    res = run("verify", tmp_path / "nope.yaml")
    assert res.exit_code == 2
    assert res.stdout == ""
    assert "AF001" in res.stderr and "nope.yaml" in res.stderr
    assert "Traceback" not in res.stderr


def test_check_empty_directory_exits_2(tmp_path: Path):
    res = run("check", tmp_path)
    assert res.exit_code == 2 and res.stdout == "" and "no *.yaml" in res.stderr


def test_check_warnings_pass_without_strict_and_fail_with_it(tmp_path: Path):
    f = tmp_path / "w.yaml"
    f.write_text(MINIMAL.replace("- type: Relu", "- type: Relu\n      params: {alpha: 1}"))
    plain = run("check", f)
    assert plain.exit_code == 0
    assert "warning AF303 unknown-param" in plain.stdout
    assert "warnings do not fail without --strict" in plain.stdout
    strict = run("check", "--strict", f)
    assert strict.exit_code == 1 and strict.stderr == ""


def test_verbose_lists_files_and_rules_on_stderr(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.yaml").write_text(MINIMAL)
    (tmp_path / "b.yml").write_text(MINIMAL.replace("name: r", "name: s").replace("Relu", "Elu"))
    (tmp_path / "notes.txt").write_text("not a rule")
    res = run("check", "--verbose", "--kernels", TEST_KERNELS, tmp_path)
    assert res.exit_code == 0
    lines = res.stderr.splitlines()
    assert lines == [
        f"checked {(tmp_path / 'b.yml').as_posix()}: s",
        f"checked {(tmp_path / 'sub' / 'a.yaml').as_posix()}: r",
    ]
    assert res.stdout == "All checks passed (2 files, 2 rules checked).\n"


def test_glob_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    Path("x1.yaml").write_text(MINIMAL)
    Path("x2.yaml").write_text(MINIMAL.replace("name: r", "name: q").replace("Relu", "Elu"))
    res = run("check", "x*.yaml")
    assert res.exit_code == 0 and "2 files, 2 rules" in res.stdout
    none = run("check", "zz*.yaml")
    assert none.exit_code == 2 and "matched no rule files" in none.stderr


def test_duplicate_names_across_files_only_in_check(tmp_path: Path):
    (tmp_path / "a.yaml").write_text(MINIMAL)
    (tmp_path / "b.yaml").write_text(MINIMAL)
    assert run("verify", tmp_path / "a.yaml", tmp_path / "b.yaml").exit_code == 0
    res = run("check", tmp_path)
    assert res.exit_code == 1
    assert "AF301 duplicate-rule-name" in res.stdout and "a.yaml:1:1" in res.stdout


def test_unknown_format_is_a_usage_error(tmp_path: Path):
    f = tmp_path / "ok.yaml"
    f.write_text(MINIMAL)
    res = run("check", "--format", "xml", f)
    assert res.exit_code == 2 and res.stdout == ""


def test_rule_schema_prints_the_schema():
    res = run("rule-schema")
    assert res.exit_code == 0
    assert json.loads(res.stdout)["title"] == "autofusion fusion rule"
    path = run("rule-schema", "--path")
    assert path.stdout.strip().endswith("rule.schema.json")


def test_convert_to_stdout_and_refuses_overwrite(tmp_path: Path):
    src = tmp_path / "fusion_rules.json"
    shutil.copy(SEED / "fusion_rules.json", src)
    res = run("convert", src)
    assert res.exit_code == 0
    assert "name: conv_bn_relu" in res.stdout and "name: matmul_relu" in res.stdout
    assert res.stderr == ""
    out = tmp_path / "out"
    assert run("convert", src, "-o", out).exit_code == 0
    again = run("convert", src, "-o", out)
    assert again.exit_code == 2 and "--force" in again.stderr
    assert run("convert", src, "-o", out, "--force").exit_code == 0


def test_convert_reports_unmapped_conditions(tmp_path: Path):
    src = tmp_path / "r.json"
    src.write_text(
        json.dumps(
            {
                "x": {
                    "pattern": ["MatMul", "Relu"],
                    "output_op": "Y",
                    "conditions": {"layout": "NHWC"},
                }
            }
        )
    )
    res = run("convert", src)
    assert res.exit_code == 0
    assert '# not mapped (no equivalent in the rule format): layout: "NHWC"' in res.stdout
    assert "not mapped" in res.stderr


@pytest.mark.parametrize(
    "content",
    ["[1, 2", "{}", '{"a": 1}', '{"a": {"pattern": []}}', "\u00ff\u00fe"],
)
def test_convert_bad_input_exits_2_without_traceback(tmp_path: Path, content: str):
    src = tmp_path / "bad.json"
    src.write_text(content)
    res = run("convert", src)
    assert res.exit_code == 2
    assert res.stdout == "" and "Traceback" not in res.stderr and "internal error" not in res.stderr


def test_check_bundled_preset():
    res = run("check", "--preset", "all", "--strict")
    assert res.exit_code == 0, res.stdout
    assert res.stdout.startswith("All checks passed") and res.stderr == ""
    bad = run("check", "--preset", "nope")
    assert bad.exit_code == 2 and "unknown preset 'nope'" in bad.stderr and bad.stdout == ""
    none = run("check")
    assert none.exit_code == 2 and "no rule files given" in none.stderr


def test_rule_text_on_stdin():
    res = CliRunner().invoke(app, ["verify", "-"], input=MINIMAL.replace("Relu", "relu"))
    assert res.exit_code == 1
    assert res.stdout.startswith("<stdin>:4:13: error AF201 unknown-op-type")
    ok = CliRunner().invoke(
        app, ["check", "--strict", "--kernels", TEST_KERNELS, "-"], input=MINIMAL
    )
    assert (ok.exit_code, ok.stderr) == (0, "")


def test_convert_deep_json_and_colliding_names(tmp_path: Path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    res = run("convert", deep)
    assert res.exit_code == 2 and "internal error" not in res.stderr
    clash = tmp_path / "clash.json"
    clash.write_text(
        json.dumps(
            {
                "a b": {"pattern": ["MatMul", "Relu"], "output_op": "X"},
                "a_b": {"pattern": ["Conv", "Relu"], "output_op": "Y"},
            }
        )
    )
    out = tmp_path / "out"
    assert run("convert", clash, "-o", out).exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == ["a_b.yaml", "a_b_2.yaml"]
    assert run("check", "--strict", "--kernels", TEST_KERNELS, out).exit_code == 0


def test_sarif_uris_are_percent_encoded_uri_references(tmp_path: Path, monkeypatch):
    """A file named 'a b#1.yaml' was written as the uri 'a b#1.yaml' (a space is not
    allowed in a URI and '#' starts a fragment); an absolute path was not a file: URI."""
    folder = tmp_path / "my rules"
    folder.mkdir()
    (folder / "a b#1.yaml").write_text(MINIMAL + "bogus: 1\n")
    monkeypatch.chdir(tmp_path)
    rel = json.loads(run("check", "--format", "sarif", "my rules").stdout)
    uri = rel["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert uri["uri"] == "my%20rules/a%20b%231.yaml"
    # an absolute path under the working directory prints relative to it too
    absolute = json.loads(run("check", "--format", "sarif", str(folder)).stdout)
    loc = absolute["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "my%20rules/a%20b%231.yaml"
    # outside it, a file: URI
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    absolute = json.loads(run("check", "--format", "sarif", str(folder)).stdout)
    loc = absolute["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == (folder / "a b#1.yaml").as_uri()
