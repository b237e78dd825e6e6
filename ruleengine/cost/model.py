"""Records produced by costing: the hardware target and each candidate's verdict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from ruleengine.match.model import Candidate


@dataclass(frozen=True)
class Target:
    """One accelerator, loaded from ``targets/<name>.yaml`` (numbers per AI core)."""

    name: str
    ub_bytes: int
    ub_reserve_bytes: int
    l1_bytes: int
    l0a_bytes: int
    l0b_bytes: int
    l0c_bytes: int
    hbm_bandwidth: float  # bytes per second
    peak_flops: Mapping[str, float]  # dtype -> flop/s for the whole chip
    cores: int
    vector_cores: int
    ub_align_bytes: int = 32
    buffer_factor: int = 2  # double buffering
    launch_overhead_s: float = 5e-6
    max_fused_inputs: int = 8
    description: str | None = None
    # UB model knobs (see ruleengine/cost/ub.py): the smallest output tile a cube op hands
    # to the vector unit (rows, cols; one 16x16 fractal by default), how many copies of
    # that hand-off tile live in UB, and the accumulator element size in L0C (fp32/int32).
    cube_min_tile: tuple[int, int] = (16, 16)
    cube_buffer_factor: int = 2
    accumulate_bytes: int = 4
    source: str | None = None  # the YAML file it was loaded from

    @property
    def ub_usable_bytes(self) -> int:
        return self.ub_bytes - self.ub_reserve_bytes


class Verdict(StrEnum):
    FUSE = "fuse"
    NO_BENEFIT = "no_benefit"  # saves nothing (e.g. only view ops fused away)
    LOW_BENEFIT = "low_benefit"  # net > 0 but below the rule's benefit_threshold, or net <= 0
    UB_OVERFLOW = "ub_overflow"
    CONSTRAINT_FAILED = "constraint_failed"  # a rule `constraints` entry fails
    PARAM_MISMATCH = "param_mismatch"  # an op's `params` do not hold (or name no attribute)
    PATTERN_MISMATCH = "pattern_mismatch"  # input count or input source kind differs
    CONST_VALUE = "const_value"  # a constant input does not hold the rule's value or shape
    INTERMEDIATE_ESCAPES = "intermediate_escapes"
    DYNAMIC_SHAPE = "dynamic_shape"
    NOT_CONVEX = "not_convex"
    TOO_MANY_INPUTS = "too_many_inputs"
    CONTRACT_MISMATCH = "contract_mismatch"  # no form of its kernel accepts the group
    DUPLICATE = "duplicate"  # same node set as a higher-priority rule's candidate
    LOST_CONFLICT = "lost_conflict"  # set by the resolver
    DROPPED_BY_VERIFICATION = "dropped_by_verification"  # set by safe mode


@dataclass(frozen=True)
class Cost:
    """HBM traffic and UB need of one candidate on one target. All byte counts are ints."""

    bytes_before: int  # unfused: every node reads its inputs and writes its outputs
    bytes_after: int  # fused: external inputs read once, escaping outputs written once
    bytes_saved: int
    overhead_bytes: int
    net_bytes: int  # bytes_saved - overhead_bytes
    accesses_before: int  # HBM tensor accesses (reads + writes) unfused
    accesses_after: int
    flops: int
    ub_bytes: int  # working set of the smallest legal tiling
    ub_limit: int  # target UB minus reserve
    tile: tuple[int, ...] = ()  # the tiling that decided ub_bytes
    launches_saved: int = 0
    time_saved_s: float = 0.0

    @property
    def relative_gain(self) -> float:
        return self.net_bytes / self.bytes_before if self.bytes_before else 0.0


@dataclass(frozen=True, slots=True)
class ScoredCandidate:
    """A candidate with its cost and verdict. ``code`` is a stable reason code. Records
    have slots, no ``__dict__`` (10^5-10^6 of them on a big model)."""

    candidate: Candidate
    priority: int
    verdict: Verdict
    reason: str
    code: str
    cost: Cost | None = None
    details: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def viable(self) -> bool:
        return self.verdict is Verdict.FUSE
