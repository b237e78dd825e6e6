"""Native calls in a forked child (``procs.py``) and the forked shape inference of
``load_graph``: the same graph and the same warnings as in process."""

from __future__ import annotations

import os
import threading
import time

import pytest
from onnx import TensorProto, helper

from ruleengine import procs
from ruleengine.graph import load_graph, onnxlite, propagate
from ruleengine.procs import Forked, forkable

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _bytes_of(data: bytes, times: int) -> bytes:
    return data * times


def test_the_child_returns_the_calls_bytes():
    assert Forked(_bytes_of, b"ab", 3).result() == b"ababab"
    big = Forked(_bytes_of, b"x", 3 << 20).result()  # more than a pipe's buffer
    assert big == b"x" * (3 << 20)


def _raise(exc: BaseException) -> bytes:
    raise exc


def test_the_childs_exception_comes_back_with_its_type_and_message():
    with pytest.raises(ValueError, match="bad value"):
        Forked(_raise, ValueError("bad value")).result()
    error = onnxlite._C.shape_inference.InferenceError("[ShapeInferenceError] x")
    with pytest.raises(type(error), match=r"\[ShapeInferenceError\] x"):
        Forked(_raise, error).result()


def test_an_unpicklable_exception_keeps_its_name_and_message():
    class Unpicklable(Exception):
        pass

    with pytest.raises(Exception, match="^odd$") as info:
        Forked(_raise, Unpicklable("odd")).result()
    assert type(info.value).__name__ == "Unpicklable"


def test_a_dropped_child_is_killed_and_reaped():
    child = Forked(time.sleep, 60)
    pid = child._pid
    del child
    with pytest.raises(ChildProcessError):  # reaped already: no such child
        os.waitpid(pid, os.WNOHANG)


def test_forkable_needs_two_jobs_and_no_other_thread():
    assert not forkable(1)
    assert forkable(2)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not forkable(2)
    finally:
        stop.set()
        other.join()


def _model_file(tmp_path):
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        helper.make_node("MatMul", ["r", "w"], ["m"], name="matmul"),
        helper.make_node("Relu", ["m"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            helper.make_tensor("shape", TensorProto.INT64, [2], [6, 4]),
            helper.make_tensor("w", TensorProto.FLOAT, [4, 5], [0.5] * 20),
        ],
    )
    path = tmp_path / "m.onnx"
    path.write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    )
    return path


def test_load_graph_forked_gives_the_same_graph(tmp_path, monkeypatch):
    path = _model_file(tmp_path)
    monkeypatch.setattr(propagate, "FORK_FROM_NODES", 0)
    forks = []
    real = procs.Forked.__init__

    def counted(self, *args):
        forks.append(args[0])
        real(self, *args)

    monkeypatch.setattr(procs.Forked, "__init__", counted)
    alone = load_graph(path, jobs=1)
    assert forks == []
    beside = load_graph(path, jobs=2)
    assert forks == [propagate._pickled_model_types]
    assert beside == alone
    assert beside.tensors["y"].shape == (6, 5)


def test_a_failed_forked_inference_warns_as_in_process(tmp_path, monkeypatch):
    path = _model_file(tmp_path)
    monkeypatch.setattr(propagate, "FORK_FROM_NODES", 0)

    def failing(data: bytes, data_prop: bool = False) -> bytes:
        raise onnxlite._C.shape_inference.InferenceError("[ShapeInferenceError] made up")

    monkeypatch.setattr(onnxlite, "infer_shapes_bytes", failing)
    alone = load_graph(path, jobs=1)
    beside = load_graph(path, jobs=2)
    assert [w.message for w in alone.warnings] == [w.message for w in beside.warnings]
    assert "InferenceError: [ShapeInferenceError] made up" in alone.warnings[0].message


def _spin(seconds: float) -> bytes:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return b""


def test_tally_counts_the_whole_cpu_of_children_reaped_inside():
    with procs.tally() as outer:
        with procs.tally() as inner:
            Forked(_spin, 0.05).result()
        assert inner.cpu >= 0.04  # the child's own CPU, from os.wait4
        assert inner.wait >= 0.04  # result() waited for the child to finish
        after = inner.cpu
        Forked(_spin, 0.0).result()  # reaped after the inner block: not its
    assert inner.cpu == after
    assert outer.cpu >= inner.cpu
    with procs.tally() as none:
        pass
    assert none.cpu == 0.0
