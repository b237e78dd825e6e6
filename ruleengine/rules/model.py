"""Frozen rule records: what the rule loader produces and every later stage reads.

No raw dicts survive loading. Values that YAML gave as lists become tuples, mappings
become ``FrozenMap`` so a rule can be hashed and shared between stages safely.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ruleengine.diagnostics.model import Diagnostic, Location
from ruleengine.records import FrozenMap, ParamValue  # noqa: F401 - re-exported

SOURCE_TYPES = ("const_or_param", "const", "graph_input", "any")

# A value check reads a constant's values only when it has at most this many elements
# (the graph loader keeps no more: ``graph.values.SMALL_CONST_NUMEL``); never weight bytes.
MAX_VALUE_NUMEL = 64


@dataclass(frozen=True)
class ConstValue:
    """What a constant input must hold (``value``, ``value_in``, ``tolerance``, ``shape``
    of an ``input_sources`` entry with ``source_type: const``).

    ``value``: one number (every element equals it) or a flat list (the elements, in
    order); ``value_in``: every element is one of these numbers; ``shape``: the exact
    shape, or ``"scalar"`` (one element, any rank); ``rel``/``abs``: the tolerance, None
    for the default of the constant's dtype."""

    value: float | tuple[float, ...] | None = None
    value_in: tuple[float, ...] | None = None
    shape: tuple[int, ...] | str | None = None
    rel: float | None = None
    abs: float | None = None
    location: Location | None = None

    @property
    def checks_values(self) -> bool:
        """Whether the constant's elements are read (not only its shape)."""
        return self.value is not None or self.value_in is not None


@dataclass(frozen=True)
class InputSource:
    """Where input ``port`` of a pattern op comes from: an earlier op, or a kind of tensor."""

    port: int
    from_op: int | None = None  # index into the same alternative's ops
    output_idx: int = 0  # which output of ``from_op``
    source_type: str | None = None  # one of SOURCE_TYPES
    # the same tensor as input ``same_as[1]`` of op ``same_as[0]`` (RoPE reads x twice)
    same_as: tuple[int, int] | None = None
    location: Location | None = None
    # ``source_type: const`` with a value, set of values, tolerance or shape to hold
    value: ConstValue | None = None


@dataclass(frozen=True)
class OpPattern:
    """One op of a match: a type (ONNX name, alias, or @class) and what must hold of it."""

    index: int
    type: str
    params: FrozenMap = field(default_factory=FrozenMap)
    param_locations: FrozenMap = field(default_factory=FrozenMap)  # key -> Location
    min_inputs: int | None = None
    max_inputs: int | None = None
    # None: no input_sources written, so op i consumes the output of op i-1 (a chain).
    input_sources: tuple[InputSource, ...] | None = None
    output_names: tuple[str, ...] = ()
    repeat_min: int = 1
    repeat_max: int = 1
    # repeat copies are siblings that all read what copy 0 reads (one op feeding several
    # pattern ops: a norm and its projections), not a chain
    fan_out: bool = False
    location: Location | None = None


@dataclass(frozen=True)
class MatchAlternative:
    """One way a rule can match: ``match.ops`` is alternative 0, each branch follows.

    A branch may name its own ``target_op`` and ``kernel_name`` (honest kernel names:
    a branch without BatchNorm does not call its kernel conv_bn_*)."""

    ops: tuple[OpPattern, ...]
    location: Location | None = None
    target_op: str | None = None
    kernel_name: str | None = None

    def chains_to_previous(self, index: int) -> bool:
        """Whether op ``index`` implicitly consumes an output of op ``index - 1``.

        The one place this rule of the format is decided (matcher and linter both ask):
        - no ``input_sources``: yes, a chain;
        - ``input_sources`` with a ``from_op``: no, the links are explicit;
        - ``input_sources`` naming only source kinds (``input1: {source_type: const}``):
          yes, unless a later op takes op ``index - 1``'s output by ``from_op``; then op
          ``index`` starts a new root of a multi-root pattern (e.g. the K projection of
          an attention pattern whose QK MatMul names both projections by ``from_op``).
        """
        if index <= 0:
            return False
        op = self.ops[index]
        if op.input_sources is None:
            return True
        if any(src.from_op is not None for src in op.input_sources):
            return False
        return not any(
            src.from_op == index - 1
            for later in self.ops[index + 1 :]
            for src in later.input_sources or ()
        )


