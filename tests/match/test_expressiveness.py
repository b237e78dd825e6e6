"""Pattern expressiveness (issue 11): fan-out repeats, same_as links, one_of params,
constants seen through Identity/Cast, rewrite ports on op inputs, branch kernel names."""

from __future__ import annotations

import numpy as np

from ruleengine.rules import lint_paths

from .helpers import const, graph, match, model, node, rules

NORM_PROJECTIONS = """
name: norm_proj
match:
  ops:
    - type: LayerNormalization
    - type: MatMul
      repeat: {min: 1, max: 4, fan_out: true}
      input_sources:
        input1: {source_type: const}
rewrite: {target_op: NormProj}
"""


def _norm_with_projections(count: int, wrap_first: str | None = None):
    inits = [const("g", np.ones(8)), const("b", np.zeros(8))]
    nodes = [node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1)]
    outputs = {}
    for i in range(count):
        inits.append(const(f"w{i}", np.ones((8, 8))))
        weight = f"w{i}"
        if wrap_first and i == 0:  # TorchScript's Identity (or a Cast) around a weight
            nodes.append(
                node(
                    wrap_first,
                    [weight],
                    [f"{weight}_wrapped"],
                    **({"to": 1} if wrap_first == "Cast" else {}),
                )
            )
            weight = f"{weight}_wrapped"
        nodes.append(node("MatMul", ["n", weight], [f"p{i}"]))
        outputs[f"p{i}"] = [2, 8]
    return model(nodes, {"x": [2, 8]}, outputs, inits)


def test_fan_out_takes_every_projection_without_a_branch_per_count(tmp_path):
    for count in (1, 2, 3, 4):
        res = match(tmp_path, _norm_with_projections(count), NORM_PROJECTIONS)
        sets = {c.node_set for c in res.candidates}
        # the norm output may not escape: only the group holding every projection
        want = frozenset({"n", *(f"p{i}" for i in range(count))})
        assert sets == {want}, (count, sets)
        # siblings are interchangeable: one candidate, its op 1 binds every copy
        (cand,) = res.candidates
        assert sorted(cand.bindings[1]) == [f"p{i}" for i in range(count)]


def test_fan_out_checks_every_copy(tmp_path):
    m = _norm_with_projections(3)
    # the third projection reads a graph input as its weight: source_type const fails there
    m.graph.node[-1].input[1] = "x2"
    m.graph.input.append(__import__("onnx").helper.make_tensor_value_info("x2", 1, [8, 8]))
    res = match(tmp_path, m, NORM_PROJECTIONS)
    assert res.candidates == ()
    assert any(n.code == "input-source" for n in res.near_misses)


def test_fan_out_more_readers_than_max_is_no_match(tmp_path):
    res = match(tmp_path, _norm_with_projections(5), NORM_PROJECTIONS)
    assert res.candidates == ()  # 4 of 5: the norm output escapes to the fifth
    assert any(n.code == "intermediate-escapes" for n in res.near_misses)


def test_const_sees_through_identity_and_cast(tmp_path):
    for wrap in ("Identity", "Cast"):
        res = match(tmp_path, _norm_with_projections(2, wrap_first=wrap), NORM_PROJECTIONS)
        assert {c.node_set for c in res.candidates} == {frozenset({"n", "p0", "p1"})}, wrap
    # a Relu of a constant is computed, not handed on: not `const`
    res = match(tmp_path, _norm_with_projections(2, wrap_first="Relu"), NORM_PROJECTIONS)
    assert res.candidates == ()


ROPE_HALF = """
name: rope
match:
  ops:
    - type: Slice
    - type: Neg
    - type: Slice
      input_sources:
        input0: {same_as: {op: 0, input: 0}}
    - type: Concat
      input_sources:
        input0: {from_op: 1}
        input1: {from_op: 2}
    - type: Mul
      input_sources:
        input0: {from_op: 3}
        input1: {source_type: const_or_param}
    - type: Mul
      input_sources:
        input0: {same_as: {op: 0, input: 0}}
        input1: {source_type: const_or_param}
    - type: Add
      input_sources:
        input0: {from_op: 5}
        input1: {from_op: 4}
rewrite: {target_op: Rope}
"""


def _rope(other_x_for_cos: bool = False):
    inits = [
        const("s0", [0], np.int64),
        const("h", [4], np.int64),
        const("e", [8], np.int64),
        const("ax", [-1], np.int64),
        const("cos", np.ones(8)),
        const("sin", np.ones(8)),
    ]
    nodes = [
        node("Slice", ["x", "h", "e", "ax"], ["x2"]),
        node("Neg", ["x2"], ["nx2"]),
        node("Slice", ["x", "s0", "h", "ax"], ["x1"]),
        node("Concat", ["nx2", "x1"], ["rot"], axis=-1),
        node("Mul", ["rot", "sin"], ["rs"]),
        node("Mul", ["y" if other_x_for_cos else "x", "cos"], ["xc"]),
        node("Add", ["xc", "rs"], ["out"]),
    ]
    return model(nodes, {"x": [2, 8], "y": [2, 8]}, {"out": [2, 8]}, inits)


