"""Contracts are part of the decision (issue 36): a candidate no form of its kernel
accepts gets the verdict ``contract_mismatch`` and is never chosen; the Erf GELU has a
MatMulBiasGelu form; the verification message says when only contracts failed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.parser

from ruleengine.cost.model import Verdict
from ruleengine.graph import load_graph
from ruleengine.kernels.catalog import bundled_catalog
from ruleengine.kernels.fit import ContractFit
from ruleengine.pipeline import analyze, fuse
from ruleengine.rewrite.model import GroupCheck, OutputCheck, Verification
from ruleengine.rules import load_rule_set
from ruleengine.verification import contract_only_failures

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"


def _save(text: str, path: Path) -> Path:
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


GELU_ERF_MODEL = """<ir_version: 8, opset_import: ["" : 17]>
g (float[2,6,16] x, float[16,32] w, float[32] b) => (float[2,6,32] y) {
    u = MatMul(x, w)
    h = Add(u, b)
    r2 = Constant <value = float {1.4142135}> ()
    d = Div(h, r2)
    e = Erf(d)
    one = Constant <value = float {1.0}> ()
    a = Add(e, one)
    m = Mul(h, a)
    half = Constant <value = float {0.5}> ()
    y = Mul(m, half)
}"""


def _gelu_model(tmp: Path) -> Path:
    """The Erf GELU after a biased projection, weights as initializers."""
    model = onnx.parser.parse_model(GELU_ERF_MODEL)
    rng = np.random.default_rng(0)
    for name, shape in (("w", [16, 32]), ("b", [32])):
        arr = rng.standard_normal(shape).astype(np.float32)
        model.graph.initializer.append(onnx.numpy_helper.from_array(arr, name))
    kept = [i for i in model.graph.input if i.name == "x"]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    onnx.checker.check_model(model, full_check=True)
    path = tmp / "gelu_erf.onnx"
    onnx.save(model, str(path))
    return path


def test_erf_gelu_binds_matmul_bias_gelu(tmp_path):
    """The rule matches the Erf GELU; its kernel now has the form (it was tanh-only)."""
    path = _gelu_model(tmp_path)
    rule = RULES / "transformer" / "matmul_bias_gelu.yaml"
    result = fuse(path, [rule], verify=True, outdir=tmp_path / "out")
    (group,) = result.plan.groups
    assert group.contract.status == "bound", group.contract.reason
    assert group.contract.form == "matmul_bias_gelu_erf"
    assert result.plan.verification.ok


LN_OPSET12 = """<ir_version: 7, opset_import: ["" : 12]>
g (float[2,6,32] s, float[32] gm, float[32] be) => (float[2,6,32] y) {
    mu = ReduceMean <keepdims = 1, axes = [-1]> (s)
    d = Sub(s, mu)
    two = Constant <value = float {2.0}> ()
    d2 = Pow(d, two)
    var = ReduceMean <keepdims = 1, axes = [-1]> (d2)
    eps = Constant <value = float {0.00001}> ()
    ve = Add(var, eps)
    sd = Sqrt(ve)
    nm = Div(d, sd)
    m = Mul(nm, gm)
    y = Add(m, be)
}"""


def test_decomposed_layernorm_binds_at_opset_12(tmp_path):
    """LayerNorm's decomposed forms are written at opset 17; at opset 12 their bodies are
    rewritten (ReduceSum axes as an attribute) and the group binds and verifies."""
    path = _save(LN_OPSET12, tmp_path / "ln12.onnx")
    rule = RULES / "transformer" / "layernorm.yaml"
    result = fuse(path, [rule], verify=True, outdir=tmp_path / "out")
    (group,) = result.plan.groups
    assert group.contract.status == "bound", group.contract.reason
    assert result.plan.verification.ok


ONLY_THE_OP = """kernel: LayerNorm
version: 1
description: a user's LayerNorm that takes only the LayerNormalization op
inputs:
- {name: X, bind: {op: LayerNormalization, input: 0}}
- {name: scale, bind: {op: LayerNormalization, input: 1}}
- {name: bias, optional: true, bind: {op: LayerNormalization, input: 2}}
outputs:
- {name: Y, bind: {op: LayerNormalization, output: 0}}
forms:
- name: the_op
  ops: [LayerNormalization]
  function: |
    (X, scale, bias) => (Y) {
      Y = LayerNormalization (X, scale, bias)
    }
