"""Issue 39's newcomer walk-through, kept: two rules written from the docs alone for two
real third-party models (examples/newcomer/), each made wrong first the way a newcomer
gets it wrong, the message naming the failing pattern op (``op N``) and a fix; then the
rules' own tests and ``fuse --verify`` with their kernels, as a user runs them.

- ``bias_hard_swish``: PP-OCRv4 det's hard-swish, ``x * clip(x + 3, 0, 6) / 6`` after a
  conv bias, constants checked with ``value:`` (docs/debugging-rules.md's walk-through).
- ``complex_magnitude``: Silero VAD's STFT magnitude, ``sqrt(re^2 + im^2)`` with the squares
  written as ``Pow(x, 2)``, one alternative with each half cast first (OpenVINO export).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ruleengine.cli import app

ROOT = Path(__file__).resolve().parents[2]
NEWCOMER = ROOT / "examples" / "newcomer"
RULES = NEWCOMER / "rules"
KERNELS = NEWCOMER / "kernels"
REAL = ROOT / ".." / "shared" / "models" / "real"
PPOCR = [str(REAL / "ppocrv4-det.onnx"), "--input-shape", "x:1,3,640,640"]
SILERO = [str(REAL / "silero-vad-openvino-16k.onnx")]


def _run(*argv: str) -> tuple[int, str]:
    """The CLI in-process; exit code and stdout + stderr."""
    res = CliRunner().invoke(app, list(argv))
    return res.exit_code, res.stdout + res.stderr


def _broken(tmp_path: Path, rule: str, *edits: tuple[str, str]) -> Path:
    """A folder holding the example rule with a slip put in: each edit's regex (dot
    matches newlines) replaced by its text."""
    broken = (RULES / f"{rule}.yaml").read_text(encoding="utf-8")
    for old, new in edits:
        broken, count = re.subn(old, new, broken, flags=re.DOTALL)
        assert count >= 1, (rule, old)
    folder = tmp_path / "my_rules"
    folder.mkdir()
    (folder / f"{rule}.yaml").write_text(broken, encoding="utf-8")
    return folder


# The first draft of complex_magnitude: alternative 0 alone (no `branches`).
FIRST_DRAFT = (r"  branches:.*?(?=rewrite:)", "")

# (rule, model, edits (regex, text) that put the slip in, the op and condition explain-rule
# names, words of its fix)
MISTAKES = {
    "hswish_composite_type": (
        "bias_hard_swish",
        PPOCR,
        # the first draft of docs/debugging-rules.md: the ONNX op where the model spells it out
        ((r"    - type: Add +# op 1: x \+ 3.*?(?=rewrite:)", "    - type: HardSwish  # op 1\n"),),
        "op 1 (HardSwish)",
        "[composite-vs-decomposed]",
        ("no HardSwish node", "write those ops as pattern ops"),
    ),
    "hswish_mul_wired_to_op_1": (
        "bias_hard_swish",
        PPOCR,
        ((r"input1: \{from_op: 2\}", "input1: {from_op: 1}"),),
        "op 3 (Mul)",
        "[link]",
        ("from_op",),
    ),
    "hswish_wrong_constant": (
        "bias_hard_swish",
        PPOCR,
        ((r"value: 3\}", "value: 2}"),),
        "op 1 (Add)",
        "[const-value]",
        ("`value: 3` would match it",),
    ),
    "magnitude_mul_for_pow": (
        "complex_magnitude",
        SILERO,
        ((r"    - type: Pow +# op 0", "    - type: Mul  # op 0"), FIRST_DRAFT),
        "op 0 (Mul)",
        "[op-type]",
        ("the model has no Mul node", "Pow"),
    ),
    "magnitude_wrong_exponent": (
        "complex_magnitude",
        SILERO,
        ((r"value: 2\}", "value: 0.5}"), FIRST_DRAFT),
        "op 0 (Pow)",
        "[const-value]",
        ("`value: 2` would match it",),
    ),
}


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_a_mistake_is_named_by_its_op_with_a_fix(tmp_path: Path, case: str) -> None:
    """explain-rule names the failing op, the condition and a fix; match says it on one
    line; the fixed rule (the example file) matches."""
    rule, model, edits, op, condition, fix_words = MISTAKES[case]
    folder = _broken(tmp_path, rule, *edits)
    code, out = _run("explain-rule", rule, "--rules", str(folder), "--model", *model)
    assert code == 0, out
    assert f"rule {rule}: 0 candidate(s)" in out
    failing = next(line for line in out.splitlines() if line.strip().startswith("failing:"))
    assert op in failing and condition in failing, out
    fix = next(line for line in out.splitlines() if line.strip().startswith("fix:"))
    for word in fix_words:
        assert word in failing + fix, (word, out)
    code, out = _run("match", *model, "--rules", str(folder))
    assert code == 0, out
    why = [line for line in out.splitlines() if line.startswith(f"why-not {rule}: {op}")]
    assert len(why) == 1 and "fix:" in why[0], out
    code, out = _run("match", *model, "--rules", str(RULES / f"{rule}.yaml"))
    assert code == 0 and "why-not" not in out, out


def test_the_link_fix_names_the_input_that_is_wrong(tmp_path: Path) -> None:
    """The Mul's input1 slip (op 1 for op 2) is fixed by `input1: {from_op: 2}`, not by
    rewriting input0, which the rule already has right (issue 39 follow-up)."""
    folder = _broken(
        tmp_path, "bias_hard_swish", (r"input1: \{from_op: 2\}", "input1: {from_op: 1}")
    )
    _, out = _run("explain-rule", "bias_hard_swish", "--rules", str(folder), "--model", *PPOCR)
    assert "`input1: {from_op: 2}`" in out, out


def test_an_add_wired_to_op_0_twice_does_not_match(tmp_path: Path) -> None:
    """`input1: {from_op: 0}` where op 1 was meant: the model's Add reads two Pows, so
    nothing matches (both inputs must be the one node bound to op 0), and the why-not
    names the Add and the link the model has (op 1, left unconnected: AF306)."""
    folder = _broken(
        tmp_path,
        "complex_magnitude",
        FIRST_DRAFT,
        (r"input1: \{from_op: 1\}", "input1: {from_op: 0}"),
    )
    code, out = _run("match", *SILERO, "--rules", str(folder))
    assert code == 0, out
    assert "why-not complex_magnitude: op 2 (Add)" in out, out
    assert "0 candidate(s)" in out and "write `input1: {from_op: 1}`" in out, out


def test_explain_focused_on_the_rule_says_the_same(tmp_path: Path) -> None:
    """`explain --rule NAME` prints explain-rule's answer for a rule with no candidate."""
    folder = _broken(tmp_path, "bias_hard_swish", (r"value: 3\}", "value: 2}"))
    code, out = _run("explain", *PPOCR, "--rules", str(folder), "--rule", "bias_hard_swish")
    assert code == 0, out
    assert "failing: op 1 (Add) fails the const-value check" in out, out


