"""Whether a candidate fits its kernel's contract, asked before the solver chooses.

The cost stage asks this of every viable candidate: one whose structure no form of its
kernel accepts (op sequence, the tensors leaving it against the outputs the kernel
writes, the model's opset, a port that binds nothing) or that its structural contract
does not describe gets the verdict ``contract_mismatch`` and is never chosen, so the
solver picks among the rest. It is the same binding ``fuse`` does on the chosen groups
(``bind.bind``); AF406 there stays as defence in depth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ruleengine.graph.model import Graph
from ruleengine.kernels.bind import bind
from ruleengine.kernels.model import Catalog, KernelEntry
from ruleengine.rules.model import Rule


@dataclass(frozen=True)
class _Probe:
    """The parts of a fused group ``bind`` reads, made from a candidate."""

    nodes: tuple[str, ...]  # topological order
    op_types: tuple[str, ...]
    outputs: tuple[str, ...]  # tensors that leave the group
    scored: Any  # has ``candidate`` (its ``bindings`` feed rewrite.inputs ports)


@dataclass(frozen=True)
class _Scored:
    candidate: Any


def target_of(rule: Rule, alternative: int) -> str:
    """The kernel a candidate of ``rule``'s branch ``alternative`` names."""
    alts = rule.alternatives
    alt = alts[alternative] if 0 <= alternative < len(alts) else None
    return (alt.target_op if alt is not None else None) or rule.rewrite.target_op


class ContractFit:
    """Asks, per candidate, why it fits no form of its kernel (None: it fits, or its
    kernel has no catalog entry: AF402 covers that). One per graph: binding results
    that depend on no tensor are shared between candidates."""

    def __init__(self, graph: Graph, catalog: Catalog) -> None:
        self.graph = graph
        self.catalog = catalog
        self._memo: dict[tuple, Any] = {}

    def misfit(self, candidate: Any, rule: Rule | None, outputs: tuple[str, ...]) -> str | None:
        """Why ``candidate`` (whose escaping tensors are ``outputs``) cannot be written
        as a call of its kernel, in words for explain and the plan (None: it can)."""
        if rule is None:
            return None
        entry = self.catalog.get(target_of(rule, candidate.alternative))
        if entry is None:
            return None
        graph = self.graph
        index = {n: graph.node(n).index for n in candidate.nodes}
        nodes = tuple(sorted(set(candidate.nodes), key=index.__getitem__))
        if not outputs:
            outputs = tuple(t for t in graph.node(nodes[-1]).outputs if t)
        ops = tuple(graph.node(n).op_type for n in nodes)
        probe = _Probe(nodes, ops, outputs, _Scored(candidate))
        _, contract = bind(graph, probe, rule, entry, self._memo)
        if contract.status != "unbound":
            return None
        return _words(entry, ops, outputs, contract.reason or "")


def _words(entry: KernelEntry, ops: tuple[str, ...], outputs: tuple[str, ...], why: str) -> str:
    """The reason explain shows: counts rather than one tensor's name where it can."""
    if why.startswith(f"no form of {entry.name} "):
        return f"no form of {entry.name} accepts {len(ops)} ops ending in {ops[-1]} ({why})"
    writes = len(entry.outputs or ())
    if "leaves the group but no kernel output is it" in why and entry.outputs is not None:
        return (
            f"{len(outputs)} tensors leave the group, kernel {entry.name} writes {writes} ({why})"
        )
    return f"kernel {entry.name} does not accept this group: {why}"
