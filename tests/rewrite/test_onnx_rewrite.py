"""The rewriter on hand-built records: functions, metadata, checker, onnxruntime equality."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from ruleengine.rewrite.onnx_rewrite import RewriteError, rewrite_model
from ruleengine.rewrite.plan import build_groups
from ruleengine.rules.model import RuleSet
from ruleengine.verification import numerics as V
from tests.rewrite.records import graph_from_model, rule, scored

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mlp_block.onnx"

GELU = ["gelu_div", "gelu_erf", "gelu_add", "gelu_mul", "gelu_half"]
RULES = RuleSet(
    (
        rule("bias_add", "MatMulBias", kernel="matmul_bias"),
        rule("cbr", "ConvBnRelu", file_path="./kernels/", gen_dot_graph=True),
        rule("gelu", "FusedGelu"),
        rule("res_softmax", "AddSoftmax"),
    )
)


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return onnx.load(str(EXAMPLE))


@pytest.fixture(scope="module")
def graph(model):
    return graph_from_model(model)


def groups_for(graph, *specs):
    return build_groups(graph, [scored(r, nodes) for r, nodes in specs], RULES)


ALL = (
    ("bias_add", ["fc1_matmul", "fc1_bias"]),
    ("gelu", GELU),
    ("bias_add", ["fc2_matmul", "fc2_bias"]),
    ("res_softmax", ["residual_add", "softmax"]),
    ("cbr", ["conv", "bn", "relu"]),
)


def test_groups_are_numbered_in_topological_order(graph):
    groups = groups_for(graph, *reversed(ALL))
    assert [g.rule for g in groups] == ["bias_add", "gelu", "bias_add", "res_softmax", "cbr"]
    gelu = groups[1]
    assert gelu.inputs == ("fc1_out", "sqrt2", "one", "half")
    assert gelu.outputs == ("gelu_out",)
    assert groups[4].kernel.file_path == "kernels"
    assert groups[4].kernel.kernel_name == "cbr"


def test_fused_model_checks_runs_and_matches(model, graph):
    groups = groups_for(graph, *ALL)
    fused = rewrite_model(model, graph, groups)
    onnx.checker.check_model(fused, full_check=True)
    assert len(fused.graph.node) == 15 - 14 + 5
    fused_nodes = [n for n in fused.graph.node if n.domain == "autofusion"]
    assert [n.op_type for n in fused_nodes] == [
        "MatMulBias",
        "FusedGelu",
        "MatMulBias",
        "AddSoftmax",
        "ConvBnRelu",
    ]
    # identical bodies share one function; every node names its rule, group and kernel
    assert sorted(f.name for f in fused.functions) == [
        "AddSoftmax",
        "ConvBnRelu",
        "FusedGelu",
        "MatMulBias",
    ]
    meta = {e.key: e.value for e in fused_nodes[0].metadata_props}
    assert meta["autofusion.rule"] == "bias_add"
    assert meta["autofusion.group_id"] == "1"
    assert meta["autofusion.kernel_name"] == "matmul_bias"
    assert json.loads(meta["autofusion.nodes"]) == ["fc1_matmul", "fc1_bias"]
    assert json.loads(meta["autofusion.attributes"]) == {"fused": True}
    assert not fused_nodes[0].attribute  # rewrite.attributes never break the call
    feeds = V.make_inputs(model, seed=3)
    ref = V.run_model(model, feeds)
    got = V.run_model(fused, feeds)
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-5, atol=1e-6)


def test_input_model_is_not_modified(model, graph):
    before = model.SerializeToString()
    rewrite_model(model, graph, groups_for(graph, *ALL))
    assert model.SerializeToString() == before


def test_different_bodies_for_one_target_op_get_overloads(model, graph):
    groups = build_groups(
        graph,
        [scored("gelu", ["fc1_bias", "gelu_div"]), scored("gelu", ["gelu_add", "gelu_mul"])],
        RULES,
    )
    fused = rewrite_model(model, graph, groups)
    onnx.checker.check_model(fused, full_check=True)
    assert sorted((f.name, f.overload) for f in fused.functions) == [
        ("FusedGelu", ""),
        ("FusedGelu", "v2"),
    ]
    feeds = V.make_inputs(model)
    assert V.verify(V.run_model(model, feeds), fused, feeds, "random").ok


def test_non_convex_group_is_refused(model, graph):
    # fc1_bias -> gelu_div -> ... -> gelu_mul, but also fc1_bias -> gelu_mul directly:
    # {fc1_bias, gelu_mul} without the path between them would create a cycle.
    groups = build_groups(graph, [scored("gelu", ["fc1_bias", "gelu_mul"])], RULES)
    with pytest.raises(RewriteError, match="cycle"):
        rewrite_model(model, graph, groups)


def test_corrupted_rule_fails_verification_and_bisection_finds_it(model, graph):
    groups = groups_for(graph, *ALL)
    feeds = V.make_inputs(model)
    ref = V.run_model(model, feeds)
    bad = rewrite_model(model, graph, groups, corrupt_rules={"gelu"})
    result = V.verify(ref, bad, feeds, "random")
    assert not result.ok
    assert {o.name for o in result.outputs if not o.ok} == {"y"}

    def passes(subset):
        fused = rewrite_model(model, graph, subset, corrupt_rules={"gelu"})
        return V.verify(ref, fused, feeds, "random").ok

    kept, dropped, runs = V.bisect_failures(groups, passes)
    assert [g.rule for g in dropped] == ["gelu"]
    assert len(kept) == 4 and runs >= 2


def test_fusing_a_fused_model_again_keeps_existing_functions(model, graph):
    first = rewrite_model(model, graph, groups_for(graph, ("gelu", GELU)))
    g2 = graph_from_model(first)
    groups = build_groups(
        g2,
        [scored("gelu", ["fc2_matmul", "fc2_bias"]), scored("cbr", ["conv", "bn", "relu"])],
        RULES,
    )
    second = rewrite_model(first, g2, groups)
    onnx.checker.check_model(second, full_check=True)
    assert sorted((f.name, f.overload) for f in second.functions) == [
        ("ConvBnRelu", ""),
        ("FusedGelu", ""),
        ("FusedGelu", "v2"),
    ]
    assert [o.domain for o in second.opset_import].count("autofusion") == 1
    feeds = V.make_inputs(model)
    assert V.verify(V.run_model(model, feeds), second, feeds, "random").ok


def test_isolation_check_names_exactly_the_corrupted_groups(model, graph):
    groups = groups_for(graph, *ALL)
    feeds = V.make_inputs(model)
    clean = rewrite_model(model, graph, groups)
    assert V.isolate_failures(model, clean, groups, feeds) == ((), 1 + len(groups))
    bad = rewrite_model(model, graph, groups, corrupt_rules={"bias_add"})
    found, runs = V.isolate_failures(model, bad, groups, feeds)
    assert [g.id for g in found] == [1, 3] and runs == 1 + len(groups)


def test_repeated_bodies_are_made_once_and_equal_the_plain_path(model, graph, monkeypatch):
    # fc1 and fc2 are the same MatMul + Add: the second group reuses the first one's
    # function (the repeated-layer memo); the model is byte-identical without the memo
    from ruleengine.rewrite import onnx_rewrite

    groups = groups_for(graph, *ALL)
    fused = rewrite_model(model, graph, groups)
    assert [f.name for f in fused.functions].count("MatMulBias") == 1
    monkeypatch.setattr(onnx_rewrite, "_body_key", lambda *args: None)
    plain = rewrite_model(model, graph, groups)
    assert fused.SerializeToString() == plain.SerializeToString()


def _key(nodes, names, inputs, outputs, change=None):
    from ruleengine.rewrite.onnx_rewrite import _body_key

    copies = []
    for name in names:  # _body_key clears the nodes it reads: copies
        c = onnx.NodeProto()
        c.CopyFrom(nodes[name])
        copies.append(c)
    if change is not None:
        change(copies[-1])
    return _body_key(copies, inputs, outputs)


def test_body_keys_tell_different_bodies_apart(model):
    nodes = {n.name: n for n in model.graph.node}
    fc1 = _key(nodes, ["fc1_matmul", "fc1_bias"], ["ln_out", "fc1.weight", "fc1.bias"], ["fc1_out"])
    args = (nodes, ["fc2_matmul", "fc2_bias"])
    fc2 = _key(*args, ["gelu_out", "fc2.weight", "fc2.bias"], ["fc2_out"])
    assert fc1 is not None and fc1 == fc2
    # a doc string is not part of a body; the inputs' order and an attribute are
    ins = ["gelu_out", "fc2.weight", "fc2.bias"]

    def documented(n):
        n.doc_string = "made by torch"

    def extra(n):
        n.attribute.append(onnx.helper.make_attribute("unused", 1))

    assert fc1 == _key(*args, ins, ["fc2_out"], documented)
    assert fc1 != _key(*args, ["fc2.weight", "gelu_out", "fc2.bias"], ["fc2_out"])
    assert fc1 != _key(*args, ins, ["fc2_out"], extra)


def test_a_fused_node_waits_for_a_later_input(model, graph):
    # the group {ln, relu} reads bn_out, made after its first node: the fused node moves
    # after bn (the stable order's general case), and everything reading ln_out after it
    groups = build_groups(graph, [scored("res_softmax", ["ln", "relu"])], RULES)
    fused = rewrite_model(model, graph, groups)
    onnx.checker.check_model(fused, full_check=True)
    assert [n.name for n in fused.graph.node][:4] == ["conv", "bn", "AddSoftmax_g1", "fc1_matmul"]
