"""Matching features on small graphs: chains, ports, sources, params, subgraph checks."""

from __future__ import annotations

from .helpers import const, match, model, node

CONV_ADD_SILU = """
name: cas
match:
  ops:
    - type: Conv2d
      params: {groups: 1, activation_type: "none"}
    - type: Add
      params: {broadcast: true}
      input_sources:
        input0: {from_op: 0}
        input1: {source_type: const_or_param}
    - type: Swish
      params: {approximate: "none"}
      input_sources:
        input0: {from_op: 1}
  subgraph:
    input_count_range: [1, 2]
    output_count: 1
rewrite: {target_op: F}
"""


def _conv_add_silu(residual_first: bool = False, extra_consumer: bool = False, bias_shape=None):
    w = const("w", [[[[1.0]]]] * 4)
    w = const("w", __import__("numpy").ones((4, 4, 1, 1)))
    add_in = ["r", "c"] if residual_first else ["c", "r"]
    nodes = [
        node("Conv", ["x", "w"], ["c"]),
        node("Add", add_in, ["a"]),
        node("Sigmoid", ["a"], ["s"]),
        node("Mul", ["s", "a"], ["y"]),
    ]
    outputs = {"y": None}
    if extra_consumer:
        nodes.append(node("Relu", ["c"], ["z"]))
        outputs["z"] = None
    return model(nodes, {"x": [1, 4, 8, 8], "r": bias_shape or [1, 4, 8, 8]}, outputs, [w])


def test_chain_with_composite_and_commutative_ports(tmp_path) -> None:
    for first in (False, True):
        res = match(tmp_path, _conv_add_silu(residual_first=first), CONV_ADD_SILU)
        assert [c.nodes for c in res.candidates] == [("c", "a", "s", "y")]
        c = res.candidates[0]
        assert c.bindings == (("c",), ("a",), ("s", "y"))
        assert c.inputs == ("x", "w", "r")
        assert c.outputs == ("y",)


def test_second_consumer_of_intermediate_is_a_near_miss(tmp_path) -> None:
    res = match(tmp_path, _conv_add_silu(extra_consumer=True), CONV_ADD_SILU)
    assert res.candidates == ()
    assert [n.code for n in res.near_misses] == ["intermediate-escapes"]
    assert "'c'" in res.near_misses[0].reason


def test_graph_output_in_the_middle_is_a_near_miss(tmp_path) -> None:
    m = _conv_add_silu()
    m.graph.output.append(__import__("onnx").helper.make_tensor_value_info("a", 1, None))
    res = match(tmp_path, m, CONV_ADD_SILU)
    assert res.candidates == ()
    assert res.near_misses[0].code == "intermediate-escapes"
    assert "graph output" in res.near_misses[0].reason


def test_broadcast_mismatch_is_a_near_miss(tmp_path) -> None:
    res = match(tmp_path, _conv_add_silu(bias_shape=[1, 3, 8, 8]), CONV_ADD_SILU)
    assert res.candidates == ()
    assert res.near_misses[0].code == "param-mismatch"
    assert "broadcast" in res.near_misses[0].reason


def test_missing_shape_is_a_dynamic_shape_near_miss(tmp_path) -> None:
    m = _conv_add_silu()
    m.graph.input[1].type.tensor_type.ClearField("shape")
    res = match(tmp_path, m, CONV_ADD_SILU)
    assert res.candidates == ()
    assert res.near_misses[0].code == "dynamic-shape"


def test_wrong_attribute_value_and_default_values(tmp_path) -> None:
    m = _conv_add_silu()
    ok = CONV_ADD_SILU
    res = match(tmp_path, m, ok.replace("groups: 1", "groups: 2"))
    assert res.candidates == () and res.near_misses[0].code == "param-mismatch"
    assert "group" in res.near_misses[0].reason
    # absent attribute == ONNX default; YAML 1.1 string "1e0" equals 1
    res = match(tmp_path, m, ok.replace("groups: 1", 'groups: "1e0", strides: [1, 1]'))
    assert len(res.candidates) == 1


def test_const_source_type(tmp_path) -> None:
    text = """
name: bias
match:
  ops:
    - type: MatMul
    - type: Add
      input_sources:
        input0: {from_op: 0}
        input1: {source_type: const}
rewrite: {target_op: F}
"""
    import numpy as np

    w = const("w", np.ones((4, 4)))
    b = const("b", np.ones((4,)))
    with_const = model(
        [node("MatMul", ["x", "w"], ["m"]), node("Add", ["b", "m"], ["y"])],
        {"x": [2, 4]},
        {"y": None},
        [w, b],
    )
    assert len(match(tmp_path, with_const, text).candidates) == 1
    with_input = model(
        [node("MatMul", ["x", "w"], ["m"]), node("Add", ["m", "r"], ["y"])],
        {"x": [2, 4], "r": [2, 4]},
        {"y": None},
        [w],
    )
    res = match(tmp_path, with_input, text)
    assert res.candidates == () and res.near_misses[0].code == "input-source"


def test_branches_and_repeat(tmp_path) -> None:
    text = """
name: act_chain
match:
  ops:
    - type: Relu
      repeat: {min: 2, max: 3}
  branches:
    - ops:
        - type: "@cube"
        - type: Tanh
rewrite: {target_op: F}
"""
    import numpy as np

    m = model(
        [
            node("Relu", ["x"], ["a"]),
            node("Relu", ["a"], ["b"]),
            node("Relu", ["b"], ["c"]),
            node("MatMul", ["c", "w"], ["d"]),
            node("Tanh", ["d"], ["y"]),
        ],
        {"x": [2, 4]},
        {"y": None},
        [const("w", np.ones((4, 4)))],
    )
    res = match(tmp_path, m, text)
    got = sorted((c.alternative, c.nodes) for c in res.candidates)
    assert got == [(0, ("a", "b")), (0, ("a", "b", "c")), (0, ("b", "c")), (1, ("d", "y"))]


