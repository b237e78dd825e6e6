"""Small graphs built with onnx.helper, and rules from inline YAML, for matcher tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ruleengine.graph import graph_from_model
from ruleengine.graph.model import Graph
from ruleengine.match import find_candidates
from ruleengine.match.model import MatchResult
from ruleengine.rules import load_rule_set

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
MODELS = SHARED / "models"

F = TensorProto.FLOAT


def const(name: str, value, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, list],
    outputs: dict[str, list | None],
    inits: list[onnx.TensorProto] = (),
    opset: int = 17,
) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, F, s) for n, s in outputs.items()],
        initializer=list(inits),
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def graph(m: onnx.ModelProto) -> Graph:
    return graph_from_model(m)


def rules(tmp_path: Path, text: str):
    p = tmp_path / "rules.yaml"
    p.write_text(text)
    return load_rule_set([p])


def match(tmp_path: Path, m: onnx.ModelProto, text: str) -> MatchResult:
    return find_candidates(graph(m), rules(tmp_path, text))


def node(op: str, ins: list[str], outs: list[str], name: str | None = None, **attrs):
    return helper.make_node(op, ins, outs, name=name or outs[0], **attrs)
