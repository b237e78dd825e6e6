"""The onnx.checker gate on the fused model blames the input when the input already fails."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import helper

from ruleengine import pipeline
from ruleengine.errors import GraphLoadError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mlp_block.onnx"


def test_model_without_graph_name_fuses(tmp_path: Path):
    """An empty graph name (onnxruntime runs it) used to end in 'the fused model fails
    onnx.checker', even with nothing fused."""
    model = onnx.load(str(EXAMPLE))
    model.graph.name = ""
    path = tmp_path / "noname.onnx"
    onnx.save(model, path)
    result = pipeline.fuse(path, verify=True)
    assert result.fused_model.graph.name
    assert result.plan.verification is not None and result.plan.verification.ok
    onnx.checker.check_model(result.fused_model, full_check=True)


def failing_the_checker(tmp_path: Path) -> Path:
    """The example with an attribute its Relu does not have: onnx.checker refuses it."""
    model = onnx.load(str(EXAMPLE))
    relu = next(n for n in model.graph.node if n.op_type == "Relu")
    relu.attribute.append(helper.make_attribute("foo", 1))
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)
    return path


def test_input_failing_the_checker_is_an_input_error(tmp_path: Path):
    path = failing_the_checker(tmp_path)
    with pytest.raises(GraphLoadError, match="input model bad.onnx fails onnx.checker"):
        pipeline.fuse(path, disable=["conv_bn_relu"])  # its kernel body would replace the Relu