def test_single_op_rule_and_output_count(tmp_path) -> None:
    text = """
name: one
match:
  ops:
    - type: Softmax
      params: {axis: -1}
  subgraph: {output_count: 1}
rewrite: {target_op: F}
"""
    m = model([node("Softmax", ["x"], ["y"], axis=-1)], {"x": [2, 4]}, {"y": None})
    assert [c.nodes for c in match(tmp_path, m, text).candidates] == [("y",)]
    m1 = model([node("Softmax", ["x"], ["y"], axis=1)], {"x": [2, 4, 3]}, {"y": None})
    res = match(tmp_path, m1, text)
    assert res.candidates == () and res.near_misses[0].code == "param-mismatch"


def test_dropout_ratio_is_an_input_const(tmp_path) -> None:
    text = """
name: ln_drop
match:
  ops:
    - type: LayerNorm
      params: {normalized_shape: [8], elementwise_affine: true}
    - type: Dropout
      params: {ratio: 0.1}
rewrite: {target_op: F}
"""
    import numpy as np

    def build(ratio, width=8):
        return model(
            [
                node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1),
                node("Dropout", ["n", "r"], ["y"]),
            ],
            {"x": [2, width]},
            {"y": None},
            [
                const("g", np.ones(width)),
                const("b", np.zeros(width)),
                const("r", np.array(ratio)),
            ],
        )

    assert len(match(tmp_path, build(0.1), text).candidates) == 1
    assert match(tmp_path, build(0.2), text).near_misses[0].code == "param-mismatch"
    res = match(tmp_path, build(0.1, width=4), text)
    assert res.candidates == () and "normalized_shape" in res.near_misses[0].reason


def test_clause_explosion_is_a_clear_error(tmp_path) -> None:
    import pytest

    from ruleengine.errors import UsageError

    ops = "".join("    - type: Gelu\n" for _ in range(5))
    text = f"name: many\nmatch:\n  ops:\n{ops}rewrite: {{target_op: F}}\n"
    m = model([node("Relu", ["x"], ["y"])], {"x": [2]}, {"y": None})
    with pytest.raises(UsageError, match="Datalog clauses"):
        match(tmp_path, m, text)


def test_repeated_composite(tmp_path) -> None:
    text = """
name: silu2
match:
  ops:
    - type: SiLU
      repeat: {min: 2, max: 2}
rewrite: {target_op: F}
"""
    m = model(
        [
            node("Sigmoid", ["x"], ["s1"]),
            node("Mul", ["x", "s1"], ["a"]),
            node("Sigmoid", ["a"], ["s2"]),
            node("Mul", ["s2", "a"], ["y"]),
        ],
        {"x": [2, 4]},
        {"y": None},
    )
    res = match(tmp_path, m, text)
    assert [c.bindings for c in res.candidates] == [(("s1", "a", "s2", "y"),)]


def test_sources_without_from_op_still_chain(tmp_path) -> None:
    import numpy as np

    text = """
name: mm_bias
match:
  ops:
    - type: MatMul
    - type: Add
      input_sources:
        input1: {source_type: const}
rewrite: {target_op: F}
"""
    m = model(
        [
            node("MatMul", ["x", "w"], ["m"]),
            node("Add", ["m", "b"], ["y"]),
            node("MatMul", ["x", "w"], ["m2"]),
            node("Relu", ["m2"], ["z"]),
        ],
        {"x": [2, 4]},
        {"y": None, "z": None},
        [const("w", np.ones((4, 4))), const("b", np.ones((4,)))],
    )
    res = match(tmp_path, m, text)
    assert [c.nodes for c in res.candidates] == [("m", "y")]


def test_chain_into_commutative_op_swaps_described_port(tmp_path) -> None:
    import numpy as np

    text = """
name: mm_bias
match:
  ops:
    - type: MatMul
    - type: Add
      input_sources:
        input1: {source_type: const}
rewrite: {target_op: F}
"""
    m = model(
        [node("MatMul", ["x", "w"], ["m"]), node("Add", ["b", "m"], ["y"])],
        {"x": [2, 4]},
        {"y": None},
        [const("w", np.ones((4, 4))), const("b", np.ones((4,)))],
    )
    assert [c.nodes for c in match(tmp_path, m, text).candidates] == [("m", "y")]


FAN_OUT = """
name: norm_qkv
match:
  ops:
    - type: Relu
    - type: MatMul
      input_sources: {input0: {from_op: 0}}
    - type: MatMul
      input_sources: {input0: {from_op: 0}}
    - type: MatMul
      input_sources: {input0: {from_op: 0}}
rewrite: {target_op: F}
"""


def test_one_candidate_per_rule_and_node_set(tmp_path) -> None:
    """Interchangeable ops (Q/K/V projections of one normalised input) bound in another
    order are the same fusion group: reported once, in the first order, not 3! times."""
    import numpy as np

    w = [const(f"w{i}", np.ones((4, 4))) for i in range(3)]
    nodes = [node("Relu", ["x"], ["r"], name="relu")]
    nodes += [node("MatMul", ["r", f"w{i}"], [f"q{i}"], name=f"mm{i}") for i in range(3)]
    outputs = {f"q{i}": None for i in range(3)}
    res = match(tmp_path, model(nodes, {"x": [2, 4]}, outputs, w), FAN_OUT)
    assert [c.nodes for c in res.candidates] == [("relu", "mm0", "mm1", "mm2")]
