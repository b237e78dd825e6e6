"""Issue 15 items 3, 4, 7: rule features whose cost grows combinatorially are bounded with
a code and a location; `check` findings grow linearly with the number of rules."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

from tests.hostile.helpers import leftovers, run


def chain_model(path, n: int):
    """A chain of ``n`` elementwise ops (what a repeated @elementwise pattern feeds on)."""
    kinds = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp"]
    nodes = [
        helper.make_node(kinds[i % 6], [f"t{i - 1}" if i else "x"], [f"t{i}"], name=f"n{i}")
        for i in range(n)
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
        [helper.make_tensor_value_info(f"t{n - 1}", TensorProto.FLOAT, [1, 1024])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def repeated_rule(tmp_path, n_ops: int, op: str = '"@elementwise"', hi: int = 16):
    ops = "".join(f"    - type: {op}\n      repeat: {{min: 1, max: {hi}}}\n" for _ in range(n_ops))
    p = tmp_path / "rep.yaml"
    p.write_text(f"name: rep\nmatch:\n  ops:\n{ops}rewrite:\n  target_op: R\n")
    return p


@pytest.mark.parametrize(("n_ops", "op"), [(3, '"@elementwise"'), (8, "Relu")])
def test_a_combinatorial_rule_fails_check_strict_with_a_location(tmp_path, n_ops, op):
    """Item 7: 8 ops x repeat 1..16 passed check --strict; item 3: 3 @elementwise ops
    x repeat 1..16 passed lint and then took 54 s and 3 GB on a 200-node chain."""
    rules = repeated_rule(tmp_path, n_ops, op)
    res = run("check", "--strict", "--format", "json", rules)
    assert res.exit_code == 1, res.output
    found = json.loads(res.stdout)["diagnostics"]
    errors = [d for d in found if d["code"] == "AF330"]
    assert len(errors) == 1 and errors[0]["line"] >= 4 and errors[0]["column"] >= 1
    assert "AF331" in {d["code"] for d in found}  # and why: overlapping chained repeats


@pytest.mark.parametrize(("n_ops", "op"), [(3, '"@elementwise"'), (8, "Relu")])
def test_fuse_refuses_it_with_a_code_before_matching(tmp_path, n_ops, op):
    model = chain_model(tmp_path / "chain.onnx", 200)
    rules = repeated_rule(tmp_path, n_ops, op)
    res = run("fuse", model, "--rules", rules, "-o", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert "AF546" in res.stderr and f"{rules}:1:1" in res.stderr
    assert "internal error" not in res.output
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_a_rule_within_the_budget_still_matches(tmp_path):
    model = chain_model(tmp_path / "chain.onnx", 12)
    rules = repeated_rule(tmp_path, 2, "Relu", hi=3)
    res = run("check", "--format", "json", rules)
    assert "AF330" not in res.stdout
    res = run("match", model, "--rules", repeated_rule(tmp_path, 1, '"@elementwise"', 4))
    assert res.exit_code == 0, res.output


def same_priority_rules(tmp_path, n: int):
    docs = [
        f"name: r{i}\nmatch:\n  ops:\n    - type: Conv\n    - type: Relu\nrewrite:\n"
        f"  target_op: A{i}\n"
        for i in range(n)
    ]
    p = tmp_path / f"set{n}.yaml"
    p.write_text("---\n".join(docs))
    return p


def test_check_groups_same_priority_conflicts_linearly(tmp_path):
    """Item 4: 800 same-priority rules gave 319,600 findings (143 MB)."""
    sizes = {}
    for n in (40, 160):
        res = run("check", "--format", "json", same_priority_rules(tmp_path, n))
        found = [d for d in json.loads(res.stdout)["diagnostics"] if d["code"] == "AF302"]
        assert len(found) == 1, len(found)
        assert f"{n} rules match Conv -> Relu" in found[0]["message"]
        assert "and " + str(n - 5) + " more" in found[0]["message"]
        sizes[n] = len(res.stdout)
    assert sizes[160] < 4.5 * sizes[40]  # 4x the rules: about 4x the output, not 16x


def test_two_conflicting_rules_keep_the_pair_message(tmp_path):
    res = run("check", "--format", "json", same_priority_rules(tmp_path, 2))
    (found,) = [d for d in json.loads(res.stdout)["diagnostics"] if d["code"] == "AF302"]
    assert (
        found["message"].startswith("rules 'r0' (")
        and "both match Conv -> Relu" in found["message"]
    )
