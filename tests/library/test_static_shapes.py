"""A Shape of a static tensor is a compile-time value: a group may hold the tensor and the
Reshape whose target shape an exporter computed from it (TorchScript's rotary, Pythia's
Q/K/V Slices). Topology does not count that path, the matcher does not count the Shape as
a reader, and the rewrite folds the Shape to a constant (ruleengine/rewrite/static_shapes.py)
so the fused model has no cycle and still computes the same in onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ruleengine.graph import graph_from_model
from ruleengine.pipeline import fuse
from ruleengine.topology import is_convex

RULE = """
name: neg_reshape_relu
match:
  ops:
    - type: Neg
    - type: Reshape
    - type: Relu
rewrite: {target_op: NegReshapeRelu}
"""


def _model(batch: int | str) -> onnx.ModelProto:
    """x -> Neg -> n; Reshape(n, Concat(Shape(n)[0:1], [4, 2])) -> Relu -> y."""
    nodes = [
        helper.make_node("Neg", ["x"], ["n"], name="neg"),
        helper.make_node("Shape", ["n"], ["s"], name="shape", start=0, end=1),
        helper.make_node("Concat", ["s", "rest"], ["shp"], name="concat", axis=0),
        helper.make_node("Reshape", ["n", "shp"], ["r"], name="reshape"),
        helper.make_node("Relu", ["r"], ["y"], name="relu"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 2])],
        initializer=[numpy_helper.from_array(np.array([4, 2], dtype=np.int64), "rest")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_of_a_static_tensor_is_no_path():
    graph = graph_from_model(_model(2))
    assert {"shape", "concat"} <= set(graph.compile_time_nodes)
    assert is_convex(graph, ["neg", "reshape", "relu"])
    dynamic = graph_from_model(_model("batch"))
    assert not dynamic.compile_time_nodes  # a dynamic shape is read at run time: a path
    assert not is_convex(dynamic, ["neg", "reshape", "relu"])


def test_group_over_a_folded_shape_fuses_and_verifies(tmp_path):
    path, rule = tmp_path / "m.onnx", tmp_path / "rule.yaml"
    onnx.save(_model(2), path)
    rule.write_text(RULE)
    result = fuse(path, [rule], verify=True)
    assert [g.nodes for g in result.plan.groups] == [("neg", "reshape", "relu")]
    assert result.plan.verification is not None and result.plan.verification.ok
    ops = {n.name: n.op_type for n in result.fused_model.graph.node}
    assert ops["shape"] == "Constant"  # folded to [2]: no cycle through the fused node
    onnx.checker.check_model(result.fused_model)


def test_dynamic_shape_is_not_fused_across(tmp_path):
    path, rule = tmp_path / "m.onnx", tmp_path / "rule.yaml"
    onnx.save(_model("batch"), path)
    rule.write_text(RULE)
    assert fuse(path, [rule]).plan.groups == ()