def test_same_as_ties_two_reads_of_one_tensor(tmp_path):
    res = match(tmp_path, _rope(), ROPE_HALF)
    assert [len(c.node_set) for c in res.candidates] == [7]
    other = match(tmp_path, _rope(other_x_for_cos=True), ROPE_HALF)
    assert other.candidates == ()
    assert any("not the tensor op 0 reads" in n.reason for n in other.near_misses)


TRANSPOSE_ONE_OF = """
name: heads
match:
  ops:
    - type: MatMul
    - type: Transpose
      params:
        perm: {one_of: [[0, 2, 1, 3], [0, 2, 3, 1]]}
rewrite: {target_op: T}
"""


def _transpose(perm):
    nodes = [
        node("MatMul", ["x", "w"], ["m"]),
        node("Transpose", ["m"], ["t"], perm=perm),
    ]
    return model(nodes, {"x": [1, 2, 3, 4]}, {"t": None}, [const("w", np.ones((4, 4)))])


def test_one_of_accepts_any_listed_value(tmp_path):
    for perm, hits in (([0, 2, 1, 3], 1), ([0, 2, 3, 1], 1), ([0, 1, 3, 2], 0)):
        res = match(tmp_path, _transpose(perm), TRANSPOSE_ONE_OF)
        assert len(res.candidates) == hits, perm
    res = match(tmp_path, _transpose([0, 1, 3, 2]), TRANSPOSE_ONE_OF)
    assert any("none of" in n.reason for n in res.near_misses)


def _lint(tmp_path, text: str) -> list[str]:
    p = tmp_path / "r.yaml"
    p.write_text(text)
    return [d.code for d in lint_paths([p], set_checks=True).diagnostics]


def test_one_of_malformed_is_an_error_and_dead_values_a_warning(tmp_path):
    bad = TRANSPOSE_ONE_OF.replace("one_of:", "any_of:")
    assert "AF210" in _lint(tmp_path, bad)
    empty = TRANSPOSE_ONE_OF.replace("[[0, 2, 1, 3], [0, 2, 3, 1]]", "[]")
    assert "AF210" in _lint(tmp_path, empty)
    assert _lint(tmp_path, TRANSPOSE_ONE_OF) == []
    dead = """
name: d
match:
  ops:
    - type: Conv
    - type: Softmax
      params:
        dim: {one_of: [1, 2]}
    - type: Gelu
      params:
        approximate: {one_of: [fast, faster]}
rewrite: {target_op: D}
"""
    assert "AF305" in _lint(tmp_path, dead)  # never-matches


def test_same_as_lint(tmp_path):
    assert "AF211" in _lint(
        tmp_path,
        ROPE_HALF.replace(
            "{op: 0, input: 0}}\n        input1", "{op: 5, input: 0}}\n        input1"
        ),
    )
    assert "AF211" in _lint(
        tmp_path,
        ROPE_HALF.replace(
            "same_as: {op: 0, input: 0}}\n    - type: Concat",
            "same_as: {op: 2, input: 0}}\n    - type: Concat",
        ),
    )
    assert "AF211" in _lint(
        tmp_path,
        ROPE_HALF.replace(
            "{op: 0, input: 0}}\n    - type: Concat", "{op: 1, input: 3}}\n    - type: Concat"
        ),
    )
    assert _lint(tmp_path, ROPE_HALF) == []


PORTS = """
name: ports
match:
  ops:
    - type: MatMul
    - type: Add
      input_sources:
        input1: {source_type: const_or_param}
rewrite:
  target_op: P
  inputs:
    - {from_op: 0, input_idx: 0, input_port: 0}
    - {from_op: 1, input_idx: 1, input_port: 1}
"""


def test_rewrite_port_on_an_op_input(tmp_path):
    from ruleengine.pipeline import analyze

    nodes = [node("MatMul", ["x", "w"], ["m"]), node("Add", ["m", "r"], ["y"])]
    m = model(nodes, {"x": [2, 8], "r": [2, 8]}, {"y": [2, 8]}, [const("w", np.ones((8, 8)))])
    path = tmp_path / "m.onnx"
    __import__("onnx").save(m, path)
    p = tmp_path / "r.yaml"
    p.write_text(PORTS)
    analysis = analyze(path, rules=[str(p)])
    from ruleengine.rewrite.plan import resolve_ports

    (sc,) = analysis.resolution.chosen
    ports = resolve_ports(analysis.graph, sc, rules(tmp_path, PORTS).rules[0])
    assert [(q["input_port"], q["tensor"], q["internal"]) for q in ports] == [
        (0, "x", False),
        (1, "r", False),
    ]
    assert _lint(tmp_path, PORTS) == []