@dataclass(frozen=True)
class SubgraphSpec:
    input_count_range: tuple[int, int] | None = None
    output_count: int | None = None
    allow_intermediate_outputs: bool = False


@dataclass(frozen=True)
class Constraint:
    """A typed check on a candidate's real tensors. ``fields`` holds the type's own keys."""

    type: str
    fields: FrozenMap = field(default_factory=FrozenMap)
    description: str | None = None
    location: Location | None = None


@dataclass(frozen=True)
class RewriteInput:
    """A port of the fused op: output ``output_idx`` of pattern op ``from_op``, or, with
    ``input_idx``, the tensor op ``from_op`` reads on that input (the external tensor
    behind a kernel port)."""

    from_op: int
    output_idx: int = 0
    input_port: int = 0
    input_idx: int | None = None
    description: str | None = None
    location: Location | None = None


@dataclass(frozen=True)
class Rewrite:
    target_op: str
    inputs: tuple[RewriteInput, ...] = ()
    attributes: FrozenMap = field(default_factory=FrozenMap)
    tensor_layout: str | None = None
    kernel_config: FrozenMap = field(default_factory=FrozenMap)
    location: Location | None = None
    # where each key of ``attributes`` is written (lint points at the key itself)
    attribute_locations: FrozenMap = field(default_factory=FrozenMap, compare=False)


# What ``fuse`` itself writes at the top of OUTDIR: a rule's output may not use these names.
FUSE_OUTPUT_NAMES = ("plan.json", "report.txt", "report.json", "graph.dot", "graph.svg")
FUSED_MODEL_SUFFIXES = (".fused.onnx", ".fused.onnx.data")


def default_kernel_name(rule_name: str) -> str:
    """The kernel name of a rule without ``output.kernel_name``: its name in snake case."""
    return re.sub(r"[^0-9a-zA-Z]+", "_", rule_name).strip("_").lower() or "kernel"


def rule_output_files(
    output: OutputSpec | Mapping[str, Any], rule_name: str
) -> list[tuple[str, str]]:
    """(field, path relative to OUTDIR) of each file a rule's ``output`` section writes."""
    get = output.get if isinstance(output, Mapping) else lambda k: getattr(output, k)
    name = get("kernel_name") or default_kernel_name(rule_name)
    files = []
    if get("file_path"):
        files.append(("file_path", f"{get('file_path')}/{name}.kernel.json"))
    if get("gen_dot_graph"):
        files.append(("dot_graph_path", f"{get('dot_graph_path') or '.'}/{name}.dot"))
    return files


def is_fuse_output_name(top: str) -> bool:
    """Whether a top-level name in OUTDIR is (or may be) one ``fuse`` writes itself."""
    return top in FUSE_OUTPUT_NAMES or top.endswith(FUSED_MODEL_SUFFIXES)


@dataclass(frozen=True)
class OutputSpec:
    """The kernel spec handed to the downstream compiler, carried into the plan."""

    kernel_name: str | None = None
    file_path: str | None = None
    compiler: str | None = None
    build_config: FrozenMap = field(default_factory=FrozenMap)
    debug_symbols: bool = False
    gen_dot_graph: bool = False
    dot_graph_path: str | None = None
    location: Location | None = None


@dataclass(frozen=True)
class Rule:
    name: str
    alternatives: tuple[MatchAlternative, ...]
    rewrite: Rewrite
    version: str = "1.0"
    priority: int = 0
    scope: tuple[str, ...] = ()
    description: str | None = None
    enabled: bool = True
    benefit_threshold: float = 0.0
    subgraph: SubgraphSpec = field(default_factory=SubgraphSpec)
    constraints: tuple[Constraint, ...] = ()
    output: OutputSpec = field(default_factory=OutputSpec)
    location: Location | None = None  # where the rule's document starts

    @property
    def ops(self) -> tuple[OpPattern, ...]:
        """The primary alternative (``match.ops``)."""
        return self.alternatives[0].ops


@dataclass(frozen=True)
class RuleSet:
    """Loaded rules, in a deterministic order (by name), with where they came from."""

    rules: tuple[Rule, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()  # warnings found while loading
    files: tuple[str, ...] = ()  # the rule files read, as displayed in diagnostics

    def by_name(self) -> dict[str, Rule]:
        return {r.name: r for r in self.rules}
