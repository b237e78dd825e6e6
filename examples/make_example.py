"""Generate the bundled example model ``examples/mlp_block.onnx`` with onnx.helper.

A pre-norm transformer MLP block as PyTorch exporters emit it at opset 17, small enough to
read in a DOT picture and fuse in well under a second:

    x [1, 16, 64] -> LayerNormalization -> MatMul(W1) -> Add(b1) -> GELU (Erf form)
      -> MatMul(W2) -> Add(b2) -> Add(x) (residual) -> Softmax -> y [1, 16, 64]

plus a small conv branch (Conv -> BatchNormalization -> Relu) on a second input, so both
the cnn and the transformer presets find something. Weights are seeded random numbers.
Run ``python examples/make_example.py`` to regenerate; the output is deterministic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN = 64
FFN = 256
TOKENS = 16
OUT = Path(__file__).resolve().parent / "mlp_block.onnx"


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(1234)

    def weight(name: str, *shape: int, scale: float = 0.05) -> onnx.TensorProto:
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name
        )

    def scalar(name: str, value: float) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(value, dtype=np.float32), name)

    inits = [
        numpy_helper.from_array(np.ones(HIDDEN, np.float32), "ln.weight"),
        numpy_helper.from_array(np.zeros(HIDDEN, np.float32), "ln.bias"),
        weight("fc1.weight", HIDDEN, FFN),
        weight("fc1.bias", FFN),
        weight("fc2.weight", FFN, HIDDEN),
        weight("fc2.bias", HIDDEN),
        scalar("sqrt2", float(np.sqrt(2.0))),
        scalar("one", 1.0),
        scalar("half", 0.5),
        weight("conv.weight", 16, 3, 3, 3, scale=0.2),
        weight("conv.bias", 16),
        numpy_helper.from_array(np.ones(16, np.float32), "bn.scale"),
        numpy_helper.from_array(np.zeros(16, np.float32), "bn.bias"),
        numpy_helper.from_array(np.zeros(16, np.float32), "bn.mean"),
        numpy_helper.from_array(np.ones(16, np.float32), "bn.var"),
    ]
    nodes = [
        helper.make_node(
            "LayerNormalization",
            ["x", "ln.weight", "ln.bias"],
            ["ln_out"],
            name="ln",
            axis=-1,
            epsilon=1e-5,
        ),
        helper.make_node("MatMul", ["ln_out", "fc1.weight"], ["fc1_mm"], name="fc1_matmul"),
        helper.make_node("Add", ["fc1_mm", "fc1.bias"], ["fc1_out"], name="fc1_bias"),
        helper.make_node("Div", ["fc1_out", "sqrt2"], ["gelu_div"], name="gelu_div"),
        helper.make_node("Erf", ["gelu_div"], ["gelu_erf"], name="gelu_erf"),
        helper.make_node("Add", ["gelu_erf", "one"], ["gelu_add"], name="gelu_add"),
        helper.make_node("Mul", ["fc1_out", "gelu_add"], ["gelu_mul"], name="gelu_mul"),
        helper.make_node("Mul", ["gelu_mul", "half"], ["gelu_out"], name="gelu_half"),
        helper.make_node("MatMul", ["gelu_out", "fc2.weight"], ["fc2_mm"], name="fc2_matmul"),
        helper.make_node("Add", ["fc2_mm", "fc2.bias"], ["fc2_out"], name="fc2_bias"),
        helper.make_node("Add", ["fc2_out", "x"], ["residual"], name="residual_add"),
        helper.make_node("Softmax", ["residual"], ["y"], name="softmax", axis=-1),
        helper.make_node(
            "Conv",
            ["image", "conv.weight", "conv.bias"],
            ["conv_out"],
            name="conv",
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node(
            "BatchNormalization",
            ["conv_out", "bn.scale", "bn.bias", "bn.mean", "bn.var"],
            ["bn_out"],
            name="bn",
            epsilon=1e-5,
        ),
        helper.make_node("Relu", ["bn_out"], ["features"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp_block",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, TOKENS, HIDDEN]),
            helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, TOKENS, HIDDEN]),
            helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 16, 32, 32]),
        ],
        initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="autofusion-example"
    )
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    onnx.checker.check_model(model, full_check=True)
    return model


def main() -> None:
    model = build()
    OUT.write_bytes(model.SerializeToString(deterministic=True))
    print(f"wrote {OUT} ({len(model.graph.node)} nodes)")


if __name__ == "__main__":
    main()
