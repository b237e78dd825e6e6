"""`autofusion explain` and `autofusion compare`: exit code, stdout and stderr together."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import onnx
import onnx.parser
import pytest
from typer.testing import CliRunner

from ruleengine.cli import app

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / ".." / "shared"
GOLDEN = ROOT / "tests" / "golden" / "analysis"
UPDATE = bool(os.environ.get("AUTOFUSION_UPDATE_GOLDEN"))

MATMUL_RELU = """
<ir_version: 8, opset_import: ["" : 17]>
agraph (float[128,256] a, float[256,128] b) => (float[128,128] y) {
  m = MatMul (a, b)
  y = Relu (m)
}"""

RULES = """
name: matmul_relu
priority: 10
match:
  ops:
    - type: MatMul
    - type: Relu
rewrite:
  target_op: MatMulRelu
---
name: relu_only
priority: 1
match:
  ops:
    - type: Relu
rewrite:
  target_op: JustRelu
"""


@pytest.fixture
def case(tmp_path: Path) -> tuple[Path, Path]:
    model = tmp_path / "mm.onnx"
    onnx.save(onnx.parser.parse_model(MATMUL_RELU), str(model))
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    return model, rules


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def small_cube_target(tmp_path: Path) -> Path:
    """The 910B with the design's example knobs: 128x128 cube tiles, 3 hand-off buffers."""
    text = (ROOT / "targets" / "ascend910b.yaml").read_text()
    text = text.replace("cube_min_tile: [16, 16]", "cube_min_tile: [128, 128]")
    text = text.replace("cube_buffer_factor: 2", "cube_buffer_factor: 3")
    path = tmp_path / "example_target.yaml"
    path.write_text(text.replace("name: ascend910b", "name: example"))
    return path


def test_explain_text_shows_bytes_ub_and_verdict(case) -> None:
    model, rules = case
    res = run("explain", str(model), "--rules", str(rules))
    assert res.exit_code == 0, res.output
    assert res.stderr == ""
    out = res.stdout
    assert "on ascend910b (UB 192 KiB, 191.8 KiB usable" in out
    # MatMul reads a, b and writes m; Relu reads m and writes y: 5 accesses -> 3.
    assert "#1 matmul_relu [MatMul_0 .. Relu_1, 2 nodes]" in out
    assert "HBM access 5 -> 3, bytes 448.0 KiB -> 320.0 KiB, gross saved 128.0 KiB" in out
    assert "UB 4 KiB (fits 192 KiB)" in out
    assert "No benefit (1)\n    relu_only [Relu_1]" in out


def test_explain_reports_the_ub_overflow_example(case, tmp_path) -> None:
    model, rules = case
    res = run("explain", str(model), "-r", str(rules), "--target", str(small_cube_target(tmp_path)))
    assert res.exit_code == 0, res.output
    assert (
        "UB overflow (1)\n    matmul_relu [MatMul_0 .. Relu_1, 2 nodes]: UB working set 320 KiB"
        in (res.stdout)
    )
    assert "m 192 KiB + y 128 KiB" in res.stdout and "UB 320 KiB (exceeds 192 KiB)" in res.stdout


