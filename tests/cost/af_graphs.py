"""Small test graphs written as ONNX text, and candidates over them (test helper)."""

from __future__ import annotations

from collections.abc import Sequence

import onnx
import onnx.parser

from ruleengine.cost.traffic import group_io
from ruleengine.graph import Graph, graph_from_model
from ruleengine.match.model import Candidate


def graph_from_text(text: str, opset: int = 17) -> Graph:
    """Parse an ONNX text graph (``<ir_version..., opset_import...>`` header added)."""
    header = f'<ir_version: 8, opset_import: ["" : {opset}]>\n'
    model = onnx.parser.parse_model(header + text)
    return graph_from_model(model)


def node_named(graph: Graph, op_type: str, k: int = 0) -> str:
    """Name of the k-th node of an op type (the loader names unnamed nodes itself)."""
    return [n.name for n in graph.nodes if n.op_type == op_type][k]


def candidate(graph: Graph, rule: str, nodes: Sequence[str], alternative: int = 0) -> Candidate:
    """A candidate binding one node per pattern op, with inputs/outputs as matching sets them."""
    io = group_io(graph, nodes)
    ins = tuple(dict.fromkeys((*io.inputs, *io.meta_inputs)))
    return Candidate(rule, alternative, tuple((n,) for n in nodes), ins, io.outputs)
