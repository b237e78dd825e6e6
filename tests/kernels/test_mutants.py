"""Wrong-kernel mutants of bundled rules are caught; the unmutated rules pass.

Each mutant is a bundled rule with one thing wrong about its kernel: the activation, the
target_op, or the port binding. It must be caught by `check --strict` or by `fuse
--verify` / `--safe` on a dev model where the rule matches; the unmutated rule passes all
three there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ruleengine.cli import app
from ruleengine.cost.model import Verdict
from ruleengine.errors import RuleLoadError
from ruleengine.pipeline import analyze, fuse

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT.parent / "shared" / "models"


def _rule(tmp: Path, rel: str, *edits: tuple[str, str]) -> Path:
    text = (ROOT / "rules" / rel).read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp / Path(rel).name
    path.write_text(text)
    return path


def _check(path: Path) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["check", "--strict", "--format", "json", str(path)])
    return res.exit_code, res.stdout


def _passes_all_three(rule: Path, model: Path) -> None:
    code, out = _check(rule)
    assert code == 0, out
    verified = fuse(model, [rule], verify=True).plan
    assert verified.verification.ok and verified.groups
    assert all(g.contract.verified == "whole model" for g in verified.groups)
    safe = fuse(model, [rule], safe=True, verify_mode="per-group").plan
    assert safe.verification.ok and not safe.verification.dropped_groups


def _misfits(rule: Path, model: Path, **kw) -> list:
    """The candidates the decision turned away because no form of their kernel fits."""
    a = analyze(model, [rule], kernels=kw.get("kernels", ()))
    return [s for s in a.scored if s.verdict is Verdict.CONTRACT_MISMATCH]


def _caught_by_fuse(rule: Path, model: Path, **kw) -> None:
    """Caught before the solver (issue 36: ``contract_mismatch``, never chosen), or, for a
    group that fits its contract, by --verify (numbers) and --safe."""
    v = fuse(model, [rule], verify=True, **kw).plan.verification
    if v is None or v.ok:  # what was chosen verifies: the wrong groups were turned away
        assert _misfits(rule, model, **kw)
        return
    safe = fuse(model, [rule], safe=True, **kw).plan
    assert safe.verification.dropped_groups and not safe.groups


def test_wrong_activation_is_caught_by_check(tmp_path):
    good = _rule(tmp_path, "cnn/conv_bn_relu.yaml")
    _passes_all_three(good, MODELS / "resnet18-narrow.ts-keepbn.onnx")
    bad = _rule(tmp_path, "cnn/conv_bn_relu.yaml", ("activation: relu", "activation: gelu"))
    code, out = _check(bad)
    assert code == 1 and "AF404" in out and "ConvBNRelu takes activation in [relu]" in out
    with pytest.raises(RuleLoadError):  # fuse refuses it too
        fuse(MODELS / "resnet18-narrow.ts-keepbn.onnx", [bad])


def test_misspelt_attribute_gets_did_you_mean(tmp_path):
    bad = _rule(tmp_path, "cnn/conv_bn_relu.yaml", ("activation: relu", "activaton: relu"))
    code, out = _check(bad)
    assert code == 1 and "AF403" in out and "did you mean 'activation'" in out


def test_wrong_target_op_is_caught_by_fuse(tmp_path):
    """The MatMul+GELU rule naming the MatMul+bias+ReLU kernel (attributes made consistent,
    so check passes): no form of MatMulBiasRelu fits its groups; --verify fails, --safe
    drops them."""
    rel, model = "transformer/matmul_bias_gelu.yaml", MODELS / "families/gemma-tiny.dynamo.onnx"
    _passes_all_three(_rule(tmp_path, rel), model)
    bad = _rule(
        tmp_path,
        rel,
        ("target_op: MatMulBiasGelu", "target_op: MatMulBiasRelu"),
        ("activation: gelu", "activation: relu"),
    )
    assert _check(bad)[0] == 0  # consistent on paper: only the model shows it
    _caught_by_fuse(bad, model)
    assert all("MatMulBiasRelu" in s.reason for s in _misfits(bad, model))


def test_wrong_target_op_with_its_activation_is_caught_by_check(tmp_path):
    """Conv+SiLU naming the Conv+ReLU kernel: its BN-less branch's kernel ConvSiLU then
    gets activation relu, which check refuses; the unmutated rule passes all three."""
    rel, model = "cnn/conv_bn_silu.yaml", MODELS / "families/mobilevit-xxs.dynamo.onnx"
    _passes_all_three(_rule(tmp_path, rel), model)
    bad = _rule(
        tmp_path,
        rel,
        ("target_op: ConvBNSiLU", "target_op: ConvBNRelu"),
        ("activation: silu", "activation: relu"),
    )
    code, out = _check(bad)
    assert code == 1 and "AF404" in out and "ConvSiLU takes activation in [silu]" in out


USER_KERNEL = """\
kernel: MatMulAct
version: 1
inputs:
  - {name: X, bind: {op: MatMul, input: 0}}
  - {name: W, bind: {op: MatMul, input: 1}}
