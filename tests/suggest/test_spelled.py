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
