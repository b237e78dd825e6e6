"""Issue 15 item 9: every number field is range-checked with a code, never an
OverflowError or ValueError from deep inside."""

from __future__ import annotations

import json
import re

import pytest

from tests.hostile.helpers import ROOT, copy_model, run

TARGET = (ROOT / "targets" / "ascend910b.yaml").read_text()


@pytest.mark.parametrize(
    ("field", "value", "line"),
    [("ub_bytes", "9" * 401, 7), ("ub_bytes", "9" * 5000, 7), ("cores", "1.0e+30", None),
     ("hbm_bandwidth", "1.0e+300", None)],
)  # fmt: skip
def test_target_numbers_out_of_range_are_af902(tmp_path, field, value, line):
    text = re.sub(rf"^{field}:\s*\S+", f"{field}: {value}", TARGET, flags=re.M)
    target = tmp_path / "t.yaml"
    target.write_text(text)
    res = run("explain", copy_model(tmp_path), "--target", target)
    assert res.exit_code == 2, res.output
    assert "AF902" in res.stderr and "internal error" not in res.output
    assert "out of range" in res.stderr
    if line is not None:
        assert f"{target}:{line}:" in res.stderr  # at its real line, not 1:1


@pytest.mark.parametrize(
    "flags",
    [["--verify", "--seed", "-1"], ["--time-limit", "nan"], ["--time-limit", "-3"],
     ["--benefit-threshold", "2"], ["--benefit-threshold", "nan"]],
)  # fmt: skip
def test_number_flags_out_of_range_are_usage_errors_with_a_code(tmp_path, flags):
    res = run("fuse", copy_model(tmp_path), "-o", tmp_path / "o", *flags)
    assert res.exit_code == 2, res.output
    assert "AF548" in res.stderr and "internal error" not in res.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("dim", ["batch=-1", "batch=99999999999999999999", "batch", "=3"])
def test_bad_dim_flags_have_a_code(tmp_path, dim):
    res = run("fuse", copy_model(tmp_path), "-o", tmp_path / "o", "--dim", dim)
    assert res.exit_code == 2 and "AF547" in res.stderr, res.output


@pytest.mark.parametrize(
    ("yaml_line", "col"),
    [("priority: " + "9" * 401, 11), ("priority: -" + "9" * 30, 11),
     ("match:\n  ops:\n    - type: Relu\n      inputs: {max_inputs: " + "9" * 40 + "}", 28)],
)  # fmt: skip
def test_rule_numbers_out_of_range_are_located(tmp_path, yaml_line, col):
    body = "name: a\n" + yaml_line + "\n"
    if "match:" not in yaml_line:
        body += "match:\n  ops:\n    - type: Relu\n    - type: Sigmoid\n"
    p = tmp_path / "r.yaml"
    p.write_text(body + "rewrite:\n  target_op: A\n")
    res = run("verify", "--format", "json", p)
    assert res.exit_code == 1, res.output
    (d,) = json.loads(res.stdout)["diagnostics"]
    assert d["code"] == "AF104" and d["column"] == col