def test_the_rules_lint_clean_and_pass_their_tests() -> None:
    """check --strict with the rules' kernels, and `autofusion test`: every test passes."""
    code, out = _run("check", str(RULES), "--kernels", str(KERNELS), "--strict")
    assert code == 0, out
    code, out = _run("test", str(RULES), "-f", "json")
    assert code == 0, out
    summary = json.loads(out)["summary"]
    assert summary["tests"] == summary["passed"] >= 4 and summary["rule_files"] == 2, summary


@pytest.mark.parametrize(
    ("rule", "model", "groups", "form"),
    [
        ("bias_hard_swish", PPOCR, 24, "bias_hardswish_decomposed"),
        ("complex_magnitude", SILERO, 1, "cast_cast_pow_pow_add_sqrt"),
    ],
    ids=["ppocrv4-det", "silero-vad-openvino"],
)
def test_fuse_verify_passes_with_the_rules_kernel(
    tmp_path: Path, rule: str, model: list[str], groups: int, form: str
) -> None:
    """fuse --verify with the rule and its kernel: every group bound to the catalog entry
    (a real contract, not a copy of the subgraph) and the fused model verified."""
    out_dir = tmp_path / "out"
    code, out = _run(
        "fuse",
        *model,
        "--rules",
        str(RULES / f"{rule}.yaml"),
        "--kernels",
        str(KERNELS),
        "--verify",
        "--no-html",
        "-o",
        str(out_dir),
    )
    assert code == 0, out
    assert "PASSED" in out, out
    plan = json.loads((out_dir / "plan.json").read_text(encoding="utf-8"))
    chosen = [g for g in plan["groups"] if g["rule"] == rule]
    assert len(chosen) == groups, [g["rule"] for g in plan["groups"]]
    for group in chosen:
        assert group["contract"]["status"] == "bound", group["contract"]
        assert group["contract"]["form"] == form
        assert group["contract"]["verified"] == "whole model"
