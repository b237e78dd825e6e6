"""Issue 39 follow-ups a newcomer trial found (helper H10's walk-through), each on a small
graph built inline: the link fix names the input that is wrong, an op read on two inputs
is one node, a disconnected op is named as such, explain-rule's output, the unchecked
groups of ``fuse --verify``, explain's lost-conflict heading, one AF505 for many shared
names, and the natural order of report.txt's "Not fused" table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from ruleengine.cli import app
from ruleengine.graph import graph_from_model
from ruleengine.match import find_candidates
from ruleengine.match.whynot import why_not
from ruleengine.match.whynot_text import whynot_line
from ruleengine.rules import load_rule_set


def _model(nodes, consts: dict[str, float], inputs=("x",), outputs=("y",)) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(v, dtype=np.float32), k) for k, v in consts.items()]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(i, TensorProto.FLOAT, [2, 8]) for i in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, 8]) for o in outputs],
        initializer=inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _node(op: str, ins: list[str], out: str, name: str | None = None):
    return helper.make_node(op, ins, [out], name=name or out)


def _rule(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rules" / "rule.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def _match(tmp_path: Path, m: onnx.ModelProto, text: str):
    rule_set = load_rule_set([_rule(tmp_path, text)])
    graph = graph_from_model(m)
    result = find_candidates(graph, rule_set)
    return graph, rule_set, result


def _why(tmp_path: Path, m: onnx.ModelProto, text: str):
    graph, rule_set, result = _match(tmp_path, m, text)
    (w,) = why_not(graph, rule_set, [rule_set.rules[0].name], result=result)
    return w


def _run(*argv: object) -> tuple[int, str]:
    res = CliRunner().invoke(app, [str(a) for a in argv])
    return res.exit_code, res.stdout + res.stderr


# ---------------------------------------------------------------- the link fix


def _hswish() -> onnx.ModelProto:
    """x -> Relu r; a = r + 3; c = clip(a); m = r * c (Mul reads op 0 and op 2)."""
    return _model(
        [
            _node("Relu", ["x"], "r"),
            _node("Add", ["r", "three"], "a"),
            _node("Sigmoid", ["a"], "c"),
            _node("Mul", ["r", "c"], "y"),
        ],
        {"three": 3.0},
    )


def _hswish_rule(mul_input1: int) -> str:
    return (
        "name: hs\nmatch:\n  ops:\n    - type: Relu\n    - type: Add\n"
        "    - type: Sigmoid\n    - type: Mul\n      input_sources:\n"
        f"        input0: {{from_op: 0}}\n        input1: {{from_op: {mul_input1}}}\n"
        "rewrite:\n  target_op: F\n"
    )


def test_the_link_fix_rewires_the_wrong_input_not_the_right_one(tmp_path: Path) -> None:
    """Mul's input1 says op 1 where the model's Mul reads op 2: the fix is input1 from
    op 2 (input0 from op 0 is already right)."""
    w = _why(tmp_path, _hswish(), _hswish_rule(1))
    assert w.op == 3 and w.condition == "link", w
    assert "`input1: {from_op: 2}`" in w.hint and "input0" not in w.hint, w
    assert _why(tmp_path, _hswish(), _hswish_rule(2)).condition == "match"


# ------------------------------------------- one op read on two inputs is one node

TWICE = (
    "name: twice\nmatch:\n  ops:\n    - type: Relu\n    - type: Add\n      input_sources:\n"
    "        input0: {from_op: 0}\n        input1: {from_op: 0}\nrewrite:\n  target_op: F\n"
)


def test_an_add_reading_two_relus_is_not_one_relu_read_twice(tmp_path: Path) -> None:
    """Both inputs name op 0: Add(Relu(x), Relu(z)) has no node read on both."""
    m = _model(
        [_node("Relu", ["x"], "a"), _node("Relu", ["z"], "b"), _node("Add", ["a", "b"], "y")],
        {},
        inputs=("x", "z"),
    )
    _, _, result = _match(tmp_path, m, TWICE)
    assert not result.candidates, [c.nodes for c in result.candidates]
    w = _why(tmp_path, m, TWICE)
    assert w.op == 1 and w.candidates == 0 and w.condition == "link", w
    # not "write input1: {from_op: 0}" (the rule has it): input0 reads the other Relu
    assert "reads op 0 only on input" in w.message, w
    assert "reads a (Relu)" in w.hint or "reads b (Relu)" in w.hint, w


def test_an_add_reading_one_relu_twice_matches(tmp_path: Path) -> None:
    m = _model([_node("Relu", ["x"], "a"), _node("Add", ["a", "a"], "y")], {})
    _, _, result = _match(tmp_path, m, TWICE)
    assert [c.nodes for c in result.candidates] == [("a", "y")]


# ------------------------------------------------------- a disconnected op


def _loose_rule() -> str:
    """Sigmoid (op 2) has no input_sources link and Mul reads op 1 instead of it."""
    return (
        "name: loose\nmatch:\n  ops:\n    - type: Relu\n    - type: Add\n"
        "    - type: Sigmoid\n      input_sources:\n        input0: {source_type: any}\n"
        "    - type: Mul\n      input_sources:\n"
        "        input0: {from_op: 0}\n        input1: {from_op: 1}\n"
        "rewrite:\n  target_op: F\n"
    )


def test_a_disconnected_op_is_named_with_the_link_the_model_has(tmp_path: Path) -> None:
    """Not 'type and input_sources differ': op 2 is not connected to op 0 (AF306), and
    the model's Sigmoid reads op 1, so the fix gives op 2 that from_op."""
    w = _why(tmp_path, _hswish(), _loose_rule())
    assert w.op == 2 and w.condition == "disconnected", w
    assert "not connected to op 0" in w.message and "AF306" in w.message, w
    assert "`input0: {from_op: 1}`" in w.hint, w
    assert w.places and w.places[0].node == "c", w


