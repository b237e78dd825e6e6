"""Constant values in patterns (issue 39): ``value``, ``value_in``, ``tolerance``,
``shape`` of a ``source_type: const`` input, matched through Identity/Cast/Transpose like
``const`` itself, and never merged across layers by the repeated-structure memo."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ruleengine.graph import graph_from_model
from ruleengine.match import find_candidates, memo
from tests.match.helpers import const, match, model, node, rules

pytestmark = pytest.mark.unit

HARDSWISH = """
name: hs
match:
  ops:
    - type: Add
      input_sources:
        input1: {{source_type: const, {add}}}
    - type: Clip
      input_sources:
        input1: {{source_type: const, value: 0}}
        input2: {{source_type: const, value: 6}}
    - type: Mul
      input_sources:
        input0: {{same_as: {{op: 0, input: 0}}}}
        input1: {{from_op: 1}}
    - type: Div
      input_sources:
        input1: {{source_type: const, value: 6}}
rewrite:
  target_op: HardSwish
"""


def _hardswish(three, *, dtype=np.float32, wrap: tuple[str, ...] = ()) -> onnx.ModelProto:
    """x * clip(x + c, 0, 6) / 6 with c = ``three`` (stored as ``dtype``, then read
    through the ``wrap`` ops: Identity, Cast to float, ...)."""
    nodes = []
    name = "c"
    for k, op in enumerate(wrap):
        attrs = {"to": TensorProto.FLOAT} if op == "Cast" else {}
        nodes.append(node(op, [name], [f"w{k}"], **attrs))
        name = f"w{k}"
    nodes += [
        node("Add", ["x", name], ["a"]),
        node("Clip", ["a", "lo", "hi"], ["c1"]),
        node("Mul", ["x", "c1"], ["m"]),
        node("Div", ["m", "six"], ["y"]),
    ]
    inits = [const("c", three, dtype), const("lo", 0.0), const("hi", 6.0), const("six", 6.0)]
    return model(nodes, {"x": [1, 8]}, {"y": [1, 8]}, inits)


def _codes(res) -> list[str]:
    return [n.code for n in res.near_misses]


def test_value_matches_the_constant_and_refuses_another(tmp_path: Path) -> None:
    rule = HARDSWISH.format(add="value: 3")
    assert len(match(tmp_path, _hardswish(3.0), rule).candidates) == 1
    res = match(tmp_path, _hardswish(2.0), rule)
    assert res.candidates == () and _codes(res) == ["const-value"]
    reason = res.near_misses[0].reason
    assert "op 0 (Add): input1 is 2" in reason and "asks for 3" in reason


@pytest.mark.parametrize("wrap", [("Identity",), ("Cast",), ("Identity", "Cast", "Identity")])
def test_value_is_read_through_identity_and_cast(tmp_path: Path, wrap) -> None:
    rule = HARDSWISH.format(add="value: 3.0")
    m3 = _hardswish(3.0, dtype=np.float16, wrap=wrap)
    assert len(match(tmp_path, m3, rule).candidates) == 1
    m2 = _hardswish(2.0, dtype=np.float16, wrap=wrap)
    assert _codes(match(tmp_path, m2, rule)) == ["const-value"]


def test_a_cast_on_the_way_is_applied(tmp_path: Path) -> None:
    # 3.7 stored as float, cast to int64 then back to float: the consumer reads 3
    m = _hardswish(3.7, wrap=())
    nodes = list(m.graph.node)
    cast_int = node("Cast", ["c"], ["ci"], to=TensorProto.INT64)
    cast_back = node("Cast", ["ci"], ["cf"], to=TensorProto.FLOAT)
    nodes[0].input[1] = "cf"
    del m.graph.node[:]
    m.graph.node.extend([cast_int, cast_back, *nodes])
    assert len(match(tmp_path, m, HARDSWISH.format(add="value: 3")).candidates) == 1


def test_fp16_constants_use_the_float16_tolerance(tmp_path: Path) -> None:
    # 1/sqrt(2) stored as float16 is 0.70703125: 1.1e-4 away, within fp16's default 1e-3
    rule = HARDSWISH.format(add="value: 0.70710678")
    assert len(match(tmp_path, _hardswish(0.70710678, dtype=np.float16), rule).candidates) == 1
    # the same distance on a float32 constant is outside float32's default 1e-4
    assert _codes(match(tmp_path, _hardswish(0.70703125), rule)) == ["const-value"]


def test_tolerance_widens_and_narrows(tmp_path: Path) -> None:
    m = _hardswish(3.01)
    assert _codes(match(tmp_path, m, HARDSWISH.format(add="value: 3"))) == ["const-value"]
    wide = HARDSWISH.format(add="value: 3, tolerance: {abs: 0.05}")
    assert len(match(tmp_path, m, wide).candidates) == 1
    rel = HARDSWISH.format(add="value: 3, tolerance: {rel: 0.01}")
    assert len(match(tmp_path, m, rel).candidates) == 1
    exact = HARDSWISH.format(add="value: 3, tolerance: {rel: 0}")
    assert _codes(match(tmp_path, _hardswish(3.0000002), exact)) == ["const-value"]


def test_value_in_accepts_any_listed_value(tmp_path: Path) -> None:
    rule = HARDSWISH.format(add="value_in: [3, 6]")
    assert len(match(tmp_path, _hardswish(6.0), rule).candidates) == 1
    assert len(match(tmp_path, _hardswish(3.0), rule).candidates) == 1
    res = match(tmp_path, _hardswish(2.0), rule)
    assert _codes(res) == ["const-value"] and "one of 3, 6" in res.near_misses[0].reason


def test_a_value_list_and_a_splat(tmp_path: Path) -> None:
    splat = _hardswish([3.0] * 8)  # a per-channel constant that is 3 everywhere
    assert len(match(tmp_path, splat, HARDSWISH.format(add="value: 3")).candidates) == 1
    listed = _hardswish([1.0, 2.0] * 4)
    ok = HARDSWISH.format(add="value: [1, 2, 1, 2, 1, 2, 1, 2]")
    assert len(match(tmp_path, listed, ok).candidates) == 1
    other = HARDSWISH.format(add="value: [2, 1, 2, 1, 2, 1, 2, 1]")
    assert _codes(match(tmp_path, listed, other)) == ["const-value"]


@pytest.mark.parametrize(
    ("stored", "shape", "ok"),
    [
        (3.0, "[]", True),
        ([3.0], "[]", False),
        ([3.0], "[1]", True),
        ([3.0], "scalar", True),
        ([[3.0]], "scalar", True),
        ([3.0, 3.0], "scalar", False),
    ],
)
def test_shape(tmp_path: Path, stored, shape, ok: bool) -> None:
    rule = HARDSWISH.format(add=f"value: 3, shape: {shape}")
    res = match(tmp_path, _hardswish(stored), rule)
    assert (len(res.candidates) == 1) is ok
    if not ok:
        assert _codes(res) == ["const-value"] and "shape" in res.near_misses[0].reason


def test_a_big_constant_is_never_read(tmp_path: Path) -> None:
    # 128 elements: the loader keeps no values (no weight bytes are read), so a value
    # check cannot hold; the shape alone can be checked
    big = _hardswish(np.full((1, 128), 3.0, np.float32))
    big.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128]))
    big.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128]))
    res = match(tmp_path, big, HARDSWISH.format(add="value: 3"))
    assert _codes(res) == ["const-value"] and "not read" in res.near_misses[0].reason
    shaped = HARDSWISH.format(add="shape: [1, 128]")
    assert len(match(tmp_path, big, shaped).candidates) == 1


def test_a_commutative_add_reads_the_constant_on_the_other_port(tmp_path: Path) -> None:
    m = _hardswish(3.0)
    m.graph.node[0].input[:] = ["c", "x"]  # Add(3, x)
    rule = HARDSWISH.format(add="value: 3").replace(
        "input0: {same_as: {op: 0, input: 0}}", "input0: {source_type: any}"
    )
    assert len(match(tmp_path, m, rule).candidates) == 1
    m.graph.initializer[0].CopyFrom(const("c", 2.0))
    assert _codes(match(tmp_path, m, rule)) == ["const-value"]


# ------------------------------------------------------------------ the memo

ADD_ONLY = """
name: add3
match:
  ops:
    - type: Relu
    - type: Add
      input_sources:
        input1: {source_type: const, value: 3}