def test_explain_json_document(case) -> None:
    model, rules = case
    res = run("explain", str(model), "-r", str(rules), "--solver", "greedy", "-f", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == 1
    assert doc["target"]["name"] == "ascend910b"
    assert doc["solver"]["name"] == "greedy" and doc["solver"]["status"] == "GREEDY"
    by_rule = {c["rule"]: c for c in doc["candidates"]}
    mm = by_rule["matmul_relu"]
    assert mm["verdict"] == "fuse" and mm["group"] == 1
    assert mm["cost"]["bytes_before"] == 458752 and mm["cost"]["bytes_after"] == 327680
    assert mm["cost"]["hbm_accesses_before"] == 5 and mm["cost"]["ub_fits"] is True
    assert by_rule["relu_only"]["code"] == "no-benefit"
    assert doc["summary"]["groups"] == 1


def test_explain_rule_filter(case) -> None:
    model, rules = case
    res = run("explain", str(model), "-r", str(rules), "--rule", "relu_only")
    assert res.exit_code == 0, res.output
    assert "matmul_relu [" not in res.stdout and "relu_only [" in res.stdout
    res = run("explain", str(model), "-r", str(rules), "--rule", "nope")
    assert res.exit_code == 2
    assert "unknown rule(s): nope" in res.stderr and "Traceback" not in res.output


def test_explain_verdict_filter(case) -> None:
    model, rules = case
    res = run("explain", str(model), "-r", str(rules), "--verdict", "no_benefit")
    assert res.exit_code == 0, res.output
    assert "relu_only [" in res.stdout and "matmul_relu [" not in res.stdout
    res = run("explain", str(model), "-r", str(rules), "--verdict", "fused")
    assert res.exit_code == 2 and "unknown verdict(s): fused" in res.stderr


def test_compare_json_has_exactly_the_documented_keys(case) -> None:
    model, rules = case
    res = run("compare", str(model), "-r", str(rules), "-f", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc) == {"schema_version", "model", "target", "exact", "greedy", "gap"}
    assert doc["schema_version"] == 1 and doc["model"] == str(model)
    assert doc["target"] == "ascend910b"
    keys = {"groups", "gross_bytes_saved", "overhead_bytes", "net_bytes_saved", "status", "bound"}
    for side in ("exact", "greedy"):
        assert set(doc[side]) == keys | {"seconds"}
        s = doc[side]
        assert s["net_bytes_saved"] == s["gross_bytes_saved"] - s["overhead_bytes"]
        assert isinstance(doc[side]["seconds"], float)
    assert doc["exact"]["status"] == "OPTIMAL" and doc["greedy"]["status"] == "GREEDY"
    assert doc["exact"]["net_bytes_saved"] == doc["greedy"]["net_bytes_saved"] > 0
    assert doc["gap"] == {"net_bytes": 0, "relative": 0.0}


def test_compare_text_prints_both_columns_and_the_gap(case) -> None:
    model, rules = case
    res = run("compare", str(model), "-r", str(rules))
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[1].split() == ["exact", "greedy"]
    assert lines[2].split() == ["groups", "1", "1"]
    assert lines[3].split()[:2] == ["net", "saved"] and lines[4].split()[:2] == ["gross", "saved"]
    assert "KiB" in lines[3] and " KB" not in res.stdout and " MB" not in res.stdout
    assert lines[-1].startswith("gap: exact saves 0 B net more than greedy (+0.00%; exact OPTIMAL)")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--target", "ascend999"], "unknown target 'ascend999'; known targets: ascend310p"),
        (["--dim", "oops"], "bad --dim 'oops'"),
    ],
)
def test_bad_flags_exit_2_without_traceback(case, args, message) -> None:
    model, rules = case
    for command in ("explain", "compare"):
        res = run(command, str(model), "-r", str(rules), *args)
        assert res.exit_code == 2, res.output
        assert message in res.stderr
        assert res.stdout == "" and "Traceback" not in res.output


def test_missing_model_exits_2(tmp_path) -> None:
    res = run("explain", str(tmp_path / "absent.onnx"))
    assert res.exit_code == 2
    assert "model file not found" in res.stderr


def test_compare_on_a_shared_model_exact_is_optimal_and_not_below_greedy() -> None:
    model = SHARED / "models" / "resnet18-narrow.ts-keepbn.onnx"
    res = run("compare", str(model), "--preset", "cnn", "-f", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["exact"]["status"] == "OPTIMAL"
    assert doc["exact"]["net_bytes_saved"] >= doc["greedy"]["net_bytes_saved"] > 0
    assert doc["exact"]["groups"] > 10


def _mask_seconds(text: str) -> str:
    text = re.sub(r'"seconds": [0-9.e-]+', '"seconds": 0.0', text)
    return re.sub(r"\b[0-9]+\.[0-9]{3} s\b", "0.000 s", text)


@pytest.mark.parametrize("fmt, suffix", [("text", "txt"), ("json", "json")])
@pytest.mark.parametrize("which", ["ascend910b", "example"])
def test_explain_golden(case, tmp_path, monkeypatch, which, fmt, suffix) -> None:
    """What users read, as golden files (AUTOFUSION_UPDATE_GOLDEN=1 rewrites them)."""
    model, rules = case
    monkeypatch.chdir(tmp_path)
    target = which if which == "ascend910b" else small_cube_target(tmp_path).name
    res = run("explain", model.name, "-r", rules.name, "-t", target, "-f", fmt)
    assert res.exit_code == 0, res.output
    got = _mask_seconds(res.stdout)
    golden = GOLDEN / f"explain_matmul_relu.{which}.{suffix}"
    if UPDATE:
        golden.write_text(got)
    assert got == golden.read_text()


def test_targets_lists_the_bundled_targets() -> None:
    res = run("targets")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].split()[:3] == ["target", "UB", "L1"]
    assert any(line.startswith("ascend910b (default)  192 KiB") for line in lines)
    doc = json.loads(run("targets", "-f", "json").stdout)
    names = {t["name"] for t in doc["targets"]}
    assert {"ascend910", "ascend910b", "ascend910b3", "ascend910b4", "ascend310p"} <= names
