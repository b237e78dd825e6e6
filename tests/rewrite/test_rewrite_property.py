"""Property: for random DAGs and any set of disjoint convex groups, the fused model passes
the checker and onnxruntime computes exactly what the original does."""

from __future__ import annotations

import numpy as np
import onnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from ruleengine.rewrite.onnx_rewrite import rewrite_model
from ruleengine.rewrite.plan import build_groups
from ruleengine.rules.model import RuleSet
from ruleengine.verification import numerics as V
from tests.rewrite.records import graph_from_model, rule, scored

UNARY = ["Relu", "Tanh", "Sigmoid", "Neg"]
BINARY = ["Add", "Mul", "Sub"]
RULES = RuleSet((rule("r0", "F0"), rule("r1", "F1")))


@st.composite
def dag_and_groups(draw):
    n = draw(st.integers(3, 12))
    tensors = ["x", "w"]  # a graph input and an initializer
    nodes, preds = [], []
    for i in range(n):
        if draw(st.booleans()):
            op, k = draw(st.sampled_from(UNARY)), 1
        else:
            op, k = draw(st.sampled_from(BINARY)), 2
        ins = [draw(st.sampled_from(tensors)) for _ in range(k)]
        nodes.append(helper.make_node(op, ins, [f"t{i}"], name=f"n{i}"))
        preds.append({int(t[1:]) for t in ins if t.startswith("t")})
        tensors.append(f"t{i}")
    # reachability (nodes are already topologically ordered)
    reach = [set() for _ in range(n)]  # reach[i]: nodes that reach i
    for i in range(n):
        for p in preds[i]:
            reach[i] |= {p} | reach[p]
    free = set(range(n))
    groups = []
    for _ in range(draw(st.integers(1, 3))):
        if len(free) < 2:
            break
        members = set(draw(st.lists(st.sampled_from(sorted(free)), min_size=2, max_size=5)))
        # convex: no node outside the set lies on a path between two members
        between = {
            v
            for v in range(n)
            if v not in members
            and any(a in reach[v] for a in members)
            and any(v in reach[b] for b in members)
        }
        if len(members) >= 2 and not between:
            groups.append(sorted(members))
            free -= members
    outputs = [f"t{n - 1}"] + draw(st.lists(st.sampled_from(tensors[2:]), max_size=2))
    return nodes, groups, list(dict.fromkeys(outputs))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag_and_groups())
def test_fused_random_dag_equals_original(case):
    nodes, groups, outputs = case
    graph = helper.make_graph(
        nodes,
        "random",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, 3]) for o in outputs],
        initializer=[onnx.numpy_helper.from_array(np.full((2, 3), 0.5, np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    g = graph_from_model(model)
    chosen = [scored(f"r{i % 2}", [f"n{k}" for k in grp]) for i, grp in enumerate(groups)]
    fused_groups = build_groups(g, chosen, RULES)
    # the fused model is checked, and identical in onnxruntime
    if not fused_groups:
        return
    try:
        fused = rewrite_model(model, g, fused_groups)
    except Exception as exc:  # cycles between groups are the resolver's job to avoid
        assert "cycle" in str(exc)
        return
    onnx.checker.check_model(fused, full_check=True)
    assert len(fused.graph.node) == len(nodes) - sum(len(x) for x in groups) + len(groups)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}
    ref, got = V.run_model(model, feeds), V.run_model(fused, feeds)
    for name in ref:
        np.testing.assert_array_equal(got[name], ref[name])
