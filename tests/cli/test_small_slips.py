"""Regression tests for the smaller slips of issue 39: each says what a new user saw."""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from ruleengine.cli import app
from ruleengine.graph import load_graph
from ruleengine.rewrite.dot import render_dot

RULE = """name: add_relu
match:
  ops:
    - type: Add
    - type: Relu
      input_sources: {input0: {from_op: 0}}
rewrite:
  target_op: AddRelu
"""


def run(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def _model(path: Path, blocks: tuple[int, ...] = (1, 2, 10, 12)) -> Path:
    """Add(x, Constant 3) -> Relu blocks named Add.N / Relu.N / Constant.N."""
    nodes, outputs = [], []
    for i in blocks:
        nodes += [
            helper.make_node(
                "Constant",
                [],
                [f"c{i}"],
                name=f"Constant.{i}",
                value=helper.make_tensor(f"k{i}", TensorProto.FLOAT, [], [3.0]),
            ),
            helper.make_node("Add", ["x", f"c{i}"], [f"a{i}"], name=f"Add.{i}"),
            helper.make_node("Relu", [f"a{i}"], [f"y{i}"], name=f"Relu.{i}"),
        ]
        outputs.append(f"y{i}")
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 8])  # noqa: E731
    graph = helper.make_graph(nodes, "blocks", [vi("x")], [vi(o) for o in outputs])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture
def case(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "add_relu.yaml").write_text(RULE)
    return _model(tmp_path / "m.onnx"), tmp_path / "add_relu.yaml"


def test_af403_points_at_the_misspelt_attribute(tmp_path: Path):
    rule = tmp_path / "a.yaml"
    rule.write_text(
        "name: a\nmatch:\n  ops:\n    - type: MatMul\n    - type: Add\n    - type: Relu\n"
        "rewrite:\n  target_op: MatMulBiasRelu\n  tensor_layout: ND\n  attributes:\n"
        "    activation: relu\n    alhpa: 1.0\n"
    )
    res = run("check", rule)
    assert "AF403" in res.stdout
    assert f"{rule}:12:5: error AF403" in res.stdout  # the line of `alhpa:`, not above


def test_an_error_that_is_one_finding_is_said_once_with_its_code(case, tmp_path: Path):
    model, rule = case
    res = run("match", model, "--rules", rule, "--input-shape", "x:2")
    assert res.exit_code == 2
    said = [ln for ln in res.stderr.splitlines() if "has 1 dim(s)" in ln]
    assert len(said) == 1 and "AF511" in said[0] and said[0].startswith("error: ")
    bad = tmp_path / "kernels"
    bad.mkdir()
    (bad / "Foo.yaml").write_text("kernel: Foo\nversion: 1\ninputs: 3\n")
    res = run("fuse", model, "--rules", rule, "--kernels", bad, "-o", tmp_path / "out")
    assert res.exit_code == 2
    said = [ln for ln in res.stderr.splitlines() if "is not of type 'array'" in ln]
    assert len(said) == 1 and "AF401" in said[0] and "Foo.yaml:3:" in said[0]


def test_match_sorts_node_names_naturally_and_counts_rules_loaded(case):
    model, rule = case
    res = run("match", model, "--rules", rule)
    assert res.exit_code == 0, res.output
    firsts = re.findall(r"Add\.(\d+) -> Relu", res.stdout)
    assert firsts == ["1", "2", "10", "12"]
    assert "4 candidate(s); 1 rule(s) loaded, 1 matched;" in res.stdout
    other = model.parent / "none.yaml"
    other.write_text(RULE.replace("add_relu", "mul_relu").replace("type: Add", "type: Mul"))
    res = run("match", model, "--rules", other)
    assert "0 candidate(s); 1 rule(s) loaded, 0 matched;" in res.stdout


def test_graph_dot_folds_constants_into_their_consumers(case):
    model, _ = case
    text = render_dot(load_graph(model), [])
    assert 'label="Constant' not in text
    assert text.count("const 3") == 4  # each Add's label names its constant
    boxes = re.findall(r"^\s*n\d+ \[label=\"(\w+)", text, re.M)
    assert sorted(boxes) == ["Add"] * 4 + ["Relu"] * 4  # 12 nodes, 8 boxes


@pytest.mark.parametrize("command", ["fuse", "explain", "match", "compare"])
def test_help_shows_rules_with_preset(command):
    res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    examples = res.output.split("Examples:", 1)[1]
    assert re.search(r"--preset \w+ --rules ", examples), f"{command}: no --preset + --rules"


@pytest.mark.parametrize("command", ["explain", "match", "compare"])
def test_kernels_flag_like_fuse_and_check(case, tmp_path: Path, command):
    model, rule = case
    bad = tmp_path / "kernels"
    bad.mkdir()
    (bad / "Foo.yaml").write_text("kernel: Foo\nversion: 1\ninputs: 3\n")
    res = run(command, model, "--rules", rule, "--kernels", bad)
    assert res.exit_code == 2 and "AF401" in res.stderr  # the folder is read, as fuse does
    good = tmp_path / "good"
    good.mkdir()
    res = run(command, model, "--rules", rule, "--kernels", good)
    assert res.exit_code == 0, res.output


def test_match_kernels_lists_candidates_no_form_accepts(case, tmp_path: Path):
    model, rule = case
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "AddRelu.yaml").write_text(
        "kernel: AddRelu\nversion: 1\ninputs:\n- {name: A, bind: {op: Add, input: 0}}\n"
        "- {name: B, bind: {op: Add, input: 1}}\noutputs:\n- {name: Y, bind: {op: Relu, "
        "output: 0}}\nforms:\n- name: add_sigmoid\n  ops: [Add, Sigmoid]\n  function: |\n"
        "    (A, B) => (Y) {\n      s = Add(A, B)\n      Y = Sigmoid(s)\n    }\n"
    )
    res = run("match", model, "--rules", rule, "--kernels", kernels)
    assert res.exit_code == 0, res.output
    assert "4 candidate(s) no form of their kernel accepts" in res.stdout
    assert "no form of AddRelu accepts 2 ops ending in Relu" in res.stdout
    res = run("match", model, "--rules", rule, "--kernels", kernels, "-f", "json")
    rows = json.loads(res.stdout)["candidates"]
    assert [r["nodes"][0] for r in rows] == ["Add.1", "Add.2", "Add.10", "Add.12"]
    assert all("no form of AddRelu" in r["kernel_misfit"] for r in rows)
    plain = json.loads(run("match", model, "--rules", rule, "-f", "json").stdout)
    assert "kernel_misfit" not in plain["candidates"][0]  # without --kernels: as before
