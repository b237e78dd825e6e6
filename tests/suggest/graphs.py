"""Small models for the suggest tests, written as ONNX text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.parser
from onnx import numpy_helper

# A rule that matches none of these graphs: the baseline fuses nothing.
NOTHING_RULE = """name: conv_relu_only
match:
  ops:
    - type: Conv
    - type: Relu
rewrite:
  target_op: ConvRelu
"""


def layers(acts: list[str], gelu: bool = False) -> str:
    """Layers x -> MatMul -> bias Add -> act -> Mul by the pre-activation -> (optional
    decomposed erf GELU) -> MatMul, one activation per layer; a layer's last MatMul feeds
    the next layer's first (cube -> cube: not fusable), so each layer is one region."""
    lines = []
    x = "x"
    inputs = ["float[64,256] x"]
    for i, act in enumerate(acts):
        inputs += [f"float[256,256] W_m{i}", f"float[256] W_b{i}", f"float[256,256] W_o{i}"]
        lines += [
            f"[mm{i}] h{i} = MatMul ({x}, W_m{i})",
            f"[bias{i}] a{i} = Add (h{i}, W_b{i})",
            f"[act{i}] t{i} = {act} (a{i})",
            f"[gate{i}] g{i} = Mul (t{i}, a{i})",
        ]
        last = f"g{i}"
        if gelu:
            lines += [
                f"[div{i}] d{i} = Div (g{i}, sqrt2)",
                f"[erf{i}] e{i} = Erf (d{i})",
                f"[one{i}] o{i} = Add (e{i}, one)",
                f"[half{i}] hf{i} = Mul (o{i}, half)",
                f"[gelu{i}] u{i} = Mul (g{i}, hf{i})",
            ]
            last = f"u{i}"
        lines.append(f"[out{i}] y{i} = MatMul ({last}, W_o{i})")
        x = f"y{i}"
    consts = (
        "  sqrt2 = Constant <value = float {1.4142135}> ()\n"
        "  one = Constant <value = float {1.0}> ()\n"
        "  half = Constant <value = float {0.5}> ()\n"
    )
    return (
        '<ir_version: 8, opset_import: ["" : 17]>\n'
        f"g ({', '.join(inputs)}) => (float[64,256] {x})\n{{\n"
        + (consts if gelu else "")
        + "\n".join(f"  {line}" for line in lines)
        + "\n}\n"
    )


def save(text: str, path: Path, seed: int = 0) -> Path:
    """Parse ONNX text; ``W_*`` graph inputs become seeded random initializers."""
    model = onnx.parser.parse_model(text)
    rng = np.random.default_rng(seed)
    keep = []
    for inp in model.graph.input:
        if not inp.name.startswith("W_"):
            keep.append(inp)
            continue
        dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        data = rng.standard_normal(dims).astype(np.float32)
        model.graph.initializer.append(numpy_helper.from_array(data, inp.name))
    del model.graph.input[:]
    model.graph.input.extend(keep)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path
