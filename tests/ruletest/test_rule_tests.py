"""`autofusion test`: rule tests beside the rules; exit code, stdout and files together."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from tests.rules.helpers import run_cli

REPO = Path(__file__).resolve().parents[2]

RULE = """name: relu_sig
match:
  ops:
    - type: Relu
    - type: Sigmoid
rewrite:
  target_op: ReluSig
"""

GRAPH = """<ir_version: 8, opset_import: ["" : 17]>
g (float[4] x) => (float[4] y, float[4] z)
{
  [r1] a = Relu (x)
  [s1] y = Sigmoid (a)
  [r2] b = Relu (x)
  [t2] z = Tanh (b)
}
"""


def _repo(tmp_path: Path, tests: dict[str, str], rule: str = RULE) -> Path:
    (tmp_path / "relu_sig.yaml").write_text(rule)
    folder = tmp_path / "relu_sig.tests"
    folder.mkdir()
    for name, header in tests.items():
        (folder / name).write_text(header + GRAPH)
    return tmp_path


def _json(res) -> dict:
    return json.loads(res.stdout)


def test_passing_tests_exit_0(tmp_path):
    repo = _repo(tmp_path, {"hit.onnxtxt": "# match: r1,s1\n"})
    res = run_cli("test", repo)
    assert res.exit_code == 0, res.stdout + res.stderr
    assert "1 test of 1 rule file: 1 passed" in res.stdout


def test_missing_and_unexpected_matches_fail_naming_the_rule(tmp_path):
    repo = _repo(tmp_path, {"a.onnxtxt": "# match: r2,t2\n", "b.onnxtxt": "# no-match\n"})
    res = run_cli("test", repo)
    assert res.exit_code == 1
    assert "relu_sig: expected match r2,t2 not found" in res.stdout
    assert "relu_sig: unexpected match r1,s1" in res.stdout
    assert "FAIL  relu_sig.tests/a.onnxtxt" in res.stdout or "a.onnxtxt" in res.stdout


def test_todo_reports_but_does_not_fail(tmp_path):
    repo = _repo(
        tmp_path,
        {
            "pending.onnxtxt": "# match: r1,s1\n# todo-match: r2,t2\n",
            "done.onnxtxt": "# todo-match: r1,s1\n",
            "wrong.onnxtxt": "# todo-no-match\n",
        },
    )
    res = run_cli("test", repo, "-f", "json")
    assert res.exit_code == 0, res.stdout
    tests = {Path(t["test"]).name: t for t in _json(res)["rule_files"][0]["tests"]}
    assert tests["pending.onnxtxt"]["status"] == "todo"
    assert tests["pending.onnxtxt"]["todo_pending"] == [["r2", "t2"]]
    assert tests["done.onnxtxt"]["status"] == "pass"
    assert any("matches now" in m for m in tests["done.onnxtxt"]["messages"])
    assert tests["wrong.onnxtxt"]["status"] == "todo"


def test_near_miss_expectation(tmp_path):
    graph = GRAPH.replace("(float[4] y, float[4] z)", "(float[4] y, float[4] z, float[4] a)")
    (tmp_path / "relu_sig.yaml").write_text(RULE)
    (tmp_path / "relu_sig.tests").mkdir()
    test = tmp_path / "relu_sig.tests" / "escape.onnxtxt"
    test.write_text("# no-match\n# near-miss: intermediate-escapes\n" + graph)
    assert run_cli("test", tmp_path).exit_code == 0
    test.write_text("# no-match\n# near-miss: input-count\n" + graph)
    res = run_cli("test", tmp_path)
    assert res.exit_code == 1
    assert "expected near miss input-count not recorded (recorded: intermediate-escapes)" in (
        res.stdout
    )


def test_near_miss_codes_have_one_spelling_and_the_old_one_is_read(tmp_path):
    """explain, match and rule tests spell a near-miss code alike (kebab-case); a test
    that copied the old snake_case form still passes, with a deprecation warning."""
    graph = GRAPH.replace("(float[4] y, float[4] z)", "(float[4] y, float[4] z, float[4] a)")
    (tmp_path / "relu_sig.yaml").write_text(RULE)
    (tmp_path / "relu_sig.tests").mkdir()
    test = tmp_path / "relu_sig.tests" / "escape.onnxtxt"
    test.write_text("# no-match\n# near-miss: intermediate_escapes\n" + graph)
    res = run_cli("test", tmp_path)
    assert res.exit_code == 0, res.output
    assert "warning: AF605" in res.stderr
    assert "the code is 'intermediate-escapes'" in res.stderr
    test.write_text("# no-match\n# near-miss: intermediate-escapes\n" + graph)
    res = run_cli("test", tmp_path)
    assert res.exit_code == 0 and "AF605" not in res.stderr
    # the spelling explain prints is the one the test records
    model = tmp_path / "m.onnx"
    from ruleengine.ruletest.spec import build_model

    model.write_bytes(build_model(graph, "m").SerializeToString())
    res = run_cli("explain", model, "--rules", tmp_path / "relu_sig.yaml", "--all")
    assert "intermediate-escapes" in res.stdout and "intermediate_escapes" not in res.stdout


def test_rule_directive_selects_one_rule_of_a_file(tmp_path):
    two = RULE + "---\n" + RULE.replace("relu_sig", "relu_tanh").replace("Sigmoid", "Tanh")
    repo = _repo(tmp_path, {"one.onnxtxt": "# rule: relu_tanh\n# match: r2,t2\n"}, rule=two)
    assert run_cli("test", repo).exit_code == 0
    (repo / "relu_sig.tests" / "one.onnxtxt").write_text("# rule: nope\n# no-match\n" + GRAPH)
    res = run_cli("test", repo)
    assert res.exit_code == 1 and "AF601" in res.stdout and "relu_sig, relu_tanh" in res.stdout


@pytest.mark.parametrize(
    ("header", "code", "where"),
    [
        ("# expect: r1,s1\n", "AF601", "a.onnxtxt:1:3"),
        ("# no-match: r1\n", "AF601", "a.onnxtxt:1:3"),
        ("# just words\n", "AF602", "a.onnxtxt:1:1"),
    ],
)
def test_directive_mistakes_are_located_errors(tmp_path, header, code, where):
    repo = _repo(tmp_path, {"a.onnxtxt": header})
    res = run_cli("test", repo)
    assert res.exit_code == 1
    assert code in res.stdout and where in res.stdout


def test_bad_onnx_text_is_located(tmp_path):
    repo = _repo(tmp_path, {"a.onnxtxt": "# no-match\n"})
    test = repo / "relu_sig.tests" / "a.onnxtxt"
    test.write_text(test.read_text().replace("Relu (x)\n  [s1]", "Relu (x\n  [s1]"))
    res = run_cli("test", repo, "-f", "json")
    assert res.exit_code == 1
    diag = _json(res)["rule_files"][0]["tests"][0]["diagnostics"][0]
    assert diag["code"] == "AF603" and diag["line"] == 6


def test_orphan_tests_folder_is_reported(tmp_path):
    repo = _repo(tmp_path, {"a.onnxtxt": "# match: r1,s1\n"})
    shutil.copytree(repo / "relu_sig.tests", repo / "renamed.tests")
    res = run_cli("test", repo)
    assert res.exit_code == 1 and "AF604" in res.stdout and "renamed.yaml" in res.stdout


def test_a_single_test_file_or_tests_folder_can_be_run(tmp_path):
    repo = _repo(tmp_path, {"a.onnxtxt": "# match: r1,s1\n", "b.onnxtxt": "# no-match\n"})
    res = run_cli("test", repo / "relu_sig.tests" / "a.onnxtxt", "-f", "json")
    assert res.exit_code == 0 and _json(res)["summary"]["tests"] == 1
    res = run_cli("test", repo / "relu_sig.tests", "-f", "json")
    assert res.exit_code == 1 and _json(res)["summary"]["tests"] == 2


def test_update_writes_what_matches_now(tmp_path):
    repo = _repo(
        tmp_path,
        {
            "stale.onnxtxt": "# A comment stays.\n# match: r2,t2\n# todo-match: r9,s9\n",
            "new.onnxtxt": "",
            "ok.onnxtxt": "# match: r1,s1\n",
        },
    )
    folder = repo / "relu_sig.tests"
    before_ok = (folder / "ok.onnxtxt").read_text()
    res = run_cli("test", repo, "--update")
    assert res.exit_code == 1  # the run before the update failed
    assert "updated" in res.stdout
    stale = (folder / "stale.onnxtxt").read_text()
    assert stale.startswith("# A comment stays.\n# match: r1,s1\n# todo-match: r9,s9\n")
    assert "r2,t2" not in stale
    assert (folder / "new.onnxtxt").read_text().startswith("# match: r1,s1\n")
    assert (folder / "ok.onnxtxt").read_text() == before_ok
    assert run_cli("test", repo).exit_code == 0


def test_junit_output_is_valid_xml(tmp_path):
    repo = _repo(
        tmp_path,
        {
            "a.onnxtxt": "# match: r1,s1\n",
            "b.onnxtxt": "# no-match\n",
            "c.onnxtxt": "# match: r1,s1\n# todo-match: r2,t2\n",
        },
    )
    res = run_cli("test", repo, "-f", "junit")
    assert res.exit_code == 1
    root = ET.fromstring(res.stdout)
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("3", "1", "1")
    case = root.find(".//testcase[@name='b.onnxtxt']")
    assert case is not None and case.find("failure") is not None
    assert case.get("classname") == "relu_sig"


@pytest.mark.parametrize("fmt", ["text", "json", "junit"])
def test_could_not_run_is_valid_output_in_every_format(tmp_path, fmt):
    res = run_cli("test", tmp_path / "missing", "-f", fmt)
    assert res.exit_code == 2
    assert "AF001" in res.stderr
    if fmt == "json":
        assert _json(res)["error"]["diagnostics"][0]["code"] == "AF001"
    elif fmt == "junit":
        assert ET.fromstring(res.stdout).find(".//error") is not None
    else:
        assert res.stdout == ""


def test_no_tests_at_all_is_exit_2(tmp_path):
    (tmp_path / "relu_sig.yaml").write_text(RULE)
    res = run_cli("test", tmp_path, "-f", "json")
    assert res.exit_code == 2 and "no rule tests found" in _json(res)["error"]["message"]


# ---------------------------------------------------------------- the bundled library


def test_a_copy_of_the_bundled_rules_passes(tmp_path, monkeypatch):
    shutil.copytree(REPO / "rules", tmp_path / "rules")
    monkeypatch.chdir(tmp_path)
    res = run_cli("test", "rules/")
    assert res.exit_code == 0, res.stdout
    assert " 0 failed" not in res.stdout and "passed" in res.stdout


@pytest.mark.parametrize(
    ("rule", "edit"),
    [
        ("cnn/conv_bn_relu.yaml", ("type: Relu", "type: Sigmoid")),  # matches nothing now
        ("transformer/softmax.yaml", ("name: softmax", "name: [softmax")),  # does not load
    ],
)
def test_a_broken_bundled_rule_fails_naming_it(tmp_path, monkeypatch, rule, edit):
    shutil.copytree(REPO / "rules", tmp_path / "rules")
    path = tmp_path / "rules" / rule
    text = path.read_text()
    assert edit[0] in text
    path.write_text(text.replace(edit[0], edit[1], 1))
    monkeypatch.chdir(tmp_path)
    res = run_cli("test", "rules/")
    assert res.exit_code == 1
    name = Path(rule).stem
    bad = [line for line in res.stdout.splitlines() if line.startswith(("FAIL", "ERROR"))]
    assert bad and all(f"rules/{Path(rule).parent}/{name}" in line for line in bad), res.stdout
