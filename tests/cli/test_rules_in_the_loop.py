"""match, explain, compare and fuse tell the rule set's lint findings (once, with their
location), and a misspelt param never widens a rule: it holds on no node."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import onnx.parser
import pytest

from tests.rules.helpers import run_cli

MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8,16,16] x, float[8,8,3,3] w) => (float[1,8,16,16] y)
{
  [conv1] c = Conv <pads = [1,1,1,1], group = 1> (x, w)
  [relu1] r = Relu (c)
  [conv2] d = Conv <pads = [1,1,1,1]> (r, w)
  [relu2] y = Relu (d)
}
"""

RULE = """name: conv_relu
match:
  ops:
    - type: Conv
      params:
        {param}: 1
    - type: Relu
rewrite:
  target_op: ConvRelu
"""


@pytest.fixture
def case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    onnx.save(onnx.parser.parse_model(MODEL), tmp_path / "m.onnx")
    (tmp_path / "typo.yaml").write_text(RULE.format(param="grop"))
    (tmp_path / "right.yaml").write_text(RULE.format(param="group"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _af217(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "AF217" in line]


def test_fuse_names_a_misspelt_param_and_does_not_widen_the_rule(case: Path):
    right = run_cli("fuse", "m.onnx", "--rules", "right.yaml", "-o", "out1", "-f", "json")
    assert right.exit_code == 0, right.stderr
    assert len(json.loads(right.stdout)["groups"]) == 2
    assert _af217(right.stderr) == []
    typo = run_cli("fuse", "m.onnx", "--rules", "typo.yaml", "-o", "out2", "-f", "json")
    # issue 39: a param the op does not have never matches, so the rule is refused (an
    # error, as in verify), never run and counted as matched
    assert typo.exit_code == 2, typo.stderr
    assert not (case / "out2" / "plan.json").exists()
    (line,) = _af217(typo.stderr)
    assert line.strip().startswith("typo.yaml:6:9: AF217") and "'grop'" in line
    assert "did you mean 'group'" in typo.stderr


@pytest.mark.parametrize(
    "command",
    [
        ("match", "m.onnx", "--rules", "typo.yaml"),
        ("explain", "m.onnx", "--rules", "typo.yaml"),
        ("compare", "m.onnx", "--rules", "typo.yaml"),
    ],
)
def test_lint_findings_are_printed_once_with_their_location(case: Path, command):
    res = run_cli(*command)
    assert res.exit_code == 2, (
        res.stderr
    )  # the rule is refused (AF217: a misspelt param is an error)
    (line,) = _af217(res.stderr)
    assert "typo.yaml:6:9" in line


def test_explain_says_param_mismatch_not_constraint_failed(case: Path):
    # a param the op has, with a value no node holds (a misspelt one is refused: AF217)
    (case / "wrong.yaml").write_text(RULE.format(param="group").replace("group: 1", "group: 2"))
    res = run_cli("explain", "m.onnx", "--rules", "wrong.yaml", "-f", "json")
    assert res.exit_code == 0
    rows = json.loads(res.stdout)["candidates"]
    assert rows and {r["verdict"] for r in rows} == {"param_mismatch"}
    assert all("group" in r["reason"] for r in rows)
    text = run_cli("explain", "m.onnx", "--rules", "wrong.yaml")
    assert "Param mismatch" in text.stdout and "Constraint failed" not in text.stdout
