"""`autofusion fuse` end to end: exit code, stdout and stderr together; files; safe mode."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from ruleengine.cli import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mlp_block.onnx"
GOLDEN_RULES = ROOT / "tests" / "golden" / "fuse" / "rules"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    copy = tmp_path / "mlp_block.onnx"
    shutil.copy(EXAMPLE, copy)
    return copy


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, ["fuse", *args], env=env or {})


def test_fuse_writes_every_output_and_reports(model, tmp_path):
    before = model.read_bytes()
    out = tmp_path / "out"
    res = run(str(model), "--rules", str(GOLDEN_RULES), "-o", str(out))
    assert res.exit_code == 0, res.output
    assert "Fused groups (5)" in res.stdout
    assert f"Files written to {out}:" in res.stdout
    names = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert {"mlp_block.fused.onnx", "plan.json", "report.txt", "report.json", "graph.dot"} <= names
    assert "output/kernels/conv_bn_relu.kernel.json" in names
    assert not [n for n in names if n.endswith(".tmp")]
    fused = onnx.load(str(out / "mlp_block.fused.onnx"))
    onnx.checker.check_model(fused, full_check=True)
    assert model.read_bytes() == before


def test_json_format_prints_the_report_json(model, tmp_path):
    res = run(str(model), "--rules", str(GOLDEN_RULES), "-o", str(tmp_path / "o"), "-f", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["totals"]["groups"] == 5
    assert data["schema_version"] == 1


def test_default_preset_and_verify(model, tmp_path):
    res = run(str(model), "-o", str(tmp_path / "o"), "--verify")
    assert res.exit_code == 0, res.output
    assert "PASSED" in res.stdout


def test_env_vars_enable_and_disable(model, tmp_path):
    res = run(
        str(model),
        "--rules",
        str(GOLDEN_RULES),
        "-o",
        str(tmp_path / "a"),
        "-f",
        "json",
        env={"AUTOFUSION_DISABLE": "golden_matmul_bias,golden_gelu_erf"},
    )
    assert res.exit_code == 0, res.output
    per_rule = json.loads(res.stdout)["totals"]["groups_per_rule"]
    assert "golden_matmul_bias" not in per_rule and "golden_gelu_erf" not in per_rule
    res = run(
        str(model),
        "--rules",
        str(GOLDEN_RULES),
        "-o",
        str(tmp_path / "b"),
        "-f",
        "json",
        env={"AUTOFUSION_RULES": "golden_conv_bn_relu"},
    )
    assert json.loads(res.stdout)["totals"]["groups_per_rule"] == {"golden_conv_bn_relu": 1}


def test_safe_mode_drops_a_rule_that_fails_on_purpose(model, tmp_path, corrupt_rules):
    out = tmp_path / "out"
    corrupt_rules("golden_matmul_bias")
    # without --safe the broken fusion is caught by --verify: exit 1, files kept for study
    res = run(str(model), "--rules", str(GOLDEN_RULES), "-o", str(tmp_path / "v"), "--verify")
    assert res.exit_code == 1
    assert "FAILED" in res.stdout and "--safe" in res.stderr
    # --safe finds both corrupted groups by bisection, drops them, and the rest verifies
    res = run(str(model), "--rules", str(GOLDEN_RULES), "-o", str(out), "--safe")
    assert res.exit_code == 0, res.output
    assert "PASSED" in res.stdout
    assert "safe mode dropped group(s) 1, 3 (found by isolation check" in res.stdout
    plan = json.loads((out / "plan.json").read_text())
    assert {g["rule"] for g in plan["groups"]} == {
        "golden_gelu_erf",
        "golden_residual_softmax",
        "golden_conv_bn_relu",
    }
    dropped = [r for r in plan["rejected"] if r["verdict"] == "dropped_by_verification"]
    assert [r["rule"] for r in dropped] == ["golden_matmul_bias", "golden_matmul_bias"]
    assert plan["verification"]["dropped_groups"] == [1, 3]
    fused = onnx.load(str(out / "mlp_block.fused.onnx"))
    assert {n.op_type for n in fused.graph.node if n.domain == "autofusion"} == {
        "GeluErf",
        "AddSoftmax",
        "ConvBNRelu",
    }


def test_user_inputs_npz(model, tmp_path):
    import numpy as np

    npz = tmp_path / "feeds.npz"
    np.savez(npz, x=np.ones((1, 16, 64), np.float32), image=np.zeros((1, 3, 32, 32), np.float32))
    res = run(str(model), "-o", str(tmp_path / "o"), "--verify", "--inputs", str(npz))
    assert res.exit_code == 0, res.output
    assert "inputs feeds.npz" in res.stdout
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.ones((1, 16, 64), np.float32))
    res = run(str(model), "-o", str(tmp_path / "p"), "--verify", "--inputs", str(bad))
    assert res.exit_code == 2 and "lacks model input(s) image" in res.stderr
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rules", "does/not/exist.yaml"], ""),
        (["--dim", "batch"], "bad --dim"),
        (["--disable", "no_such_rule"], "unknown rule name"),
        (["--target", "no_such_target"], ""),
    ],
)
def test_errors_exit_2_and_leave_no_output(model, tmp_path, args, message):
    out = tmp_path / "out"
    res = run(str(model), "-o", str(out), *args)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert message in res.stderr
    assert not out.exists()


def test_escaping_output_path_is_an_error_before_anything_is_written(model, tmp_path):
    rule = tmp_path / "escape.yaml"
    rule.write_text(
        "name: escape\nmatch:\n  ops:\n    - type: Relu\nrewrite:\n  target_op: R\n"
        "output:\n  file_path: ../../outside/\n"
    )
    out = tmp_path / "out"
    res = run(str(model), "--rules", str(rule), "-o", str(out))
    assert res.exit_code == 2
    assert "AF208" in res.stderr
    assert not out.exists() and not (tmp_path.parent / "outside").exists()


def test_missing_model_and_corrupt_model(tmp_path):
    res = run(str(tmp_path / "none.onnx"), "-o", str(tmp_path / "o"))
    assert res.exit_code == 2 and "not found" in res.stderr
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00not a model")
    res = run(str(junk), "-o", str(tmp_path / "o"))
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert not (tmp_path / "o").exists()


def test_external_data_model_keeps_weights_external(tmp_path):
    src = onnx.load(str(EXAMPLE))
    model = tmp_path / "ext.onnx"
    onnx.save_model(
        src, str(model), save_as_external_data=True, location="ext.onnx.data", size_threshold=0
    )
    data_before = (tmp_path / "ext.onnx.data").read_bytes()
    out = tmp_path / "out"
    res = run(
        str(model), "--rules", str(GOLDEN_RULES), "-o", str(out), "--verify", "--copy-weights"
    )
    assert res.exit_code == 0, res.output
    assert (out / "ext.onnx.data").read_bytes() == data_before  # referenced, copied as is
    fused = onnx.load(str(out / "ext.fused.onnx"))  # loads its weights from OUTDIR
    onnx.checker.check_model(fused, full_check=True)
    assert (tmp_path / "ext.onnx.data").read_bytes() == data_before


def test_output_files_have_ordinary_permissions(model, tmp_path):
    import os

    out = tmp_path / "out"
    assert run(str(model), "-o", str(out)).exit_code == 0
    mask = os.umask(0)
    os.umask(mask)
    assert (out / "plan.json").stat().st_mode & 0o777 == 0o666 & ~mask


def test_svg_is_written_when_graphviz_is_on_path(model, tmp_path, monkeypatch):
    # a stand-in for Graphviz's `dot`: reads DOT on stdin, writes an SVG on stdout
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "dot"
    fake.write_text("#!/bin/sh\ncat > /dev/null\necho '<svg>fused</svg>'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{__import__('os').environ['PATH']}")
    out = tmp_path / "out"
    res = run(str(model), "--rules", str(GOLDEN_RULES), "-o", str(out))
    assert res.exit_code == 0, res.output
    assert (out / "graph.svg").read_text().strip() == "<svg>fused</svg>"
    assert "graph.svg" in res.stdout


def test_unbound_dims_are_noted_on_stderr_and_bound_by_dim(tmp_path):
    m = onnx.load(EXAMPLE)
    for value in (*m.graph.input, *m.graph.output):
        dims = value.type.tensor_type.shape.dim
        if len(dims) == 3:  # x and y: [1, 16, 64] -> [batch, 16, 64]
            dims[0].dim_param = "batch"
    del m.graph.value_info[:]
    dynamic = tmp_path / "dynamic.onnx"
    onnx.save(m, dynamic)
    res = run(str(dynamic), "-o", str(tmp_path / "a"))
    assert res.exit_code == 0, res.output
    assert "note: unbound input dims: x[0] (batch)" in res.stderr
    assert "dynamic_shape" in res.stdout
    res = run(str(dynamic), "-o", str(tmp_path / "b"), "--dim", "batch=1")
    assert res.exit_code == 0, res.output
    assert "unbound" not in res.stderr
