"""Every composite form on a small graph, and in the real exporters' models."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from typer.testing import CliRunner

from ruleengine.cli import app
from ruleengine.graph import load_graph
from ruleengine.match import find_candidates
from ruleengine.ops.composites import composites

from .helpers import MODELS, const, graph, model, node, rules


def _form_model(form):
    """Instantiate a composite form as an ONNX graph: $x is the input, $vars initializers."""
    nodes, inits, seen = [], [], set()
    for fn in form.nodes:
        ins = []
        for port, ref in enumerate(fn.inputs):
            if ref.kind == "node":
                ins.append(ref.name)
            elif ref.kind == "external":
                ins.append("x" if ref.name == "x" else ref.name)
                if ref.name != "x" and ref.name not in seen:
                    seen.add(ref.name)
                    inits.append(const(ref.name, np.full((8,), 1e-5 if ref.name == "eps" else 1.0)))
            elif ref.kind == "const":
                cname = f"{fn.id}_c{port}"
                inits.append(const(cname, np.array(ref.value)))
                ins.append(cname)
            else:
                ins.append("x")
        attrs = {"axes": [-1]} if fn.op in ("ReduceMean", "ReduceSum", "ReduceMax") else {}
        if fn.op == "Cast":
            attrs = {"to": 1}
        nodes.append(node(fn.op, ins, [fn.id], **attrs))
    return model(nodes, {"x": [2, 8]}, {form.output.id: None}, inits, opset=17)


ALL_FORMS = [(c.name, f) for c in composites().values() for f in c.forms]
ALIAS = {
    "silu": "Swish",
    "gelu_erf": "Gelu",
    "gelu_tanh": "Gelu",
    "layernorm": "LayerNorm",
    "rmsnorm": "RMSNorm",
    "softmax": "Softmax",
    "rope": "RotaryEmbedding",
}


@pytest.mark.parametrize("comp, form", ALL_FORMS, ids=[f.name for _, f in ALL_FORMS])
def test_each_form_matches_its_alias(tmp_path, comp, form) -> None:
    g = graph(_form_model(form))
    rs = rules(
        tmp_path, f"name: r\nmatch:\n  ops:\n    - type: {ALIAS[comp]}\nrewrite: {{target_op: F}}\n"
    )
    res = find_candidates(g, rs)
    node_sets = [set(c.nodes) for c in res.candidates]
    assert {n.id for n in form.nodes} in node_sets


def test_gelu_variant_selects_the_form(tmp_path) -> None:
    erf = next(f for f in composites()["gelu_erf"].forms)
    g = graph(_form_model(erf))
    tmpl = (
        "name: r\nmatch:\n  ops:\n    - type: Gelu\n      params: {{approximate: {v}}}\n"
        "rewrite: {{target_op: F}}\n"
    )
    assert find_candidates(g, rules(tmp_path, tmpl.format(v="none"))).candidates
    res = find_candidates(g, rules(tmp_path, tmpl.format(v="tanh")))
    assert not res.candidates and res.near_misses[0].code == "param-mismatch"


def test_wrong_constant_is_not_a_composite(tmp_path) -> None:
    m = model(
        [
            node("Div", ["x", "k"], ["d"]),
            node("Erf", ["d"], ["e"]),
            node("Add", ["e", "one"], ["a"]),
            node("Mul", ["x", "a"], ["m"]),
            node("Mul", ["m", "half"], ["y"]),
        ],
        {"x": [2, 8]},
        {"y": None},
        [const("k", np.array(2.0)), const("one", np.array(1.0)), const("half", np.array(0.5))],
    )
    rs = rules(tmp_path, "name: r\nmatch:\n  ops:\n    - type: Gelu\nrewrite: {target_op: F}\n")
    assert find_candidates(graph(m), rs).candidates == ()


def test_silu_needs_the_same_input(tmp_path) -> None:
    m = model(
        [node("Sigmoid", ["x"], ["s"]), node("Mul", ["s", "z"], ["y"])],
        {"x": [2, 8], "z": [2, 8]},
        {"y": None},
    )
    rs = rules(tmp_path, "name: r\nmatch:\n  ops:\n    - type: SiLU\nrewrite: {target_op: F}\n")
    assert find_candidates(graph(m), rs).candidates == ()


COMPOSITE_RULES = """
name: gelu
match: {ops: [{type: Gelu}]}
rewrite: {target_op: F}
---
name: ln
match: {ops: [{type: LayerNorm, params: {elementwise_affine: true}}]}
rewrite: {target_op: F}
---
name: rms
match: {ops: [{type: RMSNorm, params: {elementwise_affine: true}}]}
rewrite: {target_op: F}
---
name: silu
match: {ops: [{type: SiLU}]}
rewrite: {target_op: F}
---
name: softmax
match: {ops: [{type: Softmax}]}
rewrite: {target_op: F}
"""

# model -> {rule: count} (2 layers each; LayerNorm = 2 per layer + final)
EXPECTED = {
    "bert-tiny.dynamo.onnx": {"gelu": 2, "ln": 5, "softmax": 2},
    "bert-tiny.ts.onnx": {"gelu": 2, "ln": 5, "softmax": 2},
    "bert-tiny.ts14.onnx": {"gelu": 2, "ln": 10, "softmax": 2},
    "gpt2-tiny.dynamo.onnx": {"gelu": 2, "ln": 5, "softmax": 2},
    "gpt2-tiny.ts.onnx": {"gelu": 2, "ln": 5, "softmax": 2},
    "gpt2-tiny.ts14.onnx": {"gelu": 2, "ln": 10, "softmax": 2},
    "llama-tiny.dynamo.onnx": {"rms": 5, "silu": 2, "softmax": 2},
    "llama-tiny.ts.onnx": {"rms": 5, "silu": 2, "softmax": 2},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_composites_in_real_models(tmp_path, name) -> None:
    g = load_graph(MODELS / name)
    res = find_candidates(g, rules(tmp_path, COMPOSITE_RULES))
    got = Counter(c.rule for c in res.candidates)
    # the ts14 LayerNorm decomposition matches with and without its bias Add (2 per norm)
    assert dict(got) == EXPECTED[name]


def test_match_cli_json_and_explain_rule_deterministic(tmp_path) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(COMPOSITE_RULES)
    runner = CliRunner()
    out = runner.invoke(
        app, ["match", str(MODELS / "llama-tiny.dynamo.onnx"), "--rules", str(p), "-f", "json"]
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["schema_version"] == 1
    first = doc["candidates"][0]
    assert {"rule", "nodes", "inputs", "outputs"} <= set(first)
    keys = [(c["rule"], c["nodes"]) for c in doc["candidates"]]
    assert keys == sorted(keys)
    a = runner.invoke(app, ["explain-rule", str(p), "--datalog"])
    b = runner.invoke(app, ["explain-rule", str(p), "--datalog"])
    assert a.exit_code == 0 and a.stdout == b.stdout
    assert "c_silu(" in a.stdout and "m_0(" in a.stdout
    bad = runner.invoke(app, ["match", str(tmp_path / "none.onnx"), "--rules", str(p)])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
