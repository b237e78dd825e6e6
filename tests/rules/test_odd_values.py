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
