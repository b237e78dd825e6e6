"""Structural contracts of generated kernels, checked on small graphs: roles by op class,
counts, the first role, broadcast-only side operands, outputs."""

from __future__ import annotations

import onnx
import onnx.parser
import pytest

from ruleengine.graph import load_graph
from ruleengine.kernels.catalog import bundled_catalog
from ruleengine.kernels.structure import check


def _graph(tmp_path, inputs: str, out: str, body: str):
    text = f"""<ir_version: 9, opset_import: ["" : 18]>
g ({inputs}) => ({out}) {{
    {body}
}}"""
    path = tmp_path / "g.onnx"
    onnx.save(onnx.parser.parse_model(text), str(path))
    graph = load_graph(path)
    return graph, tuple(n.name for n in graph.nodes)


def _problems(tmp_path, kernel: str, inputs: str, out: str, body: str) -> list[str]:
    graph, nodes = _graph(tmp_path, inputs, out, body)
    outputs = tuple(t for t in graph.outputs)
    return check(graph, nodes, outputs, bundled_catalog().get(kernel).structure)


CONV = "float[1,4,8,8] x, float[8,4,3,3] w"


@pytest.mark.parametrize(
    ("kernel", "inputs", "body", "why"),
    [
        ("CubeWithEpilogue", f"{CONV}, float[8,1,1] b",
         "c = Conv <pads = [1,1,1,1]> (x, w)\n    a = Add(c, b)\n    y = Relu(a)", None),
        ("CubeWithEpilogue", "float[1,8,8,8] x, float[8,1,1] b",
         "a = Add(x, b)\n    y = Relu(a)", "role cube"),
        ("CubeWithEpilogue", f"{CONV}, float[8,8,1,1] w2",
         "c = Conv <pads = [1,1,1,1]> (x, w)\n    y = Conv(c, w2)", "takes 1"),
        ("CubeWithEpilogue", f"{CONV}, float[1,8,1,1] b",
         "r = Relu(x)\n    c = Conv <pads = [1,1,1,1]> (r, w)\n    y = Add(c, b)", "starts"),
        ("ElementwiseChain", "float[2,6] x, float[6] s", "m = Mul(x, s)\n    y = Tanh(m)", None),
        ("ElementwiseChain", "float[2,6] x, float[6,6] w", "m = MatMul(x, w)\n    y = Tanh(m)",
         "MatMul"),
        ("ElementwiseChain", "float[2,6] x", "m = Softmax(x)\n    y = Tanh(m)", "Softmax"),
    ],
    ids=["fits", "no-cube", "two-cubes", "cube-not-first", "chain", "chain-cube", "chain-reduce"],
)  # fmt: skip
def test_structure(tmp_path, kernel, inputs, body, why):
    problems = _problems(tmp_path, kernel, inputs, "float[1,8,8,8] y", body)
    if why is None:
        assert problems == []
    else:
        assert problems and any(why in p for p in problems), problems


def test_side_operand_of_unknown_shape_is_not_taken(tmp_path):
    """A side operand whose shape the graph does not know cannot be shown to broadcast."""
    graph, nodes = _graph(
        tmp_path, "float[2,6] x, int64[1] n", "float[2,6] y",
        "s = ConstantOfShape(n)\n    m = Mul(x, s)\n    y = Tanh(m)",
    )  # fmt: skip
    chain = tuple(n for n in nodes if graph.node(n).op_type in ("Mul", "Tanh"))
    problems = check(
        graph, chain, graph.outputs, bundled_catalog().get("ElementwiseChain").structure
    )
    assert problems and "does not broadcast" in problems[0], problems
