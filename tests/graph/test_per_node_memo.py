"""The per-node shape pass asks ONNX once per distinct node, not once per node.

A stack whose reshapes take shapes computed from Shape -> Gather -> Concat leaves every
tensor after the first Reshape to the per-node pass (ONNX's whole-graph inference does
not carry those values). Each layer's nodes ask ONNX's per-node inference what the
same node of the layer before asked (same op, attributes, input types and values), so
the number of inferences is the number of distinct nodes: constant in the depth (issue
38: 2/3 of all_decomposed's 184k nodes at 2048 layers went through it one by one).
The small values (shape vectors) are computed once per distinct node likewise. The types
are the same as with one inference and one evaluation per node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ruleengine.graph import graph_from_model, propagate

pytestmark = pytest.mark.unit


def _stack(layers: int) -> onnx.ModelProto:
    """``layers`` blocks: x -> Reshape to a shape computed from x's own Shape -> MatMul
    -> Reshape back -> Add (the residual); constants per layer."""
    nodes, inits = [], []
    h = "x"
    for i in range(layers):
        p = f"l{i}_"

        def node(op: str, ins: list[str], out: str, p: str = p, **kw) -> str:
            nodes.append(helper.make_node(op, ins, [p + out], name=p + out, **kw))
            return p + out

        inits += [
            numpy_helper.from_array(np.array([0], np.int64), p + "i0"),
            numpy_helper.from_array(np.array([1], np.int64), p + "i1"),
            numpy_helper.from_array(np.array([4, -1], np.int64), p + "split"),
            numpy_helper.from_array(np.ones((8, 8), np.float32), p + "w"),
        ]
        shp = node("Shape", [h], "shp")
        b = node("Gather", [shp, p + "i0"], "b", axis=0)
        s = node("Gather", [shp, p + "i1"], "s", axis=0)
        tgt = node("Concat", [b, s, p + "split"], "tgt", axis=0)
        r = node("Reshape", [h, tgt], "r")
        mm = node("MatMul", [r, p + "w"], "mm")
        back = node("Reshape", [mm, shp], "back")
        h = node("Add", [h, back], "h")
    graph = helper.make_graph(
        nodes,
        "stack",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 32])],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _loaded(monkeypatch: pytest.MonkeyPatch, layers: int, memo: bool) -> tuple[int, dict]:
    """ONNX per-node inferences made, and every tensor's (dtype, shape)."""
    calls = [0]
    real = propagate._inferred

    def counting(*a, **kw):
        calls[0] += 1
        return real(*a, **kw)

    monkeypatch.setattr(propagate, "_inferred", counting)
    if not memo:
        plain = propagate._node_value
        monkeypatch.setattr(propagate, "_asked", lambda *a: None)
        monkeypatch.setattr(propagate, "_value_once", lambda n, v, s, o, _memo: plain(n, v, s, o))
    g = graph_from_model(_stack(layers))
    monkeypatch.undo()
    return calls[0], {n: (t.dtype, t.shape) for n, t in g.tensors.items()}


def test_inferences_are_per_distinct_node(monkeypatch) -> None:
    few, types_few = _loaded(monkeypatch, 3, memo=True)
    many, types_many = _loaded(monkeypatch, 6, memo=True)
    assert few > 0
    assert many == few  # twice the layers, no more inferences
    # every shape is known: the per-node pass did reach the whole stack
    assert all(s is not None and None not in s for _, s in types_many.values())
    one_by_one, types_plain = _loaded(monkeypatch, 6, memo=False)
    assert one_by_one > many
    assert types_plain == types_many
    assert len(types_few) < len(types_many)


def test_a_key_tells_values_and_attributes_apart() -> None:
    n1 = helper.make_node("Gather", ["a", "k"], ["o"], axis=0)
    n2 = helper.make_node("Gather", ["b", "j"], ["p"], axis=0)
    n3 = helper.make_node("Gather", ["b", "j"], ["p"], axis=1)
    t = onnx.helper.make_tensor_type_proto(TensorProto.INT64, [3])
    types = {"a": t, "b": t}
    same = {"k": np.array(0, np.int64), "j": np.array(0, np.int64)}
    other = {"k": np.array(0, np.int64), "j": np.array(1, np.int64)}
    assert propagate._asked(n1, types, same) == propagate._asked(n2, types, same)
    assert propagate._asked(n1, types, other) != propagate._asked(n2, types, other)
    assert propagate._asked(n2, types, same) != propagate._asked(n3, types, same)


def test_a_shape_value_is_keyed_by_the_shape_it_reads() -> None:
    memo: dict = {}
    shape = helper.make_node("Shape", ["a"], ["sa"])
    shape_b = helper.make_node("Shape", ["b"], ["sb"])
    shapes = {"a": (2, 3), "b": (2, 4)}
    got_a = propagate._value_once(shape, {}, shapes, 17, memo)
    got_b = propagate._value_once(shape_b, {}, shapes, 17, memo)
    assert got_a.tolist() == [2, 3]
    assert got_b.tolist() == [2, 4]
    again = propagate._value_once(
        helper.make_node("Shape", ["c"], ["sc"]), {}, {"c": (2, 3)}, 17, memo
    )
    assert again is got_a  # the same node of another layer: computed once