def test_internal_port_lint(tmp_path):
    internal = PORTS.replace(
        "{from_op: 1, input_idx: 1, input_port: 1}", "{from_op: 1, input_idx: 0, input_port: 1}"
    )
    assert _lint(tmp_path, internal) == ["AF307"]
    both = PORTS.replace(
        "input_idx: 0, input_port: 0", "input_idx: 0, output_idx: 0, input_port: 0"
    )
    assert "AF203" in _lint(tmp_path, both)
    beyond = PORTS.replace("input_idx: 0, input_port: 0", "input_idx: 7, input_port: 0")
    assert "AF203" in _lint(tmp_path, beyond)


BRANCH_NAMES = """
name: conv_bn_relu_x
match:
  ops:
    - type: Conv
    - type: BatchNormalization
    - type: Relu
  branches:
    - target_op: ConvRelu
      kernel_name: conv_relu
      ops:
        - type: Conv
        - type: Relu
rewrite: {target_op: ConvBNRelu}
output: {kernel_name: conv_bn_relu}
"""


def test_a_branch_names_its_own_kernel(tmp_path):
    from ruleengine.pipeline import fuse

    w = const("w", np.ones((4, 3, 1, 1)))
    nodes = [node("Conv", ["x", "w"], ["c"]), node("Relu", ["c"], ["y"])]
    m = model(nodes, {"x": [1, 3, 4, 4]}, {"y": [1, 4, 4, 4]}, [w])
    path = tmp_path / "m.onnx"
    __import__("onnx").save(m, path)
    p = tmp_path / "r.yaml"
    p.write_text(BRANCH_NAMES)
    result = fuse(path, rules=[str(p)])
    (group,) = result.plan.groups
    assert (group.target_op, group.kernel.kernel_name) == ("ConvRelu", "conv_relu")
    assert [n.op_type for n in result.fused_model.graph.node] == ["ConvRelu"]
    assert graph(m).node("c").op_type == "Conv"  # the input model is untouched


OPTIONAL_BIAS = """
name: opt
match:
  ops:
    - type: MatMul
    - type: Add
      repeat: {min: 0, max: 1}
      input_sources:
        input1: {source_type: const}
    - type: Relu
      input_sources:
        input0: {from_op: 1}
    - type: MatMul
      input_sources:
        input1: {source_type: const}
rewrite: {target_op: Opt}
"""


def _mm_relu_mm(bias: bool):
    inits = [const("w", np.ones((8, 8))), const("w2", np.ones((8, 8))), const("b", np.ones(8))]
    nodes = [node("MatMul", ["x", "w"], ["a"])]
    if bias:
        nodes.append(node("Add", ["a", "b"], ["ab"]))
    nodes.append(node("Relu", ["ab" if bias else "a"], ["r"]))
    nodes.append(node("MatMul", ["r", "w2"], ["y"]))
    return model(nodes, {"x": [2, 8]}, {"y": [2, 8]}, inits)


def test_optional_op_matches_with_and_without_it(tmp_path):
    (cand,) = match(tmp_path, _mm_relu_mm(True), OPTIONAL_BIAS).candidates
    assert len(cand.node_set) == 4 and len(cand.bindings[1]) == 1
    (cand,) = match(tmp_path, _mm_relu_mm(False), OPTIONAL_BIAS).candidates
    # absent: op 1 binds nothing and the Relu's `from_op: 1` reads op 0's output, which
    # is what op 1 would have handed on
    assert len(cand.node_set) == 3 and cand.bindings[1] == ()
    assert cand.bindings[2] and cand.bindings[3]


def test_optional_op_lint(tmp_path):
    first = """
name: a
match:
  ops:
    - type: MatMul
      repeat: {min: 0, max: 1}
    - type: Relu
rewrite: {target_op: A}
"""
    assert "AF212" in _lint(tmp_path, first)
    rooted = """
name: a
match:
  ops:
    - type: MatMul
    - type: Relu
    - type: Add
      repeat: {min: 0, max: 1}
      input_sources:
        input0: {from_op: 0}
rewrite: {target_op: A}
"""
    assert "AF212" in _lint(tmp_path, rooted)
    port = OPTIONAL_BIAS.replace(
        "rewrite: {target_op: Opt}",
        "rewrite:\n  target_op: Opt\n  inputs:\n    - {from_op: 1, input_idx: 1}",
    )
    assert "AF203" in _lint(tmp_path, port)
    assert _lint(tmp_path, OPTIONAL_BIAS) == []
