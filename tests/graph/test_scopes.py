"""Control-flow bodies as scopes (issue 36): each If/Loop/Scan body is decided and
rewritten by the top-level stages as a model of its own, and put back."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from ruleengine.cost import load_target
from ruleengine.graph import graph_from_model
from ruleengine.graph.scopes import Scope, bodies_of, has_bodies, outer_reads, rewrite_bodies
from ruleengine.kernels.catalog import bundled_catalog
from ruleengine.pipeline import select_rules
from ruleengine.rewrite.bodies import Decider
from ruleengine.rewrite.onnx_rewrite import rewrite_model
from ruleengine.rules import load_rule_set

F = TensorProto.FLOAT


def _vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _init(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def small_model() -> onnx.ModelProto:
    """If (Conv+Relu | Reshape MatMul Add Relu Reshape), then Loop (Mul Add Relu Sigmoid),
    then Scan (Mul Add Tanh): every weight and constant is an outer initializer."""
    rng = np.random.RandomState(0)
    n = helper.make_node
    then_g = helper.make_graph(
        [n("Conv", ["x", "W", "B"], ["cv"], name="t_conv", pads=[1, 1, 1, 1]),
         n("Relu", ["cv"], ["t_out"], name="t_relu")],
        "then", [], [_vi("t_out", [1, 8, 16, 16])],
    )  # fmt: skip
    else_g = helper.make_graph(
        [n("Reshape", ["x", "shp"], ["r"], name="e_reshape"),
         n("MatMul", ["r", "M"], ["mm"], name="e_mm"),
         n("Add", ["mm", "MB"], ["ad"], name="e_add"),
         n("Relu", ["ad"], ["rl"], name="e_relu"),
         n("Reshape", ["rl", "shp2"], ["e_out"], name="e_reshape2")],
        "else", [], [_vi("e_out", [1, 8, 16, 16])],
        initializer=[_init("shp", np.array([64, 16], np.int64)),
                     _init("shp2", np.array([1, 8, 16, 16], np.int64))],
    )  # fmt: skip
    loop_g = helper.make_graph(
        [n("Mul", ["y_in", "two"], ["m1"], name="l_mul"),
         n("Add", ["m1", "one"], ["a1"], name="l_add"),
         n("Relu", ["a1"], ["r1"], name="l_relu"),
         n("Sigmoid", ["r1"], ["y_out"], name="l_sig"),
         n("Identity", ["cond_in"], ["cond_out"], name="l_id")],
        "body",
        [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL),
         _vi("y_in", [1, 8, 16, 16])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("y_out", [1, 8, 16, 16])],
    )  # fmt: skip
    scan_g = helper.make_graph(
        [n("Mul", ["sx", "two"], ["sm1"], name="s_mul"),
         n("Add", ["sm1", "one"], ["sa1"], name="s_add"),
         n("Tanh", ["sa1"], ["sy"], name="s_tanh")],
        "sbody", [_vi("sx", [8, 16, 16])], [_vi("sy", [8, 16, 16])],
    )  # fmt: skip
    g = helper.make_graph(
        [n("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
         n("Greater", ["s", "zero"], ["c"], name="gt"),
         n("If", ["c"], ["ifo"], name="if", then_branch=then_g, else_branch=else_g),
         n("Loop", ["trip", "true", "ifo"], ["lo"], name="loop", body=loop_g),
         n("Scan", ["lo"], ["y"], name="scan", body=scan_g, num_scan_inputs=1)],
        "small", [_vi("x", [1, 4, 16, 16])], [_vi("y", [1, 8, 16, 16])],
        initializer=[
            _init("W", rng.randn(8, 4, 3, 3).astype(np.float32)),
            _init("B", rng.randn(8).astype(np.float32)),
            _init("M", rng.randn(16, 32).astype(np.float32)),
            _init("MB", rng.randn(32).astype(np.float32)),
            _init("zero", np.array(0, np.float32)), _init("trip", np.array(3, np.int64)),
            _init("true", np.array(True)), _init("two", np.array(2, np.float32)),
            _init("one", np.array(1, np.float32)),
        ],
    )  # fmt: skip
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


class Decide:
    """A scope decided and rewritten as ``fuse`` does (``rewrite.bodies``), group ids
    continuing from one scope to the next; ``groups`` by scope path."""

    def __init__(self) -> None:
        rules = select_rules(load_rule_set([], preset="all"))
        self.decider = Decider(rules, load_target("ascend910b"), bundled_catalog())
        self.groups: dict[tuple[str, ...], tuple] = {}

    def __call__(self, scope: Scope) -> onnx.ModelProto | None:
        first = 1 + sum(len(g) for g in self.groups.values())
        chosen = self.decider.groups(scope, first)
        self.groups[scope.path] = chosen.groups
        if not chosen.groups:
            return None
        return rewrite_model(
            scope.model, chosen.graph, chosen.groups, calls=chosen.calls, in_place=True
        )


def test_outer_reads_cover_nested_bodies_once() -> None:
    model = small_model()
    memo: dict = {}
    bodies = dict(bodies_of(model))
    assert list(bodies) == [
        ("if", "else_branch"),
        ("if", "then_branch"),
        ("loop", "body"),
        ("scan", "body"),
    ]  # fmt: skip (the node's attribute order: make_node sorts them)
    assert outer_reads(bodies[("if", "then_branch")], ("if", "then_branch"), memo) == (
        "x", "W", "B"
    )  # fmt: skip
    assert outer_reads(bodies[("loop", "body")], ("loop", "body"), memo) == ("two", "one")
    assert has_bodies(model)


def test_a_scope_loads_as_its_own_graph_with_outer_types() -> None:
    model = small_model()
    seen: list[Scope] = []
    rewrite_bodies(onnx.ModelProto.FromString(model.SerializeToString()), model, seen.append)
    by_path = {s.path: s for s in seen}
    then = by_path[("if", "then_branch")]
    # outer tensors: x a graph input typed from the outer scope, W and B initializers
    assert [i.name for i in then.model.graph.input] == ["x"]
    weight = next(t for t in then.model.graph.initializer if t.name == "W")
    assert tuple(weight.dims) == (8, 4, 3, 3) and not weight.raw_data  # header only
    graph = graph_from_model(then.model, where=then.where, jobs=1)
    assert [n.op_type for n in graph.nodes] == ["Conv", "Relu"]
    assert graph.tensors["x"].shape == (1, 4, 16, 16)
    assert graph.tensors["W"].is_initializer
    # a Loop body keeps its own inputs first, then the outer ones
    loop = by_path[("loop", "body")]
    assert [i.name for i in loop.model.graph.input] == ["i", "cond_in", "y_in"]


def test_groups_inside_every_body_kind_and_outputs_agree() -> None:
    model = small_model()
    fused = onnx.ModelProto.FromString(model.SerializeToString())
    decide = Decide()
    rewrite_bodies(fused, model, decide)
    counts = {"/".join(p): len(g) for p, g in decide.groups.items()}
    assert counts == {
        "if/then_branch": 1, "if/else_branch": 1, "loop/body": 1, "scan/body": 1
    }  # fmt: skip
    ids = [g.id for gs in decide.groups.values() for g in gs]
    assert sorted(ids) == list(range(1, len(ids) + 1))  # unique across scopes
    onnx.checker.check_model(fused)
    assert {o.domain for o in fused.opset_import} == {"", "autofusion"}
    for body in dict(bodies_of(fused)).values():
        assert any(n.domain == "autofusion" for n in body.node)
    before = ort.InferenceSession(model.SerializeToString())
    after = ort.InferenceSession(fused.SerializeToString())
    x = np.random.RandomState(1).randn(1, 4, 16, 16).astype(np.float32)
    for sign in (1, -1):  # both branches of the If
        feed = {"x": sign * np.abs(x)}
        np.testing.assert_array_equal(before.run(None, feed)[0], after.run(None, feed)[0])


def test_a_model_without_bodies_is_not_touched() -> None:
    x = _vi("x", [2, 3])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [_vi("y", [2, 3])])
    model = helper.make_model(g)
    data = model.SerializeToString()
    calls: list[Scope] = []
    assert rewrite_bodies(model, model, calls.append) == [] and not calls
    assert not has_bodies(model)
    assert model.SerializeToString() == data


def test_an_outer_tensor_of_unknown_type_is_an_untyped_input() -> None:
    model = small_model()
    typeless = onnx.ModelProto.FromString(model.SerializeToString())
    del typeless.graph.input[:]  # nothing typed: inference knows nothing of x
    seen: list[Scope] = []
    rewrite_bodies(onnx.ModelProto.FromString(model.SerializeToString()), typeless, seen.append)
    then = next(s for s in seen if s.path == ("if", "then_branch"))
    x = next(i for i in then.model.graph.input if i.name == "x")
    assert not x.type.HasField("tensor_type")
    graph = graph_from_model(then.model, where=then.where, jobs=1)
    assert graph.tensors["x"].shape is None
