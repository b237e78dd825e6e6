"""Segmented shape inference (``graph.segments``) gives what one whole ONNX call gives:
the same types in the same order, ``unk__`` names included, values carried across a
segment's edge; and it steps aside where it could differ."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ruleengine.graph import graph_from_model, propagate, segments, typeread
from ruleengine.graph.segments import NodeFields

F, I64 = TensorProto.FLOAT, TensorProto.INT64
SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "models"


def _model() -> onnx.ModelProto:
    """Nodes whose types depend on what crosses segments of two nodes: a Constant read
    by a Reshape three segments later, made dims (NonZero) read in later segments, a
    made dim dropped into a declared output (onnx's counter moves on regardless), a
    declared output that already uses the name ``unk__1``, a weight over
    ``VALUE_NUMEL`` elements (a typed input, not copied) and a small shape initializer."""
    big = numpy_helper.from_array(np.random.default_rng(0).random((64, 80), np.float32), "w")
    shape2 = numpy_helper.from_array(np.array([4, -1], np.int64), "shape2")
    nodes = [
        helper.make_node(
            "Constant", [], ["shape_c"], value=numpy_helper.from_array(np.array([2, 32], np.int64))
        ),
        helper.make_node("NonZero", ["y"], ["nz0"]),  # [1, unk__0]
        helper.make_node("Relu", ["x"], ["r0"]),
        helper.make_node("NonZero", ["y"], ["dropped"]),  # unk__2, merged into [1, 7]
        helper.make_node("Transpose", ["nz0"], ["t0"]),  # [unk__0, 1] (across the edge)
        helper.make_node("MatMul", ["r0", "w"], ["mm"]),  # [unk__1, 80]
        helper.make_node("Reshape", ["q", "shape_c"], ["rs"]),  # [2, 32] from the Constant
        helper.make_node("NonZero", ["t0"], ["nz1"]),  # [2, unk__3]
        helper.make_node("Reshape", ["q", "shape2"], ["rs2"]),  # [4, 16]
        helper.make_node("Add", ["nz1", "nz1"], ["a1"]),
        helper.make_node("Shape", ["a1"], ["s1"]),
        helper.make_node("Identity", ["dropped"], ["out2"]),
    ]
    graph = helper.make_graph(
        nodes,
        "segments",
        [
            helper.make_tensor_value_info("x", F, [5, 64]),
            helper.make_tensor_value_info("y", F, [3]),
            helper.make_tensor_value_info("q", F, [64]),
        ],
        [
            helper.make_tensor_value_info("dropped", I64, [1, 7]),
            helper.make_tensor_value_info("mm", F, ["unk__1", 80]),
            helper.make_tensor_value_info("s1", I64, None),
            helper.make_tensor_value_info("out2", I64, None),
        ],
        [big, shape2],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _fields(m: onnx.ModelProto) -> NodeFields:
    nodes = list(m.graph.node)
    return NodeFields(
        nodes,
        [tuple(n.input) for n in nodes],
        [tuple(n.output) for n in nodes],
        [n.op_type for n in nodes],
        [n.domain or "" for n in nodes],
    )


def _whole(m: onnx.ModelProto) -> dict:
    """``propagate``'s types from one whole call."""
    opset = m.opset_import[0].version
    data = m.SerializeToString()
    return propagate._types(
        data, False, list(m.opset_import), opset, None, typeread.TypeReader(), None
    )


def _segmented(m: onnx.ModelProto, size: int) -> dict | None:
    entries = segments.segmented_types(m, _fields(m), {}, typeread.TypeReader(), size)
    if entries is None:
        return None
    opset = m.opset_import[0].version
    return propagate._completed(entries, None, m.graph, list(m.opset_import), opset, None, None)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 100])
def test_segments_give_the_whole_calls_types(size: int) -> None:
    m = _model()
    whole = _whole(m)
    got = _segmented(m, size)
    assert got is not None
    assert list(got.items()) == list(whole.items())  # the order too
    # what crossed the segments' edges
    assert got["rs"] == (F, (2, 32))  # the Constant's value, three segments earlier
    assert got["rs2"] == (F, (4, 16))
    assert got["mm"] == (F, (5, 80))  # (the declared unk__1 is a name onnx skips)
    assert got["t0"] == (I64, ("unk__0", 1))  # a made name, read in a later segment
    # unk__1 is the output's, unk__2 was made and dropped into the declared output
    assert got["nz1"] == (I64, (2, "unk__3"))
    assert got["dropped"] == (I64, (1, 7))


