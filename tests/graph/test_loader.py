"""Graph loading: shapes, defaults, names, errors, and every shared model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ruleengine.errors import GraphLoadError
from ruleengine.graph import graph_from_model, load_graph
from ruleengine.graph.model import Tensor, record_maker

MODELS = Path(__file__).resolve().parents[2] / ".." / "shared" / "models"
F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, F, s) for n, s in outputs.items()],
        initializer=list(inits),
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("path", sorted(MODELS.glob("*.onnx")), ids=lambda p: p.name)
def test_every_shared_model_loads_with_shapes(path: Path) -> None:
    g = load_graph(path)
    assert len(g.nodes) > 40
    assert [n.index for n in g.nodes] == list(range(len(g.nodes)))
    assert len({n.name for n in g.nodes}) == len(g.nodes)
    # topological: every input is produced earlier
    pos = {n.name: n.index for n in g.nodes}
    for n in g.nodes:
        for t in n.inputs:
            if t and g.tensors[t].producer:
                assert pos[g.tensors[t].producer] < n.index
    assert all(t.dtype for t in g.tensors.values() if t.consumers)
    assert not [t for t in g.tensors.values() if t.shape is None and t.consumers]


def test_schema_defaults_and_conv_kernel_from_weight() -> None:
    w = numpy_helper.from_array(np.zeros((8, 3, 3, 3), np.float32), "w")
    m = _model(
        [
            helper.make_node("Conv", ["x", "w"], ["y"], name="conv"),
            helper.make_node("LeakyRelu", ["y"], ["z"]),
        ],
        {"x": [1, 3, 8, 8]},
        {"z": None},
        [w],
    )
    g = graph_from_model(m)
    conv = g.node("conv")
    assert conv.attributes["group"] == 1
    assert conv.attributes["kernel_shape"] == (3, 3)
    assert conv.attributes["strides"] == (1, 1)
    assert conv.attributes["pads"] == (0, 0, 0, 0)
    leaky = g.nodes[1]
    assert leaky.name == "LeakyRelu_1"  # generated, stable
    assert leaky.attributes["alpha"] == pytest.approx(0.01)
    assert g.tensor("z").shape == (1, 8, 6, 6)
    assert g.tensor("w").is_initializer and g.tensor("w").nbytes == 8 * 27 * 4


def test_dims_bound_and_unbound_reported() -> None:
    m = _model([helper.make_node("Relu", ["x"], ["y"])], {"x": ["batch", "seq", 4]}, {"y": None})
    g = graph_from_model(m, {"batch": 2})
    assert g.tensor("x").shape == (2, "seq", 4)
    assert g.tensor("y").shape == (2, "seq", 4)
    assert g.unbound_dims == ("x[1]",)  # by graph input and axis, what a user can bind
    assert g.dim_sources == {"seq": "x[1]"}
    g2 = graph_from_model(m, {"batch": 2, "nope": 3})
    assert any(d.name == "unknown-dim-name" for d in g2.warnings)


def test_constant_values_kept() -> None:
    c = helper.make_node(
        "Constant", [], ["c"], value=numpy_helper.from_array(np.array(0.1, np.float32))
    )
    m = _model([c, helper.make_node("Mul", ["x", "c"], ["y"])], {"x": [2]}, {"y": None})
    g = graph_from_model(m)
    assert g.tensor("c").is_constant and not g.tensor("c").is_initializer
    assert g.tensor("c").const_value == pytest.approx((0.1,))


def test_missing_external_weights_still_load(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": [1, 64]}, {"y": None}, [w])
    path = tmp_path / "m.onnx"
    onnx.save_model(m, path, save_as_external_data=True, location="m.data", size_threshold=0)
    (tmp_path / "m.data").unlink()
    g = load_graph(path)
    assert g.tensor("w").shape == (64, 64) and g.tensor("w").dtype == "float32"
    assert g.tensor("y").shape == (1, 64)


def test_duplicate_names_renamed_with_warning() -> None:
    m = _model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="n"),
            helper.make_node("Relu", ["a"], ["b"], name="n"),
        ],
        {"x": [2]},
        {"b": None},
    )
    g = graph_from_model(m)
    assert [n.name for n in g.nodes] == ["n", "n__2"]
    assert g.nodes[1].source_name == "n" and g.nodes[1].source_index == 1
    assert any(d.code == "AF505" for d in g.warnings)


def test_control_flow_is_opaque_and_outer_reads_count_as_consumers() -> None:
    then_g = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", F, [2])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", F, [2])],
    )
    m = _model(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
        ],
        {"x": [2], "cond": []},
        {"y": [2]},
    )
    m.graph.input[1].type.tensor_type.elem_type = TensorProto.BOOL
    g = graph_from_model(m)
    assert g.opaque_nodes == ("If_1",)
    assert ("If_1", -1) in g.tensor("a").consumers


@pytest.mark.parametrize(
    "nodes, fragment",
    [
        (
            [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["x"], ["a"])],
            "produced by node",
        ),
        ([helper.make_node("Relu", ["nothing"], ["a"])], "no node, initializer or graph input"),
        (
            [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])],
            "cycle",
        ),
    ],
    ids=["two-producers", "dangling", "cycle"],
)
def test_malformed_graphs_are_clear_errors(nodes, fragment) -> None:
    m = _model(nodes, {"x": [2]}, {"a": None})
    with pytest.raises(GraphLoadError) as exc:
        graph_from_model(m)
    assert fragment in exc.value.message
    assert exc.value.diagnostics and exc.value.diagnostics[0].code.startswith("AF5")


def test_unreadable_file(tmp_path: Path) -> None:
    p = tmp_path / "x.onnx"
    p.write_bytes(b"\x00\x01garbage" * 10)
    with pytest.raises(GraphLoadError):
        load_graph(p)
    with pytest.raises(GraphLoadError):
        load_graph(tmp_path / "missing.onnx")


def test_const_foldable_follows_constants_and_static_shapes() -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["xs"]),  # static shape: foldable
        helper.make_node("Shape", ["d"], ["ds"]),  # dynamic shape: not foldable
        helper.make_node("Concat", ["xs", "k"], ["cat"], axis=0),  # foldable inputs only
        helper.make_node("Concat", ["ds", "k"], ["dcat"], axis=0),
        helper.make_node("Relu", ["x"], ["y"]),  # reads an activation
    ]
    k = numpy_helper.from_array(np.array([2], dtype=np.int64), "k")
    g = graph_from_model(
        _model(nodes, {"x": [2, 3], "d": ["n", 3]}, {"y": [2, 3], "cat": None, "dcat": None}, [k])
    )
    folded = {t.name for t in g.tensors.values() if t.const_foldable}
    assert folded == {"k", "xs", "cat"}
    assert not g.tensors["cat"].is_constant  # `const` in rules stays strict


def test_loader_records_equal_their_constructor_and_stay_frozen(tmp_path: Path) -> None:
    """Node/Tensor are built without their __init__ (speed): each must be exactly the
    record the constructor gives, and as immutable; load_graph (in place, no copy) and
    graph_from_model (on a copy) give the same graph and leave the model untouched."""
    import dataclasses

    m = _model(
        [
            helper.make_node("Softmax", ["x"], ["s"], name="sm", axis=-1),
            helper.make_node("Mul", ["s", "c"], ["y"], name="mul"),
        ],
        {"x": [2, 4]},
        {"y": [2, 4]},
        [numpy_helper.from_array(np.full((4,), 2.0, np.float32), "c")],
    )
    before = m.SerializeToString()
    g = graph_from_model(m)
    assert m.SerializeToString() == before
    for rec in (*g.nodes, *g.tensors.values()):
        same = type(rec)(**{f.name: getattr(rec, f.name) for f in dataclasses.fields(rec)})
        assert rec == same and repr(rec) == repr(same) and type(rec) is type(same)
        with pytest.raises(dataclasses.FrozenInstanceError):
            rec.name = "other"  # type: ignore[misc]
    assert g.tensors["c"].const_value == (2.0, 2.0, 2.0, 2.0)
    assert g.node("sm").attributes["axis"] == -1
    onnx.save(m, str(tmp_path / "m.onnx"))
    h = load_graph(tmp_path / "m.onnx")
    assert h.nodes == g.nodes and dict(h.tensors) == dict(g.tensors)
    with pytest.raises(TypeError):
        Tensor.built(name="t")  # every field given, or an error: never a half-made record
    for rec in (g.tensors["c"], g.node("sm")):  # positionally, in field order: the same
        cls = type(rec)
        values = [getattr(rec, f.name) for f in dataclasses.fields(cls)]
        made = record_maker(cls)(*values)
        assert type(made) is cls and made == rec and repr(made) == repr(rec)
        with pytest.raises(TypeError):
            record_maker(cls)(*values[:-1])


def test_a_one_shot_process_freezes_what_a_paused_block_allocated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLI (one process, one command) moves what loading allocated out of the
    collector's sight when the pause ends, instead of a collection walking all of it;
    library callers keep the plain behaviour."""
    import gc

    from ruleengine import runtime

    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with runtime.paused_gc():
        kept = [[i] for i in range(1000)]
    assert gc.get_freeze_count() == frozen  # not one-shot: nothing frozen
    monkeypatch.setattr(runtime, "_ONE_SHOT", True)
    try:
        with runtime.paused_gc():
            kept += [[i] for i in range(1000)]
        assert gc.isenabled() and gc.get_freeze_count() >= frozen + 1000
    finally:
        gc.unfreeze()


def test_tensors_are_every_defined_name_once_sorted_by_name() -> None:
    """Graph inputs, initializers (one record for a repeated name) and node outputs,
    whatever order the file gives them in; nothing a node only reads from outside."""
    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    a = helper.make_node("MatMul", ["x", "w"], ["z_mm"], name="mm")
    b = helper.make_node("Relu", ["z_mm"], ["b_out"], name="relu")
    m = _model([a, b], {"x": [2, 2]}, {"b_out": [2, 2]}, inits=[w, w])
    g = graph_from_model(m)
    assert list(g.tensors) == ["b_out", "w", "x", "z_mm"]
    assert all(name == t.name for name, t in g.tensors.items())
    assert g.tensors["w"].is_initializer and g.tensors["x"].is_graph_input
    assert g.tensors["z_mm"].producer == "mm" and g.tensors["z_mm"].consumers == (("relu", 0),)
    assert g.tensors["b_out"].is_graph_output
