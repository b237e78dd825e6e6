"""bench/count_independent.py, the second count of coverage (issue 40): right on graphs
counted by hand, and in agreement with bench/coverage.py (ruleengine/coverage.py) on shared
models. Two counts of one thing must agree; the script must not share the engine's code."""

from __future__ import annotations

import ast
import importlib.util
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from .fixturelib import MODELS, REPO

SCRIPT = REPO / "bench" / "count_independent.py"


def _script():
    name = "count_independent"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _model(nodes, inits, out="y", shape=(4, 2)) -> onnx.ModelProto:
    """A graph of one float32[2, 4] input ``x`` and one output."""
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, list(shape))],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _hand_graph() -> onnx.ModelProto:
    """Fusable edges, by hand (every tensor below is float32[4, 2] = 32 bytes):
    relu -> add through the Reshape view (v), add -> mm (a), mm2 -> exp (m2), exp -> addw
    (e): 128 bytes.
    Not counted: x (a graph input), mm -> mm2 (cube -> cube), mm2 -> shape (shape-like),
    the folded Cast of a weight into addw, exp -> custom (unknown domain), edges into the
    view on their own."""
    f32 = np.float32
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shp"], ["v"], name="view"),
        helper.make_node("Add", ["v", "bias"], ["a"], name="add"),
        helper.make_node("MatMul", ["a", "W"], ["m"], name="mm"),
        helper.make_node("MatMul", ["m", "W"], ["m2"], name="mm2"),
        helper.make_node("Shape", ["m2"], ["s"], name="shape"),
        helper.make_node("Exp", ["m2"], ["e"], name="exp"),
        helper.make_node("Cast", ["W"], ["cw"], name="castw", to=TensorProto.FLOAT),
        helper.make_node("Slice", ["cw", "zero", "one"], ["cw1"], name="slicew"),
        helper.make_node("Add", ["e", "cw1"], ["y"], name="addw"),
        helper.make_node("Custom", ["e"], ["z"], name="custom", domain="com.example"),
    ]
    inits = {
        "shp": np.asarray([4, 2], np.int64),
        "bias": np.zeros(2, f32),
        "W": np.eye(2, dtype=f32),
        "zero": np.asarray([0], np.int64),
        "one": np.asarray([1], np.int64),
    }
    return _model(nodes, inits)


def test_counts_a_hand_graph() -> None:
    ci = _script()
    model = ci.inferred(_hand_graph())
    got = {(e.producer, e.consumer, e.tensor, e.nbytes) for e in ci.edges(model)}
    assert got == {
        ("relu", "add", "v", 32),
        ("add", "mm", "a", 32),
        ("mm2", "exp", "m2", 32),
        ("exp", "addw", "e", 32),
    }
    assert ci.count(model, [{"relu", "view", "add"}]).coverage == pytest.approx(1 / 4)
    both = ci.count(model, [{"relu", "view", "add", "mm"}, {"mm2", "exp", "addw"}])
    assert (both.fusable_bytes, both.captured_bytes, both.unknown_edges) == (128, 128, 0)
    # a group across the view but not its producer's: nothing captured
    assert ci.count(model, [{"view", "add"}]).captured_bytes == 0


def test_unknown_sizes_are_counted_apart() -> None:
    ci = _script()
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("NonZero", ["r"], ["nz"], name="nz"),  # opaque: data-dependent
        helper.make_node("Cast", ["nz"], ["c"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Relu", ["c"], ["y"], name="relu2"),
    ]
    model = ci.inferred(_model(nodes, {}, shape=(2, None)))
    figures = ci.count(model, [{"cast", "relu2"}])
    # nz -> cast has an opaque producer; cast -> relu2 is of unknown size ([2, ?])
    assert (figures.fusable_bytes, figures.unknown_edges) == (0, 1)


def test_names_nameless_nodes_as_the_engine_does(tmp_path) -> None:
    from ruleengine.graph import load_graph

    ci = _script()
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"], name="Relu_0"),  # takes the default name
        helper.make_node("Neg", ["b"], ["c"], name="twice"),
        helper.make_node("Neg", ["c"], ["y"], name="twice"),
    ]
    model = _model(nodes, {}, shape=(2, 4))
    onnx.save(model, tmp_path / "m.onnx")
    engine = [n.name for n in load_graph(tmp_path / "m.onnx").nodes]
    assert sorted(ci.node_names(model.graph)) == sorted(engine)


