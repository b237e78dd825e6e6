"""Flags with values that make no sense: a usage error (exit 2), never silently used or an
internal error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ruleengine.cli import app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mlp_block.onnx"


@pytest.mark.parametrize("command", ["fuse", "explain", "compare"])
@pytest.mark.parametrize(
    "flag",
    [
        ["--benefit-threshold", "nan"],
        ["--benefit-threshold", "-0.5"],
        ["--benefit-threshold", "7"],
        ["--time-limit", "-1"],
        ["--time-limit", "0"],
        ["--time-limit", "nan"],
        ["--dim", "batch=99999999999999999999"],
    ],
)
def test_out_of_range_flags_exit_2_and_write_nothing(tmp_path, command, flag):
    """--benefit-threshold nan/7 and --time-limit -1 used to be accepted silently."""
    model = tmp_path / "m.onnx"
    shutil.copy(EXAMPLE, model)
    out = tmp_path / "out"
    extra = ["-o", str(out)] if command == "fuse" else []
    res = CliRunner().invoke(app, [command, str(model), *extra, *flag])
    assert res.exit_code == 2, res.output
    assert "internal error" not in res.stderr and "Traceback" not in res.output
    assert not out.exists()


def test_original_model_failing_on_random_inputs_says_how_to_go_on(tmp_path):
    """The error blamed the model without saying the inputs were random and made up, and
    onnxruntime's own colour log line came first on stderr."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=0)],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
    )
    model = tmp_path / "g.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["fuse", str(model), "-o", str(out), "--verify"])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: onnxruntime cannot run the original model g.onnx")
    assert "random (seed 0) inputs" in res.stderr and "--inputs FILE.npz" in res.stderr
    assert not out.exists()


def test_rule_both_enabled_and_disabled_is_a_usage_error(tmp_path):
    """--enable X with --disable X (or AUTOFUSION_DISABLE=X) fused nothing, silently."""
    model = tmp_path / "m.onnx"
    shutil.copy(EXAMPLE, model)
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app,
        ["fuse", str(model), "-o", str(out), "--enable", "matmul_bias"],
        env={"AUTOFUSION_DISABLE": "matmul_bias"},
    )
    assert res.exit_code == 2, res.output
    assert "matmul_bias both enabled and disabled" in res.stderr
    assert not out.exists()
