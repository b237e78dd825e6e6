"""A literal ``-1`` dim (PaddlePaddle's unknown batch) and a dim with neither value nor
name are unknown dims: ``--input-shape`` and ``--dim x[0]=...`` bind them like a
symbolic one (issue 36, item 4). The Paddle export itself: tests/e2e/test_real_models.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from ruleengine.cli import app
from ruleengine.errors import GraphLoadError
from ruleengine.graph import load_graph
from ruleengine.verification import numerics


def _model(tmp_path: Path) -> Path:
    """y = Relu(x), x declared ``[-1, 3, ?, w]``: a -1, a static, an empty, a named dim."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, None, "w"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_value == -1
    assert not m.graph.input[0].type.tensor_type.shape.dim[2].HasField("dim_value")
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    return path


def test_minus_one_and_empty_dims_are_unknown(tmp_path: Path) -> None:
    g = load_graph(_model(tmp_path))
    assert g.tensor("x").shape == (None, 3, None, "w")  # -1 is no size
    assert g.unbound_dims == ("x[0]", "x[2]", "x[3]")


def test_input_shape_binds_minus_one_and_empty_dims(tmp_path: Path) -> None:
    g = load_graph(_model(tmp_path), input_shapes={"x": (1, 3, 48, 192)})
    assert g.unbound_dims == ()
    assert g.tensor("y").shape == (1, 3, 48, 192)
    assert g.bound_dims == {"x[0]": 1, "x[2]": 48, "w": 192}


def test_input_shape_still_refuses_a_static_mismatch(tmp_path: Path) -> None:
    with pytest.raises(GraphLoadError) as err:
        load_graph(_model(tmp_path), input_shapes={"x": (1, 4, 48, 192)})
    (diag,) = err.value.diagnostics
    assert diag.code == "AF514" and "axis 1" in diag.message


def test_dim_binds_nameless_axes_by_axis_name(tmp_path: Path) -> None:
    g = load_graph(_model(tmp_path), dims={"x[0]": 2, "x[2]": 5, "w": 7})
    assert g.unbound_dims == ()
    assert g.tensor("y").shape == (2, 3, 5, 7)
    assert not g.warnings
    g = load_graph(_model(tmp_path), dims={"x[1]": 2})  # a static axis: binds nothing
    assert [d.code for d in g.warnings] == ["AF507"]
    assert "binds no symbolic dimension" in g.warnings[0].message


def test_random_inputs_follow_the_bound_axes(tmp_path: Path) -> None:
    path = _model(tmp_path)
    g = load_graph(path, input_shapes={"x": (2, 3, 5, 7)})
    feeds = numerics.make_inputs(onnx.load(str(path)), dims=g.bound_dims)
    assert np.asarray(feeds["x"]).shape == (2, 3, 5, 7)
    feeds = numerics.make_inputs(onnx.load(str(path)))  # unbound: size 1, never -1
    assert np.asarray(feeds["x"]).shape == (1, 3, 1, 1)


def test_cli_binds_the_minus_one_axis(tmp_path: Path) -> None:
    path = _model(tmp_path)
    res = CliRunner().invoke(app, ["match", str(path)])
    assert res.exit_code == 0, res.output
    assert "unbound input dims: x[0], x[2], x[3] (w)" in res.stderr
    res = CliRunner().invoke(app, ["match", str(path), "--input-shape", "x:1,3,48,192"])
    assert res.exit_code == 0, res.output
    assert "unbound" not in res.stderr and "AF514" not in res.stderr
    res = CliRunner().invoke(
        app, ["match", str(path), "--dim", "x[0]=1", "--dim", "x[2]=48", "--dim", "w=192"]
    )
    assert res.exit_code == 0, res.output
    assert "unbound" not in res.stderr and "warning" not in res.stderr


def test_question_mark_dims_are_each_unknown(tmp_path: Path) -> None:
    """Paddle2ONNX names unknown axes ``?``: not one size shared by every such axis."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "?", "?"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    path = tmp_path / "q.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    graph = load_graph(path)
    assert graph.unbound_dims == ("x[1]", "x[2]") and graph.dim_sources == {}
    graph = load_graph(path, input_shapes={"x": (1, 48, 192)})
    assert graph.tensor("y").shape == (1, 48, 192)
    feeds = numerics.make_inputs(onnx.load(str(path)), dims=graph.bound_dims)
    assert np.asarray(feeds["x"]).shape == (1, 48, 192)
    graph = load_graph(path, dims={"x[1]": 4, "x[2]": 5})
    assert graph.tensor("y").shape == (1, 4, 5) and not graph.warnings
