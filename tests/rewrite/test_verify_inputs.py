"""Verification inputs and output comparison on models nobody tested: sequence and
optional values, user .npz files that do not fit the model."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ruleengine import pipeline
from ruleengine.errors import UsageError
from ruleengine.verification import numerics as V


def _opt_seq_model() -> onnx.ModelProto:
    """Identity over an optional(sequence(float[5])) input, as onnx's test_identity_opt."""
    elem = helper.make_tensor_type_proto(TensorProto.FLOAT, [5])
    opt = helper.make_optional_type_proto(helper.make_sequence_type_proto(elem))
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "opt_seq",
        [helper.make_value_info("x", opt)],
        [helper.make_value_info("y", opt)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])


def test_sequence_and_optional_inputs_get_values_and_outputs_compare(tmp_path: Path):
    model = _opt_seq_model()
    feeds = V.make_inputs(model)
    assert isinstance(feeds["x"], list) and feeds["x"][0].shape == (5,)
    path = tmp_path / "opt.onnx"
    onnx.save(model, path)
    result = pipeline.fuse(path, verify=True)  # used to raise KeyError: 0
    assert result.plan.verification is not None and result.plan.verification.ok


def test_compare_sequences_none_and_strings():
    a = np.arange(3, dtype=np.float32)
    assert V.compare({"s": [a, a]}, {"s": [a, a]})[0].ok
    assert not V.compare({"s": [a, a]}, {"s": [a]})[0].ok
    assert not V.compare({"s": [a, a]}, {"s": [a, a + 1]})[0].ok
    assert V.compare({"o": None}, {"o": None})[0].ok
    assert not V.compare({"o": None}, {"o": a})[0].ok
    words = np.array(["a", "b"], dtype=object)
    assert V.compare({"w": words}, {"w": words.copy()})[0].ok
    assert not V.compare({"w": words}, {"w": np.array(["a", "c"], dtype=object)})[0].ok


def _sym_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "sym",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("writer", "message"),
    [
        (lambda p: np.save(p, np.zeros((1, 4), np.float32)), "single .npy array"),
        (lambda p: p.write_bytes(b"PK\x03\x04garbage"), "cannot read inputs file"),
        (lambda p: np.savez(p, x=np.zeros((1, 4))), "is float64, the model input wants float32"),
        (lambda p: np.savez(p, x=np.zeros((1, 5), np.float32)), "has shape (1, 5)"),
        (lambda p: np.savez(p, x=np.zeros((4,), np.float32)), "wants (batch, 4)"),
    ],
)
def test_inputs_file_that_does_not_fit_is_a_usage_error(tmp_path: Path, writer, message):
    """.npy files and broken zips used to be internal errors; wrong dtypes and shapes were
    blamed on the model ('onnxruntime cannot run the original model')."""
    target = tmp_path / "in.npz"
    writer(target)
    if not target.exists():  # np.save appends .npy
        target = tmp_path / "in.npz.npy"
    with pytest.raises(UsageError, match=re.escape(message)):
        V.load_inputs(target, _sym_model())


def test_inputs_file_that_fits_loads():
    import io

    buf = io.BytesIO()
    np.savez(buf, x=np.ones((3, 4), np.float32), extra=np.zeros(2))
    buf.seek(0)
    feeds = V.load_inputs(buf, _sym_model())
    assert list(feeds) == ["x"] and feeds["x"].shape == (3, 4)


def test_random_inputs_too_large_for_memory_are_refused_with_a_hint():
    """--dim seq=100000 on a big model used to end in an internal MemoryError."""
    with pytest.raises(UsageError, match="bind smaller sizes with --dim"):
        V.make_inputs(_sym_model(), dims={"batch": 10**12})


def test_string_inputs_get_strings():
    graph = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["t"])],
        "strings",
        [helper.make_tensor_value_info("s", TensorProto.STRING, [3])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = V.make_inputs(model)
    out = V.run_model(model, feeds)
    assert V.compare(out, out)[0].ok


def test_integer_inputs_that_size_an_output_get_neutral_values():
    """Random repeats up to 100 made onnx's test_tile verification build a 3 GB output
    and run for over a minute; Pad pads likewise."""
    graph = helper.make_graph(
        [
            helper.make_node("Tile", ["x", "repeats"], ["t"]),
            helper.make_node("Pad", ["t", "pads"], ["y"]),
        ],
        "tile",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5]),
            helper.make_tensor_value_info("repeats", TensorProto.INT64, [4]),
            helper.make_tensor_value_info("pads", TensorProto.INT64, [8]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = V.make_inputs(model)
    assert feeds["repeats"].tolist() == [1, 1, 1, 1] and feeds["pads"].tolist() == [0] * 8
    assert V.run_model(model, feeds)["y"].shape == (2, 3, 4, 5)
