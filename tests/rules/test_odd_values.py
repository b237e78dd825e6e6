"""Values YAML can spell that a rule cannot use."""

from __future__ import annotations

from pathlib import Path

import pytest

from ruleengine.errors import RuleLoadError
from ruleengine.rules import load_rule_set
from tests.rules.helpers import MINIMAL, run_cli, write


@pytest.mark.parametrize(
    ("text", "field", "line"),
    [
        (MINIMAL + "benefit_threshold: .nan\n", "benefit_threshold", 7),
        (
            MINIMAL.replace("- type: Relu", "- type: LeakyRelu\n      params: {alpha: .NaN}"),
            "params.alpha",
            5,
        ),
    ],
)
def test_nan_is_an_error_with_its_location(tmp_path: Path, text: str, field: str, line: int):
    """benefit_threshold: .nan passed the schema's [0, 1] bounds (NaN compares false) and
    the rule then fused every candidate; a NaN param silently matched nothing."""
    rule = write(tmp_path, "nan.yaml", text)
    res = run_cli("verify", rule)
    assert res.exit_code == 1, res.output
    assert f"nan.yaml:{line}:" in res.stdout and "AF104" in res.stdout and field in res.stdout
    with pytest.raises(RuleLoadError):
        load_rule_set([rule])


def test_infinite_param_is_still_a_value(tmp_path: Path):
    text = MINIMAL.replace("- type: Relu", "- type: Clip\n      params: {max: .inf}")
    assert run_cli("verify", write(tmp_path, "inf.yaml", text)).exit_code == 0


def test_existing_folder_without_rules_is_not_called_missing(tmp_path: Path):
    """'error: path not found: rules' for a folder that exists but holds no *.yaml."""
    (tmp_path / "rules").mkdir()
    res = run_cli("check", tmp_path / "rules")
    assert res.exit_code == 2
    assert "path not found" not in res.stderr and "no rule files at:" in res.stderr
    assert "no *.yaml or *.yml rule files in directory" in res.stderr


def test_from_op_on_the_first_op_reads_sensibly(tmp_path: Path):
    """The message said 'op 0 can only consume ops 0..-1'."""
    text = MINIMAL.replace(
        "- type: Relu", "- type: Relu\n      input_sources:\n        input0: {from_op: 0}"
    )
    res = run_cli("verify", write(tmp_path, "self.yaml", text))
    assert res.exit_code == 1
    assert "0..-1" not in res.stdout and "op 0 is the first op" in res.stdout


def test_convert_reads_a_bom_and_refuses_duplicate_rule_names(tmp_path: Path):
    """A UTF-8 BOM (Windows editors) was 'not valid JSON'; a rule name given twice was
    converted silently as the last one (json.loads keeps the last key)."""
    bom = tmp_path / "bom.json"
    bom.write_bytes(b'\xef\xbb\xbf{"r": {"pattern": ["Conv", "Relu"], "output_op": "X"}}')
    res = run_cli("convert", bom)
    assert res.exit_code == 0, res.output
    assert "name: r" in res.stdout
    dup = tmp_path / "dup.json"
    dup.write_text(
        '{\n  "r": {"pattern": ["Conv"], "output_op": "X"},\n'
        '  "r": {"pattern": ["Relu"], "output_op": "Y"}\n}\n'
    )
    res = run_cli("convert", dup)
    assert res.exit_code == 2
    assert "dup.json:3:3: AF005 duplicate key 'r'" in res.stderr
