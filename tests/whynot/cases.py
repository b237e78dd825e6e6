"""The rule-debugging suite: broken rules against shared models, each with the pattern op
(0-based, as ``from_op`` counts it) that ``explain-rule`` must name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MODELS = Path(__file__).resolve().parents[2] / ".." / "shared" / "models"
PPOCR = ("real/ppocrv4-det.onnx", {"x": (1, 3, 640, 640)})
RESNET = ("families/resnet-bottleneck-narrow.ts-keepbn.onnx", {})
BERT = ("families/distilbert-tiny.ts.onnx", {})

# The hard-swish block of PP-OCRv4 as Paddle2ONNX writes it: the op before (a bias Add),
# x + 3, Clip(0, 6), x * clip, / 6. Each case below breaks one thing of this rule.
HSWISH = """\
name: {name}
match:
  ops:
    - type: Add
      input_sources:
        input1: {{source_type: const}}
    - type: Add
      input_sources:
        input0: {{from_op: 0}}
        input1: {{source_type: const}}
    - type: Clip
    - type: Mul
      input_sources:
        input0: {{from_op: 0}}
        input1: {{from_op: 2}}
    - type: Div
      input_sources:
        input0: {{from_op: 3}}
        input1: {{source_type: const}}
rewrite:
  target_op: HardSwish
