"""Records of the verification stage: the mode chosen and what verification leaves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ruleengine.rewrite.model import FusedGroup, Verification

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class VerifyOutcome:
    """What verification leaves: the groups kept, the ones dropped, the fused model."""

    groups: tuple[FusedGroup, ...]
    dropped: tuple[FusedGroup, ...]
    fused: onnx.ModelProto
    verification: Verification
    found: Mapping[int, str] = field(default_factory=dict)  # dropped group id -> found by


@dataclass(frozen=True)
class ModeChoice:
    """Whole model or group by group, and why (with the memory estimate it rests on)."""

    mode: str
    reason: str
    estimate_bytes: int
    available_bytes: int | None
