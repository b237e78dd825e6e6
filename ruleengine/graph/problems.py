"""The findings of graph loading (AF5xx): which registered code each problem has, and
how a finding or a refusal (``GraphLoadError``) is built from it."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ruleengine.diagnostics.codes import make
from ruleengine.diagnostics.model import Diagnostic, Location, Severity
from ruleengine.errors import GraphLoadError

# Stable diagnostic codes of graph loading (AF5xx).
CODES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "unreadable": ("AF501", "unreadable-model"),
        "cycle": ("AF502", "cyclic-graph"),
        "two-producers": ("AF503", "tensor-with-two-producers"),
        "dangling": ("AF504", "dangling-input"),
        "duplicate-node": ("AF505", "duplicate-node-name"),
        "shape-inference": ("AF506", "shape-inference-failed"),
        "bad-dim": ("AF507", "unknown-dim-name"),
        "no-graph": ("AF508", "empty-model"),
        "shape-input": ("AF510", "unknown-input-name"),
        "shape-rank": ("AF511", "input-shape-rank"),
        "shape-size": ("AF512", "input-shape-not-positive"),
        "shape-overflow": ("AF513", "input-shape-overflow"),
        "shape-conflict": ("AF514", "input-shape-conflict"),
    }
)


def problem(
    key: str, message: str, where: str, hint: str | None, severity: Severity = Severity.ERROR
) -> Diagnostic:
    """The finding ``key`` (a key of ``CODES``) about the model at ``where``."""
    return make(CODES[key][1], message, Location(where), hint=hint, severity=severity)


def fail(key: str, message: str, where: str, hint: str | None = None) -> GraphLoadError:
    """The error that refuses the model at ``where`` with the finding ``key``."""
    return GraphLoadError(message, (problem(key, message, where, hint),))
