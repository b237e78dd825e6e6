"""Relaxations on small graphs built inline: each kind of literal of a failing op is
relaxed by the same generic step (drop it, free a constant argument, take a link from
another op, free the type), and the answer names the condition."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ruleengine.graph import graph_from_model
from ruleengine.match import find_candidates
from ruleengine.match.whynot import why_not
from ruleengine.match.whynot_engine import connected
from ruleengine.rules import load_rule_set


def _model(nodes, consts: dict[str, float]) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(v, dtype=np.float32), k) for k, v in consts.items()]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _node(op: str, ins: list[str], out: str):
    return helper.make_node(op, ins, [out], name=out)


def _why(tmp_path: Path, m: onnx.ModelProto, text: str):
    path = tmp_path / "rule.yaml"
    path.write_text(text)
    rule_set = load_rule_set([path])
    graph = graph_from_model(m)
    result = find_candidates(graph, rule_set)
    (w,) = why_not(graph, rule_set, [rule_set.rules[0].name], result=result)
    return w


def _gelu(one: float) -> onnx.ModelProto:
    """x -> Relu -> the exact-GELU Erf form, with ``one`` where GELU adds 1."""
    return _model(
        [
            _node("Relu", ["x"], "r"),
            _node("Div", ["r", "k"], "d"),
            _node("Erf", ["d"], "e"),
            _node("Add", ["e", "one"], "a"),
            _node("Mul", ["r", "a"], "m"),
            _node("Mul", ["m", "half"], "y"),
        ],
        {"k": 1.4142135, "one": one, "half": 0.5},
    )


RELU_GELU = (
    "name: relu_gelu\nmatch:\n  ops:\n    - type: Relu\n    - type: Gelu\n"
    "rewrite:\n  target_op: F\n"
)


def test_a_composite_constant_is_freed(tmp_path: Path) -> None:
    """The form's constant (a ``cin`` literal) is where it fails: 2.0 instead of 1.0."""
    w = _why(tmp_path, _gelu(2.0), RELU_GELU)
    assert w.op == 1 and w.condition == "constant", w
    assert "1.0" in w.message and w.places and w.places[0].node == "a", w
    assert "constant 2 on input1" in w.places[0].text, w


def test_the_same_rule_matches_the_right_constant(tmp_path: Path) -> None:
    w = _why(tmp_path, _gelu(1.0), RELU_GELU)
    assert w.condition == "match" and w.candidates == 1


def test_a_link_is_taken_from_the_op_it_really_reads(tmp_path: Path) -> None:
    m = _model(
        [_node("Relu", ["x"], "r"), _node("Sigmoid", ["r"], "s"), _node("Sub", ["r", "s"], "y")],
        {},
    )
    text = (
        "name: wired\nmatch:\n  ops:\n    - type: Relu\n    - type: Sigmoid\n    - type: Sub\n"
        "      input_sources:\n        input0: {from_op: 1}\n        input1: {from_op: 1}\n"
        "rewrite:\n  target_op: F\n"
    )
    w = _why(tmp_path, m, text)
    assert w.op == 2 and w.condition in ("port", "link"), w
    assert w.places[0].node == "y" and "from_op: 0" in w.hint, w


def test_an_absent_type_says_which_types_the_model_has(tmp_path: Path) -> None:
    m = _model([_node("Relu", ["x"], "y")], {})
    text = "name: absent\nmatch:\n  ops:\n    - type: Tanh\nrewrite:\n  target_op: F\n"
    w = _why(tmp_path, m, text)
    assert w.op == 0 and w.condition == "op-type" and "Relu" in w.hint


def test_connected_needs_every_variable_joined() -> None:
    lits = [("e_A__B", ("N0_0", "N1_0", "P")), ("n_C", ("N2_0",))]
    assert connected(lits[:1], ["N0_0", "N1_0"])
    assert not connected(lits, ["N0_0", "N1_0", "N2_0"])