def test_explain_rule_prints_the_lint_first_and_no_empty_table(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_hswish(), str(model))
    path = _rule(tmp_path, _loose_rule())
    code, out = _run("explain-rule", "loose", "--rules", path.parent, "--model", model)
    assert code == 0, out
    lines = out.splitlines()
    assert "AF306" in lines[0] and "disconnected-pattern" in lines[0], out
    assert out.index("AF306 disconnected-pattern") < out.index("rule loose: 0 candidate(s)")
    # no candidates: no empty table, no "0 facts" summary before the answer
    assert "FIRST -> LAST" not in out and " facts;" not in out, out
    # a rule that matches keeps its table
    path.write_text(_hswish_rule(2).replace("name: hs", "name: loose"))
    code, out = _run("explain-rule", "loose", "--rules", path.parent, "--model", model)
    assert code == 0 and "FIRST -> LAST" in out and "AF306" not in out, out


# ------------------------------------------------- a const-value reason, once


def test_a_const_value_reason_is_said_once(tmp_path: Path) -> None:
    text = (
        "name: plus\nmatch:\n  ops:\n    - type: Relu\n    - type: Add\n      input_sources:\n"
        "        input0: {from_op: 0}\n        input1: {source_type: const, value: 2}\n"
        "rewrite:\n  target_op: F\n"
    )
    m = _model([_node("Relu", ["x"], "r"), _node("Add", ["r", "three"], "y")], {"three": 3.0})
    w = _why(tmp_path, m, text)
    assert w.condition == "const-value", w
    line = whynot_line(w)
    assert line.count("the rule asks for 2") == 1, line
    assert line.count("op 1 (Add)") == 1, line


# ------------------------------------------- fuse --verify: groups not checked

RELU_ADD = (
    "name: relu_add\nmatch:\n  ops:\n    - type: Relu\n    - type: Add\n"
    "rewrite:\n  target_op: NoSuchKernelOp\n"
)


