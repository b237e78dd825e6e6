"""Weights never read by fuse: external references re-pointed to OUTDIR, missing weights,
verification without weights, and the checker on the written model's path."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from ruleengine.cli import app
from ruleengine.errors import UsageError
from ruleengine.pipeline import fuse, write_outputs
from ruleengine.rewrite import weights
from ruleengine.verification.numerics import run_model

RULE = """\
name: matmul_bias_relu
match:
  ops:
    - type: MatMul
    - type: Add
      input_sources:
        input1: {source_type: const_or_param}
    - type: Relu
rewrite:
  target_op: MatMulBiasRelu
"""


def external_weights_dir(tmp: Path, name: str = "m") -> Path:
    """Two MatMul+bias+ReLU blocks; weights in an external file ``<name>.onnx.data``."""
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for i in range(2):
        w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), f"w{i}")
        b = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), f"b{i}")
        inits += [w, b]
        nodes += [
            helper.make_node("MatMul", [x, f"w{i}"], [f"mm{i}"], name=f"mm{i}"),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"], name=f"add{i}"),
            helper.make_node("Relu", [f"add{i}"], [f"y{i}"], name=f"relu{i}"),
        ]
        x = f"y{i}"
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [8, 64])],
        inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    d = tmp / "src"
    d.mkdir()
    onnx.save_model(
        model, str(d / f"{name}.onnx"), save_as_external_data=True, location=f"{name}.onnx.data",
        size_threshold=0,
    )  # fmt: skip
    (tmp / "rules.yaml").write_text(RULE)
    return d


def _locations(model: Path) -> set[str]:
    m = onnx.load(str(model), load_external_data=False)
    return {weights.external_info(t)[0] for t in m.graph.initializer if weights.is_external(t)}


def _run(*args: str):
    return CliRunner().invoke(app, ["fuse", *args])


def test_weights_copied_into_outdir_run_in_onnxruntime(tmp_path):
    src = external_weights_dir(tmp_path)
    out = tmp_path / "out"
    result = fuse(src / "m.onnx", [tmp_path / "rules.yaml"], outdir=out)
    assert [p.how for p in result.placements] == ["copy"]
    assert result.weight_files == ("m.onnx.data",)
    write_outputs(result, out)
    fused = out / "m.fused.onnx"
    assert _locations(fused) == {"m.onnx.data"}
    assert not os.path.samefile(out / "m.onnx.data", src / "m.onnx.data")  # no hard link
    assert os.stat(src / "m.onnx.data").st_nlink == 1
    graph = onnx.load(str(fused)).graph  # with its weights, from OUTDIR
    assert sum(n.domain == "autofusion" for n in graph.node) == 2
    feeds = {"x": np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)}
    want = run_model(src / "m.onnx", feeds)
    got = run_model(fused, feeds)  # from its path: the weights resolve from OUTDIR
    np.testing.assert_allclose(got["y1"], want["y1"], rtol=1e-5, atol=1e-5)
    assert "m.onnx.data" in (out / "report.txt").read_text()


def test_copy_weights_passes_the_checker_on_the_path(tmp_path):
    src = external_weights_dir(tmp_path)
    out = tmp_path / "out"
    res = _run(str(src / "m.onnx"), "-r", str(tmp_path / "rules.yaml"), "-o", str(out),
               "--copy-weights")  # fmt: skip
    assert res.exit_code == 0, res.output
    data = out / "m.onnx.data"
    assert data.read_bytes() == (src / "m.onnx.data").read_bytes()
    assert os.stat(data).st_nlink == 1
    onnx.checker.check_model(str(out / "m.fused.onnx"), full_check=True)


def test_outdir_holding_the_model_keeps_the_reference(tmp_path):
    src = external_weights_dir(tmp_path)
    result = fuse(src / "m.onnx", [tmp_path / "rules.yaml"], outdir=tmp_path)
    assert [(p.how, p.new_location) for p in result.placements] == [("inside", "src/m.onnx.data")]
    write_outputs(result, tmp_path)
    assert _locations(tmp_path / "m.fused.onnx") == {"src/m.onnx.data"}
    onnx.checker.check_model(str(tmp_path / "m.fused.onnx"), full_check=True)


def test_writing_elsewhere_re_points_the_references(tmp_path):
    src = external_weights_dir(tmp_path)
    result = fuse(src / "m.onnx", [tmp_path / "rules.yaml"])  # rendered for the model's folder
    assert [p.how for p in result.placements] == ["inside"]
    other = tmp_path / "elsewhere"
    write_outputs(result, other)  # copied there (the default), the references re-pointed
    assert (other / "m.onnx.data").read_bytes() == (src / "m.onnx.data").read_bytes()
    assert os.stat(other / "m.onnx.data").st_nlink == 1
    assert _locations(other / "m.fused.onnx") == {"m.onnx.data"}
    onnx.checker.check_model(str(other / "m.fused.onnx"), full_check=True)


def test_missing_weights_plan_identical_and_warning_from_any_cwd(tmp_path, monkeypatch):
    src = external_weights_dir(tmp_path)
    rules = str(tmp_path / "rules.yaml")
    with_weights = tmp_path / "with"
    assert _run(str(src / "m.onnx"), "-r", rules, "-o", str(with_weights)).exit_code == 0
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(src / "m.onnx", bare / "m.onnx")  # the graph without its weights file
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = tmp_path / "without"
    res = _run(str(bare / "m.onnx"), "-r", rules, "-o", str(out))
    assert res.exit_code == 0, res.output
    assert "AF520" in res.stderr and str(bare / "m.onnx.data") in res.stderr
    a = json.loads((with_weights / "plan.json").read_text())
    b = json.loads((out / "plan.json").read_text())
    assert a == b and len(a["groups"]) == 2
    # the fused graph references the same location, relative to OUTDIR
    assert _locations(out / "m.fused.onnx") == {"../bare/m.onnx.data"}
    assert not (out / "m.onnx.data").exists()


@pytest.mark.parametrize("flag", ["--verify", "--safe"])
def test_verify_without_weights_is_a_usage_error(tmp_path, flag):
    src = external_weights_dir(tmp_path)
    (src / "m.onnx.data").unlink()
    out = tmp_path / "out"
    res = _run(str(src / "m.onnx"), "-r", str(tmp_path / "rules.yaml"), "-o", str(out), flag)
    assert res.exit_code == 2
    assert "AF521" in res.stderr and "m.onnx.data" in res.stderr and "weights" in res.stderr
    assert not out.exists()


def test_verification_reads_external_weights_by_memory_map(tmp_path):
    src = external_weights_dir(tmp_path)
    for mode in ("whole", "per-group"):
        v = fuse(src / "m.onnx", [tmp_path / "rules.yaml"], verify=True, verify_mode=mode)
        assert v.plan.verification.ok and v.plan.verification.mode == mode
    bad = fuse(
        src / "m.onnx",
        [tmp_path / "rules.yaml"],
        safe=True,
        verify_mode="whole",
        corrupt_rules=("matmul_bias_relu",),
    )
    assert bad.plan.verification.dropped_groups == (1, 2)


def test_model_over_the_protobuf_limit_moves_inline_weights_out(tmp_path):
    """A fused model too large for one message gets its inline tensors in a data file
    (the limit is lowered here; bench/llm.py runs a 30 GiB model)."""
    src = external_weights_dir(tmp_path)
    model = onnx.load(str(src / "m.onnx"))  # weights now inline
    files = {}
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    files["big.onnx.data"] = weights.externalize_inline(copy, "big.onnx.data")
    files["big.onnx"] = copy.SerializeToString()
    assert copy.ByteSize() < 4096 and len(files["big.onnx.data"]) > 4 * 64 * 64
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    onnx.checker.check_model(str(tmp_path / "big.onnx"), full_check=True)
    feeds = {"x": np.ones((8, 64), np.float32)}
    np.testing.assert_array_equal(
        run_model(tmp_path / "big.onnx", feeds)["y1"], run_model(model, feeds)["y1"]
    )


def test_checkable_copy_drops_external_values_only(tmp_path):
    src = external_weights_dir(tmp_path)
    m = onnx.load(str(src / "m.onnx"), load_external_data=False)
    c = weights.checkable(m, limit=1 << 30)
    assert not c.graph.initializer and {i.name for i in c.graph.input} >= {"w0", "b1"}
    onnx.checker.check_model(c, full_check=True)  # in memory, from any directory


def test_unknown_verify_mode_is_a_usage_error(tmp_path):
    src = external_weights_dir(tmp_path)
    with pytest.raises(UsageError, match="verify mode"):
        fuse(src / "m.onnx", [tmp_path / "rules.yaml"], verify=True, verify_mode="halfway")


def test_checkable_inputs_equal_make_tensor_value_info():
    """The graph inputs ``checkable`` writes as protobuf bytes for external tensors equal
    ``onnx.helper.make_tensor_value_info`` of each (long names, dims over 127, scalars,
    several element types; an initializer that is already an input is not added twice)."""
    g = helper.make_graph(
        [], "g", [helper.make_tensor_value_info("dup", TensorProto.FLOAT, [2])], []
    )
    specs = [
        ("w" * 300, TensorProto.FLOAT, [4096, 11008]),
        ("b", TensorProto.FLOAT16, [128]),
        ("s", TensorProto.INT64, []),
        ("e", TensorProto.BFLOAT16, [0, 3]),
        ("dup", TensorProto.FLOAT, [2]),
        ("b2", TensorProto.FLOAT16, [128]),
    ]
    for name, dtype, dims in specs:
        t = g.initializer.add()
        t.name, t.data_type = name, dtype
        t.dims.extend(dims)
        t.data_location = TensorProto.EXTERNAL
        e = t.external_data.add()
        e.key, e.value = "location", "w.bin"
    m = helper.make_model(g)
    c = weights.checkable(m, limit=1 << 30)
    want = [helper.make_tensor_value_info("dup", TensorProto.FLOAT, [2])] + [
        helper.make_tensor_value_info(n, d, s) for n, d, s in specs if n != "dup"
    ]
    assert list(c.graph.input) == want
    assert not c.graph.initializer
    assert len(m.graph.initializer) == len(specs)  # the model itself is not changed


def test_fusing_again_into_the_same_folder_keeps_the_linked_weights(tmp_path):
    # --weights link: the second run finds the first run's hard link in OUTDIR (placed
    # "inside"); the checker on the path refuses hard links, as it would have on the first
    src = external_weights_dir(tmp_path)
    out = tmp_path / "out"
    args = (str(src / "m.onnx"), "-r", str(tmp_path / "rules.yaml"), "-o", str(out),
            "--weights", "link")  # fmt: skip
    assert _run(*args).exit_code == 0
    first = (out / "m.fused.onnx").read_bytes()
    res = _run(*args)
    assert res.exit_code == 0, res.output
    assert (out / "m.fused.onnx").read_bytes() == first
    assert os.path.samefile(out / "m.onnx.data", src / "m.onnx.data")
    feeds = {"x": np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)}
    got = run_model(out / "m.fused.onnx", feeds)
    want = run_model(src / "m.onnx", feeds)
    np.testing.assert_allclose(got["y1"], want["y1"], rtol=1e-5, atol=1e-5)


def test_weights_hard_linked_by_the_user_inside_outdir(tmp_path):
    src = external_weights_dir(tmp_path)
    os.link(src / "m.onnx.data", tmp_path / "backup.data")  # the user's own second name
    res = _run(str(src / "m.onnx"), "-r", str(tmp_path / "rules.yaml"), "-o", str(src))
    assert res.exit_code == 0, res.output
    assert _locations(src / "m.fused.onnx") == {"m.onnx.data"}
