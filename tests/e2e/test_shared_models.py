"""Every model in ../shared/models fused with the default preset: checked, run, equal;
every model of ../shared/models/families fused and verified in onnxruntime.

For each model: the fused model passes ``onnx.checker`` (full check), runs in onnxruntime,
and every output equals the original's within relative error 1e-5 (max abs error over the
output's max magnitude) on seeded random inputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import pytest

from ruleengine.pipeline import fuse
from ruleengine.resources import schema_path
from ruleengine.verification import numerics as V

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
MODELS = sorted((SHARED / "models").glob("*.onnx"))
FAMILIES = sorted((SHARED / "models" / "families").glob("*.onnx"))
REL_TOL = 1e-5


@pytest.mark.parametrize("path", MODELS, ids=[p.name for p in MODELS])
def test_fused_model_is_valid_and_equal(path: Path):
    before = path.read_bytes()
    result = fuse(path, verify=True)
    fused = result.fused_model
    onnx.checker.check_model(fused, full_check=True)
    assert result.plan.verification is not None and result.plan.verification.ok
    original = onnx.load(str(path))
    feeds = V.make_inputs(original, seed=1)
    ref = V.run_model(path, feeds)
    got = V.run_model(fused, feeds)
    assert set(got) == set(ref)
    for name, r in ref.items():
        scale = max(float(np.max(np.abs(r))), 1e-30)
        err = float(np.max(np.abs(got[name].astype(np.float64) - r.astype(np.float64))))
        assert err / scale <= REL_TOL, f"{path.name}: output {name} rel error {err / scale:.2e}"
    n_fused = sum(1 for n in fused.graph.node if n.domain == "autofusion")
    assert n_fused == len(result.plan.groups)
    assert len(fused.graph.node) == result.plan.nodes_after
    assert path.read_bytes() == before  # the input model is never modified
    plan = json.loads(result.files["plan.json"])
    jsonschema.validate(plan, json.loads(schema_path("plan").read_text()))
    assert json.loads(result.files["report.json"])["totals"]["groups"] == len(plan["groups"])


@pytest.mark.parametrize("path", FAMILIES, ids=[p.name for p in FAMILIES])
def test_fused_family_model_verifies(path: Path):
    """Every dev model of ../shared/models/families fused with the default preset computes
    the same outputs as the original in onnxruntime (fuse --verify's own comparison)."""
    before = path.read_bytes()
    result = fuse(path, verify=True)
    assert result.plan.groups, f"{path.name}: nothing fused"
    assert result.plan.verification is not None and result.plan.verification.ok, (
        result.plan.verification
    )
    assert path.read_bytes() == before
