"""Lint of constant values in patterns (issue 39) and of params that never hold.

``value``/``value_in``/``tolerance``/``shape`` on a ``source_type: const`` input: the
record they build, and every way to write one that can never hold, found by ``verify``
with its line:col (AF213-AF216, AF1xx for the schema, did-you-mean for a misspelt key).
A param spelt like one the op has is an error in ``verify`` too (AF217); one the op
does not have at all stays a warning (AF303: the seed rules' README says so).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ruleengine.rules import lint_file
from ruleengine.rules.model import ConstValue
from tests.rules.helpers import run_cli, write

pytestmark = pytest.mark.unit

RULE = """name: r
match:
  ops:
    - type: Conv
    - type: {op}
      input_sources:
        input1: {source}
rewrite:
  target_op: R
"""


def _lint(op: str, source: str):
    return lint_file(Path("r.yaml"), "r.yaml", RULE.format(op=op, source=source))


def _found(res) -> list[tuple[str, int, int]]:
    return [(d.code, d.location.line, d.location.column) for d in res.diagnostics]


@pytest.mark.parametrize(
    ("source", "want"),
    [
        ("{source_type: const, value: 3}", ConstValue(value=3)),
        ("{source_type: const, value: 0.5, shape: []}", ConstValue(value=0.5, shape=())),
        ("{source_type: const, value: [1, 2], shape: [2]}", ConstValue(value=(1, 2), shape=(2,))),
        ("{source_type: const, value_in: [3, 6]}", ConstValue(value_in=(3, 6))),
        ("{source_type: const, shape: scalar}", ConstValue(shape="scalar")),
        (
            "{source_type: const, value: 0.7071, tolerance: {rel: 0.001, abs: 0.0001}}",
            ConstValue(value=0.7071, rel=0.001, abs=0.0001),
        ),
    ],
)
def test_value_checks_build_their_record(source: str, want: ConstValue) -> None:
    res = _lint("Add", source)
    assert res.diagnostics == ()
    src = res.rules[0].ops[1].input_sources[0]
    got = src.value
    assert got is not None and got.location is not None and got.location.line == 7
    assert (got.value, got.value_in, got.shape, got.rel, got.abs) == (
        want.value,
        want.value_in,
        want.shape,
        want.rel,
        want.abs,
    )
    assert src.source_type == "const"


@pytest.mark.parametrize(
    ("op", "source", "found", "words"),
    [
        # a value on an input that is no constant
        ("Add", "{source_type: const_or_param, value: 3}", ("AF213", 7, 47), "const_or_param"),
        ("Add", "{source_type: any, value_in: [3]}", ("AF213", 7, 36), "source_type: const"),
        ("Add", "{from_op: 0, value: 3}", ("AF213", 7, 30), "op 0's output"),
        ("Add", "{same_as: {op: 0, input: 0}, shape: [1]}", ("AF213", 7, 46), "same_as"),
        # a value the input cannot hold
        ("Reshape", "{source_type: const, value: [1.5, 2]}", ("AF214", 7, 38), "integer"),
        ("Slice", "{source_type: const, value_in: [0.5]}", ("AF214", 7, 38), "integer"),
        # contradictions
        ("Add", "{source_type: const, tolerance: {rel: 0.1}}", ("AF215", 7, 38), "tolerance"),
        ("Add", "{source_type: const, value: 1, value_in: [1]}", ("AF215", 7, 48), "not both"),
        ("Add", "{source_type: const, value: [1, 2], shape: [3]}", ("AF215", 7, 38), "holds 3"),
        ("Add", "{source_type: const, value: [1, 2], shape: scalar}", ("AF215", 7, 38), "holds 1"),
        # a value check on a tensor too big to be read
        ("Mul", "{source_type: const, shape: [8, 9], value: 1}", ("AF216", 7, 53), "72 elements"),
        # the schema, with did-you-mean
        ("Add", "{source_type: const, valeu: 3}", ("AF102", 7, 38), "did you mean 'value'"),
        ("Add", "{source_type: const, value: three}", ("AF103", 7, 45), ""),
        (
            "Add",
            "{source_type: const, value: 1, tolerance: {relative: 1}}",
            ("AF102", 7, 60),
            "rel",
        ),
        ("Add", "{source_type: const, value_in: []}", ("AF104", 7, 48), ""),
    ],
)
def test_value_checks_that_never_hold_are_errors(
    op: str, source: str, found: tuple, words: str
) -> None:
    res = _lint(op, source)
    assert _found(res) == [found], [str(d) for d in res.diagnostics]
    d = res.diagnostics[0]
    assert d.severity == "error" and res.rules == ()
    assert words in d.message + (d.hint or "")


def test_values_the_input_can_hold_pass() -> None:
    # an integer value on an integer input, a fraction on a float input, a shape alone
    assert _lint("Reshape", "{source_type: const, value: [1, -1]}").diagnostics == ()
    assert _lint("Clip", "{source_type: const, value: 0.5}").diagnostics == ()
    assert _lint("Mul", "{source_type: const, shape: [64, 64]}").diagnostics == ()


def test_verify_and_check_report_value_errors_with_their_location(tmp_path: Path) -> None:
    f = write(tmp_path, "r.yaml", RULE.format(op="Add", source="{source_type: any, value: 3}"))
    for command in ("verify", "check"):
        res = run_cli(command, f)
        assert res.exit_code == 1
        assert "r.yaml:7:36: error AF213 value-not-const" in res.stdout


def test_an_unknown_param_is_an_error_in_verify_with_did_you_mean(tmp_path: Path) -> None:
    text = RULE.format(op="Clip", source="{source_type: const}").replace(
        "    - type: Clip\n", "    - type: Clip\n      params: {mni: 0}\n"
    )
    f = write(tmp_path, "r.yaml", text)
    res = run_cli("verify", f)
    assert res.exit_code == 1
    assert "r.yaml:6:16: error AF217 misspelt-param: Clip has no parameter 'mni'" in res.stdout
    assert "did you mean 'min'?" in res.stdout
    assert run_cli("check", f).exit_code == 1  # not only with --strict
    # a document with another error still names the param
    broken = write(tmp_path, "b.yaml", text.replace("target_op: R", "target_op: 1"))
    out = run_cli("verify", broken).stdout
    assert "AF217" in out and "AF103" in out


def test_a_rule_with_a_misspelt_param_is_never_run_or_counted(tmp_path: Path) -> None:
    """fuse, explain and match refuse the rule file with a misspelt param (exit 2, the
    finding on stderr): the rule can never match, so it is never counted as matched
    (issue 39: a misspelt param was "matched 24 times")."""
    import onnx

    from tests.match.helpers import const, model, node

    m = model(
        [node("Conv", ["x", "w"], ["c"]), node("Add", ["c", "b"], ["y"])],
        {"x": [1, 1, 4, 4]},
        {"y": [1, 1, 4, 4]},
        [const("w", [[[[1.0]]]]), const("b", 3.0)],
    )
    onnx.save(m, tmp_path / "m.onnx")
    text = RULE.format(op="Add", source="{source_type: const, value: 3}")
    good = write(tmp_path, "good.yaml", text)
    bad = write(
        tmp_path,
        "bad.yaml",
        text.replace("- type: Conv\n", "- type: Conv\n      params: {grop: 1}\n"),
    )
    res = run_cli("match", tmp_path / "m.onnx", "--rules", good)
    assert res.exit_code == 0 and "1 candidate(s)" in res.stdout
    for command in ("match", "explain", "fuse"):
        extra = ["-o", tmp_path / "out"] if command == "fuse" else []
        res = run_cli(command, tmp_path / "m.onnx", "--rules", bad, *extra)
        assert res.exit_code == 2, (command, res.stdout, res.stderr)
        assert "AF217" in res.stderr and "did you mean 'group'?" in res.stderr
        assert "matched" not in res.stdout
    assert not (tmp_path / "out" / "plan.json").exists()


def test_a_param_onnx_removed_later_is_warned_with_the_input_that_replaced_it(
    tmp_path: Path,
) -> None:
    from ruleengine.rules import lint_paths

    text = (
        "name: r\nmatch:\n  ops:\n    - type: MatMul\n    - type: Squeeze\n"
        "      params: {axes: [0]}\n    - type: Clip\n      params: {min: 0, max: 6}\n"
        "rewrite:\n  target_op: R\n"
    )
    f = write(tmp_path, "r.yaml", text)
    res = lint_paths([f], set_checks=True)
    # Squeeze's axes became input 1 at opset 13; Clip's min/max are mapped by the alias
    # (an attribute before opset 11, an input after), so they are not reported
    assert [(d.code, d.location.line, d.location.column) for d in res.diagnostics] == [
        ("AF308", 6, 16)
    ]
    d = res.diagnostics[0]
    assert d.severity == "warning" and "before opset 13" in d.message
    assert "input1: {source_type: const, value: ...}" in d.hint
    assert run_cli("check", f).exit_code == 0 and run_cli("check", "--strict", f).exit_code == 1
    assert run_cli("verify", f).exit_code == 0  # a model of an old opset may still match


def test_a_param_the_op_lacks_warns_and_is_never_counted_as_matched(tmp_path: Path) -> None:
    """No param of the op is spelt like it: a warning (the seed rules' README keeps
    `verify` at exit 0 for Relu's `clip_max`), the rule loads, and fuse counts it as
    matched 0 times, its structural matches being near misses only."""
    import json

    import onnx

    from tests.match.helpers import const, model, node

    m = model(
        [node("Conv", ["x", "w"], ["c"]), node("Relu", ["c"], ["y"])],
        {"x": [1, 1, 4, 4]},
        {"y": [1, 1, 4, 4]},
        [const("w", [[[[1.0]]]])],
    )
    onnx.save(m, tmp_path / "m.onnx")
    text = (
        "name: r\nmatch:\n  ops:\n    - type: Conv\n    - type: Relu\n"
        "      params: {clip_max: 6}\nrewrite:\n  target_op: ConvRelu\n"
    )
    f = write(tmp_path, "r.yaml", text)
    assert run_cli("verify", f).exit_code == 0
    assert run_cli("check", "--strict", f).exit_code == 1
    res = run_cli("fuse", tmp_path / "m.onnx", "--rules", f, "-o", tmp_path / "out")
    assert res.exit_code == 0, res.stderr
    assert "AF303" in res.stderr
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert [r["matched"] for r in plan["rules"] if r["rule"] == "r"] == [0]
