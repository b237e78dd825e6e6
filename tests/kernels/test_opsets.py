"""A reference form's body must be valid at the model's opset: the light CNNs shipped in
the onnx package (opset 9, Caffe2-era exports) fuse, pass onnx.checker and verify; a form
setting an attribute the op lacks at the model's opset is caught by the catalog's opset
check (a literal value: the form's min_opset; a value the call asks for: at bind time)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from onnx import TensorProto, helper

from ruleengine.kernels.catalog import at_opset, bundled_catalog, load_entry
from ruleengine.pipeline import analyze, fuse, write_outputs

LIGHT = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"


@pytest.mark.parametrize(
    "name", ["bvlc_alexnet", "squeezenet", "densenet121", "shufflenet", "vgg19"]
)
def test_light_cnn_fuses_verifies_and_passes_the_checker(name, tmp_path):
    """alexnet/squeezenet: ConvReluMaxPool at opset 9 (MaxPool has no dilations or
    ceil_mode); densenet121: BN + explicit Mul/Add affine + Relu; shufflenet: Conv + BN +
    Sum + Relu; vgg19: Gemm + Relu."""
    path = LIGHT / f"light_{name}.onnx"
    # onnx has shipped these test models for years; a missing one must fail, not hide
    assert path.is_file(), f"{path} is not in the installed onnx package"
    result = fuse(path, verify=True, verify_mode="whole")
    groups = result.plan.groups
    assert groups
    unfit = [
        (g.rule, g.contract.status, g.contract.reason)
        for g in groups
        if g.contract.status not in ("bound", "structural")
    ]
    assert unfit == []
    assert result.plan.verification.ok, result.plan.verification
    write_outputs(result, tmp_path)  # onnx.checker (full) on the written model
    onnx.checker.check_model(str(tmp_path / result.fused_name), full_check=True)


def _conv_relu_maxpool(opset: int, tmp: Path) -> Path:
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w")
    b = onnx.numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        "stem",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])],
        [w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 4
    onnx.checker.check_model(model, full_check=True)
    path = tmp / f"stem{opset}.onnx"
    onnx.save(model, str(path))
    return path


def test_bundled_form_drops_attributes_the_old_opset_lacks(tmp_path):
    """At opset 9 the ConvReluMaxPool body's MaxPool writes no dilations/ceil_mode (the
    call carries none but the implied ones); at opset 13 it keeps them."""
    for opset, present in ((9, False), (13, True)):
        path = _conv_relu_maxpool(opset, tmp_path)
        result = fuse(path, enable=["conv_relu_maxpool"], verify=True, verify_mode="whole")
        (group,) = result.plan.groups
        assert group.contract.status == "bound", group.contract.reason
        assert result.plan.verification.ok
        fn = next(f for f in result.fused_model.functions if f.name == "ConvReluMaxPool")
        pool = next(n for n in fn.node if n.op_type == "MaxPool")
        names = {a.name for a in pool.attribute}
        assert ("dilations" in names) is present and ("ceil_mode" in names) is present
        onnx.checker.check_model(result.fused_model, full_check=True)


LITERAL = """kernel: ConvReluMaxPool
version: 1
inputs:
- {name: X, bind: {op: Conv, input: 0}}
- {name: W, bind: {op: Conv, input: 1}}
- {name: B, optional: true, bind: {op: Conv, input: 2}}
outputs:
- {name: Y, bind: {op: MaxPool, output: 0}}
attributes:
  activation: {type: string, values: [relu], default: relu}
  pooling: {type: string, values: [max], default: max}
  pool_dilations: {type: ints, from: {op: MaxPool, attribute: dilations}}
forms:
- name: literal_dilations
  ops: [Conv, Relu, MaxPool]
  function: |
    (X, W, B) => (Y) {
      c = Conv <pads = [1, 1, 1, 1]> (X, W, B)
      r = Relu(c)
      Y = MaxPool <kernel_shape = [2, 2], strides = [2, 2], dilations = [1, 1]> (r)
    }
