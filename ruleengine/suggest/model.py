"""Records of the suggest stage: regions, clusters, drafted rules, the summary."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from ruleengine.coverage import CoverageFigures
    from ruleengine.suggest.beside import Later

# where suggest reports what it is doing (the CLI prints it on stderr)
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Region:
    """A node set no chosen group covers, that fuses into one kernel the target accepts."""

    nodes: tuple[str, ...]  # topological order
    bytes_saved: int  # HBM bytes the fused region saves (cost model, before overhead)
    net_bytes: int


@dataclass(frozen=True)
class Instance:
    """One region of one model, in canonical form (``units`` index the pattern ops)."""

    model: str  # display name of the model
    region: Region
    units: tuple  # tuple[canon.Unit, ...]
    escapes: bool  # an intermediate tensor is also read outside the region
    dtypes: frozenset[str]  # dtypes of the region's data tensors
    absorbed_rules: frozenset[str]  # rules whose chosen groups the region swallows


@dataclass(frozen=True)
class Cluster:
    """Regions of one structure, across layers and models."""

    key: tuple
    instances: tuple[Instance, ...]

    @property
    def bytes_saved(self) -> int:
        return sum(i.region.bytes_saved for i in self.instances)

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(i.model for i in self.instances))


# (pattern ops a branch is without: no-op Casts, pattern ops a branch has a
# BatchNormalization after: bare Convs); ((), ()): no branch
BranchUnits = tuple[tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True)
class DraftRule:
    """A suggested rule: its YAML text and what it was drafted from."""

    name: str
    text: str
    cluster: Cluster
    priority: int
    tests: Mapping[str, str] = field(default_factory=dict)  # file in <name>.tests/ -> text
    kernel: str = ""  # the kernel catalog entry of its target_op (kernels/<TargetOp>.yaml)
    # less general drafts of the same cluster (cluster, text), most general first: what
    # the draft is narrowed to where its generalization lowers coverage (untested)
    narrower: tuple[tuple[Cluster, str], ...] = field(default=(), compare=False, repr=False)
    # attribute values of its regions pinned (``emit.shared_params``): a narrowing only
    pinned: bool = field(default=False, compare=False)
    # per size-pinned draft among itself and its narrowings (text): the same draft
    # unpinned and the ``memory_limit`` fields, recorded where both were drafted
    unsized: Mapping[str, tuple[str, Mapping[str, int]]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # per draft text among itself and its narrowings: the branches it writes, as pattern
    # ops (canonical indices of ``cluster``): (the no-op Casts its branch is without, the
    # Convs its branch has a BatchNormalization after); what its branch tests are cut to
    branch_units: Mapping[str, BranchUnits] = field(default_factory=dict, compare=False, repr=False)
    # per branched draft text: the same draft with fewer branches, fewest last (none):
    # what is taken where a branch does not find its region as its export has it
    fewer_branches: Mapping[str, tuple[str, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def branches(self) -> BranchUnits:
        """(no-op Casts dropped, Convs given a BatchNormalization) of this text's branches."""
        return self.branch_units.get(self.text, ((), ()))

    @property
    def target_op(self) -> str:
        return "".join(p[:1].upper() + p[1:] for p in self.name.split("_") if p)


@dataclass(frozen=True)
class ModelCoverage:
    """Coverage of one model before and after adding the suggested rules."""

    model: str
    fusable_bytes: int
    before: float
    after: float
    reach: float  # what the selection stage picks once the drafted groups are offered
    # the most captured by a partition into kernels the target accepts that the selection
    # stage could pick once rules are added (saving at least the net bytes it saves now)
    ceiling: float
    ceiling_exact: bool  # proven optimal over every convex connected group (no pool cap hit)
    partition_max: float  # the same without the selection's net bytes: any partition
    partition_max_exact: bool
    bound: float  # edges whose smallest convex group alone fits (each edge on its own)
    groups_after: int
    suggested_groups: int  # chosen groups of suggested rules
    unknown_edges: int = 0  # edges not counted: their tensor's size is unknown
    # the same model with its composite ops written out (``spelled.decomposed``), as
    # another exporter spells it; None where it has none
    spelled: SpelledCoverage | None = None


@dataclass(frozen=True)
class SpelledCoverage:
    """Coverage of a model's other spelling (composites written out) before and after
    the drafted rules, and, where it falls, the drafted rules whose chosen groups there
    take ops from groups the given rules chose (rule -> those rules)."""

    before: float
    after: float
    lowered_by: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Suggestion:
    """Everything ``autofusion suggest`` decided; the CLI renders and writes it."""

    rules: tuple[DraftRule, ...]
    dropped: tuple[tuple[str, str], ...]  # (cluster description, why it got no rule)
    coverage: tuple[ModelCoverage, ...]
    target: str


class ModelBaseline(NamedTuple):
    """One model's figures with the given rules alone, as its drafting found them."""

    path: str | Path
    name: str  # display name of the model
    before: CoverageFigures  # coverage of the given rules' chosen groups
    reach: float  # the drafting partition's simulated selection (share of fusable bytes)
    # (ceiling, ceiling_exact, partition_max, partition_max_exact) of ``ModelCoverage``;
    # suggest's is a ``beside.Later`` of them, read when reported (the ceiling under
    # twins is computed beside the drafting)
    ceilings: tuple[float, bool, float, bool] | Later[tuple[float, bool, float, bool]]
    bound: float  # ``ModelCoverage.bound``
