"""The rule-debugging suite (issue 39): for each broken rule, ``explain-rule`` names the
failing pattern op by its index as ``from_op`` counts it, a node where it failed, the
rule file line:column, and how to fix it. Built from the rule's own Datalog clauses."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ruleengine.cli import app
from ruleengine.graph import load_graph
from ruleengine.match import find_candidates
from ruleengine.match.whynot import why_not
from ruleengine.match.whynot_text import whynot_text
from ruleengine.rules import load_rule_set

from .cases import CASES, HSWISH, MODELS, PPOCR, Case


@cache
def _graph(model: str, shapes: tuple):
    return load_graph(MODELS / model, {}, dict(shapes))


def _write(tmp_path: Path, case: Case) -> Path:
    path = tmp_path / f"{case.name}.yaml"
    path.write_text(case.text)
    return path


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_explain_names_the_failing_op(case: Case, tmp_path: Path) -> None:
    graph = _graph(case.model[0], tuple(case.model[1].items()))
    path = _write(tmp_path, case)
    rule_set = load_rule_set([path])
    result = find_candidates(graph, rule_set)
    assert not [c for c in result.candidates if c.rule == case.name], "the case must be broken"
    (w,) = why_not(graph, rule_set, [case.name], result=result)
    text = "\n".join(whynot_text(w))
    assert w.op == case.op, text
    assert f"op {case.op} (" in w.message, text
    assert w.condition in case.conditions, text
    # a node where it failed, one of the model's
    assert w.places and w.places[0].node in {n.name for n in graph.nodes}, text
    assert w.places[0].node in text
    # the rule file line:column of the failing op (or its input or param)
    assert w.location and re.fullmatch(rf"{re.escape(str(path))}:\d+:\d+", w.location), text
    line = int(w.location.split(":")[-2])
    assert line >= _op_line(case.text, case.op), text
    # how to fix it
    assert w.hint and "fix: " + w.hint in text


def _op_line(text: str, op: int) -> int:
    """The 1-based line of pattern op ``op``'s ``- type:``."""
    lines = [i for i, ln in enumerate(text.splitlines(), 1) if ln.strip().startswith("- type:")]
    return lines[op]


def test_the_fixed_rule_matches_and_says_so(tmp_path: Path) -> None:
    graph = _graph(PPOCR[0], tuple(PPOCR[1].items()))
    path = tmp_path / "hswish.yaml"
    path.write_text(HSWISH.format(name="hswish"))
    rule_set = load_rule_set([path])
    result = find_candidates(graph, rule_set)
    (w,) = why_not(graph, rule_set, ["hswish"], result=result)
    assert w.condition == "match" and w.candidates == 24 and w.op is None


def test_explain_rule_cli_text_and_json(tmp_path: Path) -> None:
    case = CASES[0]
    path = _write(tmp_path, case)
    model = str(MODELS / case.model[0])
    args = ["explain-rule", case.name, "--rules", str(path), "--model", model]
    args += ["--input-shape", "x:1,3,640,640"]
    runner = CliRunner()
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "failing: op 3 (Mul)" in res.output and "fix: op 3 reads op 0" in res.output
    res = runner.invoke(app, [*args, "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    (rule,) = doc["rules"]
    assert rule["op"] == 3 and rule["places"][0]["node"] == "p2o.Mul.2"


def test_match_prints_a_why_not_line_for_a_rule_without_candidates(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "wrong_type")
    path = _write(tmp_path, case)
    res = CliRunner().invoke(
        app, ["match", str(MODELS / case.model[0]), "--rules", str(path), "--input-shape",
              "x:1,3,640,640"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if ln.startswith("why-not wrong_type:"))
    assert "op 2 (Relu)" in line and "fix: use `type: Clip`" in line


def test_explain_rule_focus_on_explain(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "missing_bn")
    path = _write(tmp_path, case)
    res = CliRunner().invoke(
        app, ["explain", str(MODELS / case.model[0]), "--rules", str(path), "--rule", case.name]
    )
    assert res.exit_code == 0, res.output
    assert "failing: op 1 (Relu) expects Relu; the model has BatchNormalization" in res.output
