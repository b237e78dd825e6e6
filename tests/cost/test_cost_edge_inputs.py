"""Cost model on inputs nobody tested: empty (zero-sized) tensors."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from ruleengine import pipeline
from ruleengine.cost.ub import _block


def test_block_over_a_zero_sized_dim_does_not_divide_by_zero() -> None:
    assert _block((0, 8), 8) == (1, 8)
    assert _block((4, 0), 3) == (3, 1)


def test_zero_sized_tensors_are_costed(tmp_path: Path) -> None:
    """A candidate over a [3, 0] tensor (onnx's reduce_*_empty_set tests) used to crash
    the UB model with ZeroDivisionError (an internal error in explain and fuse)."""
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "x"], ["a"]),
            helper.make_node("Relu", ["a"], ["y"]),
        ],
        "zero",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 0])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 0])],
    )
    path = tmp_path / "zero.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    analysis = pipeline.analyze(path)
    assert analysis.scored and all(s.cost is not None for s in analysis.scored)