outputs:
  - {name: Y, bind: {op: Mul, nth: -1, output: 0}}
attributes:
  activation: {type: string, values: [relu, gelu]}
forms:
  - name: matmul_relu
    function: |
      (X, W) => (Y) {
        m = MatMul(X, W)
        Y = Relu(m)
      }
"""


def test_wrong_kernel_that_fits_is_caught_numerically(tmp_path):
    """A user catalog (--kernels) whose kernel accepts any structure binds the GELU groups:
    the kernel runs, and verification finds that it computes ReLU, not GELU."""
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "MatMulAct.yaml").write_text(USER_KERNEL)
    bad = _rule(
        tmp_path,
        "transformer/matmul_bias_gelu.yaml",
        ("target_op: MatMulBiasGelu", "target_op: MatMulAct"),
    )
    res = CliRunner().invoke(app, ["check", "--strict", "--kernels", str(kernels), str(bad)])
    assert res.exit_code == 0, res.stdout
    model = MODELS / "families" / "gemma-tiny.dynamo.onnx"
    v = fuse(model, [bad], verify=True, verify_mode="per-group", kernels=[kernels])
    checks = v.plan.verification.groups
    assert checks and all(c.status == "failed" and c.outputs for c in checks)
    assert all(g.contract.status == "bound" for g in v.plan.groups)
    _caught_by_fuse(bad, model, kernels=[kernels])


def test_permuted_ports_are_caught_by_fuse(tmp_path):
    """rewrite.inputs with input_idx binds kernel ports; X and W swapped is valid on paper
    (check passes) and caught when the kernel runs."""
    model = MODELS / "families" / "electra-tiny.dynamo.onnx"
    entries = (
        "  inputs:\n    - {from_op: 0, input_idx: %d, input_port: 0}\n"
        "    - {from_op: 0, input_idx: %d, input_port: 1}\n  attributes:"
    )
    good = _rule(tmp_path, "transformer/matmul_bias.yaml", ("  attributes:", entries % (0, 1)))
    _passes_all_three(good, model)
    bad = _rule(tmp_path, "transformer/matmul_bias.yaml", ("  attributes:", entries % (1, 0)))
    assert _check(bad)[0] == 0
    _caught_by_fuse(bad, model)


def test_ports_bound_to_inner_tensors_or_out_of_range_fail_check(tmp_path):
    inner = "  inputs:\n    - {from_op: 0, output_idx: 0, input_port: 1}\n  attributes:"
    bad = _rule(tmp_path, "transformer/matmul_bias.yaml", ("  attributes:", inner))
    code, out = _check(bad)
    assert code == 1 and "AF405" in out and "produced inside the group" in out
    far = "  inputs:\n    - {from_op: 0, input_idx: 0, input_port: 7}\n  attributes:"
    code, out = _check(_rule(tmp_path, "transformer/matmul_bias.yaml", ("  attributes:", far)))
    assert code == 1 and "AF405" in out and "has 3 input ports" in out
    with pytest.raises(RuleLoadError):
        fuse(MODELS / "families" / "electra-tiny.dynamo.onnx", [bad])


@pytest.mark.parametrize(
    "edit",
    [("activation: gelu", "activation: relu"), ("activation: gelu", "approximate: tanh")],
    ids=["relu", "tanh"],
)
def test_wrong_ffn_variant_is_caught_by_fuse(tmp_path, edit):
    """The FFN kernel takes gelu (erf or tanh), relu and swiglu, so `activation: relu` (or
    `approximate: tanh`) on the erf GELU rule passes check; no form of FFN computes that on
    its groups, so --verify fails and --safe drops them. The unmutated rule passes."""
    rel, model = "transformer/ffn_gelu.yaml", MODELS / "families/pythia-tiny.dynamo.onnx"
    _passes_all_three(_rule(tmp_path, rel), model)
    bad = _rule(tmp_path, rel, edit)
    assert _check(bad)[0] == 0
    _caught_by_fuse(bad, model)
    assert all("computes" in s.reason for s in _misfits(bad, model))


@pytest.mark.parametrize(
    ("rel", "old", "new", "model"),
    [
        (
            "generic/cube_epilogue.yaml",
            "target_op: CubeWithEpilogue",
            "target_op: ElementwiseChain",
            "families/regnety-narrow.ts.onnx",
        ),
        (
            "transformer/elementwise_chain.yaml",
            "target_op: ElementwiseChain",
            "target_op: CubeWithEpilogue",
            "bert-tiny.ts.onnx",
        ),
    ],
    ids=["cube-as-chain", "chain-as-cube"],
)
def test_generated_kernel_that_cannot_describe_the_group_is_caught(tmp_path, rel, old, new, model):
    """A generated kernel's structural contract is checked on the group: a Conv epilogue is
    no elementwise chain (a cube op plays no role of it), a chain has no cube op."""
    good = _rule(tmp_path, rel)
    plan = fuse(MODELS / model, [good], verify=True, verify_mode="per-group").plan
    assert plan.groups and plan.verification.ok
    assert all(g.contract.status == "structural" for g in plan.groups)
    assert all(g.contract.verified == "per group" for g in plan.groups)
    bad = _rule(tmp_path, rel, (old, new))
    assert _check(bad)[0] == 0
    _caught_by_fuse(bad, MODELS / model)


def test_named_kernel_for_another_structure_is_caught(tmp_path):
    """The MatMul + bias + residual + LayerNorm rule naming the FFN + LayerNorm kernel:
    check passes (the attributes fit), no form of FFNAddLayerNorm computes its groups."""
    rel, model = "transformer/matmul_add_layernorm.yaml", MODELS / "bert-tiny.ts.onnx"
    _passes_all_three(_rule(tmp_path, rel), model)
    bad = _rule(tmp_path, rel, ("target_op: MatMulAddLayerNorm", "target_op: FFNAddLayerNorm"))
    assert _check(bad)[0] == 0
    _caught_by_fuse(bad, model)


SDPA_PORTS = (
    "  inputs:\n    - {from_op: 0, input_idx: %d, input_port: 0}\n"
    "    - {from_op: 0, input_idx: %d, input_port: 1}\n  attributes:"
)
# cos and sin: input 1 of pattern ops 4 (Q * cos) and 9 (rotated Q * sin), ports 5 and 6
RRA_PORTS = (
    "  inputs:\n    - {from_op: 4, input_idx: 1, input_port: %d}\n"
    "    - {from_op: 9, input_idx: 1, input_port: %d}\n  attributes:"
)
ATTENTION_RULES = {  # rule file -> a dev model it matches
    "transformer/sdpa.yaml": "families/pythia-tiny.dynamo.onnx",
    "transformer/attention_qkv.yaml": "bert-tiny.ts.onnx",
    "generic/attention_heads.yaml": "families/opt-tiny.dynamo.onnx",
    "transformer/attention_oproj.yaml": "families/stablelm-tiny.dynamo.onnx",
    "transformer/rmsnorm_rope_attention.yaml": "llama-tiny.dynamo.onnx",
}
# (rule file, edits, caught by): wrong target_op, wrong variant attribute, permuted ports
ATTENTION_MUTANTS = {
    "sdpa-as-mha": ("transformer/sdpa.yaml",
                    [("target_op: FlashAttentionScore", "target_op: MultiHeadAttention")], "fuse"),
    "sdpa-bsnd": ("transformer/sdpa.yaml", [("input_layout: BNSD", "input_layout: BSND")], "fuse"),
    "sdpa-q-kt-swapped": ("transformer/sdpa.yaml", [("  attributes:", SDPA_PORTS % (1, 0))],
                          "fuse"),
    "mha-as-fas": ("transformer/attention_qkv.yaml",
                   [("target_op: MultiHeadAttention", "target_op: FlashAttentionScore")], "check"),
    "mha-bnsd": ("transformer/attention_qkv.yaml", [("input_layout: BSH", "input_layout: BNSD")],
                 "fuse"),
    "heads-as-oproj": ("generic/attention_heads.yaml",
                       [("target_op: FlashAttentionScore", "target_op: AttentionOutProj")], "fuse"),
    "oproj-as-rra": ("transformer/attention_oproj.yaml",
                     [("target_op: AttentionOutProj", "target_op: RmsNormRopeAttention")], "fuse"),
    "heads-bnsd": ("generic/attention_heads.yaml",
                   [("  target_op: FlashAttentionScore\n",
                     "  target_op: FlashAttentionScore\n  attributes:\n    input_layout: BNSD\n")],
                   "fuse"),
    "oproj-bnsd": ("transformer/attention_oproj.yaml",
                   [("input_layout: BSH", "input_layout: BNSD")], "fuse"),
    "rra-interleaved": ("transformer/rmsnorm_rope_attention.yaml",
                        [("rotary_mode: half", "rotary_mode: interleaved")], "fuse"),
    "rra-cos-sin-swapped": ("transformer/rmsnorm_rope_attention.yaml",
                            [("  attributes:", RRA_PORTS % (6, 5))], "fuse"),
    "rra-as-oproj": ("transformer/rmsnorm_rope_attention.yaml",
                     [("target_op: RmsNormRopeAttention", "target_op: AttentionOutProj")], "check"),
}  # fmt: skip


@pytest.mark.parametrize("rel", sorted(ATTENTION_RULES))
def test_attention_rules_pass_all_three(tmp_path, rel):
    """The unmutated attention rules pass check --strict, fuse --verify and --safe."""
    _passes_all_three(_rule(tmp_path, rel), MODELS / ATTENTION_RULES[rel])


def test_attention_ports_bound_by_the_rule_pass(tmp_path):
    """The sdpa rule binding Q and Kt itself (rewrite.inputs), the right way round."""
    rel = "transformer/sdpa.yaml"
    good = _rule(tmp_path, rel, ("  attributes:", SDPA_PORTS % (0, 1)))
    _passes_all_three(good, MODELS / ATTENTION_RULES[rel])


def test_rotary_ports_bound_by_the_rule_pass(tmp_path):
    """rmsnorm_rope_attention binding cos and sin itself (rewrite.inputs), the right way."""
    rel = "transformer/rmsnorm_rope_attention.yaml"
    good = _rule(tmp_path, rel, ("  attributes:", RRA_PORTS % (5, 6)))
    _passes_all_three(good, MODELS / ATTENTION_RULES[rel])


@pytest.mark.parametrize("mutant", sorted(ATTENTION_MUTANTS))
def test_attention_mutant_is_caught(tmp_path, mutant):
    """Wrong target_op, wrong variant (layout) and permuted ports on the attention rules:
    each is caught by check --strict, or by fuse --verify and --safe on the model."""
    rel, edits, caught_by = ATTENTION_MUTANTS[mutant]
    bad = _rule(tmp_path, rel, *edits)
    code, out = _check(bad)
    if caught_by == "check":
        assert code == 1 and "AF403" in out, out
        return
    assert code == 0, out  # valid on paper: only the model shows it
    _caught_by_fuse(bad, MODELS / ATTENTION_RULES[rel], verify_mode="per-group")
