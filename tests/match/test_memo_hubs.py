"""The memo's cost per distinct structure on a stack whose mask is a graph input.

A mask fed as a graph input is a non-constant hub: every layer's Add reads it, so it has
shared-input (``tin``) facts. Those facts once sent every rule reading shared inputs
(silu, the norms, softmax, ... 41 of the bundled rules) to plain matching on the whole
graph (issue 38: match 50x slower per layer, memory ~12 MB a layer). A hub's shared
input only filters nodes a clause's edges already reach, so those rules stay memoised:
the same result as plain matching, memo classes constant in the depth, candidates linear.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ruleengine.graph import graph_from_model
from ruleengine.match import anchors, find_candidates, memo
from ruleengine.match.compile import compile_rule_set
from ruleengine.match.matcher import default_aliases
from ruleengine.rules import load_rule_set

pytestmark = pytest.mark.unit

# rules reading shared inputs (composites: SiLU, GELU with an Add reading its x, RMSNorm,
# softmax) and long chains
RULES = (
    "silu",
    "gelu_tanh",
    "rmsnorm",
    "softmax",
    "elementwise_chain",
    "add_rmsnorm",
    "cube_epilogue",
)
H, HEADS, S = 8, 2, 4


@pytest.fixture(scope="module")
def rule_set():
    rs = load_rule_set([], preset="all")
    return replace(rs, rules=tuple(r for r in rs.rules if r.name in RULES))


@pytest.fixture(autouse=True)
def _memo_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memo, "MAX_COVER", 1.0)  # small graphs: use it all the same


def _stack(layers: int) -> onnx.ModelProto:
    """Issue 38's awkward spelling, small: decomposed RMSNorm with scalar constants shared
    by every layer, Q/K/V without bias, K perm [0, 2, 3, 1], scores Div sqrt(d) + mask Add
    (the mask a graph input), decomposed softmax, SiLU MLP, weights as graph inputs."""
    nodes: list[onnx.NodeProto] = []
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, S, H]),
        helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, S, S]),
    ]

    def add(op: str, ins: list[str], **kw) -> str:
        out = f"n{len(nodes)}"
        nodes.append(helper.make_node(op, ins, [out], name=out, **kw))
        return out

    def weight(name: str, shape: list[int]) -> str:
        inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        return name

    def rms(x: str, p: str) -> str:
        ms = add("ReduceMean", [add("Pow", [x, "two"]), "axes"], keepdims=1)
        d = add("Div", [x, add("Sqrt", [add("Add", [ms, "eps"])])])
        return add("Mul", [d, weight(f"{p}.g", [H])])

    x = "x"
    for i in range(layers):
        h = rms(x, f"l{i}a")
        heads = {}
        for n in "qkv":
            r = add("Reshape", [add("MatMul", [h, weight(f"l{i}.w{n}", [H, H])]), "split"])
            heads[n] = add("Transpose", [r], perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3])
        s = add("Add", [add("Div", [add("MatMul", [heads["q"], heads["k"]]), "scale"]), "mask"])
        e = add("Exp", [add("Sub", [s, add("ReduceMax", [s, "axes"], keepdims=1)])])
        p = add("Div", [e, add("ReduceSum", [e, "axes"], keepdims=1)])
        c = add("Transpose", [add("MatMul", [p, heads["v"]])], perm=[0, 2, 1, 3])
        o = add("MatMul", [add("Reshape", [c, "merge"]), weight(f"l{i}.wo", [H, H])])
        x = add("Add", [x, o])
        g = add("MatMul", [rms(x, f"l{i}b"), weight(f"l{i}.wg", [H, 2 * H])])
        m = add("Mul", [g, add("Sigmoid", [g])])
        x = add("Add", [x, add("MatMul", [m, weight(f"l{i}.wd", [2 * H, H])])])
    consts = {
        "two": np.float32(2.0),
        "eps": np.float32(1e-6),
        "scale": np.float32(np.sqrt(H // HEADS)),
        "axes": np.array([-1], np.int64),
        "split": np.array([1, S, HEADS, H // HEADS], np.int64),
        "merge": np.array([1, S, H], np.int64),
    }
    graph = helper.make_graph(
        nodes,
        f"hub{layers}",
        inputs,
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, S, H])],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _memo_and_plain(layers: int, rule_set) -> tuple:
    graph = graph_from_model(_stack(layers))
    stats: dict = {}
    with_memo = find_candidates(graph, rule_set, memo=True, stats=stats)
    plain = find_candidates(graph, rule_set, memo=False)
    return with_memo, plain, stats


def test_a_mask_input_is_a_hub_with_shared_input_facts(rule_set) -> None:
    graph = graph_from_model(_stack(12))
    rules = rule_set.rules
    prog = compile_rule_set(rules, default_aliases(), tabled_forms=True)
    st = memo.structure(graph)
    assert "mask" in st.hubs
    edges, types = memo._hub_predicates(graph, st, prog)
    assert types == {"Add"} and not edges
    radius, _ = memo._anchors(prog, rules, types)
    assert all(radius[r.name] is not None for r in rules)  # every rule memoised


def test_memo_equals_plain_with_a_mask_input(rule_set) -> None:
    with_memo, plain, stats = _memo_and_plain(12, rule_set)
    assert stats["plain_rules"] == 0  # no rule left to plain matching over the whole graph
    assert len(with_memo.twins) > 0
    assert with_memo.candidates == plain.candidates
    assert with_memo.near_misses == plain.near_misses
    assert [n.reason for n in with_memo.near_misses] == [n.reason for n in plain.near_misses]
    assert {c.rule for c in plain.candidates} >= {"silu", "rmsnorm", "softmax"}


def test_classes_constant_and_candidates_linear_in_the_depth(rule_set) -> None:
    counts, classes = [], []
    for layers in (16, 32, 48):
        graph = graph_from_model(_stack(layers))
        stats: dict = {}
        found = find_candidates(graph, rule_set, memo=True, stats=stats)
        counts.append(len(found.candidates))
        classes.append(stats["classes"])
    assert classes[0] == classes[1] == classes[2]  # work per distinct structure
    assert counts[2] - counts[1] == counts[1] - counts[0]  # the same per added layer


def test_edge_reach_skips_only_shared_inputs_hub_readers_could_share() -> None:
    rs = load_rule_set([], preset="all")
    rules = tuple(r for r in rs.rules if r.name == "rmsnorm")
    prog = compile_rule_set(rules, default_aliases(), tabled_forms=True)
    for conc in prog.rules["rmsnorm"][2].values():
        got = anchors.clause_anchor(conc)
        radius = got[1]
        # no op type a hub's readers have: the radius is the clause's own
        assert anchors.edge_reach(conc, got, frozenset({"Conv"})) == radius
        # Pow and Div share x in a decomposed RMSNorm; without that link the edges
        # still reach every node, farther or as far
        every = frozenset({"Pow", "Div", "Mul", "ReduceMean", "Add", "Sqrt", "Reciprocal"})
        reach = anchors.edge_reach(conc, got, every)
        assert reach is None or reach >= radius


def test_the_window_yields_only_rows_anchored_at_representatives(rule_set) -> None:
    from ruleengine.match.classes import classify
    from ruleengine.match.datalog import datalog_answers

    graph = graph_from_model(_stack(16))
    rules = rule_set.rules
    prog = compile_rule_set(rules, default_aliases(), tabled_forms=True)
    st = memo.structure(graph)
    _, types = memo._hub_predicates(graph, st, prog)
    radius, anchor_of = memo._anchors(prog, rules, types)
    classes = classify(st, max(radius.values()) + 1)
    reps = {graph.nodes[int(r)].name for r in classes.reps}
    _, window = memo._balls(st, [int(r) for r in classes.reps], max(radius.values()))
    names = {graph.nodes[i].name for i in window}
    every, *_ = datalog_answers(graph, prog, names)
    anchored, *_ = datalog_answers(graph, prog, names, 1, (anchor_of, reps))

    def at_reps(rows: list[tuple], rule: str) -> set[tuple]:
        at = anchor_of[rule]
        return {r for r in rows if r[1 + at[r[0]]] in reps}

    fewer = False
    for rule in rules:
        head = prog.rules[rule.name][0]
        assert set(anchored.get(head, ())) <= set(every.get(head, ()))
        assert at_reps(anchored.get(head, []), rule.name) == at_reps(every.get(head, []), rule.name)
        fewer |= len(anchored.get(head, ())) < len(every.get(head, ()))
    assert fewer  # rows anchored elsewhere were not computed