def test_imports_nothing_from_the_engine() -> None:
    tree = ast.parse(SCRIPT.read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "ruleengine" not in imported
    assert imported <= {"__future__", "argparse", "json", "math", "subprocess", "sys", "time"} | {
        "collections",
        "dataclasses",
        "pathlib",
        "numpy",
        "onnx",
        "onnxruntime",
    }


@pytest.mark.parametrize("name", ["gpt2-tiny.dynamo.onnx", "bert-tiny.ts.onnx"])
def test_agrees_with_the_engine_on_shared_models(name: str) -> None:
    """Same groups (the engine's chosen ones), both counts: the same bytes."""
    from ruleengine import coverage
    from ruleengine.pipeline import analyze

    ci = _script()
    path = MODELS / name
    analysis = analyze(path)
    groups = [set(sc.candidate.nodes) for sc in analysis.resolution.chosen]
    engine = coverage.measure(analysis.graph, groups)
    ours = ci.count(ci.load(path), groups)
    assert (ours.fusable_bytes, ours.captured_bytes) == (
        engine.fusable_bytes,
        engine.captured_bytes,
    )


def test_compares_through_explain_and_the_bench(tmp_path) -> None:
    """The script end to end on the hand graph: explain's groups, bench/coverage.py's row
    (run as subprocesses, as on the corpus)."""
    ci = _script()
    path = tmp_path / "hand.onnx"
    onnx.save(_hand_graph(), path)
    row = ci.compare(path)
    assert row.fusable_ours == row.fusable_bench == 128
    assert row.agree and row.saved_explain == row.saved_bench


def _if_graph() -> onnx.ModelProto:
    """An If whose condition folds (Shape of the static input) and whose branches read a
    run-time tensor from the enclosing graph: its output, and the Sigmoid after it, are
    run-time (silero-vad's decoder is behind such an If)."""
    out = [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 4])]
    then = helper.make_graph([helper.make_node("Identity", ["r"], ["b"])], "then", [], out)
    other = helper.make_graph([helper.make_node("Neg", ["r"], ["b"])], "else", [], out)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["d"], name="dim"),
        helper.make_node("Equal", ["d", "two"], ["c"], name="cond"),
        helper.make_node("If", ["c"], ["i"], name="if", then_branch=then, else_branch=other),
        helper.make_node("Sigmoid", ["i"], ["g"], name="sig"),
        helper.make_node("Mul", ["g", "x"], ["y"], name="mul"),
    ]
    inits = {"zero": np.asarray(0, np.int64), "two": np.asarray(2, np.int64)}
    return _model(nodes, inits, shape=(2, 4))


def test_a_control_flow_output_is_run_time_when_its_body_reads_run_time_data(tmp_path) -> None:
    from ruleengine import coverage
    from ruleengine.graph import load_graph

    ci = _script()
    model = ci.load_model(_if_graph())
    got = {(e.producer, e.consumer, e.nbytes) for e in ci.edges(model)}
    assert got == {("sig", "mul", 32)}  # if -> sig: an opaque producer
    onnx.save(_if_graph(), tmp_path / "if.onnx")
    graph = load_graph(tmp_path / "if.onnx")
    assert {"if", "sig", "mul"}.isdisjoint(coverage.compile_time_nodes(graph))
    assert coverage.compile_time_nodes(graph) == set(graph.compile_time_nodes)
    engine = {(e.producer, e.consumer, e.nbytes) for e in coverage.fusable_edges(graph).edges}
    assert engine == got