"""


def test_no_form_for_the_ops_is_a_verdict_not_a_group(tmp_path):
    """A catalog (--kernels) whose LayerNorm takes only the op: the decomposed candidates
    are contract_mismatch with the reason, never chosen, and fuse --verify passes with
    no AF406."""
    path = _save(LN_OPSET12, tmp_path / "ln12.onnx")
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "LayerNorm.yaml").write_text(ONLY_THE_OP)
    rule = RULES / "transformer" / "layernorm.yaml"
    a = analyze(path, [rule], kernels=[kernels])
    misfits = [s for s in a.scored if s.verdict is Verdict.CONTRACT_MISMATCH]
    assert misfits, [(s.verdict, s.reason) for s in a.scored]
    assert {s.code for s in misfits} == {"contract-mismatch"}
    assert "no form of LayerNorm accepts 9 ops ending in Add" in " ".join(s.reason for s in misfits)
    assert not a.resolution.chosen
    result = fuse(path, [rule], verify=True, kernels=[kernels], outdir=tmp_path / "out")
    assert not result.plan.groups
    assert not [w for w in result.warnings if w.code == "AF406"]


def test_escaping_outputs_beyond_the_kernel_are_a_misfit(tmp_path):
    """Two tensors leave a MatMul+Add+Relu group whose kernel writes one: the fit says
    so in counts."""
    text = """<ir_version: 8, opset_import: ["" : 17]>
g (float[2,16] x, float[16,8] w, float[8] b) => (float[2,8] y, float[2,8] a) {
    m = MatMul(x, w)
    a = Add(m, b)
    y = Relu(a)
}"""
    path = _save(text, tmp_path / "two_out.onnx")
    graph = load_graph(path, {})
    rule = next(r for r in load_rule_set([], preset="all").rules if r.name == "matmul_bias_relu")
    names = tuple(n.name for n in graph.nodes)
    candidate = SimpleNamespace(
        nodes=names, alternative=0, rule=rule.name, bindings=tuple((n,) for n in names)
    )
    why = ContractFit(graph, bundled_catalog()).misfit(candidate, rule, ("a", "y"))
    assert why is not None and why.startswith("2 tensors leave the group"), why
    assert ContractFit(graph, bundled_catalog()).misfit(candidate, rule, ("y",)) is None


def test_contract_only_failures_is_the_true_message():
    agree = (OutputCheck("y", 1.0, 0.0, 0.0, True),)
    contract = GroupCheck(3, "r", "failed", error="contract: no form fits")
    v = Verification(False, "random (seed 0)", agree, groups=(contract,), error="1 (AF406)")
    assert contract_only_failures(v) == 1
    differ = (OutputCheck("y", 0.5, 1.0, 1.0, False),)
    assert contract_only_failures(Verification(False, "r", differ, groups=(contract,))) == 0
    numeric = GroupCheck(4, "r", "failed", error=None)
    v2 = Verification(False, "r", agree, groups=(contract, numeric))
    assert contract_only_failures(v2) == 0
    assert contract_only_failures(Verification(False, "r", agree)) == 0


def test_bodies_below_opset_13_take_their_axes_as_attributes():
    """ReduceSum/Unsqueeze axes and Split's split were attributes before opset 13; a
    Softmax without an axis says -1; an axis that is no constant is a problem."""
    from ruleengine.kernels.opset_down import below_13

    fn = onnx.parser.parse_function(
        """<domain: "autofusion", opset_import: ["" : 17]>
        K (x) => (y, z) {
            ax = Constant <value = int64[1] {-1}> ()
            s = ReduceSum <keepdims = 1> (x, ax)
            u = Unsqueeze(s, ax)
            sp = Constant <value = int64[2] {2, 2}> ()
            a, b = Split <axis = -1> (x, sp)
            y = Softmax(a)
            z = Add(b, u)
        }"""
    )
    changed, problems = below_13(fn, 12)
    assert changed and problems == []
    by_op = {n.op_type: n for n in fn.node}
    assert list(by_op["ReduceSum"].input) == ["x"]
    assert [a.ints for a in by_op["ReduceSum"].attribute if a.name == "axes"] == [[-1]]
    assert [a.ints for a in by_op["Split"].attribute if a.name == "split"] == [[2, 2]]
    assert [a.i for a in by_op["Softmax"].attribute if a.name == "axis"] == [-1]
    dynamic = onnx.parser.parse_function(
        """<domain: "autofusion", opset_import: ["" : 17]>
        K (x, ax) => (y) {
            y = ReduceSum(x, ax)
        }"""
    )
    assert below_13(dynamic, 12)[1] == ["its body's ReduceSum axes is no constant"]
