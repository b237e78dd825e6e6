"""Issue 15 item 11: inputs that exist but are not what they seem get their own code and
place; malformed rule files are located at their real line:col; models with duplicate
node names or unusual file names are handled."""

from __future__ import annotations

import json
import os

import onnx
import pytest
from onnx import TensorProto, helper

from tests.hostile.helpers import copy_model, leftovers, run


def test_a_missing_model_is_af540(tmp_path):
    for cmd in (["fuse"], ["match"], ["explain"]):
        res = run(
            *cmd, tmp_path / "none.onnx", *(["-o", tmp_path / "o"] if cmd == ["fuse"] else [])
        )
        assert res.exit_code == 2 and "AF540" in res.stderr, res.output


@pytest.mark.parametrize("kind", ["directory", "fifo", "device"])
def test_a_model_that_exists_but_is_no_file_is_af541(tmp_path, kind):
    """/dev/zero, a directory or a FIFO were all reported as "not found"."""
    if kind == "directory":
        path = tmp_path / "m.onnx"
        path.mkdir()
    elif kind == "fifo":
        path = tmp_path / "m.onnx"
        os.mkfifo(path)
    else:
        path = "/dev/zero"
    for cmd in ("fuse", "match"):
        res = run(cmd, path, *(["-o", tmp_path / "o"] if cmd == "fuse" else []))
        assert res.exit_code == 2, res.output
        assert "AF541" in res.stderr and "not found" not in res.stderr
    res = run("fuse", copy_model(tmp_path), "--verify", "--inputs", path, "-o", tmp_path / "o")
    assert res.exit_code == 2 and "AF541" in res.stderr


def test_a_valid_model_named_json_loads(tmp_path):
    model = copy_model(tmp_path).rename(tmp_path / "model.json")
    res = run("fuse", model, "-o", tmp_path / "out", "--verify")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out" / "model.fused.onnx").is_file()


def test_short_external_data_is_af542_and_writes_nothing(tmp_path):
    src = onnx.load(str(copy_model(tmp_path)))
    model = tmp_path / "ext.onnx"
    onnx.save_model(src, str(model), save_as_external_data=True, location="w.bin", size_threshold=0)
    os.truncate(tmp_path / "w.bin", 100)  # (a missing file is only a warning, AF520)
    res = run("fuse", model, "-o", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert "AF542" in res.stderr and "internal error" not in res.output
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def _two_relus(name_a: str, name_b: str, out_a: str = "h", out_b: str = "y"):
    nodes = [
        helper.make_node("Relu", ["x"], [out_a], name=name_a),
        helper.make_node("Sigmoid", [out_a], [out_b], name=name_b),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info(out_b, TensorProto.FLOAT, [4, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_duplicate_node_names_are_never_fused_under_made_up_names(tmp_path):
    model = tmp_path / "dup.onnx"
    onnx.save(_two_relus("same", "same"), str(model))
    rules = tmp_path / "r.yaml"
    rules.write_text(
        "name: rs\nmatch:\n  ops:\n    - type: Relu\n    - type: Sigmoid\nrewrite:\n"
        "  target_op: RS\n"
    )
    res = run("fuse", model, "--rules", rules, "-o", tmp_path / "out")
    assert res.exit_code == 0, res.output
    assert "AF505" in res.stderr and "none of them is fused" in res.stderr
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert plan["groups"] == []
    assert "same__2" not in (tmp_path / "out" / "plan.json").read_text()
    # the same model with unique names fuses: the rule itself is fine
    onnx.save(_two_relus("a", "b"), str(model))
    res = run("fuse", model, "--rules", rules, "-o", tmp_path / "out2")
    assert json.loads((tmp_path / "out2" / "plan.json").read_text())["groups"]


def test_two_producers_message_quotes_both_node_names(tmp_path):
    """AF503 left a node name starting with 'a' unquoted (taken for 'an initializer')."""
    m = _two_relus("add_1", "act_2", out_a="y", out_b="y")
    model = tmp_path / "two.onnx"
    onnx.save(m, str(model))
    res = run("match", model)
    assert res.exit_code == 2 and "AF503" in res.stderr
    assert "produced by node 'act_2' and also by node 'add_1'" in res.stderr


@pytest.mark.parametrize(
    ("content", "code", "line", "col"),
    [
        (b"name: a\nmatch:\n  ops: x\x00\n", "AF002", 3, 9),
        (b"name: a\n" + b"#" * (1 << 20) + b"\n", "AF003", 1, 1),
        (b"name: a\npriority: " + b"9" * 5000 + b"\n", "AF004", 2, 11),
        (b"name: a\nmatch:\n  ops: " + b"[" * 100 + b"]" * 100 + b"\n", "AF006", 3, 71),
        (
            b"name: a\nmatch:\n  ops:\n" + b"".join(b" " * (i + 2) + b"- \n" for i in range(1200)),
            "AF006",
            66,
            65,
        ),
    ],
)
def test_whole_file_and_nesting_errors_have_a_real_line_col(tmp_path, content, code, line, col):
    p = tmp_path / "r.yaml"
    p.write_bytes(content)
    res = run("verify", "--format", "json", p)
    assert res.exit_code == 1, res.output
    (d,) = json.loads(res.stdout)["diagnostics"]
    assert (d["code"], d["line"], d["column"]) == (code, line, col)
