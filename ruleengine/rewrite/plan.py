"""Build the fusion plan from the resolution (its JSON form: ``plan_json``).

Groups are numbered in topological order of their first node, so ids are stable for a
given model and rule set. Every candidate that did not become a group is listed with its
verdict, a stable code and a sentence; per-rule statistics follow ATC's fusion result file
(how often a rule matched, how often it took effect).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ruleengine.cost.model import ScoredCandidate, Target
from ruleengine.graph.model import Graph
from ruleengine.match.model import MatchResult
from ruleengine.resolve.model import Resolution
from ruleengine.rewrite.model import (
    FusedGroup,
    KernelSpec,
    Plan,
    Rejection,
    RuleStats,
    Verification,
)
from ruleengine.rewrite.outpaths import safe_relpath
from ruleengine.rewrite.rejections import ListedRejections, RejectedCandidates, match_counts
from ruleengine.rules.checks import check_unknown_params
from ruleengine.rules.model import FrozenMap, Rule, RuleSet, default_kernel_name


def to_json(value: Any) -> Any:
    """Rule values (FrozenMap, tuples) as plain JSON values, keys in their YAML order."""
    if isinstance(value, FrozenMap | Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [to_json(v) for v in value]
    return value


def kernel_spec(rule: Rule) -> KernelSpec:
    """The rule's ``output`` section with paths checked and made relative to OUTDIR."""
    out = rule.output
    where = out.location or rule.location
    return KernelSpec(
        kernel_name=out.kernel_name or default_kernel_name(rule.name),
        file_path=safe_relpath(out.file_path, f"rule {rule.name}: output.file_path", where)
        if out.file_path
        else None,
        compiler=out.compiler,
        build_config=to_json(out.build_config) if out.build_config else None,
        debug_symbols=bool(out.debug_symbols),
        gen_dot_graph=bool(out.gen_dot_graph),
        dot_graph_path=safe_relpath(
            out.dot_graph_path, f"rule {rule.name}: output.dot_graph_path", where
        )
        if out.dot_graph_path
        else None,
    )


