"""Score every candidate: traffic, overhead, UB need, constraints, and a verdict.

Every "no" is kept: a rejected candidate carries its verdict, a stable code and a
reason, and near misses from matching come through with theirs, so ``explain`` can
answer "why was this not fused?".
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from itertools import compress, repeat
from operator import attrgetter, is_
from types import MappingProxyType
from typing import Any

import numpy as np

from ruleengine.cost.constraints import Context, evaluate
from ruleengine.cost.model import Cost, ScoredCandidate, Target, Verdict
from ruleengine.cost.opinfo import (
    REDUCE,
    VIEW,
    is_view,
    node_flops,
    node_kinds,
    size_table,
    static_shape,
)
from ruleengine.cost.scored import FUSE_ID, VERDICT_ID, ScoredRecords
from ruleengine.cost.traffic import GroupIO, Traffic, group_io, topo_position, traffic
from ruleengine.cost.ub import UBNeed, reduced_row, ub_need
from ruleengine.graph.model import Graph, Node
from ruleengine.match.model import Candidate, MatchResult, NearMiss, TwinMap
from ruleengine.rules.model import Rule, RuleSet
from ruleengine.runtime import paused_gc
from ruleengine.topology import is_convex

OVERHEAD_FRACTION = 0.05  # share of the group's compute time charged as fusion overhead

# Near-miss codes from matching -> the verdict explain shows for them.
_NEAR_MISS_VERDICTS = {
    "intermediate-escapes": Verdict.INTERMEDIATE_ESCAPES,
    "dynamic-shape": Verdict.DYNAMIC_SHAPE,
    "not-convex": Verdict.NOT_CONVEX,
    "too-many-inputs": Verdict.TOO_MANY_INPUTS,
    "param-mismatch": Verdict.PARAM_MISMATCH,
    "input-count": Verdict.PATTERN_MISMATCH,
    "input-source": Verdict.PATTERN_MISMATCH,
    "output-count": Verdict.PATTERN_MISMATCH,
}


def kb(n: int | float) -> str:
    """Bytes as KiB with at most one decimal, the way every output prints UB sizes."""
    v = n / 1024
    return f"{v:.0f} KiB" if abs(v - round(v)) < 0.05 else f"{v:.1f} KiB"


def human_bytes(n: int | float) -> str:
    sign = "-" if n < 0 else ""
    n = abs(n)
    # binary units named as such (KiB, not KB), like every other output of the tool
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{sign}{n / scale:.1f} {unit}"
    return f"{sign}{int(n)} B"


def _dtype_of(graph: Graph, io: GroupIO, ub: UBNeed) -> str:
    if ub.anchor and graph.tensors[ub.anchor].dtype:
        return graph.tensors[ub.anchor].dtype or "float16"
    for node in io.nodes:
        for t in node.outputs:
            if t and t in graph.tensors and graph.tensors[t].dtype:
                return graph.tensors[t].dtype or "float16"
    return "float16"


def overhead_bytes(flops: int, dtype: str, target: Target) -> int:
    """0.05 x the group's compute time, converted to bytes at the target's bandwidth."""
    peak = target.peak_flops.get(dtype)
    if peak is None:
        peak = target.peak_flops.get("float32") or min(target.peak_flops.values())
    return round(OVERHEAD_FRACTION * flops / peak * target.hbm_bandwidth)


def compute_cost(graph: Graph, io: GroupIO, tr: Traffic, ub: UBNeed, target: Target) -> Cost:
    saved = tr.bytes_before - tr.bytes_after
    overhead = overhead_bytes(tr.flops, _dtype_of(graph, io, ub), target)
    net = saved - overhead
    launches = max(0, sum(1 for n in io.nodes if not is_view(n)) - 1)
    return Cost(
        bytes_before=tr.bytes_before,
        bytes_after=tr.bytes_after,
        bytes_saved=saved,
        overhead_bytes=overhead,
        net_bytes=net,
        accesses_before=tr.accesses_before,
        accesses_after=tr.accesses_after,
        flops=tr.flops,
        ub_bytes=ub.bytes,
        ub_limit=ub.limit,
        tile=ub.tile,
        launches_saved=launches,
        time_saved_s=net / target.hbm_bandwidth + launches * target.launch_overhead_s,
    )


def _ub_reason(ub: UBNeed) -> str:
    if not ub.legal:
        return f"UB: {ub.why_illegal}"
    parts = " + ".join(f"{t} {kb(b)}" for t, b in sorted(ub.buffers, key=lambda x: -x[1])[:4])
    more = " + ..." if len(ub.buffers) > 4 else ""
    return (
        f"UB working set {kb(ub.bytes)} exceeds {kb(ub.limit)} usable "
        f"(smallest tile {'x'.join(map(str, ub.tile))}: {parts}{more})"
    )


_INDEX_DTYPES = frozenset({"int64", "int32"})


def _kernel_inputs(graph: Graph, io: GroupIO) -> tuple[str, ...]:
    """External inputs that become inputs of the fused kernel.

    Constant scalars (an epsilon, the 0.5 of GELU) become immediates of the kernel and
    constant integer tensors (axes, shapes; also those computed from constants and static
    shapes, which the compiler folds) become attributes; neither takes an input slot.
    Activations and weights do; aliases of one constant (``constant_root``) take one.
    An inference BatchNormalization folded into the Conv before it (``folded_bn_inputs``)
    takes none, or one for the bias where the Conv has none.
    """
    out = []
    roots: set[str] = set()
    folded = folded_bn_inputs(graph, io.nodes)
    for t in io.inputs:
        if t in folded:
            continue
        tensor = graph.tensors.get(t)
        if tensor is not None and (
            tensor.is_constant or tensor.is_initializer or tensor.const_foldable
        ):
            if (tensor.numel or 0) <= 1 or tensor.dtype in _INDEX_DTYPES:
                continue
            root = constant_root(graph, t)
            if root in roots:  # another alias of a constant already read: one buffer
                continue
            roots.add(root)
        out.append(t)
    return tuple(out)


def folded_bn_inputs(graph: Graph, nodes: Sequence[Node]) -> frozenset[str]:
    """Constant inputs of the group's inference BatchNormalizations that a compiler folds
    into the Conv before them: scale, mean and variance (and the bias, where the Conv has
    one) become the Conv's weight and bias, one buffer each, as when the exporter folds
    them (TorchScript's keepbn export keeps them). Only where the BatchNormalization
    reads a Conv of the group that nothing else reads, has one output (inference) and
    constant statistics."""
    inside = {n.name for n in nodes}
    out: set[str] = set()
    for n in nodes:
        if n.op_type != "BatchNormalization" or len(n.inputs) < 5 or len(n.outputs) != 1:
            continue
        x = graph.tensors.get(n.inputs[0])
        if x is None or x.producer not in inside or x.is_graph_output:
            continue
        conv = graph.node(x.producer)
        if conv.op_type != "Conv" or [c for c, _ in x.consumers] != [n.name]:
            continue
        stats = n.inputs[1:5]
        if not all(
            (s := graph.tensors.get(t)) is not None
            and (s.is_constant or s.is_initializer or s.const_foldable)
            for t in stats
        ):
            continue
        has_bias = len(conv.inputs) > 2 and bool(conv.inputs[2])
        out.update(stats if has_bias else (stats[0], stats[2], stats[3]))
    return frozenset(out)


def constant_root(graph: Graph, t: str) -> str:
    """The constant that ``t`` aliases through Identity nodes, else ``t`` itself.

    Exporters write an Identity per tied or repeated parameter (TorchScript: one per
    module reading a shared weight, or a value equal to another's), where others read
    the one initializer directly. The Identity is folded at compile time and every alias
    is the same buffer, so a kernel reading two aliases reads one input: counted once,
    the group fits ``max_fused_inputs`` whichever way the exporter spelled it."""
    while True:
        tensor = graph.tensors.get(t)
        if tensor is None or tensor.producer is None:
            return t
        node = graph.node(tensor.producer)
        if node.op_type != "Identity" or not node.inputs or not node.inputs[0]:
            return t
        src = graph.tensors.get(node.inputs[0])
        if src is None or not (src.is_constant or src.is_initializer or src.const_foldable):
            return t
        t = node.inputs[0]


def _dynamic_reason(graph: Graph, unknown: tuple[str, ...]) -> str:
    """Which sizes are unknown, and which graph-input axis to bind (never a name made up
    by shape inference, which nobody can know)."""
    names = ", ".join(unknown[:3]) + (" ..." if len(unknown) > 3 else "")
    axes: dict[str, None] = {}
    for t in unknown:
        tensor = graph.tensors.get(t)
        for d in (tensor.shape or ()) if tensor is not None else ():
            if isinstance(d, str) and d in graph.dim_sources:
                axes[f"{graph.dim_sources[d]} ({d})"] = None
    if axes:
        how = f"bind {', '.join(axes)} with --input-shape NAME:d0,d1,... or --dim NAME=VALUE"
    elif graph.unbound_dims:
        how = f"it depends on unbound input dims {', '.join(graph.unbound_dims[:4])}"
    else:
        how = "it depends on data, or shape inference could not determine it"
    return f"size of {names} is not known statically ({how})"


def _put_fields(obj: object, **values: object) -> None:
    """Set fields of a frozen, slotted record (its ``__setattr__`` refuses)."""
    for name, value in values.items():
        object.__setattr__(obj, name, value)


class GroupMemo:
    """Traffic and UB need of groups, shared between groups of the same local structure.

    A decoder stack repeats one layer, so most candidates have a twin in every layer:
    same op types, same tensor sizes, same wiring, same tensors leaving the group. Both
    numbers are pure functions of that local structure, so they are computed once per
    structure and mapped back onto each group's own tensor names. The key holds every
    input the two computations read: per node its op type, domain, kind bits, flops,
    reduced row and wiring (tensors numbered by first use); per tensor its static
    shape, element size, byte size, name length (the anchor's tie-break), dtype and
    whether it is a constant; the group's inputs, view-only inputs, outputs and storage
    roots. The cost record and the kernel inputs, functions of the same, are shared
    too. An illegal tiling (whose reason names nodes) is never shared. One memo per
    target and graph.
    """

    def __init__(self, graph: Graph, target: Target) -> None:
        self.graph = graph
        self.target = target
        self._seen: dict[tuple, tuple] = {}
        self._node_feat: dict[str, tuple] = {}
        self._tensor_feat: dict[str, tuple] = {}
        self._pos = topo_position(graph)
        # tensor -> names of its readers, None for a graph output (always leaves); made
        # for the tensors of the groups analysed (not 10^5 sets per graph up front)
        self._readers: dict[str, frozenset[str] | None] = {}
        self._kinds = node_kinds(graph)
        self._table = size_table(graph)

    def _tensor_features(self, t: str) -> tuple:
        """What traffic, UB, cost and kernel inputs read of a tensor (once per tensor)."""
        tensor = self.graph.tensors.get(t)
        if tensor is None:
            return (None, len(t), None, False, False)
        const = tensor.is_constant or tensor.is_initializer
        return (self._table.get(t), len(t), tensor.dtype, const, tensor.const_foldable)

    def _features(self, n: Node) -> tuple:
        """What traffic and UB read of a node besides its wiring (once per node)."""
        kind = self._kinds[n.name]
        row = _reduced_row_of(self.graph, n) if kind & REDUCE else 0
        return (n.op_type, n.domain, kind, node_flops(self.graph, n), row)

    def analyse(
        self, names: Sequence[str]
    ) -> tuple[GroupIO, Traffic, UBNeed | None, tuple[Cost, tuple[str, ...]] | None]:
        """``group_io``, ``traffic`` and, when every size is known, ``ub_need`` and
        (``compute_cost``, ``_kernel_inputs``)."""
        graph = self.graph
        pos = self._pos
        node_of = graph.node
        # the nodes as group_io orders them (topological), tensors numbered by first use
        nodes = tuple(sorted((node_of(n) for n in set(names)), key=lambda n: pos[n.name]))
        names_by_id = tuple(
            dict.fromkeys(t for n in nodes for seq in (n.inputs, n.outputs) for t in seq if t)
        )
        ids = {t: i for i, t in enumerate(names_by_id)}
        lid = ids.get
        node_feat = self._node_feat
        wiring = []
        for n in nodes:
            feat = node_feat.get(n.name)
            if feat is None:
                feat = node_feat[n.name] = self._features(n)
            wiring.append(
                (feat, tuple(lid(t, -1) for t in n.inputs), tuple(lid(t, -1) for t in n.outputs))
            )
        # which produced tensors leave the group: with the wiring, this fixes group_io
        inside = {n.name for n in nodes}
        readers = self._readers
        tensors_of = graph.tensors
        for n in nodes:
            for t in n.outputs:
                if t and t not in readers and t in tensors_of:
                    tt = tensors_of[t]
                    readers[t] = (
                        None if tt.is_graph_output else frozenset(c for c, _ in tt.consumers)
                    )
        key_io = tuple(
            t in readers and (readers[t] is None or not readers[t] <= inside)
            for n in nodes
            for t in n.outputs
            if t
        )
        tensor_feat = self._tensor_feat
        tensors = []
        for t in names_by_id:
            feat_t = tensor_feat.get(t)
            if feat_t is None:
                feat_t = tensor_feat[t] = self._tensor_features(t)
            tensors.append(feat_t)
        key = (tuple(wiring), key_io, tuple(tensors))
        hit = self._seen.get(key)
        if hit is not None:
            io_l, tr_l, ub_l, extra_l = hit
            io = GroupIO(
                nodes,
                *(tuple(names_by_id[i] for i in part) for part in io_l[:4]),
                {names_by_id[i]: names_by_id[r] for i, r in io_l[4]},
            )
            tr = Traffic(*tr_l[:5], tuple(names_by_id[i] for i in tr_l[5]))
            if ub_l is None:
                return io, tr, None, None
            size, limit, elems, tile, anchor, buffers = ub_l
            ub = UBNeed(
                size,
                limit,
                elems,
                tile,
                names_by_id[anchor] if anchor >= 0 else "",
                tuple((names_by_id[i], b) for i, b in buffers),
                True,
            )
            cost, kin = extra_l
            return io, tr, ub, (cost, tuple(names_by_id[i] for i in kin))
        io = group_io(graph, names)
        tr = traffic(graph, io)
        ub = None if tr.unknown else ub_need(graph, io, self.target)
        extra = None
        if ub is not None:
            extra = (compute_cost(graph, io, tr, ub, self.target), _kernel_inputs(graph, io))
        if ub is None or ub.legal:
            tr_l = (*astuple_traffic(tr), tuple(ids[t] for t in tr.unknown))
            ub_l = (
                None
                if ub is None
                else (
                    ub.bytes,
                    ub.limit,
                    ub.tile_elems,
                    ub.tile,
                    ids[ub.anchor] if ub.anchor else -1,
                    tuple((ids[t], b) for t, b in ub.buffers),
                )
            )
            extra_l = None if extra is None else (extra[0], tuple(ids[t] for t in extra[1]))
            io_l = (
                *(
                    tuple(ids[t] for t in part)
                    for part in (io.inputs, io.meta_inputs, io.outputs, io.intermediates)
                ),
                tuple((ids[t], ids[r]) for t, r in io.root.items()),
            )
            self._seen[key] = (io_l, tr_l, ub_l, extra_l)
        return io, tr, ub, extra


def astuple_traffic(tr: Traffic) -> tuple[int, int, int, int, int]:
    return (tr.bytes_before, tr.bytes_after, tr.accesses_before, tr.accesses_after, tr.flops)


def _reduced_row_of(graph: Graph, node: Node) -> int:
    shape = static_shape(graph, node.inputs[0]) if node.inputs else None
    return reduced_row(graph, node, shape) if shape else 0


def score_one(
    graph: Graph,
    candidate: Candidate,
    rule: Rule | None,
    target: Target,
    benefit_threshold: float | None = None,
    *,
    memo: GroupMemo | None = None,
) -> ScoredCandidate:
    """Cost and judge one candidate (verdicts in a fixed order of precedence).

    ``memo`` (one per graph and target) shares traffic and UB numbers between groups
    of identical local structure; the result is the same with or without it.
    """
    priority = rule.priority if rule else 0
    extra: tuple[Cost, tuple[str, ...]] | None = None
    if memo is not None and memo.graph is graph and memo.target is target:
        io, tr, ub_known, extra = memo.analyse(candidate.nodes)
    else:
        io = group_io(graph, candidate.nodes)
        tr = traffic(graph, io)
        ub_known = None
    details: dict[str, object] = {
        "inputs": io.inputs,
        "outputs": io.outputs,
        "intermediates": io.intermediates,
    }

    def verdict(v: Verdict, code: str, reason: str, cost: Cost | None) -> ScoredCandidate:
        return ScoredCandidate(
            candidate, priority, v, reason, code, cost, MappingProxyType(dict(details))
        )

    if tr.unknown:
        return verdict(
            Verdict.DYNAMIC_SHAPE, "dynamic-shape", _dynamic_reason(graph, tr.unknown), None
        )
    ub = ub_known if ub_known is not None else ub_need(graph, io, target)
    cost = extra[0] if extra is not None else compute_cost(graph, io, tr, ub, target)
    details["ub_buffers"] = ub.buffers
    details["ub_anchor"] = ub.anchor
    if not is_convex(graph, candidate.nodes):
        return verdict(
            Verdict.NOT_CONVEX,
            "not-convex",
            "a path leaves the group and re-enters it; fusing it would create a cycle",
            cost,
        )
    kernel_inputs = extra[1] if extra is not None else _kernel_inputs(graph, io)
    details["kernel_inputs"] = kernel_inputs
    if len(kernel_inputs) > target.max_fused_inputs:
        return verdict(
            Verdict.TOO_MANY_INPUTS,
            "too-many-inputs",
            f"{len(kernel_inputs)} external inputs > max_fused_inputs "
            f"{target.max_fused_inputs} of {target.name}",
            cost,
        )
    ctx = Context(graph, io, target, ub, candidate.bindings)
    failure, notes = evaluate(ctx, rule.constraints if rule else ())
    if notes:
        details["notes"] = tuple(notes)
    if failure is not None:
        return verdict(Verdict.CONSTRAINT_FAILED, failure.code, failure.reason, cost)
    if not ub.fits:
        return verdict(Verdict.UB_OVERFLOW, "ub-overflow", _ub_reason(ub), cost)
    if cost.bytes_saved <= 0:
        return verdict(
            Verdict.NO_BENEFIT,
            "no-benefit",
            "fusing removes no HBM traffic (no intermediate tensor stays on chip; "
            "view ops move no data)",
            cost,
        )
    threshold = (
        benefit_threshold
        if benefit_threshold is not None
        else (rule.benefit_threshold if rule else 0.0)
    )
    if cost.net_bytes <= 0:
        return verdict(
            Verdict.LOW_BENEFIT,
            "overhead-exceeds-saving",
            f"overhead {human_bytes(cost.overhead_bytes)} >= saving "
            f"{human_bytes(cost.bytes_saved)}",
            cost,
        )
    if cost.relative_gain < threshold:
        return verdict(
            Verdict.LOW_BENEFIT,
            "below-threshold",
            f"net gain {cost.relative_gain:.1%} of unfused traffic is below the rule's "
            f"benefit_threshold {threshold:.0%}",
            cost,
        )
    return verdict(
        Verdict.FUSE,
        "fuse",
        f"saves {human_bytes(cost.net_bytes)} net ({cost.relative_gain:.0%} of its traffic)",
        cost,
    )


class _NearMissScored(ScoredCandidate):
    """A near miss's record whose ``cost`` and ``details`` are computed on first read.

    A near miss's verdict and reason come from the matcher; its numbers (what fusing it
    would have been worth) are only shown by ``explain``. A big decoder has tens of
    thousands of near misses, so scoring computes their traffic and UB need only when
    something reads them; the values are exactly those ``score_one`` would compute.
    """

    # _text/_near: the reason given, or the near miss to read it from (a translated near
    # miss computes it on first read: match.memo); _lazy: (cost, details) once known;
    # _pending: (graph, target) to compute them with
    __slots__ = ("_text", "_near", "_lazy", "_pending")

    def __init__(
        self,
        candidate: Candidate,
        priority: int,
        verdict: Verdict,
        reason: str | None,
        code: str,
        cost: Cost | None = None,
        details: object = None,
        *,
        _graph: Graph | None = None,
        _target: Target | None = None,
        _near: NearMiss | None = None,
    ) -> None:
        put = object.__setattr__
        _put_fields(
            self,
            candidate=candidate,
            priority=priority,
            verdict=verdict,
            code=code,
            _text=reason,
            _near=_near,
        )
        if _graph is None:  # dataclasses.replace(): the numbers are given
            put(self, "_lazy", (cost, details))
            put(self, "_pending", None)
        else:
            put(self, "_pending", (_graph, _target))

    @property  # type: ignore[override]
    def reason(self) -> str:
        text, near = self._text, self._near
        return near.reason if text is None and near is not None else (text or "")

    def _numbers(self) -> tuple[Cost | None, object]:
        got = getattr(self, "_lazy", None)
        if got is None:
            graph, target = self._pending  # type: ignore[misc]
            io = group_io(graph, self.candidate.nodes)
            tr = traffic(graph, io)
            details: dict[str, object] = {"inputs": io.inputs, "outputs": io.outputs}
            cost = None
            if not tr.unknown:
                ub = ub_need(graph, io, target)
                cost = compute_cost(graph, io, tr, ub, target)
                details["ub_buffers"] = ub.buffers
            got = (cost, MappingProxyType(details))
            object.__setattr__(self, "_lazy", got)
            object.__setattr__(self, "_pending", None)
        return got

    @property  # type: ignore[override]
    def cost(self) -> Cost | None:
        return self._numbers()[0]

    @property  # type: ignore[override]
    def details(self) -> Mapping[str, object]:
        return self._numbers()[1]  # type: ignore[return-value]


def _from_near_miss(
    graph: Graph, nm: NearMiss, rule: Rule | None, target: Target
) -> ScoredCandidate:
    """A near miss keeps the matcher's code and reason; its numbers show what was at stake."""
    return _NearMissScored(
        nm.candidate,
        rule.priority if rule else 0,
        _NEAR_MISS_VERDICTS.get(nm.code, Verdict.CONSTRAINT_FAILED),
        None,
        nm.code,
        _graph=graph,
        _target=target,
        _near=nm,
    )


def _near_record_maker(
    graph: Graph, rules: Mapping[str, Rule], target: Target
) -> Callable[[NearMiss], ScoredCandidate]:
    """``_from_near_miss`` made without ``__init__`` (10^5 near misses on a 2048-layer
    stack): the same records, one (graph, target) pair shared by all."""
    priority = {name: r.priority for name, r in rules.items()}
    pending = (graph, target)
    verdicts = _NEAR_MISS_VERDICTS
    failed = Verdict.CONSTRAINT_FAILED
    new = object.__new__
    put = object.__setattr__

    def make(nm: NearMiss) -> ScoredCandidate:
        c = nm.candidate
        code = nm.code
        obj = new(_NearMissScored)
        put(obj, "candidate", c)
        put(obj, "priority", priority.get(c.rule, 0))
        put(obj, "verdict", verdicts.get(code, failed))
        put(obj, "code", code)
        put(obj, "_text", None)
        put(obj, "_near", nm)
        put(obj, "_pending", pending)
        return obj

    return make


def _from_near_misses(
    graph: Graph, near: Sequence[NearMiss], rules: Mapping[str, Rule], target: Target
) -> list[ScoredCandidate]:
    """``_from_near_miss`` of each (``_near_record_maker``)."""
    return list(map(_near_record_maker(graph, rules, target), near))


class _TwinScored(ScoredCandidate):
    """A candidate the matcher found by translating another (``MatchResult.twins``):
    same local structure over its whole index span, so the same verdict, code and
    numbers; its reason and details name its own tensors and are computed on first
    read (by ``score_one``, so they are exactly what scoring it directly gives)."""

    # _given: the reason given (None: the scoring's own); _lazy: (reason, details) once
    # known; _redo: what score_one recomputes them with
    __slots__ = ("_given", "_lazy", "_redo")

    def __init__(
        self,
        candidate: Candidate,
        priority: int,
        verdict: Verdict,
        reason: str | None = None,
        code: str = "",
        cost: Cost | None = None,
        details: object = None,
        *,
        _redo: tuple | None = None,
    ) -> None:
        put = object.__setattr__
        _put_fields(
            self,
            candidate=candidate,
            priority=priority,
            verdict=verdict,
            code=code,
            cost=cost,
            _given=reason,  # _given None: the scoring's own reason
        )
        if _redo is None:  # dataclasses.replace(): everything is given
            put(self, "_lazy", (reason, details))
        else:
            put(self, "_redo", _redo)

    @classmethod
    def like(cls, candidate: Candidate, template: tuple) -> _TwinScored:
        """A record of ``candidate`` taking ``template``'s priority, verdict, code, cost,
        given reason and ``_redo`` (``like_template``), made without ``__init__`` (10^5
        per stack). The one place a lazy record's slots are written (``relabel`` too)."""
        # one object.__setattr__ per field, not _put_fields: its keyword dict and loop
        # were ~40% of this function's time, 10^5-10^6 calls a stack
        obj = object.__new__(cls)
        put = object.__setattr__
        priority, verdict, code, cost, given, redo = template
        put(obj, "candidate", candidate)
        put(obj, "priority", priority)
        put(obj, "verdict", verdict)
        put(obj, "code", code)
        put(obj, "cost", cost)
        put(obj, "_given", given)  # None: the scoring's own reason
        put(obj, "_redo", redo)
        return obj

    @staticmethod
    def like_template(base: ScoredCandidate, redo: tuple) -> tuple:
        return (base.priority, base.verdict, base.code, base.cost, None, redo)

    def relabel(self, verdict: Verdict, code: str, reason: str) -> _TwinScored:
        """``replace(self, verdict=, code=, reason=)`` without computing the details."""
        if getattr(self, "_lazy", None) is not None:
            return replace(self, verdict=verdict, code=code, reason=reason)
        return _TwinScored.like(
            self.candidate, (self.priority, verdict, code, self.cost, reason, self._redo)
        )

    def _words(self) -> tuple[str, Mapping[str, object]]:
        got = getattr(self, "_lazy", None)
        if got is None:
            graph, rule, target, threshold, memo = self._redo
            sc = score_one(graph, self.candidate, rule, target, threshold, memo=memo)
            got = (sc.reason, sc.details)
            object.__setattr__(self, "_lazy", got)
            object.__delattr__(self, "_redo")
        return got  # type: ignore[return-value]

    @property  # type: ignore[override]
    def reason(self) -> str:
        given = self._given
        return given if given is not None else self._words()[0]

    @property  # type: ignore[override]
    def details(self) -> Mapping[str, object]:
        return self._words()[1]


def relabel(sc: ScoredCandidate, verdict: Verdict, code: str, reason: str) -> ScoredCandidate:
    """``dataclasses.replace(sc, verdict=, code=, reason=)`` that leaves numbers and details
    computed on first read as they are (``replace`` reads every field)."""
    if isinstance(sc, _TwinScored):
        return sc.relabel(verdict, code, reason)
    if isinstance(sc, _NearMissScored) and sc._pending is not None:
        graph, target = sc._pending
        return _NearMissScored(
            sc.candidate, sc.priority, verdict, reason, code, _graph=graph, _target=target
        )
    return replace(sc, verdict=verdict, code=code, reason=reason)


def _anchor_ties(graph: Graph, io: GroupIO) -> tuple[str, ...]:
    """The outputs of equal largest size among which ``ub_need`` picks its anchor by
    name length (the one place a name decides a number), in its order; () when the
    largest is unique."""
    table = size_table(graph)
    kinds = node_kinds(graph)
    compute = [n for n in io.nodes if not kinds[n.name] & VIEW]
    if not compute:
        return ()

    def sized(ts: Sequence[str]) -> list[tuple[str, int]]:
        return [
            (t, math.prod(table[t][0])) for t in ts if t and t in table and table[t][0] is not None
        ]

    found = sized(io.outputs) or sized(compute[-1].outputs)
    if not found:
        return ()
    top = max(n for _, n in found)
    tied = tuple(t for t, n in found if n == top)
    return tied if len(tied) > 1 else ()


def _first_shortest(names: Sequence[str]) -> int:
    lengths = [len(t) for t in names]
    return lengths.index(min(lengths))


def _set_keys(
    graph: Graph,
    nodes_of: Callable[[int], Sequence[str]],
    which: Sequence[int],
    twins: Mapping[int, tuple[int, int]],
) -> list[int]:
    """One int per candidate ``which[k]`` (a candidate index; ``nodes_of`` gives its
    nodes), equal for two candidates exactly when their node sets are equal: the least
    node position and the set's shape (positions minus the least, interned). A twin's
    shape is its source's and its least position the source's plus the offset
    (``MatchResult.twins``), so only the candidates that are no twin, and the sources,
    are read node by node."""
    pos = topo_position(graph)
    shapes: dict[tuple[int, ...], int] = {}

    def read(i: int) -> tuple[int, int]:
        ps = sorted(set(map(pos.__getitem__, nodes_of(i))))
        lo = ps[0]
        return lo, shapes.setdefault(tuple(p - lo for p in ps), len(shapes))

    n = len(which)
    lows = np.empty(n, dtype=np.int64)
    sids = np.empty(n, dtype=np.int64)
    at = np.asarray(which, dtype=np.int64)
    if isinstance(twins, TwinMap) and len(twins):
        k = np.minimum(twins.index.searchsorted(at), len(twins) - 1)
        is_twin = twins.index[k] == at
    else:
        k = np.zeros(n, dtype=np.int64)
        is_twin = np.zeros(n, dtype=bool)
    # no twin: read from the names (a few thousand: a stack's first and last layers)
    for t in np.flatnonzero(~is_twin).tolist():
        lows[t], sids[t] = read(which[t])
    rows = np.flatnonzero(is_twin)
    if len(rows):
        k = k[rows]
        sources, back = np.unique(twins.source[k], return_inverse=True)  # type: ignore[union-attr]
        table = np.asarray([read(j) for j in sources.tolist()], dtype=np.int64).reshape(-1, 2)
        lows[rows] = table[back.reshape(-1), 0] + twins.shift[k]  # type: ignore[union-attr]
        sids[rows] = table[back.reshape(-1), 1]
    return (lows * max(len(shapes), 1) + sids).tolist()


def _duplicate_reason(w_rule: str, w_priority: int, rule: str, priority: int) -> str:
    """Why a candidate lost to ``w_rule``'s with the same node set."""
    if rule == w_rule:
        return f"same nodes as another match of {w_rule}"
    if priority == w_priority:
        return (
            f"same nodes as {w_rule}, equal priority {priority}: "
            f"tie broken by rule name ({w_rule} < {rule})"
        )
    return f"same nodes as {w_rule} (priority {w_priority} > {priority})"


def _duplicate_groups(
    graph: Graph,
    viable: Sequence[int],
    nodes_of: Callable[[int], Sequence[str]],
    twins: Mapping[int, tuple[int, int]],
) -> list[list[int]]:
    """The viable candidates (indices) sharing a node set with another, per set
    (``_set_keys``: no set made per record; node sets shared by several grouped by numpy)."""
    at = np.asarray(_set_keys(graph, nodes_of, viable, twins), dtype=np.int64)
    order = np.argsort(at, kind="stable")
    srt = at[order]
    edge = np.flatnonzero(srt[1:] != srt[:-1]) + 1
    starts, ends = np.r_[0, edge], np.r_[edge, len(srt)]
    many = np.flatnonzero(ends - starts > 1)
    pick = np.asarray(viable, dtype=np.int64)[order]
    return [
        pick[a:b].tolist() for a, b in zip(starts[many].tolist(), ends[many].tolist(), strict=True)
    ]


def _duplicate_losers(
    groups: Iterable[list[int]],
    priority_of: Callable[[int], int],
    rule_of: Callable[[int], str],
    key_of: Callable[[int], tuple],
) -> Iterator[tuple[int, str]]:
    """Per group of viable candidates with one node set: every one but the highest
    priority's (then least key), with why it is a duplicate, as (index, reason)."""
    texts: dict[tuple, str] = {}  # one reason per (winner's rule and priority, loser's)
    for idxs in groups:
        if len(idxs) < 2:
            continue
        prio = {i: priority_of(i) for i in idxs}
        rule = {i: rule_of(i) for i in idxs}
        # ranked by (-priority, candidate key); the key starts with the rule name, so
        # when no two share priority and rule (the common case: 10^4 groups on a
        # stack) (-priority, rule) orders them alike without spelling a key
        heads = [(-prio[i], rule[i], i) for i in idxs]
        if len({h[:2] for h in heads}) == len(heads):
            ranked = [h[2] for h in sorted(heads)]
        else:
            ranked = sorted(idxs, key=lambda i: (-prio[i], key_of(i)))
        w = ranked[0]
        w_rule, w_priority = rule[w], prio[w]
        for i in ranked[1:]:
            told = (w_rule, w_priority, rule[i], prio[i])
            why = texts.get(told)
            if why is None:
                why = texts[told] = _duplicate_reason(*told)
            yield i, why


def _reduce_duplicates(
    scored: list[ScoredCandidate],
    graph: Graph | None = None,
    twins: Mapping[int, tuple[int, int]] | None = None,
) -> list[ScoredCandidate]:
    """Among viable candidates with the same node set, the higher priority survives.
    ``scored`` is in candidate order; with ``graph`` the node sets are compared as
    ``_set_keys`` (no set made per record), else as sets."""
    # the verdicts compared by C-level maps (10^5-10^6 records on a stack)
    is_fuse = map(is_, map(attrgetter("verdict"), scored), repeat(Verdict.FUSE))
    viable = list(compress(range(len(scored)), is_fuse))
    groups: Iterable[list[int]]
    if graph is not None:
        groups = _duplicate_groups(graph, viable, lambda i: scored[i].candidate.nodes, twins or {})
    else:
        records = map(scored.__getitem__, viable)
        keys = list(map(frozenset, map(attrgetter("candidate.nodes"), records)))
        shared = {h for h, n in Counter(keys).items() if n > 1}  # counted in C; few repeat
        by_nodes: dict[object, list[int]] = {}
        for i, h in zip(viable, keys, strict=True):
            if h in shared:
                by_nodes.setdefault(h, []).append(i)
        groups = by_nodes.values()
    out = list(scored)
    for i, why in _duplicate_losers(
        groups,
        lambda i: scored[i].priority,
        lambda i: scored[i].candidate.rule,
        lambda i: scored[i].candidate.key,
    ):
        out[i] = relabel(scored[i], Verdict.DUPLICATE, "duplicate", why)
    return out


def _not_twins(twins: Mapping[int, tuple[int, int]], n: int) -> list[int]:
    """The candidate indices below ``n`` that are no twin, ascending."""
    if isinstance(twins, TwinMap):
        own = np.ones(n, dtype=bool)
        own[twins.index] = False
        return np.flatnonzero(own).tolist()
    return [i for i in range(n) if i not in twins]


def _by_source(
    twins: Mapping[int, tuple[int, int]],
) -> Iterator[tuple[int, list[int], list[int]]]:
    """The twins grouped by the candidate they translate: (source, their indices, their
    offsets), sources ascending, indices ascending within each."""
    if isinstance(twins, TwinMap):
        if not len(twins):
            return
        order = np.argsort(twins.source, kind="stable")
        src = twins.source[order]
        cuts = np.flatnonzero(src[1:] != src[:-1]) + 1
        for rows in np.split(order, cuts):
            yield int(twins.source[rows[0]]), twins.index[rows].tolist(), twins.shift[rows].tolist()
        return
    groups: dict[int, tuple[list[int], list[int]]] = {}
    for i, (j, shift) in sorted(twins.items()):
        idx, shifts = groups.setdefault(j, ([], []))
        idx.append(i)
        shifts.append(shift)
    for j in sorted(groups):
        yield j, *groups[j]


def score_candidates(
    graph: Graph,
    match_result: MatchResult | Sequence[Candidate],
    rule_set: RuleSet,
    target: Target,
    *,
    benefit_threshold: float | None = None,
) -> Sequence[ScoredCandidate]:
    """Score every candidate and near miss; sorted by candidate key (deterministic).

    ``benefit_threshold`` overrides every rule's own threshold when given. On the
    memo's result (``MatchResult.near_at`` known) the records come as a
    ``ScoredRecords``: verdicts, codes, rules and net bytes as arrays, each record made
    on first read; else as a tuple.
    """
    if isinstance(match_result, MatchResult):
        candidates, near = match_result.candidates, match_result.near_misses
    else:
        candidates, near = tuple(match_result), ()
    rules = rule_set.by_name()
    twins = match_result.twins if isinstance(match_result, MatchResult) else {}
    with paused_gc():
        memo = GroupMemo(graph, target)
        n_c = len(candidates)
        # records made now, by candidate index (the candidates that are no twin, and the
        # twins whose names pick another anchor); the others are made from a template
        # (``_TwinScored.like``) when read
        made: dict[int, ScoredCandidate] = {}
        template = np.full(n_c, -1, dtype=np.int64)
        templates: list[tuple] = []
        for i in _not_twins(twins, n_c):
            c = candidates[i]
            made[i] = score_one(graph, c, rules.get(c.rule), target, benefit_threshold, memo=memo)
        # a translated candidate takes its twin's verdict and numbers (match.memo),
        # unless names of tied anchor candidates sort otherwise by length there
        # per twin source: its tied anchor outputs (node position, port), and which of
        # them the source picks (by name length), its rule and its twins' template
        ties: dict[int, tuple[tuple[tuple[int, int], ...], int, str, int]] = {}
        by_port: dict[int, Any] = {}  # output port -> each node's output name length there

        def out_len(q: int) -> Any:
            got = by_port.get(q)
            if got is None:
                got = by_port[q] = np.fromiter(
                    (len(n.outputs[q]) if q < len(n.outputs) else 1 << 30 for n in nodes),
                    dtype=np.int64,
                    count=len(nodes),
                )
            return got

        redo: dict[str, tuple] = {}  # per rule: what _TwinScored recomputes its words with
        pos = topo_position(graph)
        nodes = graph.nodes

        def source(j: int) -> tuple[tuple[tuple[int, int], ...], int, str, int]:
            hit = ties.get(j)
            if hit is None:
                base = made[j]
                tied = _anchor_ties(graph, memo.analyse(base.candidate.nodes)[0])
                at = tuple(
                    (pos[graph.tensors[t].producer], graph.tensors[t].producer_port or 0)
                    for t in tied
                )
                rule_name = base.candidate.rule
                again = redo.get(rule_name)
                if again is None:
                    again = redo[rule_name] = (
                        graph,
                        rules.get(rule_name),
                        target,
                        benefit_threshold,
                        memo,
                    )
                templates.append(_TwinScored.like_template(base, again))
                hit = ties[j] = (
                    at,
                    _first_shortest([nodes[k].outputs[q] for k, q in at]) if at else 0,
                    rule_name,
                    len(templates) - 1,
                )
            return hit

        for j, idx, shifts in _by_source(twins):
            refs, picked, rule_name, t = source(j)
            rules_of = _rules_at(candidates, idx)
            if not refs and all(map(rule_name.__eq__, rules_of)):
                # the common case: every twin of this source takes its record
                template[idx] = t
                continue
            # where the source's anchor is one of equal-sized outputs picked by name
            # length, each twin whose names pick the same one (``_first_shortest`` at
            # every offset at once: the first least length per column)
            same = [True] * len(idx)
            if refs:
                at = np.asarray(shifts, dtype=np.int64)
                lengths = np.stack([out_len(q)[k + at] for k, q in refs])
                same = (lengths.argmin(axis=0) == picked).tolist()
            for i, rule_i, alike in zip(idx, rules_of, same, strict=True):
                if alike and rule_name == rule_i:
                    template[i] = t
                    continue
                c = candidates[i]
                made[i] = score_one(
                    graph, c, rules.get(c.rule), target, benefit_threshold, memo=memo
                )
        like = _TwinScored.like

        def get(i: int) -> ScoredCandidate:
            rec = made.get(i)
            return rec if rec is not None else like(candidates[i], templates[int(template[i])])

        # verdicts of the candidates: the duplicates' check reads them
        t_verdict = np.fromiter((VERDICT_ID[t[1]] for t in templates), np.int64, len(templates))
        verdict_c = np.full(n_c, -1, dtype=np.int64)
        has_t = template >= 0
        verdict_c[has_t] = t_verdict[template[has_t]]
        for i, rec in made.items():
            verdict_c[i] = VERDICT_ID[rec.verdict]
        viable = np.flatnonzero(verdict_c == FUSE_ID).tolist()
        groups = _duplicate_groups(graph, viable, lambda i: candidates[i].nodes, twins)

        def priority_of(i: int) -> int:
            rec = made.get(i)
            return rec.priority if rec is not None else templates[int(template[i])][0]

        # a twin that is a duplicate takes a template of its own (one per template and
        # reason: ``relabel``'s record, made when read)
        dup_templates: dict[tuple[int, str], int] = {}
        in_groups = [i for g in groups for i in g]
        rule_of = dict(zip(in_groups, _rules_at(candidates, in_groups), strict=True))
        for i, why in _duplicate_losers(
            groups, priority_of, rule_of.__getitem__, lambda i: candidates[i].key
        ):
            verdict_c[i] = VERDICT_ID[Verdict.DUPLICATE]
            rec = made.get(i)
            if rec is not None:
                made[i] = relabel(rec, Verdict.DUPLICATE, "duplicate", why)
                continue
            t = int(template[i])
            d = dup_templates.get((t, why))
            if d is None:
                priority, _v, _c, cost, _given, again = templates[t]
                templates.append((priority, Verdict.DUPLICATE, "duplicate", cost, why, again))
                d = dup_templates[t, why] = len(templates) - 1
            template[i] = d
        near_record = _near_record_maker(graph, rules, target)
        near_at = match_result.near_at if isinstance(match_result, MatchResult) else None
        if near_at is None or len(near_at) != len(near):
            scored = list(map(get, range(n_c)))
            from_near = list(map(near_record, near))
            # (candidate key, verdict), the key's parts read one by one (a translated
            # candidate keeps no key tuple): a StrEnum sorts as its value
            order = attrgetter(
                "candidate.rule", "candidate.nodes", "candidate.alternative", "verdict"
            )
            return tuple(sorted(scored + from_near, key=order))
        return _records(
            candidates,
            near,
            near_at,
            made,
            template,
            templates,
            verdict_c,
            near_record,
            {name: r.priority for name, r in rules.items()},
            twins,
        )


def _rules_at(candidates: Sequence[Candidate], idx: list[int]) -> list[str]:
    """The rules of candidates ``idx``: from the memo's rows when it has them (no record
    made: ``_CandRows.rule_at``), else read."""
    rule_at = getattr(candidates, "rule_at", None)
    if rule_at is not None:
        return rule_at(idx)
    return list(map(attrgetter("rule"), map(candidates.__getitem__, idx)))


def _rule_runs(seq: Sequence[Any], rule_of: Callable[[Any], str]) -> tuple[list[str], list[int]]:
    """The rules of a sequence sorted by rule, and how many records each has (a binary
    search per rule, not a read per record)."""
    names: list[str] = []
    sizes: list[int] = []
    i, n = 0, len(seq)
    while i < n:
        r = rule_of(seq[i])
        j = bisect_right(seq, r, i, n, key=rule_of)
        names.append(r)
        sizes.append(j - i)
        i = j
    return names, sizes


def _records(
    candidates: Sequence[Candidate],
    near: Sequence[NearMiss],
    near_at: Any,
    made: dict[int, ScoredCandidate],
    template: np.ndarray,
    templates: list[tuple],
    verdict_c: np.ndarray,
    near_record: Callable[[NearMiss], ScoredCandidate],
    priority: Mapping[str, int],
    twins: Mapping[int, tuple[int, int]],
) -> ScoredRecords:
    """The candidates' records (in key order) and the near misses' (in key order) in one
    key order, near miss ``k`` right before candidate ``near_at[k]`` (``MatchResult``:
    all keys distinct): what sorting them by (key, verdict) gives, without reading a key
    (10^5-10^6 records on a stack); each record made when read."""
    n_c, n_n = len(candidates), len(near)
    at = np.asarray(near_at, dtype=np.int64)
    origin = np.empty(n_c + n_n, dtype=np.int64)
    # candidate i: after itself and the near misses that sort before it
    origin[np.arange(n_c) + np.searchsorted(at, np.arange(n_c), "right")] = np.arange(n_c)
    origin[at + np.arange(n_n)] = np.arange(n_c, n_c + n_n)
    # codes: per candidate from its template or record, per near miss its own
    code_names: dict[str, int] = {}
    t_code = np.fromiter(
        (code_names.setdefault(t[2], len(code_names)) for t in templates),
        np.int64,
        len(templates),
    )
    t_net = np.fromiter(
        (t[3].net_bytes if t[3] is not None else 0 for t in templates), np.int64, len(templates)
    )
    t_costed = np.fromiter((t[3] is not None for t in templates), bool, len(templates))
    has_t = template >= 0
    code_c = np.zeros(n_c, dtype=np.int64)
    net_c = np.zeros(n_c, dtype=np.int64)
    costed_c = np.zeros(n_c, dtype=bool)
    code_c[has_t] = t_code[template[has_t]]
    net_c[has_t] = t_net[template[has_t]]
    costed_c[has_t] = t_costed[template[has_t]]
    for i, rec in made.items():
        code_c[i] = code_names.setdefault(rec.code, len(code_names))
        cost = rec.cost
        if cost is not None:
            net_c[i] = cost.net_bytes
            costed_c[i] = True
    ids = getattr(near, "code_ids", None)
    if ids is not None:  # the memo's near misses (``_NearRows``): codes as ids, no record
        names = near.code_names  # type: ignore[attr-defined]
        local = np.fromiter(
            (code_names.setdefault(c, len(code_names)) for c in names), np.int64, len(names)
        )
        code_n = local[ids] if len(names) else np.zeros(n_n, dtype=np.int64)
        distinct = list(names)
    else:
        near_codes = list(map(attrgetter("code"), near))
        distinct = list(dict.fromkeys(near_codes))
        for code in distinct:
            code_names.setdefault(code, len(code_names))
        code_n = np.fromiter(map(code_names.__getitem__, near_codes), np.int64, n_n)
    verdict_of = {
        code_names[c]: VERDICT_ID[_NEAR_MISS_VERDICTS.get(c, Verdict.CONSTRAINT_FAILED)]
        for c in distinct
    }
    verdict_n = np.zeros(n_n, dtype=np.int64)
    for k, v in verdict_of.items():
        verdict_n[code_n == k] = v
    # rules: candidates and near misses each come in runs of one rule (key order)
    rule_names: dict[str, int] = {}
    per: list[Any] = []
    for seq, get in ((candidates, attrgetter("rule")), (near, attrgetter("candidate.rule"))):
        names, sizes = _rule_runs(seq, get)
        ids = [rule_names.setdefault(r, len(rule_names)) for r in names]
        per.append(np.repeat(np.asarray(ids, dtype=np.int64), sizes))
    return ScoredRecords(
        origin=origin,
        candidates=candidates,
        near=near,
        made=made,
        template=template,
        templates=templates,
        twin=_TwinScored.like,
        near_record=near_record,
        verdicts=np.concatenate([verdict_c, verdict_n])[origin].astype(np.int8),
        codes=np.concatenate([code_c, code_n])[origin].astype(np.int32),
        code_names=list(code_names),
        rules=np.concatenate(per)[origin].astype(np.int32),
        rule_names=list(rule_names),
        rule_priority=[priority.get(r, 0) for r in rule_names],
        nets=np.concatenate([net_c, np.zeros(n_n, dtype=np.int64)])[origin],
        costed=np.concatenate([costed_c, np.zeros(n_n, dtype=bool)])[origin],
        twins=twins,
    )