"""


def test_catalog_opset_check_catches_a_literal_attribute_the_opset_lacks(tmp_path):
    """A literal MaxPool dilations makes the form need opset 10: an opset-9 model's
    candidate does not fit (``contract_mismatch``: never chosen, issue 36), an opset-13
    model's binds."""
    folder = tmp_path / "kernels"
    folder.mkdir()
    (folder / "ConvReluMaxPool.yaml").write_text(LITERAL)
    (form,) = load_entry(folder / "ConvReluMaxPool.yaml").forms
    assert form.min_opset == 10

    def fuse_at(opset: int):
        return fuse(
            _conv_relu_maxpool(opset, tmp_path),
            enable=["conv_relu_maxpool"],
            kernels=[folder],
            verify=True,
            verify_mode="whole",
        )

    old = fuse_at(9)
    assert not old.plan.groups
    decided = analyze(
        _conv_relu_maxpool(9, tmp_path), enable=["conv_relu_maxpool"], kernels=[folder]
    )
    (misfit,) = [s for s in decided.scored if s.verdict.value == "contract_mismatch"]
    assert "needs opset 10, the model has 9" in misfit.reason
    new = fuse_at(13)
    assert new.plan.groups[0].contract.status == "bound"
    assert new.plan.verification.ok


def test_a_call_asking_for_an_attribute_the_opset_lacks_does_not_fit():
    """The bundled form at opset 9: implied values are dropped, others are a problem."""
    form = next(
        f for f in bundled_catalog().get("ConvReluMaxPool").forms if f.name == "conv_relu_maxpool"
    )
    assert form.min_opset == 1  # attributes referring to the call's are not literal
    kept, problems = at_opset(form, 9, {"pool_dilations": [1, 1], "pool_ceil_mode": 0})
    assert problems == []
    pool = next(
        n for n in onnx.FunctionProto.FromString(kept.function).node if n.op_type == "MaxPool"
    )
    assert {"dilations", "ceil_mode"}.isdisjoint(a.name for a in pool.attribute)
    _, problems = at_opset(form, 9, {"pool_dilations": [2, 2]})
    assert problems and "MaxPool dilations" in problems[0] and "opset 9" in problems[0]
    same, problems = at_opset(form, 10, {"pool_dilations": [2, 2]})
    assert problems == [] and same is form


def _three_stems(tmp: Path) -> Path:
    """Three Conv + Relu + MaxPool blocks in a row at opset 9."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(3):
        inits += [
            onnx.numpy_helper.from_array(
                rng.standard_normal((4, 4, 3, 3)).astype(np.float32), f"w{i}"
            ),
            onnx.numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), f"b{i}"),
        ]
        nodes += [
            helper.make_node(
                "Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]
            ),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
            helper.make_node("MaxPool", [f"r{i}"], [f"p{i}"], kernel_shape=[2, 2], strides=[2, 2]),
        ]
        x = f"p{i}"
    graph = helper.make_graph(
        nodes,
        "stems",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 4, 2, 2])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 4
    path = tmp / "stems9.onnx"
    onnx.save(model, str(path))
    return path


def test_groups_unbound_for_one_cause_are_one_warning(tmp_path):
    """Without --verify an unbound group (defence in depth: the decision turns them away,
    issue 36) is fused as it is and warned about (AF406); the warnings are grouped by
    rule, kernel and reason, so a model repeating the structure in every layer gets one
    line naming the count, not one line per layer."""
    from types import SimpleNamespace

    from ruleengine.verification import unbound_warnings

    folder = tmp_path / "kernels"
    folder.mkdir()
    (folder / "ConvReluMaxPool.yaml").write_text(LITERAL)
    path = _three_stems(tmp_path)
    result = fuse(path, enable=["conv_relu_maxpool"], kernels=[folder])
    assert not result.groups  # never chosen: the form needs opset 10
    reason = "form conv_relu_maxpool: its body needs opset 10, the model has 9"
    groups = [
        SimpleNamespace(
            id=i,
            rule="conv_relu_maxpool",
            target_op="ConvReluMaxPool",
            contract=SimpleNamespace(reason=reason),
        )
        for i in (1, 2, 3)
    ]
    (warning,) = [w for w in unbound_warnings(groups, path) if w.code == "AF406"]
    assert warning.message.startswith("3 groups (1, 2, 3) of rule conv_relu_maxpool do not fit")
    assert "needs opset 10, the model has 9" in warning.message