def test_verify_says_which_groups_it_did_not_check(tmp_path: Path) -> None:
    """A target with no kernel entry: its function is its own subgraph, so PASSED says
    nothing about it; the report and report.json say so."""
    model = tmp_path / "m.onnx"
    onnx.save(_model([_node("Relu", ["x"], "r"), _node("Add", ["r", "x"], "y")], {}), str(model))
    rules = _rule(tmp_path, RELU_ADD)
    out_dir = tmp_path / "out"
    code, out = _run("fuse", model, "--rules", rules, "--verify", "--no-html", "-o", out_dir)
    assert code == 0, out
    said = "1 group(s) not checked: no kernel entry (their function is their own subgraph)"
    assert said in out, out
    assert out.index("PASSED") < out.index(said), out
    assert said in (out_dir / "report.txt").read_text()
    report = json.loads((out_dir / "report.json").read_text())
    assert report["verification"]["not_checked"] == [
        {"groups": 1, "reason": "no kernel entry (their function is their own subgraph)"}
    ]
    # without --verify nothing is said about checking
    code, out = _run("fuse", model, "--rules", rules, "--no-html", "-o", tmp_path / "o2")
    assert code == 0 and "not checked" not in out, out


# ------------------------------------------ explain: a loser of a hidden winner


def test_a_loser_whose_winner_is_filtered_out_is_not_called_a_cycle(tmp_path: Path) -> None:
    """explain --rule short: the short chain lost to the long one (another rule, not
    shown): it is listed as lost to that group, not as 'would close a cycle'."""
    model = tmp_path / "m.onnx"
    onnx.save(
        _model([_node("Relu", ["x"], "r"), _node("Abs", ["r"], "a"), _node("Neg", ["a"], "y")], {}),
        str(model),
    )
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "long.yaml").write_text(
        "name: long\nmatch:\n  ops:\n    - type: Relu\n    - type: Abs\n    - type: Neg\n"
        "rewrite:\n  target_op: L\n"
    )
    (folder / "short.yaml").write_text(
        "name: short\nmatch:\n  ops:\n    - type: Relu\n    - type: Abs\nrewrite:\n  target_op: S\n"
    )
    code, out = _run("explain", model, "--rules", folder, "--rule", "short")
    assert code == 0, out
    assert "would close a cycle" not in out, out
    assert "Lost to groups not listed here" in out and "-> #1 long" in out, out
    code, out = _run("explain", model, "--rules", folder, "-f", "json", "--rule", "short")
    (short,) = json.loads(out)["candidates"]
    assert short["lost_to"]["rule"] == "long", short


# ----------------------------------------------------------- AF505, once


def test_many_nodes_sharing_a_name_give_one_finding() -> None:
    nodes = [_node("Relu", ["x"], "a", "n")]
    nodes += [_node("Relu", [f"{p}"], f"{q}", "n") for p, q in (("a", "b"), ("b", "c"))]
    nodes += [_node("Neg", ["c"], "d", "m"), _node("Abs", ["d"], "y", "m")]
    g = graph_from_model(_model(nodes, {}))
    found = [d for d in g.warnings if d.code == "AF505"]
    assert len(found) == 1, [d.message for d in found]
    msg = found[0].message
    assert "2 node names are shared (5 nodes)" in msg, msg
    assert "'n' is used by 3 nodes" in msg and "'n__2' .. 'n__3'" in msg, msg
    assert "'m' is used by 2 nodes (the later one is 'm__2'" in msg, msg


# ------------------------------------------- report.txt: natural node order


def test_not_fused_lists_node_names_in_natural_order(tmp_path: Path) -> None:
    """r.9 before r.10 (as text, r.10 sorts first)."""
    nodes = []
    outs = []
    for k in (10, 9, 2):
        nodes += [_node("Relu", ["x"], f"t{k}", f"r.{k}"), _node("Abs", [f"t{k}"], f"o{k}")]
        outs += [f"t{k}", f"o{k}"]  # the Relu's output escapes: intermediate_escapes
    model = tmp_path / "m.onnx"
    onnx.save(_model(nodes, {}, outputs=tuple(outs)), str(model))
    rules = _rule(
        tmp_path,
        "name: ra\nmatch:\n  ops:\n    - type: Relu\n    - type: Abs\nrewrite:\n  target_op: F\n",
    )
    out_dir = tmp_path / "out"
    code, out = _run("fuse", model, "--rules", rules, "--no-html", "-o", out_dir)
    assert code == 0, out
    for text in (out, (out_dir / "report.txt").read_text()):
        table = text[text.index("Not fused") :]
        at = [table.index(f"r.{k}, o{k}") for k in (2, 9, 10)]
        assert at == sorted(at), table
