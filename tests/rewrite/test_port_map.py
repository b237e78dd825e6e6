"""rewrite.inputs reaches the plan resolved on each group's real tensors (port_map)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ruleengine.pipeline import fuse

SEED = Path(__file__).resolve().parents[2] / ".." / "shared" / "seed-rules"


def test_seed_conv_add_silu_ports_name_the_conv_and_add_outputs(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])
    r = helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 16, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])
    w = numpy_helper.from_array(np.full((16, 16, 3, 3), 0.01, np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["conv_out"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["conv_out", "r"], ["add_out"], name="add"),
        helper.make_node("Sigmoid", ["add_out"], ["sig"], name="sigmoid"),
        helper.make_node("Mul", ["add_out", "sig"], ["y"], name="mul"),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x, r], [y], [w]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    result = fuse(path, [SEED / "conv_add_silu_fusion.yaml"], verify=True)
    (group,) = result.plan.groups
    assert group.nodes == ("conv", "add", "sigmoid", "mul")
    assert [(p["input_port"], p["tensor"]) for p in group.port_map] == [
        (0, "conv_out"),
        (1, "add_out"),
    ]