def _renamed_long(m: onnx.ModelProto) -> onnx.ModelProto:
    """``m`` with every tensor name over 127 bytes (its length takes two bytes in a
    serialized ValueInfoProto) and a doc string on each declared output (a third field)."""
    long = onnx.ModelProto()
    long.CopyFrom(m)
    g = long.graph
    names = {vi.name for vi in (*g.input, *g.output)} | {i.name for i in g.initializer}
    names |= {t for n in g.node for t in (*n.input, *n.output) if t}
    new = {t: t + "_" + "x" * 140 for t in names}
    for n in g.node:
        n.input[:] = [new.get(t, t) for t in n.input]
        n.output[:] = [new.get(t, t) for t in n.output]
    for vi in (*g.input, *g.output):
        vi.name = new[vi.name]
    for vi in g.output:
        vi.doc_string = "declared"
    for init in g.initializer:
        init.name = new[init.name]
    return long


@pytest.mark.parametrize("size", [1, 3])
def test_long_names_read_from_the_segments_bytes(size: int) -> None:
    """A segment's types are read from onnx's serialized result: names and types of
    any length, and fields beyond them, read as protobuf reads them."""
    m = _renamed_long(_model())
    whole = _whole(m)
    got = _segmented(m, size)
    assert got is not None
    assert list(got.items()) == list(whole.items())
    assert got["rs" + "_" + "x" * 140] == (F, (2, 32))


def test_malformed_segment_bytes_are_refused() -> None:
    """Bytes that are not an inferred model's read as None (the caller falls back to one
    whole call), never as wrong types."""
    good = propagate.onnxlite.infer_shapes_bytes(_model().SerializeToString())
    assert segments._inferred(good) is not None
    assert segments._inferred(good[:-3]) is None
    assert segments._inferred(b"\x3a\x05ab") is None  # a graph field cut short


def test_a_weight_is_not_copied_into_a_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Initializers over VALUE_NUMEL elements enter a segment as typed inputs."""
    sent: list[bytes] = []
    infer = segments.onnxlite.infer_shapes_bytes

    def spy(data: bytes, data_prop: bool = False) -> bytes:
        sent.append(data)
        return infer(data, data_prop)

    m = _model()
    whole = _whole(m)
    monkeypatch.setattr(segments.onnxlite, "infer_shapes_bytes", spy)
    assert _segmented(m, 2) == whole
    weight = m.graph.initializer[0].raw_data
    assert len(weight) == 64 * 80 * 4 and len(sent) == 6
    assert not any(weight in data for data in sent)


def test_what_segments_cannot_represent_falls_back() -> None:
    m = _model()
    fields = _fields(m)
    segments.SEGMENT_FROM_NODES, saved = 0, segments.SEGMENT_FROM_NODES
    try:
        assert segments.segmentable(m, fields)
        body = helper.make_graph([], "b", [], [helper.make_tensor_value_info("x", F, None)])
        m_if = _model()
        m_if.graph.node.append(
            helper.make_node("If", ["c"], ["o"], then_branch=body, else_branch=body)
        )
        assert not segments.segmentable(m_if, _fields(m_if))
    finally:
        segments.SEGMENT_FROM_NODES = saved
    # a graph input with a symbolic dim: data propagation, in one whole call
    m_sym = _model()
    m_sym.graph.input[1].type.tensor_type.shape.dim[0].dim_param = "n"
    assert _segmented(m_sym, 2) is None
    # a node reading a tensor produced in a later segment (not in topological order)
    m_late = _model()
    nodes = list(m_late.graph.node)
    nodes[1], nodes[4] = nodes[4], nodes[1]  # Transpose(nz0) before NonZero -> nz0
    del m_late.graph.node[:]
    m_late.graph.node.extend(nodes)
    assert _segmented(m_late, 2) is None
    assert _segmented(m_late, 100) == _whole(m_late)  # one segment: the order is onnx's


@pytest.mark.parametrize("name", ["gpt2-tiny.ts.onnx", "llama-tiny.dynamo.onnx"])
@pytest.mark.parametrize("jobs", [1, 2])
def test_loader_gives_the_same_graph_segmented(
    name: str, jobs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real export loaded with its inference in segments of 3 nodes (forked or not) is
    the Graph one whole call gives."""
    path = SHARED / name
    assert path.exists(), f"{path} missing: the suite needs ../shared beside the checkout"
    model = onnx.load(str(path))
    whole = graph_from_model(model, jobs=jobs)
    monkeypatch.setattr(segments, "SEGMENT_FROM_NODES", 0)
    monkeypatch.setattr(segments, "SEGMENT_NODES", 3)
    monkeypatch.setattr(propagate, "FORK_FROM_NODES", 0)
    calls: list[int] = []
    real = segments.segmented_types

    def counted(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(segments, "segmented_types", counted)
    seg = graph_from_model(model, jobs=jobs)
    if jobs == 1:
        assert calls == [True]  # (forked, the call is in the child)
    assert seg.nodes == whole.nodes
    assert tuple(seg.tensors.items()) == tuple(whole.tensors.items())
    assert seg.warnings == whole.warnings
    assert seg.unbound_dims == whole.unbound_dims
