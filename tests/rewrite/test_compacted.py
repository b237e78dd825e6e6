"""The fused model's compaction (``onnx_rewrite._compacted``): a copy of its own, the model
itself when protobuf could not parse it back (2 GiB), and every other error propagated."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError, EncodeError
from onnx import TensorProto, helper

from ruleengine.graph import onnxlite
from ruleengine.rewrite import onnx_rewrite


def _model():
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return onnxlite.ModelProto.FromString(helper.make_model(graph).SerializeToString())


def test_compacted_is_an_equal_message_of_its_own():
    model = _model()
    out = onnx_rewrite._compacted(model)
    assert out is not model
    assert out.SerializeToString() == model.SerializeToString()


def test_a_model_at_the_parse_limit_is_kept_as_it_is(monkeypatch):
    model = _model()
    size = len(model.SerializeToString())
    monkeypatch.setattr(onnx_rewrite, "_PARSE_LIMIT_BYTES", size)
    assert onnx_rewrite._compacted(model) is model
    monkeypatch.setattr(onnx_rewrite, "_PARSE_LIMIT_BYTES", size + 1)
    assert onnx_rewrite._compacted(model) is not model


class _Unserializable:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def SerializeToString(self) -> bytes:  # protobuf's name
        raise self.error


@pytest.mark.parametrize(
    "error", [EncodeError("Failed to serialize proto"), MemoryError(), RuntimeError("bug")]
)
def test_serializer_errors_propagate(error):
    with pytest.raises(type(error)):
        onnx_rewrite._compacted(_Unserializable(error))


def test_parser_errors_under_the_limit_propagate(monkeypatch):
    class Refusing:
        def ParseFromString(self, data: bytes) -> None:  # protobuf's name
            raise DecodeError("Error parsing message with type 'onnx.ModelProto'")

    model = _model()
    monkeypatch.setattr(onnx_rewrite.onnxlite, "ModelProto", Refusing)
    with pytest.raises(DecodeError):
        onnx_rewrite._compacted(model)
