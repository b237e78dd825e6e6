"""The match and explain-rule commands: exit codes, stdout and stderr together."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper
from typer.testing import CliRunner

from ruleengine.cli import app

from .helpers import MODELS, SHARED

SEED = SHARED / "seed-rules"
runner = CliRunner()


def test_match_text_table_and_totals(tmp_path: Path) -> None:
    # the seed rule without its Relu `clip_max` param (Relu has none: see the next test)
    text = (SEED / "conv_bn_relu_fusion.yaml").read_text()
    assert "clip_max" in text
    rule = tmp_path / "conv_bn_relu.yaml"
    rule.write_text(text.replace("      params:\n        clip_max: 0.0\n", ""))
    res = runner.invoke(
        app, ["match", str(MODELS / "resnet18-narrow.ts-keepbn.onnx"), "--rules", str(rule)]
    )
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].split()[:3] == ["RULE", "ALT", "NODES"]
    assert sum(1 for ln in lines if ln.startswith("Conv_BN_Relu_Fusion")) == 9
    assert "9 candidates from 1 rule" in res.stdout or "9 candidate(s)" in res.stdout


def test_an_unknown_param_never_widens_a_rule_and_is_named_on_stderr() -> None:
    """The seed rule asks Relu for `clip_max`, which Relu does not have: the op never
    matches (a param_mismatch near miss) and the lint finding is printed once."""
    model = str(MODELS / "resnet18-narrow.ts-keepbn.onnx")
    res = runner.invoke(
        app, ["match", model, "--rules", str(SEED / "conv_bn_relu_fusion.yaml"), "--near-misses"]
    )
    assert res.exit_code == 0, res.output
    assert "0 candidate(s)" in res.stdout
    assert "Relu has no parameter 'clip_max'" in res.stdout
    warn = [ln for ln in res.stderr.splitlines() if "AF303" in ln]
    assert len(warn) == 1 and "conv_bn_relu_fusion.yaml:" in warn[0] and "clip_max" in warn[0]


def test_match_reports_unbound_dims_on_stderr(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], [0.0] * 64)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 17)]
    )
    path = tmp_path / "dynamic.onnx"
    onnx.save(model, path)
    res = runner.invoke(app, ["match", str(path), "--rules", str(SEED / "priority_conflict.yaml")])
    assert res.exit_code == 0, res.output
    assert "unbound input dims: x[0] (batch)" in res.stderr
    res = runner.invoke(
        app,
        ["match", str(path), "--rules", str(SEED / "priority_conflict.yaml"), "--dim", "batch=2"],
    )
    assert res.exit_code == 0, res.output
    assert "unbound" not in res.stderr


def test_match_bad_inputs_exit_2_without_traceback(tmp_path: Path) -> None:
    bad_model = tmp_path / "bad.onnx"
    bad_model.write_bytes(b"not a model")
    res = runner.invoke(
        app, ["match", str(bad_model), "--rules", str(SEED / "conv_bn_relu_fusion.yaml")]
    )
    assert res.exit_code == 2
    assert "AF501" in res.stderr and "Traceback" not in res.output
    res = runner.invoke(
        app,
        [
            "match",
            str(MODELS / "resnet18-narrow.ts.onnx"),
            "--rules",
            str(SEED / "chunked_rewrite_fragment.yaml"),
        ],
    )
    assert res.exit_code == 2 and "Traceback" not in res.output
    res = runner.invoke(
        app, ["match", str(MODELS / "resnet18-narrow.ts.onnx"), "--preset", "cnn", "--dim", "oops"]
    )
    assert res.exit_code == 2 and "--dim" in res.stderr


def test_explain_rule_text_and_model() -> None:
    res = runner.invoke(
        app,
        [
            "explain-rule",
            str(SEED / "conv_add_swish_branches.yaml"),
            "--model",
            str(MODELS / "resnet18-narrow.ts.onnx"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "op 2: Swish -> ONNX Swish; composite forms silu" in res.stdout
    assert "alternative 2 (branch 1)" in res.stdout
    assert "11 candidate(s)" in res.stdout


def test_json_layout_switches_at_the_compact_size_limit() -> None:
    """``jsontext.json_bytes`` encodes each record once and adds up the compact size:
    the layout (indented, or one record per line) flips exactly where the compact
    document reaches the limit, and both read back as the same data."""
    import json

    from ruleengine.jsontext import INDENT_LIMIT_BYTES, json_bytes

    compact = {"a": [], "b": {"k": [1, 2]}, "s": "é"}
    limit_items = (INDENT_LIMIT_BYTES - 40) // 13
    for n in range(limit_items - 5, limit_items + 5):
        data = {"c": ["x" * 10] * n, **compact}
        text = json_bytes(data)
        size = len(json.dumps(data, ensure_ascii=False, separators=(",", ":")))
        indented = (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()
        assert (text == indented) == (size < INDENT_LIMIT_BYTES)
        assert json.loads(text) == data