def group_boundary(graph: Graph, nodes: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """External inputs (first-use order) and escaping outputs of a node set."""
    members = set(nodes)
    ordered = sorted((graph.node(n) for n in members), key=lambda n: n.index)
    produced = {t for n in ordered for t in n.outputs if t}
    inputs: list[str] = []
    seen: set[str] = set()
    for n in ordered:
        for t in n.inputs:
            if t and t not in produced and t not in seen:
                seen.add(t)
                inputs.append(t)
    outputs: list[str] = []
    for n in ordered:
        for t in n.outputs:
            if not t:
                continue
            tensor = graph.tensors.get(t)
            if tensor is None:
                continue
            leaves = tensor.is_graph_output or any(c not in members for c, _ in tensor.consumers)
            if leaves:
                outputs.append(t)
    return tuple(inputs), tuple(outputs)


def build_groups(
    graph: Graph, chosen: Sequence[ScoredCandidate], rule_set: RuleSet
) -> tuple[FusedGroup, ...]:
    """Number the chosen candidates and gather what the rewriter and the plan need."""
    rules = rule_set.by_name()
    index = {n.name: n.index for n in graph.nodes}
    ordered = sorted(
        chosen, key=lambda s: (min(index[n] for n in s.candidate.nodes), s.candidate.key)
    )
    groups: list[FusedGroup] = []
    for gid, sc in enumerate(ordered, start=1):
        rule = rules[sc.candidate.rule]
        nodes = tuple(sorted(set(sc.candidate.nodes), key=index.__getitem__))
        inputs, outputs = group_boundary(graph, nodes)
        if not outputs:  # dead code: a function still needs an output to be a valid call
            outputs = tuple(t for t in graph.node(nodes[-1]).outputs if t)
        # a branch may name its own fused op and kernel (say what the group contains)
        alt = rule.alternatives[sc.candidate.alternative]
        kernel = kernel_spec(rule)
        if alt.kernel_name:
            kernel = replace(kernel, kernel_name=alt.kernel_name)
        groups.append(
            FusedGroup(
                id=gid,
                scored=sc,
                target_op=alt.target_op or rule.rewrite.target_op,
                nodes=nodes,
                op_types=tuple(graph.node(n).op_type for n in nodes),
                inputs=inputs,
                outputs=outputs,
                kernel=kernel,
                attributes=to_json(rule.rewrite.attributes) or None,
                tensor_layout=rule.rewrite.tensor_layout,
                kernel_config=to_json(rule.rewrite.kernel_config) or None,
                port_map=resolve_ports(graph, sc, rule),
            )
        )
    return tuple(groups)


def resolve_ports(graph: Graph, sc: ScoredCandidate, rule: Rule) -> tuple[dict[str, Any], ...]:
    """rewrite.inputs on this group's real tensors, for the kernel generator.

    ``from_op``/``output_idx`` name an op of the pattern and one of its outputs; the op's
    output node is the last of its bound nodes in topological order (a composite or a
    repeat binds several). ``from_op``/``input_idx`` name the tensor the op's first bound
    node reads on that input (the external tensor behind the port); ``internal`` says
    whether the port's tensor is produced inside the group (``check`` warns, AF307).
    """
    ports = []
    bindings = sc.candidate.bindings
    inside = set(sc.candidate.nodes)
    for entry in rule.rewrite.inputs:
        tensor = None
        if 0 <= entry.from_op < len(bindings) and bindings[entry.from_op]:
            order = sorted(bindings[entry.from_op], key=lambda n: graph.node(n).index)
            if entry.input_idx is not None:
                ins = graph.node(order[0]).inputs
                if entry.input_idx < len(ins) and ins[entry.input_idx]:
                    tensor = ins[entry.input_idx]
            else:
                outs = graph.node(order[-1]).outputs
                if entry.output_idx < len(outs) and outs[entry.output_idx]:
                    tensor = outs[entry.output_idx]
        producer = graph.tensors[tensor].producer if tensor in graph.tensors else None
        port = {
            "input_port": entry.input_port,
            "from_op": entry.from_op,
            **(
                {"input_idx": entry.input_idx}
                if entry.input_idx is not None
                else {"output_idx": entry.output_idx}
            ),
            "tensor": tensor,
            "internal": producer is not None and producer in inside,
        }
        if entry.description:
            port["description"] = entry.description
        ports.append(port)
    return tuple(sorted(ports, key=lambda p: p["input_port"]))


def check_output_paths(rule_set: RuleSet) -> None:
    """Refuse, before anything is computed or written, any rule output path escaping OUTDIR."""
    for rule in rule_set.rules:
        kernel_spec(rule)


def node_traffic(graph: Graph) -> tuple[int, tuple[str, ...]]:
    """Whole-model unfused HBM traffic: each run-time node reads its inputs and writes its
    outputs.

    The cost model's unfused count (``cost.traffic.traffic``'s ``bytes_before``) over all
    nodes but the compile-time ones (a compiler folds them; view ops move no data either),
    in one pass. Returns (bytes, the tensors of unknown size, which are not counted).
    """
    from ruleengine.cost.opinfo import VIEW, node_kinds, size_table

    table = size_table(graph)
    kinds = node_kinds(graph)
    before = 0
    unknown: dict[str, None] = {}
    for node in graph.nodes:
        if node.compile_time or kinds[node.name] & VIEW:
            continue
        for t in (*dict.fromkeys(t for t in node.inputs if t), *(t for t in node.outputs if t)):
            entry = table.get(t)
            if entry is None or entry[2] is None:
                unknown[t] = None
            else:
                before += entry[2]
    return before, tuple(unknown)


def unknown_min_bytes(graph: Graph, names: Sequence[str]) -> int:
    """A lower bound of the bytes of tensors of unknown size: unknown dims count as 1,
    an unknown rank or dtype as nothing."""
    from ruleengine.graph.model import DTYPE_SIZES

    total = 0
    for name in names:
        t = graph.tensors.get(name)
        size = DTYPE_SIZES.get((t.dtype if t is not None else None) or "")
        if t is None or t.shape is None or size is None:
            continue
        n = size
        for d in t.shape:
            n *= d if isinstance(d, int) else 1
        total += n
    return total


def build_plan(
    *,
    model_name: str,
    graph: Graph,
    rule_set: RuleSet,
    target: Target,
    match: MatchResult,
    scored: Sequence[ScoredCandidate],
    resolution: Resolution,
    groups: Sequence[FusedGroup],
    dropped: Sequence[FusedGroup] = (),
    verification: Verification | None = None,
    timings: Sequence[tuple[str, float]] = (),
    cpu_timings: Sequence[tuple[str, float]] = (),
    model_sha256: str | None = None,
    listed: ListedRejections | None = None,
) -> Plan:
    """Assemble the plan record (groups after safe mode, rejections, statistics, totals).

    ``listed`` (from ``list_rejections`` before the per-candidate records were let go)
    stands for ``match``'s, ``scored``'s and ``resolution.lost``'s rejections and match
    counts: a compact plan then holds only what it lists."""
    before, unknown = node_traffic(graph)
    saved = sum(g.scored.cost.bytes_saved for g in groups if g.scored.cost is not None)
    rejected: Sequence[Rejection]
    if listed is not None:
        rejected = listed.with_dropped(dropped)
    else:
        rejected = RejectedCandidates(scored, resolution.lost, dropped, match.near_misses)

    # ATC's "match times": every structural match, including near misses.
    matched = listed.matched if listed is not None else match_counts(match)
    fused: dict[str, int] = {}
    for g in groups:
        fused[g.rule] = fused.get(g.rule, 0) + 1
    # a rule with a param its op does not have (AF303) never matches: its structural
    # matches are near misses only, never counted as matched
    never = {r.name for r in rule_set.rules if check_unknown_params(r)}
    stats = tuple(
        RuleStats(r.name, 0 if r.name in never else matched.get(r.name, 0), fused.get(r.name, 0))
        for r in rule_set.rules
    )
    n_before = len(graph.nodes)
    n_after = n_before - sum(len(g.nodes) for g in groups) + len(groups)
    costs = [g.scored.cost for g in groups if g.scored.cost is not None]
    return Plan(
        model=model_name,
        graph_name=graph.name,
        target=target.name,
        solver=resolution.solver,
        status=resolution.status,
        objective=resolution.objective,
        bound=resolution.bound,
        solver_seconds=resolution.seconds,
        nodes_before=n_before,
        nodes_after=n_after,
        hbm_bytes_before=before,
        hbm_bytes_after=before - saved,
        launches_saved=sum(c.launches_saved for c in costs),
        time_saved_s=sum(c.time_saved_s for c in costs),
        hbm_bandwidth=target.hbm_bandwidth,
        groups=tuple(groups),
        rejected=rejected,
        rules=stats,
        unknown_traffic_tensors=len(unknown),
        unknown_size_min_bytes=unknown_min_bytes(graph, unknown),
        compile_time_nodes=len(graph.compile_time_nodes),
        verification=verification,
        timings=tuple(timings),
        cpu_timings=tuple(cpu_timings),
        model_sha256=model_sha256,
    )