rewrite:
  target_op: A
"""


def _stack(layers: int, odd: int, wrap: tuple[str, ...]) -> onnx.ModelProto:
    """``layers`` x (Relu, Add(constant behind ``wrap``)), every constant 3 but layer
    ``odd``'s, which is 2."""
    nodes, inits = [], []
    x = "x"
    for i in range(layers):
        name = f"c{i}"
        inits.append(const(name, 2.0 if i == odd else 3.0, np.float16 if wrap else np.float32))
        for k, op in enumerate(wrap):
            attrs = {"to": TensorProto.FLOAT} if op == "Cast" else {}
            nodes.append(node(op, [name], [f"l{i}_w{k}"], **attrs))
            name = f"l{i}_w{k}"
        nodes.append(node("Relu", [x], [f"l{i}_r"]))
        nodes.append(node("Add", [f"l{i}_r", name], [f"l{i}_a"]))
        x = f"l{i}_a"
    m = model(nodes, {"x": [1, 8]}, {x: [1, 8]}, inits)
    return m


@pytest.mark.parametrize("wrap", [(), ("Cast",), ("Identity", "Identity", "Cast")])
def test_the_memo_never_merges_layers_whose_constants_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wrap
) -> None:
    monkeypatch.setattr(memo, "MAX_COVER", 1.0)  # a small graph: use the memo all the same
    g = graph_from_model(_stack(40, 17, wrap))
    rs = rules(tmp_path, ADD_ONLY)
    stats: dict = {}
    with_memo = find_candidates(g, rs, memo=True, stats=stats)
    plain = find_candidates(g, rs, memo=False)
    assert stats.get("classes", 0) < 40 * (2 + len(wrap))  # the memo did share work
    assert with_memo.candidates == plain.candidates
    assert [(n.candidate, n.code) for n in with_memo.near_misses] == [
        (n.candidate, n.code) for n in plain.near_misses
    ]
    assert len(plain.candidates) == 39
    (miss,) = plain.near_misses
    assert miss.code == "const-value" and "l17_a" in miss.candidate.nodes


