"""One test per row of ../shared/seed-rules/README.md (the compatibility suite)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ruleengine.errors import RuleLoadError
from ruleengine.rules import lint_paths, load_rule_set
from tests.rules.helpers import SEED, TEST_KERNELS, run_cli


def _codes(result) -> list[str]:
    return [d.code for d in result.diagnostics]


def test_conv_add_silu_full_rule_verifies_and_checks_strict_clean():
    f = SEED / "conv_add_silu_fusion.yaml"
    assert run_cli("verify", f).exit_code == 0
    res = run_cli("check", "--strict", "--kernels", TEST_KERNELS, f)
    assert res.exit_code == 0, res.stdout
    rule = load_rule_set([f]).rules[0]
    assert rule.name == "Conv_Add_SiLU_Fusion"
    assert [op.type for op in rule.ops] == ["Conv2d", "Add", "Swish"]
    assert rule.ops[0].params == {"activation_type": "none", "groups": 1}
    assert rule.ops[1].input_sources[1].source_type == "const_or_param"
    assert rule.ops[2].input_sources[0].from_op == 1
    assert rule.subgraph.input_count_range == (1, 2)
    assert [c.type for c in rule.constraints] == [
        "dtype_match",
        "shape_constraint",
        "memory_limit",
        "workspace_size",
        "channel_divisibility",
    ]
    assert rule.output.kernel_name == "conv_add_silu_fusion"
    assert rule.rewrite.attributes["chunk_size"] == (1, 512, 56, 56)


def test_conv_add_swish_branches_has_three_alternatives():
    f = SEED / "conv_add_swish_branches.yaml"
    assert run_cli("verify", f).exit_code == 0
    assert run_cli("check", "--strict", "--kernels", TEST_KERNELS, f).exit_code == 0
    rule = load_rule_set([f]).rules[0]
    assert [[op.type for op in alt.ops] for alt in rule.alternatives] == [
        ["Conv2d", "Add", "Swish"],
        ["Conv2d", "BiasAdd", "Relu"],
        ["Conv2d", "Add", "Relu"],
    ]
    assert rule.alternatives[1].ops[1].input_sources is None  # a plain chain


def test_conv_bn_relu_epsilon_is_a_number_and_clip_max_is_warned():
    f = SEED / "conv_bn_relu_fusion.yaml"
    assert run_cli("verify", f).exit_code == 0
    rule = load_rule_set([f]).rules[0]
    eps = rule.ops[1].params["epsilon"]
    assert isinstance(eps, float) and abs(eps - 0.00001) < 1e-12
    res = lint_paths([f], set_checks=True)
    assert _codes(res) == ["AF303"]
    d = res.diagnostics[0]
    assert (d.location.line, d.location.column) == (13, 9)
    assert "clip_max" in d.message and "Relu" in d.message
    assert run_cli("check", f).exit_code == 0
    assert run_cli("check", "--strict", f).exit_code == 1


def test_matmul_reshape_warns_no_hbm_saving():
    f = SEED / "matmul_reshape_fusion.yaml"
    assert run_cli("verify", f).exit_code == 0
    res = lint_paths([f], set_checks=True)
    assert _codes(res) == ["AF304"]
    assert "Reshape" in res.diagnostics[0].message
    assert run_cli("check", "--strict", f).exit_code == 1


def test_attention_fusion_three_pasted_rules_are_one_finding():
    """Three rules pasted without `---`: one finding saying so (it was 8 duplicate keys)."""
    f = SEED / "attention_fusion.yaml"
    res = lint_paths([f], set_checks=False)
    (d,) = res.diagnostics
    assert d.code == "AF005" and d.location.line == 13
    assert "3 rules in one YAML document (`name:` at lines 2, 13, 29)" in d.message
    assert d.hint == "add a `---` line before line 13 and line 29"
    assert [r.line for r in d.related] == [2, 29]
    assert res.rules == ()  # never silently keeps the last (or first) rule
    cli = run_cli("verify", f)
    assert cli.exit_code == 1
    assert "attention_fusion.yaml:13:1: error AF005 duplicate-key" in cli.stdout
    with pytest.raises(RuleLoadError):
        load_rule_set([f])


def test_layernorm_dropout_verifies():
    f = SEED / "layernorm_dropout_fusion.yaml"
    assert run_cli("verify", f).exit_code == 0
    rule = load_rule_set([f]).rules[0]
    assert rule.ops[0].params["normalized_shape"] == (512,)


def test_chunked_fragment_names_each_missing_required_field():
    f = SEED / "chunked_rewrite_fragment.yaml"
    res = run_cli("verify", f)
    assert res.exit_code == 1
    for field in ("'name'", "'match'", "'target_op'"):
        assert f"missing required field {field}" in res.stdout
    assert res.stderr == ""


def test_priority_conflict_names_both_rules_and_lines(tmp_path: Path):
    f = SEED / "priority_conflict.yaml"
    res = lint_paths([f], set_checks=True)
    assert _codes(res) == ["AF302"]
    msg = res.diagnostics[0].message
    assert "'MatMulRelu'" in msg and "'MatMulReluOptimized'" in msg
    assert "priority_conflict.yaml:3:1" in msg and "priority_conflict.yaml:12:1" in msg
    assert run_cli("check", f).exit_code == 1
    raised = tmp_path / "raised.yaml"
    raised.write_text(f.read_text().replace("priority: 1\n", "priority: 2\n", 1))
    assert run_cli("check", "--strict", "--kernels", TEST_KERNELS, raised).exit_code == 0
    rules = load_rule_set([raised]).by_name()
    assert rules["MatMulRelu"].priority > rules["MatMulReluOptimized"].priority


def test_fusion_rules_json_converts_to_rules_that_verify(tmp_path: Path):
    src = tmp_path / "fusion_rules.json"
    shutil.copy(SEED / "fusion_rules.json", src)
    out = tmp_path / "out"
    res = run_cli("convert", src, "-o", out)
    assert res.exit_code == 0, res.stderr
    files = sorted(p.name for p in out.iterdir())
    assert files == ["conv_bn_relu.yaml", "matmul_relu.yaml"]
    assert run_cli("verify", *sorted(out.iterdir())).exit_code == 0
    assert run_cli("check", "--strict", "--kernels", TEST_KERNELS, out).exit_code == 0
    rules = load_rule_set([out]).by_name()
    assert [op.type for op in rules["conv_bn_relu"].ops] == ["Conv", "BatchNormalization", "Relu"]
    assert rules["conv_bn_relu"].ops[1].params == {"training_mode": 0}
    assert rules["matmul_relu"].rewrite.target_op == "MatMulReLU"
    assert json.loads((SEED / "fusion_rules.json").read_text())  # source untouched


def _matmul_relu_model(path: Path) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((64, 64), dtype=np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Relu", ["h"], ["y"], name="relu"),
        ],
        "mm_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [128, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [128, 64])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("winner", ["MatMulRelu", "MatMulReluOptimized"])
def test_priority_conflict_higher_priority_wins_at_fuse_time(tmp_path: Path, winner: str):
    from ruleengine.pipeline import analyze

    text = (SEED / "priority_conflict.yaml").read_text()
    first, second = text.split("---\n")
    if winner == "MatMulRelu":
        first = first.replace("priority: 1\n", "priority: 2\n")
    else:
        second = second.replace("priority: 1\n", "priority: 2\n")
    rules = tmp_path / "raised.yaml"
    rules.write_text(first + "---\n" + second)
    model = _matmul_relu_model(tmp_path / "m.onnx")
    analysis = analyze(model, [rules])
    chosen = [s.candidate.rule for s in analysis.resolution.chosen]
    assert chosen == [winner]


def test_matmul_reshape_comes_out_as_no_benefit_at_fuse_time(tmp_path: Path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from ruleengine.cost.model import Verdict
    from ruleengine.pipeline import analyze

    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Reshape", ["h", "shape"], ["y"], name="reshape"),
        ],
        "mm_reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [128, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 128])],
        [
            numpy_helper.from_array(np.ones((64, 64), dtype=np.float32), "w"),
            numpy_helper.from_array(np.array([64, 128], dtype=np.int64), "shape"),
        ],
    )
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    analysis = analyze(model, [SEED / "matmul_reshape_fusion.yaml"])
    assert [s.verdict for s in analysis.scored] == [Verdict.NO_BENEFIT]
    assert analysis.resolution.chosen == ()


@pytest.mark.parametrize(
    ("second", "third"),
    [("Add", "swish"), ("Add", "Relu"), ("BiasAdd", "Relu")],
)
def test_conv_add_swish_branches_match_each_shape(tmp_path: Path, second: str, third: str):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from ruleengine.graph import load_graph
    from ruleengine.match import find_candidates

    inits = [numpy_helper.from_array(np.ones((16, 16, 3, 3), dtype=np.float32), "w")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])]
    if second == "BiasAdd":
        inits.append(numpy_helper.from_array(np.ones((1, 16, 1, 1), dtype=np.float32), "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 16, 6, 6]))
    nodes.append(helper.make_node("Add", ["c", "b"], ["a"], name="add"))
    if third == "swish":
        nodes += [
            helper.make_node("Sigmoid", ["a"], ["s"], name="sig"),
            helper.make_node("Mul", ["a", "s"], ["y"], name="mul"),
        ]
    else:
        nodes.append(helper.make_node("Relu", ["a"], ["y"], name="relu"))
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])],
        inits,
    )
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    rule_set = load_rule_set([SEED / "conv_add_swish_branches.yaml"])
    result = find_candidates(load_graph(model), rule_set)
    matched = {tuple(sorted(c.nodes)) for c in result.candidates}
    assert tuple(sorted(n.name for n in graph.node)) in matched
