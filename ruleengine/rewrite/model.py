"""Records of the rewrite/emit stage: fused groups, the plan, verification results.

The plan is built from the resolution (which candidates were chosen) and the graph; the
fused model, the report, the DOT picture and plan.json are all renderings of these records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ruleengine.cost.model import ScoredCandidate

PLAN_SCHEMA_VERSION = 1  # every JSON document autofusion writes uses an integer version
REPORT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class KernelSpec:
    """A rule's ``output`` section as handed to the kernel generator (paths inside OUTDIR)."""

    kernel_name: str
    file_path: str | None = None  # relative to OUTDIR, normalised, never escaping it
    compiler: str | None = None
    build_config: Any = None  # JSON-ready mapping
    debug_symbols: bool = False
    gen_dot_graph: bool = False
    dot_graph_path: str | None = None  # relative to OUTDIR


@dataclass(frozen=True)
class FusedGroup:
    """One chosen candidate, numbered, with everything the rewriter and the plan need."""

    id: int  # 1-based, in topological order of the group's first node
    scored: ScoredCandidate
    target_op: str
    nodes: tuple[str, ...]  # node names in topological order
    op_types: tuple[str, ...]
    inputs: tuple[str, ...]  # external tensors read (weights included), first-use order
    outputs: tuple[str, ...]  # tensors that leave the group
    kernel: KernelSpec
    attributes: Any = None  # rewrite.attributes, JSON-ready (kept in metadata, not attrs)
    tensor_layout: str | None = None
    kernel_config: Any = None
    # rewrite.inputs resolved on this group: which of its tensors feeds which fused port
    port_map: tuple[dict[str, Any], ...] = ()
    node_name: str | None = None  # the fused node in the fused model (set after rewriting)
    overload: str = ""  # which overload of the function ``target_op`` the node calls
    contract: Any = None  # kernels.model.Contract: the catalog entry as bound, and how verified

    @property
    def rule(self) -> str:
        return self.scored.candidate.rule


@dataclass(frozen=True)
class Rejection:
    """A candidate that did not become a group, and why (stable code + sentence)."""

    rule: str
    nodes: tuple[str, ...]
    verdict: str
    code: str
    reason: str


@dataclass(frozen=True)
class RuleStats:
    """ATC-style per-rule statistics: how often a rule matched and how often it took effect."""

    rule: str
    matched: int
    fused: int


@dataclass(frozen=True)
class OutputCheck:
    """Original vs fused value of one model output."""

    name: str
    cosine: float
    max_abs_error: float
    max_rel_error: float
    ok: bool


@dataclass(frozen=True)
class GroupCheck:
    """Per-group verification of one group: its fused node alone against the original
    subgraph, on random inputs of the real shapes (``status``: passed, failed, or
    not_run when the original subgraph itself cannot run on made-up inputs)."""

    group: int
    rule: str
    status: str
    outputs: tuple[OutputCheck, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status != "failed"


@dataclass(frozen=True)
class DroppedGroup:
    """A group ``fuse --safe`` dropped, numbered as in the round that dropped it."""

    group: int
    rule: str
    target_op: str
    nodes: tuple[str, ...]
    reason: str  # how it was found, and the group's own error when one was recorded
    found_by: str = ""  # isolation check, bisection, per-group check or contract


@dataclass(frozen=True)
class SafeRound:
    """One round of ``fuse --safe``: the plan verified, the groups that failed (excluded
    from every later solve) and what came next: ``re-solved`` (the solver ran again
    without them), ``kept`` (it chose the remaining groups again: nothing to add),
    ``passed`` (nothing failed) or ``round limit`` (failures dropped, no more solving)."""

    round: int
    groups: int  # groups verified in this round
    net_bytes: int  # the net bytes saved by the plan this round verified
    dropped: tuple[DroppedGroup, ...]
    found_by: str | None
    runs: int  # onnxruntime runs of this round
    next: str


@dataclass(frozen=True)
class Verification:
    """Numerical comparison of the original and the fused model in onnxruntime (CPU)."""

    ok: bool
    inputs_source: str  # "random (seed N)" or the .npz file name
    outputs: tuple[OutputCheck, ...] = ()
    threshold: float = 0.999
    dropped_groups: tuple[int, ...] = ()  # safe mode: groups dropped after bisection
    runs: int = 0  # onnxruntime sessions compared (bisection steps included)
    error: str | None = None  # onnxruntime could not run a model
    found_by: str | None = None  # safe mode: "isolation check", "bisection" or both
    mode: str = "whole"  # "whole" (one model run each) or "per-group"
    mode_reason: str = ""  # why that mode: the memory estimate, or the flag
    estimate_bytes: int | None = None  # estimated onnxruntime memory of a whole-model run
    available_bytes: int | None = None  # memory available when the choice was made
    groups: tuple[GroupCheck, ...] = ()  # per-group mode: one check per group
    rounds: tuple[SafeRound, ...] = ()  # safe mode: each verify, drop and re-solve round


@dataclass(frozen=True)
class Plan:
    """Everything the fuse command decided, ready to render (JSON, text, DOT)."""

    model: str  # model file name (no directory: reproducible)
    graph_name: str
    target: str
    solver: str
    status: str
    objective: int
    bound: int | None
    solver_seconds: float
    nodes_before: int
    nodes_after: int
    hbm_bytes_before: int
    hbm_bytes_after: int
    launches_saved: int
    time_saved_s: float
    hbm_bandwidth: float
    groups: tuple[FusedGroup, ...]
    rejected: Sequence[Rejection]  # rewrite.rejections.RejectedCandidates: sorted, built lazily
    rules: tuple[RuleStats, ...]
    unknown_traffic_tensors: int = 0  # tensors whose size is unknown (not counted)
    unknown_size_min_bytes: int = 0  # their bytes with every unknown dim taken as 1
    compile_time_nodes: int = 0  # nodes a compiler folds (no kernel, no traffic)
    verification: Verification | None = None
    timings: tuple[tuple[str, float], ...] = field(default=())  # stage -> seconds
    cpu_timings: tuple[tuple[str, float], ...] = field(default=())  # stage -> CPU seconds
    model_sha256: str | None = None  # of the input model file, to tie the plan to it

    @property
    def bytes_saved(self) -> int:
        """Gross: the HBM traffic the groups remove (before the fusion overhead)."""
        return self.hbm_bytes_before - self.hbm_bytes_after

    @property
    def gross_bytes_saved(self) -> int:
        return self.bytes_saved

    @property
    def overhead_bytes(self) -> int:
        """The fusion overhead charged to the groups (cost model: share of compute time)."""
        return sum(g.scored.cost.overhead_bytes for g in self.groups if g.scored.cost)

    @property
    def net_bytes_saved(self) -> int:
        """Gross minus overhead: what the solver maximises (explain and compare say net)."""
        return self.gross_bytes_saved - self.overhead_bytes
