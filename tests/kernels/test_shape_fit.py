"""A form that binds by op sequence must also type-check on the group's tensors: an
attention whose K is already head-major (only its last two axes swapped) binds no
AttentionOutProj form that transposes K from BSND (phi3-tiny's dynamo export did)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.parser

from ruleengine.cost.model import Verdict
from ruleengine.pipeline import analyze, fuse

ROOT = Path(__file__).resolve().parents[2]
RULE = ROOT / "rules" / "transformer" / "attention_oproj.yaml"

# K arrives head-major [1, 4, 16, 16] (B, N, S, D); V arrives [1, 16, 4, 16] (B, S, N, D).
ATTENTION = """<ir_version: 8, opset_import: ["" : 18]>
g (float[1,4,16,16] q, float[1,4,16,16] k, float[1,16,4,16] v, float[1,1,16,16] mask,
   float[1,16,64] res) => (float[1,16,64] y) {
    vt = Transpose <perm = [0, 2, 1, 3]> (v)
    kt = Transpose <perm = [0, 1, 3, 2]> (k)
    s = MatMul(q, kt)
    scale = Constant <value = float {0.25}> ()
    ss = Mul(s, scale)
    sm = Add(ss, mask)
    p = Softmax <axis = -1> (sm)
    o = MatMul(p, vt)
    ot = Transpose <perm = [0, 2, 1, 3]> (o)
    shape = Constant <value = int64[3] {1, 16, 64}> ()
    o3 = Reshape(ot, shape)
    pr = MatMul(o3, wo)
    y = Add(res, pr)
}"""


def _model(tmp: Path) -> Path:
    model = onnx.parser.parse_model(ATTENTION)
    wo = np.random.default_rng(0).standard_normal([64, 64]).astype(np.float32)
    model.graph.initializer.append(onnx.numpy_helper.from_array(wo, "wo"))
    onnx.checker.check_model(model, full_check=True)
    path = tmp / "attention_bnsd_k.onnx"
    onnx.save(model, str(path))
    return path


def test_a_form_whose_body_does_not_type_check_is_a_contract_mismatch(tmp_path: Path) -> None:
    analysis = analyze(_model(tmp_path), [RULE])
    misfits = [s for s in analysis.scored if s.verdict is Verdict.CONTRACT_MISMATCH]
    assert misfits, [(s.verdict, s.reason) for s in analysis.scored]
    assert any("type-check" in s.reason for s in misfits), [s.reason for s in misfits]
    assert not analysis.resolution.chosen


def test_fuse_then_verifies_where_it_failed_before(tmp_path: Path) -> None:
    result = fuse(_model(tmp_path), [RULE], verify=True, outdir=tmp_path / "out")
    assert result.plan.verification.ok
    assert not [w for w in result.warnings if w.code == "AF406"]
