"""Rules become frozen records; semantics checks; load_rule_set and presets."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ruleengine.errors import RuleLoadError, UsageError
from ruleengine.rules import lint_file, load_rule_set, preset_names, preset_paths
from tests.rules.helpers import MINIMAL, SEED


def _lint(text: str):
    return lint_file(Path("r.yaml"), "r.yaml", text)


def test_records_are_frozen_and_hashable():
    rule = load_rule_set([SEED / "conv_add_silu_fusion.yaml"]).rules[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.name = "x"  # type: ignore[misc]
    hash(rule)
    assert rule.location.line == 2
    assert rule.ops[0].param_locations["groups"].line == 13
    assert rule.version == "1.0" and rule.scope == ("ai_core",)
    dtype = rule.constraints[0]
    assert dtype.fields["allowed_dtypes"] == ("float16", "float32")
    assert rule.rewrite.inputs[1].input_port == 1


def test_defaults():
    rule = _lint(MINIMAL).rules[0]
    assert rule.priority == 0 and rule.enabled and rule.benefit_threshold == 0.0
    assert rule.ops[0].input_sources is None
    assert rule.ops[0].repeat_min == rule.ops[0].repeat_max == 1
    assert rule.subgraph.allow_intermediate_outputs is False
    assert rule.alternatives[0].ops == rule.ops


def test_repeat_and_branches_only():
    text = (
        "name: r\nmatch:\n  branches:\n    - ops:\n        - type: '@elementwise'\n"
        "          repeat: {min: 2, max: 4}\nrewrite:\n  target_op: R\n"
    )
    res = _lint(text)
    assert res.diagnostics == ()
    op = res.rules[0].ops[0]
    assert (op.repeat_min, op.repeat_max) == (2, 4)


def test_numeric_version_normalised():
    assert _lint(MINIMAL + "version: 1.0\n").rules[0].version == "1.0"
    res = _lint(MINIMAL + "version: '2.0'\n")
    assert [d.code for d in res.diagnostics] == ["AF104"]


def test_unknown_field_suggests_the_close_one():
    res = _lint(MINIMAL.replace("target_op: R", "target_op: R\n  atributes: {}"))
    d = res.diagnostics[0]
    assert d.code == "AF102" and "'attributes'" in d.hint and d.location.line == 7


def test_unknown_op_type_suggests_case_fix():
    d = _lint(MINIMAL.replace("Relu", "relu")).diagnostics[0]
    assert d.code == "AF201" and "'Relu'" in d.hint


def test_constraint_fields_checked_by_type():
    base = MINIMAL + "constraints:\n"
    bad_field = _lint(base + "  - type: memory_limit\n    max_workspace: 1\n")
    assert [d.code for d in bad_field.diagnostics] == ["AF102"]
    missing = _lint(base + "  - type: channel_divisibility\n    divisor: 16\n")
    assert [d.code for d in missing.diagnostics] == ["AF101"]
    assert "'channel_dim'" in missing.diagnostics[0].message
    ok = _lint(
        base + "  - type: shape_constraint\n    broadcast: true\n    rank: [3, 4]\n"
        "  - type: single_consumer\n  - type: ub_fit\n    description: fits\n"
    )
    assert ok.diagnostics == ()


def test_source_needs_exactly_one_kind():
    text = MINIMAL.replace(
        "- type: Relu",
        "- type: Conv\n    - type: Add\n      input_sources:\n        input0: {}\n"
        "        input1: {from_op: 0, source_type: const}",
    )
    res = _lint(text)
    assert [d.code for d in res.diagnostics] == ["AF207", "AF207"]


def test_rewrite_ports_must_be_distinct():
    text = (
        MINIMAL.replace("- type: Relu", "- type: Conv\n    - type: Relu")
        + "  inputs:\n    - {from_op: 0, input_port: 0}\n    - {from_op: 1, input_port: 0}\n"
    )
    res = _lint(text)
    assert [d.code for d in res.diagnostics] == ["AF203"]


def test_input_count_range_inverted():
    text = MINIMAL.replace("rewrite:", "  subgraph:\n    input_count_range: [3, 1]\nrewrite:")
    assert [d.code for d in _lint(text).diagnostics] == ["AF204"]


@pytest.mark.parametrize("path", ["/abs/x", "../x", "a/../../x", "~/x", "C:\\x"])
def test_unsafe_output_paths(path: str):
    res = _lint(MINIMAL + f"output:\n  file_path: '{path}'\n")
    assert [d.code for d in res.diagnostics] == ["AF208"]


@pytest.mark.parametrize("path", ["./output/kernels/", "a/../b", "k"])
def test_safe_output_paths(path: str):
    assert _lint(MINIMAL + f"output:\n  file_path: '{path}'\n").diagnostics == ()


def test_load_rule_set_raises_with_all_errors(tmp_path: Path):
    (tmp_path / "a.yaml").write_text(MINIMAL.replace("Relu", "Nope"))
    (tmp_path / "b.yaml").write_text("name: b\n")
    with pytest.raises(RuleLoadError) as exc:
        load_rule_set([tmp_path])
    codes = sorted(d.code for d in exc.value.diagnostics)
    assert codes == ["AF101", "AF101", "AF201"]


def test_load_rule_set_duplicate_names_across_files(tmp_path: Path):
    (tmp_path / "a.yaml").write_text(MINIMAL)
    (tmp_path / "b.yaml").write_text(MINIMAL.replace("Relu", "Elu"))
    with pytest.raises(RuleLoadError) as exc:
        load_rule_set([tmp_path])
    assert [d.code for d in exc.value.diagnostics] == ["AF301"]


def test_load_rule_set_sorted_and_keeps_warnings(tmp_path: Path):
    (tmp_path / "z.yaml").write_text(MINIMAL.replace("name: r", "name: a") + "enabled: yes\n")
    (tmp_path / "y.yaml").write_text(MINIMAL.replace("name: r", "name: b").replace("Relu", "Elu"))
    rs = load_rule_set([tmp_path, tmp_path / "z.yaml"])  # the same file twice is read once
    assert [r.name for r in rs.rules] == ["a", "b"]
    assert [d.code for d in rs.diagnostics] == ["AF010"]
    assert len(rs.files) == 2


def test_load_rule_set_missing_path():
    with pytest.raises(UsageError):
        load_rule_set(["/nonexistent/rules"])


def test_presets():
    names = preset_names()
    assert names[-1] == "all"
    assert len(preset_paths("all")) == len(names) - 1
    for name in names[:-1]:
        assert preset_paths(name)[0].name == name
    with pytest.raises(UsageError):
        preset_paths("nope")
    load_rule_set([], preset="all")  # the bundled library loads (possibly empty)


def test_docs_examples_pass_check_strict(tmp_path: Path):
    """Every ```yaml block of docs/rules.md that is a rule passes `check --strict`."""
    import re

    from ruleengine.rules import lint_paths

    docs = Path(__file__).resolve().parents[2] / "docs" / "rules.md"
    blocks = re.findall(r"```yaml\n(.*?)```", docs.read_text(encoding="utf-8"), re.S)
    rules = [b for b in blocks if re.search(r"^name:", b, re.M)]
    assert len(rules) >= 2
    for i, text in enumerate(rules):
        f = tmp_path / f"doc{i}.yaml"
        f.write_text(text, encoding="utf-8")
        res = lint_paths([f], set_checks=True)
        assert res.diagnostics == () and len(res.rules) == 1, res.diagnostics


@pytest.mark.parametrize(
    ("op", "inputs"),
    [("Relu", "min_inputs: 2"), ("Add", "max_inputs: 1"), ("Conv2d", "min_inputs: 4")],
)
def test_impossible_input_counts_never_match(op: str, inputs: str, tmp_path: Path):
    from ruleengine.rules import lint_paths

    f = tmp_path / "never.yaml"
    f.write_text(MINIMAL.replace("- type: Relu", f"- type: {op}\n      inputs: {{{inputs}}}"))
    res = lint_paths([f], set_checks=True)
    assert [d.code for d in res.diagnostics] == ["AF305"]


def test_schema_errors_do_not_hide_semantic_findings():
    text = (
        "name: r\npriority: high\nmatch:\n  ops:\n    - type: conv2d\n    - type: Relu\n"
        "      input_sources:\n        input0: {from_op: 3}\n        in1: {source_type: const}\n"
        "rewrite:\n  target_op: R\n"
    )
    res = _lint(text)
    assert [(d.code, d.location.line) for d in res.diagnostics] == [
        ("AF103", 2),
        ("AF201", 5),
        ("AF202", 8),
        ("AF104", 9),
    ]
    assert res.rules == ()


def test_conflicts_compare_params_after_alias_resolution(tmp_path: Path):
    from ruleengine.rules import lint_paths

    def rule(name: str, op: str, params: str) -> str:
        return (
            f"name: {name}\npriority: 5\nmatch:\n  ops:\n    - type: {op}\n"
            f"      params: {{{params}}}\n    - type: Relu\nrewrite:\n  target_op: {name}\n"
        )

    disjoint = tmp_path / "disjoint.yaml"
    disjoint.write_text(rule("a", "Conv2d", "groups: 1") + "---\n" + rule("b", "Conv", "group: 2"))
    assert lint_paths([disjoint], set_checks=True).diagnostics == ()
    same = tmp_path / "same.yaml"
    same.write_text(rule("a", "Conv2d", "groups: 1") + "---\n" + rule("b", "Conv", "group: 1.0"))
    assert [d.code for d in lint_paths([same], set_checks=True).diagnostics] == ["AF302"]


@pytest.mark.parametrize(
    ("op", "params", "bad"),
    [
        ("Conv2d", "kernel_size: 3", True),  # kernel_shape is a list
        ("Conv2d", "kernel_size: [3, 3]", False),
        ("Conv", "group: one", True),
        ("Softmax", "axis: '-1'", False),  # a numeric string compares by meaning
        ("LeakyRelu", "alpha: [0.1]", True),
        ("Gelu", "approximate: tanh", False),
        ("BatchNorm", "eps: 1e-5", False),
    ],
)
def test_param_value_kinds(op: str, params: str, bad: bool, tmp_path: Path):
    from ruleengine.rules import lint_paths

    f = tmp_path / "kinds.yaml"
    f.write_text(MINIMAL.replace("- type: Relu", f"- type: {op}\n      params: {{{params}}}"))
    codes = [d.code for d in lint_paths([f], set_checks=True).diagnostics]
    assert codes == (["AF305"] if bad else [])


def test_output_idx_must_exist():
    two = MINIMAL.replace("- type: Relu", "- type: Conv\n    - type: Relu")
    ok = two.replace("target_op: R", "target_op: R\n  inputs: [{from_op: 0, output_idx: 0}]")
    assert _lint(ok).diagnostics == ()
    bad = two.replace("target_op: R", "target_op: R\n  inputs: [{from_op: 0, output_idx: 1}]")
    d = _lint(bad).diagnostics
    assert [x.code for x in d] == ["AF203"] and "has 1 output" in d[0].message
    src = two.replace(
        "    - type: Relu",
        "    - type: Relu\n      input_sources: {input0: {from_op: 0, output_idx: 3}}",
    )
    assert [x.code for x in _lint(src).diagnostics] == ["AF202"]
    split = MINIMAL.replace("- type: Relu", "- type: Split\n    - type: Relu").replace(
        "target_op: R", "target_op: R\n  inputs: [{from_op: 0, output_idx: 5}]"
    )
    assert _lint(split).diagnostics == ()  # Split has variadic outputs