# ------------------------------------------------------------------ reject reasons

BROADCAST = """
name: b
match:
  ops:
    - type: Relu
    - type: Add
      params: {{broadcast: {value}}}
rewrite:
  target_op: A
"""


@pytest.mark.parametrize(
    ("value", "shape", "said"),
    [
        ("false", [8], "op 1 (Add): broadcast: false, but input shapes differ"),
        ("true", [3], "op 1 (Add): broadcast: true, but input shapes"),
    ],
)
def test_a_shape_param_reason_names_the_param_once(
    tmp_path: Path, value: str, shape: list, said: str
) -> None:
    m = model(
        [node("Relu", ["x"], ["r"]), node("Add", ["r", "y"], ["z"])],
        {"x": [2, 8], "y": shape},
        {"z": None},
    )
    res = match(tmp_path, m, BROADCAST.format(value=value))
    (miss,) = res.near_misses
    assert miss.code == "param-mismatch" and said in miss.reason, miss.reason
    assert "broadcast: broadcast" not in miss.reason


def test_a_bfloat16_cast_on_the_way_gives_its_tolerance() -> None:
    from ruleengine.match.values import const_values, tolerance
    from ruleengine.rules.model import ConstValue

    m = _hardswish(3.0)
    nodes = list(m.graph.node)
    down = node("Cast", ["c"], ["cb"], to=TensorProto.BFLOAT16)
    up = node("Cast", ["cb"], ["cf"], to=TensorProto.FLOAT)
    nodes[0].input[1] = "cf"
    del m.graph.node[:]
    m.graph.node.extend([down, up, *nodes])
    got = const_values(graph_from_model(m), "cf")
    assert got is not None and got[0] == [3.0] and "bfloat16" in got[1]
    assert tolerance(ConstValue(value=3.0), got[1]) == (1e-2, 0.0)
    assert tolerance(ConstValue(value=3.0, abs=0.5), got[1]) == (0.0, 0.5)
