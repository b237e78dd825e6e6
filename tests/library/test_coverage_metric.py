"""The fusable-traffic metric (ruleengine/coverage.py, read by bench/coverage.py and
suggest) on hand-computed graphs."""

from __future__ import annotations

import onnx

from ruleengine import coverage
from ruleengine.graph import load_graph
from ruleengine.ruletest.spec import build_model

from .fixturelib import MODELS
from .test_bars import bench

GRAPH = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,16,64] x, float[64,64] W_1, float[64] W_b, float[64,64] W_2, float[64] W_c)
  => (float[1,4,16,16] y, int64[3] s)
{
  [sh] shp = Constant <value = int64[4] {1, 16, 4, 16}> ()
  [cw] cw = Relu (W_c)
  [mm1] a = MatMul (x, W_1)
  [bias] b = Add (a, W_b)
  [relu] r = Relu (b)
  [mm2] c = MatMul (r, W_2)
  [mm3] d = MatMul (a, W_2)
  [addw] e = Add (c, cw)
  [rs] f = Reshape (e, shp)
  [tr] y = Transpose <perm = [0, 2, 1, 3]> (f)
  [shape] s = Shape (d)
}
"""


def _graph(tmp_path, text=GRAPH):
    path = tmp_path / "g.onnx"
    onnx.save(build_model(text), path)
    return load_graph(path)


def test_fusable_edges(tmp_path):
    edges = coverage.fusable_edges(_graph(tmp_path))
    assert edges.unknown == 0
    found = {(e.producer, e.consumer): e.nbytes for e in edges.edges}
    hidden = 16 * 64 * 4
    assert found == {
        ("mm1", "bias"): hidden,  # cube -> vector: fusable
        ("bias", "relu"): hidden,
        ("relu", "mm2"): hidden,  # vector -> cube: fusable
        ("mm2", "addw"): hidden,
        ("addw", "tr"): hidden,  # traced through the Reshape view to its storage
    }
    # not there: mm1 -> mm3 (cube -> cube), mm3 -> shape (Shape is opaque),
    # cw -> addw (computed from a weight only: folds to a constant), edges into the view.


def test_family_and_model_lists():
    """The family is read from the graph (Softmax feeding a MatMul), not from the file
    name: hybrids with attention (MobileViT, wav2vec2) are transformers, PoolFormer (no
    attention) and the light CNNs are not; the families folder is part of the model list."""
    assert bench.family(MODELS / "llama-tiny.ts.onnx") == "transformer"
    assert bench.family(MODELS / "resnet18-narrow.ts.onnx") == "cnn"
    families = MODELS / "families"
    assert bench.family(families / "mobilevit-xxs.dynamo.onnx") == "transformer"
    assert bench.family(families / "wav2vec2-tiny.ts.onnx") == "transformer"
    assert bench.family(families / "poolformer-narrow.dynamo.onnx") == "cnn"
    assert all(bench.family(p) == "cnn" for p in bench.light_models())
    listed = {p.name for p in bench.shared_models()}
    assert {"bert-tiny.ts.onnx", "bloom-tiny.ts.onnx"} <= listed
    assert len(bench.light_models()) >= 9


def test_family_of_renamed_file(tmp_path):
    """A transformer saved under a CNN-sounding name is still a transformer."""
    import shutil

    copy = tmp_path / "resnet-like-name.onnx"
    shutil.copy(MODELS / "bert-tiny.dynamo.onnx", copy)
    assert bench.family(copy) == "transformer"


def test_torchscript_unknown_dims_are_resolved_without_binding():
    """The attention-score tensors TorchScript leaves as unk__N come out static, so the
    coverage bench measures exactly what a user gets (no dims bound by hand)."""
    graph = load_graph(MODELS / "llama-tiny.ts.onnx")
    assert graph.unbound_dims == ()
    scores = [t for t in graph.tensors.values() if t.shape and len(t.shape) == 4]
    assert scores and all(t.is_static for t in scores)


COMPILE_TIME = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,8] x, float[8] W_b) => (float[2,8] y)
{
  [shp] s = Shape (x)
  [cast] sf = Cast <to = 1> (s)
  [wb] b2 = Mul (W_b, W_b)
  [add] a = Add (x, b2)
  [exp] e = Exp (a)
  [mul] y = Mul (e, a)
}
"""


def test_compile_time_nodes_are_not_edges(tmp_path):
    """Shape of a static input and arithmetic on it fold at compile time: no edges, and
    the nodes are compile-time (so is a Mul of two weights)."""
    graph = _graph(tmp_path, COMPILE_TIME)
    assert coverage.compile_time_nodes(graph) == {"shp", "cast", "wb"}
    edges = coverage.fusable_edges(graph)
    assert {(e.producer, e.consumer) for e in edges.edges} == {
        ("add", "exp"),
        ("add", "mul"),
        ("exp", "mul"),
    }
    assert edges.fusable_bytes == 3 * 2 * 8 * 4


def test_coverage_and_ceilings(tmp_path):
    graph = _graph(tmp_path, COMPILE_TIME)
    edges = coverage.fusable_edges(graph)
    half = coverage.measure(graph, [{"add", "exp"}], edges)
    assert (half.captured_bytes, half.fusable_bytes) == (64, 192)
    assert coverage.measure(graph, [{"add", "exp", "mul"}], edges).coverage == 1.0
    ceil = coverage.ceilings(graph, edges)
    # unfused: add reads x, b2 and writes a; exp reads a, writes e; mul reads e, a, writes y
    # (64 B each, b2 32 B) = 32 + 7 * 64; all three fused: read x, b2, write y (160 B);
    # the compile-time Shape, Cast and weight Mul move nothing.
    assert ceil.hbm_before == 32 + 7 * 64
    assert ceil.fuse_everything == (480 - 160) / 480
    assert ceil.epilogue_only == ceil.fuse_everything  # no cube op


def test_epilogue_only_ceiling_leaves_edges_into_cube_ops(tmp_path):
    graph = _graph(tmp_path)
    ceil = coverage.ceilings(graph)
    assert 0 < ceil.epilogue_only < ceil.fuse_everything
