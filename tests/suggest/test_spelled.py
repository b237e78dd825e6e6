"""A model's other spelling (``suggest.spelled``): composite ops written out from the
composites data, computing what the op computes, and recognised as the composite."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from ruleengine.suggest.spelled import decomposed


def _model(node: onnx.NodeProto, opset: int, inits: list, shape=(2, 4, 8)) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _layernorm(opset: int, tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    node = helper.make_node(
        "LayerNormalization", ["x", "w", "b"], ["y"], name="ln", axis=-1, epsilon=1e-5
    )
    src = tmp_path / "ln.onnx"
    onnx.save(_model(node, opset, [w, b]), str(src))
    out = tmp_path / "out"
    out.mkdir()
    twin = decomposed(src, out)
    assert twin is not None
    return src, twin


def test_layernorm_written_out_computes_the_same(tmp_path: Path) -> None:
    src, twin = _layernorm(17, tmp_path)
    model = onnx.load(str(twin))
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node if n.op_type != "Constant"]
    # layernorm_affine of ops/composites.yaml, the form TorchScript writes at opset < 17
    assert ops == ["ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add"]
    assert model.graph.node[-1].output[0] == "y"  # the consumers keep their tensor
    reduce = next(n for n in model.graph.node if n.op_type == "ReduceMean")
    assert helper.get_attribute_value(reduce.attribute[0]) == [-1]
    x = np.random.default_rng(1).standard_normal((2, 4, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(twin, x), _run(src, x), rtol=1e-4, atol=1e-5)


def test_reduce_axes_are_an_input_from_opset_18(tmp_path: Path) -> None:
    src, twin = _layernorm(18, tmp_path)
    model = onnx.load(str(twin))
    reduce = next(n for n in model.graph.node if n.op_type == "ReduceMean")
    assert not reduce.attribute and len(reduce.input) == 2
    x = np.random.default_rng(2).standard_normal((2, 4, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(twin, x), _run(src, x), rtol=1e-4, atol=1e-5)


def test_written_out_layernorm_is_recognised_as_the_composite(tmp_path: Path) -> None:
    from ruleengine.graph import load_graph
    from ruleengine.suggest.canon import composite_instances

    _, twin = _layernorm(17, tmp_path)
    found = composite_instances(load_graph(twin, {}))
    # the affine form takes all nine ops (the plain and scale-only forms are inside it)
    assert max(len(c.nodes) for c in found) == 9


def test_softmax_written_out(tmp_path: Path) -> None:
    node = helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=-1)
    src = tmp_path / "sm.onnx"
    onnx.save(_model(node, 17, []), str(src))
    twin = decomposed(src, tmp_path)
    assert twin is not None
    ops = [n.op_type for n in onnx.load(str(twin)).graph.node if n.op_type != "Constant"]
    assert ops == ["ReduceMax", "Sub", "Exp", "ReduceSum", "Div"]  # softmax_stable
    x = np.random.default_rng(3).standard_normal((2, 4, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(twin, x), _run(src, x), rtol=1e-4, atol=1e-6)


def test_no_composite_op_no_other_spelling(tmp_path: Path) -> None:
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    src = tmp_path / "relu.onnx"
    onnx.save(_model(node, 17, []), str(src))
    assert decomposed(src, tmp_path) is None
    assert list(tmp_path.iterdir()) == [src]  # nothing written


def test_suggest_reports_the_other_spelling(tmp_path: Path) -> None:
    """suggest measures each model with its composites written out too, before and after
    the drafted rules, and names a drafted rule that lowers coverage there."""
    from ruleengine.suggest import suggest

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "g"),
        numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "W2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        helper.make_node("Tanh", ["h"], ["t"], name="act"),
        helper.make_node("Add", ["t", "x"], ["s"], name="res"),
        helper.make_node("LayerNormalization", ["s", "g", "b"], ["n"], name="ln", axis=-1),
        helper.make_node("MatMul", ["n", "W2"], ["y"], name="mm2"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 64])],
        initializer=inits,
    )
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    s = suggest([src])
    (m,) = s.coverage
    assert m.spelled is not None
    assert 0.0 <= m.spelled.before <= 1.0 and 0.0 <= m.spelled.after <= 1.0
    if m.spelled.after + 0.0005 < m.spelled.before:
        assert m.spelled.lowered_by
    else:
        assert not m.spelled.lowered_by


# The roberta ts -> ts14 mechanism on a small graph: given rules fuse Mul -> Tanh, the sum
# Add with the LayerNorm after it, or the LayerNorm with the projection after it; a
# drafted rule takes Mul -> Tanh -> Add. With LayerNormalization (the source) the draft
# frees the norm for the projection and coverage rises; with the norm written out (as
# TorchScript writes it at opset 14) the Add is read twice by the norm, and the draft with
# the norm-projection group (more net bytes) captures less than the given rules did.
GIVEN = {
    "r0_chain": "match:\n  ops:\n    - type: Mul\n"
    "      input_sources: {input0: {source_type: const_or_param}}\n    - type: Tanh\n",
    "r1_add_norm": "match:\n  ops:\n    - type: Add\n    - type: LayerNorm\n",
    "r3_norm_proj": "match:\n  ops:\n    - type: LayerNorm\n    - type: MatMul\n",
}
DRAFT = """name: d_draft
priority: 90
match:
  ops:
    - type: Mul
      input_sources: {input0: {source_type: const_or_param}}
    - type: Tanh
    - type: Add
