"""The alias table (ops/aliases.yaml) is consistent with onnx.defs and the composites."""

from __future__ import annotations

import pytest

from ruleengine.ops.aliases import (
    alias_table,
    composite_names,
    onnx_ops,
    op_type_info,
)
from ruleengine.ops.model import ParamKind

ALIASES = sorted(alias_table())


def test_required_aliases_present():
    for name in (
        "Conv2d", "Conv1d", "Conv3d", "BatchNorm", "BatchNorm2d", "LayerNorm", "RMSNorm",
        "BiasAdd", "Linear", "Dense", "Swish", "SiLU", "Gelu", "GELU", "Softmax", "ReLU",
        "Relu6", "HardSwish", "Dropout", "MatMul", "Add", "Mul", "Reshape",
    ):  # fmt: skip
        assert name in alias_table(), name


@pytest.mark.parametrize("name", ALIASES)
def test_alias_targets_exist(name: str):
    alias = alias_table()[name]
    assert alias.onnx_types or alias.composites
    for t in alias.onnx_types:
        assert t in onnx_ops(), f"{name}: {t} is not an ONNX op"
    for c in alias.composites:
        assert c in composite_names(), f"{name}: composite {c} unknown"
    assert alias.composite == (alias.composites[0] if alias.composites else None)


@pytest.mark.parametrize("name", ALIASES)
def test_alias_params_map_onto_real_onnx_attributes(name: str):
    alias = alias_table()[name]
    attrs = set().union(*(onnx_ops()[t].attributes for t in alias.onnx_types))
    for pname, p in alias.params.items():
        if p.kind == ParamKind.ATTR:
            assert p.onnx_attr in attrs, f"{name}.{pname} -> {p.onnx_attr} not in {sorted(attrs)}"
        elif p.kind == ParamKind.INPUT_CONST:
            assert p.input_index is not None
            assert p.input_index < max(onnx_ops()[t].max_inputs for t in alias.onnx_types)
            if p.onnx_attr:
                assert p.onnx_attr in attrs and p.attr_before_opset
        elif p.kind == ParamKind.VARIANT:
            assert set(p.variants.values()) <= set(alias.composites)
        elif p.kind == ParamKind.SHAPE:
            assert p.check in ("broadcast", "normalized_shape", "elementwise_affine")
        else:
            assert p.kind == ParamKind.ALWAYS


def test_param_renames():
    conv = alias_table()["Conv2d"].params
    assert conv["groups"].onnx_attr == "group"
    assert conv["kernel_size"].onnx_attr == "kernel_shape"
    assert conv["activation_type"].always == "none"
    assert alias_table()["BatchNorm"].params["eps"].onnx_attr == "epsilon"
    reshape = alias_table()["Reshape"].params["allow_zero_dim"]
    assert dict(reshape.value_map) == {False: 0, True: 1}
    gelu = alias_table()["Gelu"].params["approximate"]
    assert dict(gelu.variants) == {"none": "gelu_erf", "tanh": "gelu_tanh"}
    dropout = alias_table()["Dropout"].params["ratio"]
    assert (dropout.kind, dropout.input_index, dropout.attr_before_opset) == (
        ParamKind.INPUT_CONST,
        1,
        12,
    )
    assert alias_table()["BiasAdd"].const_operand
    assert dict(alias_table()["Relu6"].implied_params) == {"min": 0, "max": 6}


def test_op_type_classification():
    assert op_type_info("Conv2d").kind == "alias"
    assert op_type_info("Relu").kind == "onnx"
    assert op_type_info("silu").kind == "composite"
    assert op_type_info("@view").kind == "class"
    assert op_type_info("relu").kind == "unknown"
    assert op_type_info("@nothing").kind == "unknown"
    assert op_type_info("Conv2d").canonical() == op_type_info("Conv").canonical()
    assert op_type_info("BatchNorm").canonical() == op_type_info("BatchNormalization").canonical()
    assert "group" in op_type_info("Conv2d").param_names()
    assert op_type_info("silu").param_names() is None
