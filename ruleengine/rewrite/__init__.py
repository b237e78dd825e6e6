"""Rewrite and emit: fused ONNX model, plan, report, DOT picture.

One module per concern: ``plan`` (groups and the plan record), ``rejections`` (the
candidates not fused, built lazily), ``plan_json`` (plan.json), ``outpaths`` (rule output
paths inside OUTDIR), ``onnx_rewrite`` (the fused model with model-local functions),
``report`` (text and JSON), ``dot`` (DOT/SVG), ``emit`` (render all files, write
atomically). Verification is a stage of its own (``ruleengine.verification``).
"""

from __future__ import annotations

from ruleengine.kernels.model import FUSED_DOMAIN
from ruleengine.rewrite.model import (
    FusedGroup,
    KernelSpec,
    OutputCheck,
    Plan,
    Rejection,
    RuleStats,
    Verification,
)

__all__ = [
    "FUSED_DOMAIN",
    "FusedGroup",
    "KernelSpec",
    "OutputCheck",
    "Plan",
    "Rejection",
    "RuleStats",
    "Verification",
]