rewrite: {target_op: D}
"""


def _stolen_add(path: Path, opset: int = 17) -> Path:
    rng = np.random.default_rng(0)

    def f(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    inits = [
        numpy_helper.from_array(f(1, 64), "c"),
        numpy_helper.from_array(f(64), "g"),
        numpy_helper.from_array(f(64), "bt"),
        numpy_helper.from_array(f(64, 64), "W"),
    ]
    nodes = [
        helper.make_node("Mul", ["p", "c"], ["a"], name="mul"),
        helper.make_node("Tanh", ["a"], ["t"], name="tanh"),
        helper.make_node("Add", ["t", "y"], ["s"], name="sum"),
        helper.make_node("LayerNormalization", ["s", "g", "bt"], ["n"], name="ln", axis=-1),
        helper.make_node("MatMul", ["n", "W"], ["o"], name="proj"),
    ]
    graph = helper.make_graph(
        nodes,
        "stolen_add",
        [
            helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 64]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 64]),
        ],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, [32, 64])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(model, str(path))
    return path


def _given(tmp_path: Path) -> Path:
    folder = tmp_path / "given"
    folder.mkdir()
    for name, body in GIVEN.items():
        text = f"name: {name}\npriority: 100\n{body}rewrite: {{target_op: {name.upper()}}}\n"
        (folder / f"{name}.yaml").write_text(text)
    return folder


def _report(path: Path, given: Path, drafts: list):
    from ruleengine.suggest.analyses import Given, analysis_with_drafts, covered
    from ruleengine.suggest.model import ModelCoverage

    before = covered(analysis_with_drafts(path, [], Given([given], None, "ascend910b")))
    after = covered(analysis_with_drafts(path, drafts, Given([given], None, "ascend910b")))
    return (
        before,
        after,
        ModelCoverage(path.name, 1, before, after, after, 1, True, 1, True, 1, 0, 0),
    )


def test_a_draft_that_steals_a_written_out_composites_op_gets_a_bridge(
    tmp_path: Path, monkeypatch
) -> None:
    """The draft raises the source and lowers its other spelling (the loss a family's
    other export shows); a bridge rule drafted in that spelling (the draft's group with
    the given groups it displaces, the norm left written out) restores it there, leaves
    the source as it was, and does the same on an export written at opset 14."""
    import ruleengine.suggest.spelled_checks as sg
    from ruleengine.suggest.analyses import Given
    from ruleengine.suggest.model import Cluster, DraftRule

    src = _stolen_add(tmp_path / "src.onnx")
    given = _given(tmp_path)
    draft = DraftRule("d_draft", DRAFT, Cluster((), ()), 90)
    before, after, m = _report(src, given, [draft])
    assert after > before  # the draft raises coverage where it is drafted

    # reported, not bridged: the other spelling falls and the draft is named
    monkeypatch.setattr(sg, "SPELLED_BRIDGES", False)
    drafts, (seen,) = sg.spelled_checks(
        [src], [m], [draft], Given([given], None, "ascend910b"), lambda _m: None
    )
    assert [d.name for d in drafts] == ["d_draft"]
    assert seen.spelled is not None and seen.spelled.after < seen.spelled.before - 0.01
    assert seen.spelled.lowered_by == (("d_draft", ("r0_chain", "r1_add_norm")),)

    monkeypatch.setattr(sg, "SPELLED_BRIDGES", True)
    drafts, (seen,) = sg.spelled_checks(
        [src], [m], [draft], Given([given], None, "ascend910b"), lambda _m: None
    )
    (bridge,) = drafts[1:]
    assert seen.after == after  # the source keeps what the draft gives it
    assert seen.spelled.after >= seen.spelled.before and not seen.spelled.lowered_by
    assert "ReduceMean" in bridge.text  # the norm written out: it matches only there
    assert set(bridge.tests) == {"positive_region.onnxtxt", "negative_link_cut.onnxtxt"}

    # another export of the same graph at opset 14 (LayerNorm decomposed by the exporter)
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    written = decomposed(_stolen_add(tmp_path / "o17.onnx"), other_dir)
    assert written is not None
    model = onnx.load(str(written))
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", 14))
    onnx.checker.check_model(model, full_check=True)
    other = tmp_path / "o14.onnx"
    onnx.save(model, str(other))
    o_before, o_after, _ = _report(other, given, [draft])
    assert o_after < o_before  # what the cross pair showed: a loss
    _, o_bridged, _ = _report(other, given, drafts)
    assert o_bridged >= o_before
