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


def _af303(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "AF303" in line]


def test_fuse_names_a_misspelt_param_and_does_not_widen_the_rule(case: Path):
    right = run_cli("fuse", "m.onnx", "--rules", "right.yaml", "-o", "out1", "-f", "json")
    assert right.exit_code == 0, right.stderr
    assert len(json.loads(right.stdout)["groups"]) == 2
    assert _af303(right.stderr) == []
    typo = run_cli("fuse", "m.onnx", "--rules", "typo.yaml", "-o", "out2", "-f", "json")
    assert typo.exit_code == 0, typo.stderr
    assert json.loads(typo.stdout)["groups"] == []  # not 2, and not every Conv + Relu
    (line,) = _af303(typo.stderr)
    assert line.startswith("warning: typo.yaml:6:9: AF303") and "'grop'" in line
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
    assert res.exit_code == 0, res.stderr
    (line,) = _af303(res.stderr)
    assert "typo.yaml:6:9" in line


def test_explain_says_param_mismatch_not_constraint_failed(case: Path):
    res = run_cli("explain", "m.onnx", "--rules", "typo.yaml", "-f", "json")
    assert res.exit_code == 0
    rows = json.loads(res.stdout)["candidates"]
    assert rows and {r["verdict"] for r in rows} == {"param_mismatch"}
    assert all("grop" in r["reason"] for r in rows)
    text = run_cli("explain", "m.onnx", "--rules", "typo.yaml")
    assert "Param mismatch" in text.stdout and "Constraint failed" not in text.stdout
