"""Shape resolution: every size known on real exports, from any working directory, with
the weights external or absent; --input-shape; compile-time nodes are not kernels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import convert_model_to_external_data
from typer.testing import CliRunner

from ruleengine import pipeline
from ruleengine.cli import app
from ruleengine.errors import GraphLoadError
from ruleengine.graph import graph_from_model, load_graph

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "models"
MODELS = sorted(SHARED.glob("*.onnx")) + sorted((SHARED / "families").glob("*.onnx"))
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _export_like(src: Path, folder: Path) -> Path:
    """The model as a fresh exporter writes it for a large model: no inferred value_info
    and every tensor over 1 KiB in an external file beside it (torch's threshold)."""
    m = onnx.load(str(src))
    del m.graph.value_info[:]
    convert_model_to_external_data(
        m, all_tensors_to_one_file=True, location=src.name + ".data", size_threshold=1024
    )
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / src.name
    onnx.save(m, str(out))
    return out


def _mask_model() -> onnx.ModelProto:
    """TorchScript's attention-mask idiom: Expand to a shape built by Shape -> Gather ->
    Unsqueeze -> Concat -> Where(Equal(.., -1)), then a Range/Trilu causal mask; ONNX's
    own inference leaves unk__N dims on all of it."""
    c = numpy_helper.from_array
    inits = [
        c(np.array(0, np.int64), "zero"),
        c(np.array(1, np.int64), "one"),
        c(np.array([0], np.int64), "ax0"),
        c(np.array([-1, -1, -1, -1], np.int64), "minus"),
        c(np.array([1, 1, 1, 1], np.int64), "ones4"),
        c(np.ones((1, 1, 1, 1), np.float32), "m0"),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Gather", ["sx", "zero"], ["b"], axis=0),
        helper.make_node("Gather", ["sx", "one"], ["s"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Unsqueeze", ["s", "ax0"], ["s1"]),
        helper.make_node("Concat", ["b1", "ax0", "s1", "s1"], ["target0"], axis=0),
        helper.make_node("Add", ["target0", "ones4"], ["target1"]),
        helper.make_node("Sub", ["target1", "ones4"], ["target"]),
        helper.make_node("Equal", ["target", "minus"], ["eq"]),
        helper.make_node("Where", ["eq", "ones4", "target"], ["shape"]),
        helper.make_node("Max", ["shape", "ones4"], ["shape2"]),
        helper.make_node("Expand", ["m0", "shape2"], ["mask"]),
        helper.make_node("Range", ["zero", "s", "one"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=F),
        helper.make_node("Add", ["mask", "rf"], ["scores"]),
        helper.make_node("Trilu", ["scores"], ["tri"], upper=0),
        helper.make_node("Unsqueeze", ["x", "one"], ["x4"]),
        helper.make_node("Add", ["tri", "x4"], ["att"]),
        helper.make_node("Softmax", ["att"], ["y"], axis=-1),
    ]
    g = helper.make_graph(
        nodes,
        "mask",
        [helper.make_tensor_value_info("x", F, [2, 8, 8])],
        [helper.make_tensor_value_info("y", F, None)],
        initializer=inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_chains_resolve_to_static_sizes() -> None:
    g = graph_from_model(_mask_model())
    assert g.tensor("mask").shape == (2, 1, 8, 8)
    assert g.tensor("y").shape == (2, 1, 8, 8)
    assert g.tensor("r").shape == (8,)
    assert all(t.is_static for t in g.tensors.values()), [
        (t.name, t.shape) for t in g.tensors.values() if not t.is_static
    ]
    assert g.unbound_dims == ()
    # the shape arithmetic is folded by a compiler; the Softmax is a kernel
    assert {"Shape_0", "Concat_5", "Where_9", "Expand_11", "Range_12"} <= set(g.compile_time_nodes)
    assert "Trilu_15" in g.compile_time_nodes  # the causal mask, built from constants
    assert not {"Add_17", "Softmax_18"} & set(g.compile_time_nodes)


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_fresh_exports_have_every_size_known_from_another_cwd(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Done-when of issue 9, at the graph level: no value_info, weights external, run from
    an unrelated directory; every tensor has a static shape and a dtype."""
    model = _export_like(path, tmp_path / "model")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    g = load_graph(model)
    unknown = [(t.name, t.dtype, t.shape) for t in g.tensors.values() if t.nbytes is None]
    assert unknown == []
    assert g.unbound_dims == ()
    assert g.unknown_size_tensors == ()


def test_shapes_do_not_need_the_weight_file(tmp_path: Path) -> None:
    src = SHARED / "llama-tiny.ts.onnx"
    with_data = load_graph(_export_like(src, tmp_path / "a"))
    model = _export_like(src, tmp_path / "b")
    (tmp_path / "b" / (src.name + ".data")).unlink()
    without = load_graph(model)
    assert {k: t.shape for k, t in without.tensors.items()} == {
        k: t.shape for k, t in with_data.tensors.items()
    }
    assert without.unknown_size_tensors == ()


def test_same_plan_from_two_working_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnxruntime's symbolic inference used to read external data relative to the cwd:
    the same file fused differently depending on where the command ran."""
    model = _export_like(SHARED / "bert-tiny.ts.onnx", tmp_path / "model")
    plans = []
    for cwd in (tmp_path / "model", tmp_path / "other"):
        cwd.mkdir(exist_ok=True)
        monkeypatch.chdir(cwd)
        result = pipeline.fuse(model)
        plans.append(result.files["plan.json"])
    assert plans[0] == plans[1]
    plan = json.loads(plans[0])
    assert not [r for r in plan["rejected"] if r["verdict"] == "dynamic_shape"]
    assert plan["summary"]["unknown_size_tensors"] == 0
    assert plan["summary"]["groups"] > 0


# ----------------------------------------------------------------------- --input-shape
def _symbolic(tmp_path: Path) -> Path:
    x = helper.make_tensor_value_info("x", F, ["batch", "seq", 64])
    y = helper.make_tensor_value_info("y", F, None)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Sigmoid", ["r"], ["s"]),
        helper.make_node("Mul", ["r", "s"], ["y"]),
    ]
    m = helper.make_model(
        helper.make_graph(nodes, "sym", [x], [y]), opset_imports=[helper.make_opsetid("", 17)]
    )
    path = tmp_path / "sym.onnx"
    onnx.save(m, str(path))
    return path


def test_input_shape_binds_a_whole_input(tmp_path: Path) -> None:
    path = _symbolic(tmp_path)
    g = load_graph(path)
    assert g.unbound_dims == ("x[0]", "x[1]")
    assert g.dim_sources == {"batch": "x[0]", "seq": "x[1]"}
    g = load_graph(path, input_shapes={"x": (2, 128, 64)})
    assert g.unbound_dims == ()
    assert g.tensor("y").shape == (2, 128, 64)
    assert g.bound_dims == {"batch": 2, "seq": 128}  # verification's random inputs use them


@pytest.mark.parametrize(
    ("shapes", "code"),
    [
        ({"nope": (1, 2, 64)}, "AF510"),
        ({"x": (1, 64)}, "AF511"),
        ({"x": (1, 0, 64)}, "AF512"),
        ({"x": (1, -4, 64)}, "AF512"),
        ({"x": (1, 1 << 63, 64)}, "AF513"),
        ({"x": (1, 2, 32)}, "AF514"),
    ],
)
def test_bad_input_shapes_are_located_errors(tmp_path: Path, shapes: dict, code: str) -> None:
    path = _symbolic(tmp_path)
    with pytest.raises(GraphLoadError) as err:
        load_graph(path, input_shapes=shapes)
    (diag,) = err.value.diagnostics
    assert diag.code == code
    assert diag.location is not None and diag.location.file == str(path)
    assert diag.hint


def test_input_shape_flag(tmp_path: Path) -> None:
    path = _symbolic(tmp_path)
    runner = CliRunner()
    res = runner.invoke(app, ["match", str(path)])
    assert res.exit_code == 0, res.output
    assert "unbound input dims: x[0] (batch), x[1] (seq)" in res.stderr
    assert "unk__" not in res.stderr
    res = runner.invoke(app, ["match", str(path), "--input-shape", "x:1,16,64"])
    assert res.exit_code == 0, res.output
    assert "unbound" not in res.stderr
    for bad, code in (("x:1,0,64", "AF512"), ("y:1", "AF510"), ("x:1,1", "AF511")):
        res = runner.invoke(app, ["match", str(path), "--input-shape", bad])
        assert res.exit_code == 2, res.output
        assert code in res.stderr and str(path) in res.stderr
        assert "Traceback" not in res.output
    res = runner.invoke(app, ["fuse", str(path), "--input-shape", "x:1,a,64", "-o", "o"])
    assert res.exit_code == 2 and "bad --input-shape" in res.stderr


# ------------------------------------------------------------------ compile-time nodes
def _weight_transpose(tmp_path: Path) -> Path:
    """y = Relu(x @ Transpose(W)): the Transpose of a weight is folded by any compiler."""
    w = numpy_helper.from_array(np.ones((256, 128), np.float32), "W")
    nodes = [
        helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0], name="wt"),
        helper.make_node("MatMul", ["x", "Wt"], ["mm"], name="mm"),
        helper.make_node("Relu", ["mm"], ["y"], name="relu"),
    ]
    m = helper.make_model(
        helper.make_graph(
            nodes,
            "wt",
            [helper.make_tensor_value_info("x", F, [64, 128])],
            [helper.make_tensor_value_info("y", F, [64, 256])],
            [w],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    path = tmp_path / "wt.onnx"
    onnx.save(m, str(path))
    return path


RULES = """\
name: transpose_matmul_relu
match:
  ops:
    - type: Transpose
    - type: MatMul
    - type: Relu
rewrite:
  target_op: TMR
---
name: matmul_relu
match:
  ops:
    - type: MatMul
    - type: Relu
rewrite:
  target_op: MR
"""


def test_weight_transpose_is_compile_time_and_moves_no_bytes(tmp_path: Path) -> None:
    path = _weight_transpose(tmp_path)
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    g = load_graph(path)
    assert g.compile_time_nodes == ("wt",) and g.node("wt").compile_time
    result = pipeline.fuse(path, [rules])
    plan = json.loads(result.files["plan.json"])
    x, wt, mm, y = 64 * 128 * 4, 256 * 128 * 4, 64 * 256 * 4, 64 * 256 * 4
    # unfused: MatMul reads x and the folded weight, writes mm; Relu reads mm, writes y.
    # Counting the Transpose would add 2 * 128 KiB (read W, write Wt).
    assert plan["summary"]["hbm_bytes_before"] == x + wt + mm + mm + y
    assert plan["summary"]["compile_time_nodes"] == 1
    rules_matched = {r["rule"]: r["matched"] for r in plan["rules"]}
    assert rules_matched == {"transpose_matmul_relu": 0, "matmul_relu": 1}
    (group,) = plan["groups"]
    assert group["rule"] == "matmul_relu"
    assert group["bytes_before"] == x + wt + mm + mm + y
    assert "compile-time nodes:   1" in result.files["report.txt"].decode()


def test_shape_vectors_in_external_data_are_read_from_the_model_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some tools move every initializer out (size threshold 0), shape vectors included:
    small integer tensors are read from the model's folder (never the cwd), weights not."""
    m = onnx.load(str(SHARED / "bert-tiny.dynamo.onnx"))
    del m.graph.value_info[:]
    convert_model_to_external_data(m, location="w.bin", size_threshold=0)
    (tmp_path / "m").mkdir()
    onnx.save(m, str(tmp_path / "m" / "model.onnx"))
    monkeypatch.chdir(tmp_path)
    g = load_graph(tmp_path / "m" / "model.onnx")
    assert g.unknown_size_tensors == ()
