"""Contracts in the decision on a real export (issue 36): ppocrv4-rec (Paddle2ONNX,
opset 12) had 5 groups its own kernels rejected (AF406) under the default preset."""

from __future__ import annotations

from pathlib import Path

from ruleengine.pipeline import fuse

REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "models" / "real"


def test_ppocrv4_rec_default_preset_has_no_af406(tmp_path):
    """The real Paddle2ONNX export: every chosen group fits its kernel; verified."""
    result = fuse(
        REAL / "ppocrv4-rec.onnx",
        input_shapes={"x": [1, 3, 48, 320]},
        verify=True,
        outdir=tmp_path / "out",
    )
    assert result.plan.verification.ok
    assert [g.id for g in result.plan.groups if g.contract.status == "unbound"] == []