"""


@dataclass(frozen=True)
class Case:
    name: str
    model: tuple[str, dict]
    text: str  # the rule file
    op: int  # the failing pattern op explain must name
    conditions: tuple[str, ...]  # the condition kinds accepted


def hswish(name: str, old: str, new: str) -> str:
    text = HSWISH.format(name=name)
    assert old in text, old
    return text.replace(old, new, 1)


CASES = [
    # mis-wired input_sources: x * clip reads x+3 instead of x
    Case(
        "miswired_from_op",
        PPOCR,
        hswish(
            "miswired_from_op",
            "input0: {from_op: 0}\n        input1: {from_op: 2}",
            "input0: {from_op: 1}\n        input1: {from_op: 2}",
        ),
        3,
        ("link",),
    ),
    # wrong op type: Relu where the model clips
    Case(
        "wrong_type", PPOCR, hswish("wrong_type", "- type: Clip", "- type: Relu"), 2, ("op-type",)
    ),
    # composite vs decomposed: type HardSwish where the model has Add/Clip/Mul/Div
    Case(
        "composite_vs_decomposed",
        PPOCR,
        "name: composite_vs_decomposed\nmatch:\n  ops:\n    - type: Add\n"
        "      input_sources:\n        input1: {source_type: const}\n"
        "    - type: HardSwish\nrewrite:\n  target_op: HardSwish\n",
        1,
        ("composite-vs-decomposed",),
    ),
    # too long: one op more than the model's chain
    Case(
        "too_long",
        PPOCR,
        hswish("too_long", "rewrite:", "    - type: Relu\nrewrite:"),
        5,
        ("op-type",),
    ),
    # wrong branch order on a non-commutative op: Div reads the product on input0
    Case(
        "div_port_order",
        PPOCR,
        hswish(
            "div_port_order",
            "input0: {from_op: 3}\n        input1: {source_type: const}",
            "input1: {from_op: 3}\n        input0: {source_type: const}",
        ),
        4,
        ("port",),
    ),
    # wrong source kind: the +3 is a constant, not a graph input
    Case(
        "source_graph_input",
        PPOCR,
        hswish(
            "source_graph_input",
            "input0: {from_op: 0}\n        input1: {source_type: const}",
            "input0: {from_op: 0}\n        input1: {source_type: graph_input}",
        ),
        1,
        ("input-source",),
    ),
    # wrong constant: x * clip has no constant operand
    Case(
        "wrong_const",
        PPOCR,
        hswish(
            "wrong_const",
            "input0: {from_op: 0}\n        input1: {from_op: 2}",
            "input0: {from_op: 2}\n        input1: {source_type: const}",
        ),
        3,
        ("input-source",),
    ),
    # wrong constant value: hard-swish adds 3, not 2
    Case(
        "wrong_value",
        PPOCR,
        hswish(
            "wrong_value",
            "input0: {from_op: 0}\n        input1: {source_type: const}",
            "input0: {from_op: 0}\n        input1: {source_type: const, value: 2.0}",
        ),
        1,
        ("const-value",),
    ),
    # wrong set of constant values: the divisor is 6
    Case(
        "wrong_value_in",
        PPOCR,
        hswish(
            "wrong_value_in",
            "input0: {from_op: 3}\n        input1: {source_type: const}",
            "input0: {from_op: 3}\n        input1: {source_type: const, value_in: [5, 7]}",
        ),
        4,
        ("const-value",),
    ),
    # escaping intermediate: the pattern ends at the Clip, but x is read by the Mul too
    Case(
        "escaping_intermediate",
        PPOCR,
        "name: escaping_intermediate\nmatch:\n  ops:\n    - type: Add\n      input_sources:\n"
        "        input1: {source_type: const}\n    - type: Add\n      input_sources:\n"
        "        input0: {from_op: 0}\n        input1: {source_type: const}\n    - type: Clip\n"
        "rewrite:\n  target_op: AddClip\n",
        0,
        ("intermediate-escapes",),
    ),
    # wrong input count
    Case(
        "input_count",
        PPOCR,
        hswish(
            "input_count",
            "    - type: Clip\n",
            "    - type: Clip\n      inputs: {min_inputs: 1, max_inputs: 1}\n",
        ),
        2,
        ("input-count",),
    ),
    # too-long repeat: three Adds in a row after the Conv's scale; the model has two
    Case(
        "repeat_too_long",
        PPOCR,
        "name: repeat_too_long\nmatch:\n  ops:\n    - type: Mul\n    - type: Add\n"
        "      repeat: {min: 3, max: 3}\n    - type: Clip\nrewrite:\n  target_op: MulAdds\n",
        1,
        ("repeat",),
    ),
    # wrong param: a 7x7 Conv before the scale Mul; the model's are 1x1 and 3x3
    Case(
        "wrong_param",
        PPOCR,
        "name: wrong_param\nmatch:\n  ops:\n    - type: Conv\n      params:\n"
        "        kernel_shape: [7, 7]\n    - type: Mul\nrewrite:\n  target_op: ConvMul\n",
        0,
        ("param-mismatch",),
    ),
    # wrong shape param: the scale Mul broadcasts a per-channel weight
    Case(
        "broadcast_false",
        PPOCR,
        "name: broadcast_false\nmatch:\n  ops:\n    - type: Conv\n    - type: Mul\n"
        "      params:\n        broadcast: false\nrewrite:\n  target_op: ConvMul\n",
        1,
        ("param-mismatch",),
    ),
    # wrong attribute on a later op: Conv -> BN -> Relu with a BN epsilon the model lacks
    Case(
        "wrong_attribute",
        RESNET,
        "name: wrong_attribute\nmatch:\n  ops:\n    - type: Conv\n"
        "    - type: BatchNormalization\n      params:\n        epsilon: 0.1\n    - type: Relu\n"
        "rewrite:\n  target_op: ConvBNRelu\n",
        1,
        ("param-mismatch",),
    ),
    # missing op: Conv -> Relu where the model keeps BatchNormalization between them
    Case(
        "missing_bn",
        RESNET,
        "name: missing_bn\nmatch:\n  ops:\n    - type: Conv\n    - type: Relu\n"
        "rewrite:\n  target_op: ConvRelu\n",
        1,
        ("op-type",),
    ),
    # mis-wired: the next Conv reads the Relu, not the BN
    Case(
        "next_conv_from_bn",
        RESNET,
        "name: next_conv_from_bn\nmatch:\n  ops:\n    - type: Conv\n"
        "    - type: BatchNormalization\n    - type: Relu\n    - type: Conv\n"
        "      input_sources:\n        input0: {from_op: 1}\n"
        "rewrite:\n  target_op: ConvChain\n",
        3,
        ("link",),
    ),
    # residual taken for a constant
    Case(
        "residual_not_const",
        RESNET,
        "name: residual_not_const\nmatch:\n  ops:\n    - type: Conv\n"
        "    - type: BatchNormalization\n    - type: Add\n      input_sources:\n"
        "        input0: {from_op: 1}\n        input1: {source_type: const}\n"
        "rewrite:\n  target_op: ConvBNAdd\n",
        2,
        ("input-source",),
    ),
    # wrong dtype: the attention mask is cast to bool (9), not float (1)
    Case(
        "wrong_dtype",
        BERT,
        "name: wrong_dtype\nmatch:\n  ops:\n    - type: Cast\n      params:\n        to: 1\n"
        "rewrite:\n  target_op: CastFloat\n",
        0,
        ("param-mismatch",),
    ),
    # wrong variant of a composite: the model's GELU is the Erf form
    Case(
        "gelu_variant",
        BERT,
        "name: gelu_variant\nmatch:\n  ops:\n    - type: MatMul\n    - type: Add\n"
        "    - type: Gelu\n      params:\n        approximate: tanh\nrewrite:\n"
        "  target_op: MatMulAddGelu\n",
        2,
        ("param-mismatch",),
    ),
    # wrong op after attention scores: the model adds the mask before Softmax
    Case(
        "softmax_too_early",
        BERT,
        "name: softmax_too_early\nmatch:\n  ops:\n    - type: MatMul\n"
        "      input_sources:\n        input1: {source_type: const_or_param}\n"
        "    - type: Softmax\nrewrite:\n  target_op: ScoresSoftmax\n",
        1,
        ("op-type",),
    ),
    # wrong shape param: LayerNorm over a size the model does not have
    Case(
        "layernorm_shape",
        BERT,
        "name: layernorm_shape\nmatch:\n  ops:\n    - type: Add\n    - type: LayerNorm\n"
        "      params:\n        normalized_shape: [1000]\nrewrite:\n  target_op: AddLayerNorm\n",
        1,
        ("param-mismatch",),
    ),
]
