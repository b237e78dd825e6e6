"""Rewrite and emit: fused ONNX model, plan, report, DOT picture.

One module per concern: ``plan`` (groups, plan record, plan.json), ``onnx_rewrite`` (the
fused model with model-local functions), ``report`` (text and JSON), ``dot`` (DOT/SVG),
``emit`` (render all files, write atomically). Verification is a stage of its own
(``ruleengine.verification``).
"""

from __future__ import annotations

from ruleengine.rewrite.model import (
    FUSED_DOMAIN,
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
