"""Build the fusion plan from the resolution, and render it as JSON (plan.json).

Groups are numbered in topological order of their first node, so ids are stable for a
given model and rule set. Every candidate that did not become a group is listed with its
verdict, a stable code and a sentence; per-rule statistics follow ATC's fusion result file
(how often a rule matched, how often it took effect).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from itertools import chain, compress, groupby, islice, repeat
from operator import attrgetter, is_not, itemgetter, le, ne
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any, NoReturn

from ruleengine.cost.model import ScoredCandidate, Target, Verdict
from ruleengine.cost.scored import RecordView, ScoredRecords
from ruleengine.diagnostics.model import Diagnostic, Location, Severity
from ruleengine.errors import OutputError
from ruleengine.graph.model import Graph
from ruleengine.match.model import MatchResult
from ruleengine.records import LazyTuple
from ruleengine.resolve.lost import LostCandidates
from ruleengine.resolve.model import Resolution
from ruleengine.rewrite.model import (
    FUSED_DOMAIN,
    PLAN_SCHEMA_VERSION,
    FusedGroup,
    KernelSpec,
    OutputCheck,
    Plan,
    Rejection,
    RuleStats,
    Verification,
)
from ruleengine.rules.model import FrozenMap, Rule, RuleSet, default_kernel_name

PLAN_DETAILS = ("compact", "full")
EXAMPLES_PER_VERDICT = 3  # compact detail: rejected candidates kept per (rule, verdict)


def to_json(value: Any) -> Any:
    """Rule values (FrozenMap, tuples) as plain JSON values, keys in their YAML order."""
    if isinstance(value, FrozenMap | Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [to_json(v) for v in value]
    return value


def safe_relpath(path: str, what: str, location: Location | None = None) -> str:
    """Normalise a rule's output path relative to OUTDIR; refuse one that would escape it."""
    posix = path.replace("\\", "/")
    if PurePosixPath(posix).is_absolute() or PureWindowsPath(path).drive or path.startswith("~"):
        raise _escape_error(path, what, location, "it is absolute")
    parts: list[str] = []
    for part in PurePosixPath(posix).parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise _escape_error(path, what, location, "'..' leaves the output directory")
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts) or "."


def _escape_error(path: str, what: str, location: Location | None, why: str) -> OutputError:
    diag = Diagnostic(
        code="AF208",  # the rule loader's code for the same finding
        name="unsafe-path",
        severity=Severity.ERROR,
        message=f"{what} {path!r} escapes the output directory: {why}",
        location=location,
        hint="write output paths relative to the output directory, without '..' or a leading '/'",
    )
    return OutputError(f"{what} {path!r} escapes the output directory ({why})", (diag,))


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
    stats = tuple(
        RuleStats(r.name, matched.get(r.name, 0), fused.get(r.name, 0)) for r in rule_set.rules
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


def match_counts(match: MatchResult) -> Counter[str]:
    """Per rule, how many distinct node tuples it matched (ATC's "match times"),
    candidates and near misses: the distinct (rule, node tuple) pairs, counted from the
    records' cached node tuples (no node set is made and kept per record: ~1 KB each)."""
    if match.matched is not None:  # counted by the matcher (``match.memo``)
        return Counter(match.matched)
    if match.near_at is not None:
        # the memo's records (``MatchResult.near_at``): candidates and near misses each
        # in key order, so equal node tuples of a rule are neighbours, and no near miss
        # has a candidate's; a pair counts where it differs from the one before it
        counts: Counter[str] = Counter()
        for records in (match.candidates, list(map(attrgetter("candidate"), match.near_misses))):
            pairs = list(map(attrgetter("rule", "nodes"), records))
            counts.update(
                compress(map(itemgetter(0), pairs), chain((True,), map(ne, pairs[1:], pairs)))
            )
        return counts
    found = chain(match.candidates, map(attrgetter("candidate"), match.near_misses))
    distinct: dict[str, set[tuple[str, ...]]] = {}  # per rule, in first-seen order
    # records come in runs of one rule (sorted by key): one set update per run
    for rule, run in groupby(map(attrgetter("rule", "nodes"), found), itemgetter(0)):
        seen = distinct.get(rule)
        if seen is None:
            seen = distinct[rule] = set()
        seen.update(map(itemgetter(1), run))
    return Counter({rule: len(seen) for rule, seen in distinct.items()})


class RejectedCandidates(LazyTuple[Rejection]):
    """Every candidate that did not become a group, in (rule, nodes, code) order: the
    non-viable scored records, the losers of conflicts, the groups safe mode dropped and
    the near misses the cost stage did not carry.

    A 2048-layer stack has ~10^6 of them while a compact plan lists ~3 per (rule,
    verdict): the counts (``by_verdict``) and the few listed (``examples``, ``head``)
    are computed from the source records without building a record per rejection; the
    whole sorted sequence (iteration, indexing, ``--plan-detail full``) is built on
    first use, each reason read only when shown."""

    def __init__(
        self,
        scored: Sequence[ScoredCandidate],
        lost: Sequence[tuple[ScoredCandidate, str]] = (),
        dropped: Sequence[FusedGroup] = (),
        near_misses: Sequence[Any] = (),
        *,
        from_cost: bool = False,
    ) -> None:
        """``from_cost``: ``scored`` is ``score_candidates``' output for the match whose
        ``near_misses`` these are (a record for every one of them, every record in
        candidate key order) and ``lost`` ``resolve``'s of it (in the same order): the
        near misses are not looked up among the records, and no bucket's order is
        checked (10^5-10^6 records on a stack)."""
        self._all: tuple[Rejection, ...] | None = None
        self._buckets: dict[tuple[str, str], list[int]] | None = None
        self._nodes: list[tuple[str, ...]] | None = None
        self._in_order = from_cost
        # (rule ids, rule names, verdict ids, verdict names) per entry, when known as arrays
        self._keys: tuple[Any, list[str], Any, list[str]] | None = None
        losers = lost.losers() if isinstance(lost, LostCandidates) else None
        if (
            from_cost
            and isinstance(scored, ScoredRecords)
            and isinstance(losers, RecordView)
            and losers.records is scored
            and not dropped
        ):
            self._from_arrays(scored, lost, losers)  # type: ignore[arg-type]
            return
        # One entry per rejection, in the order a stable sort ties them, kept as parallel
        # lists filled by C-level maps (10^5-10^6 entries): the record (with .candidate
        # and a .reason read when shown), its verdict, its code; fixed reasons by index.
        src: list[Any] = list(  # verdicts compared by C-level maps
            compress(scored, map(is_not, map(attrgetter("verdict"), scored), repeat(Verdict.FUSE)))
        )
        verdicts: list[str] = list(map(attrgetter("verdict"), src))  # StrEnum: == value
        codes: list[str] = list(map(attrgetter("code"), src))
        reasons: dict[int, str] = {}
        self._lost: tuple[int, int, LostCandidates] | None = None
        if isinstance(lost, LostCandidates):
            # the losers as scored (same candidates), each reason made when shown
            start = len(src)
            src += losers  # type: ignore[arg-type]
            self._lost = (start, len(src), lost)
        else:
            for sc, why in lost:
                reasons[len(src)] = why
                src.append(sc)
        verdicts += ["lost_conflict"] * len(lost)
        codes += ["lost-conflict"] * len(lost)
        for g in dropped:
            reasons[len(src)] = f"group {g.id} failed numerical verification; dropped by safe mode"
            src.append(g.scored)
        verdicts += ["dropped_by_verification"] * len(dropped)
        codes += ["verification-failed"] * len(dropped)
        if near_misses and not from_cost:  # unless the cost stage carried it with a verdict
            # the near misses' candidates that a record scored from it carries (ids of
            # theirs only: 2 x 10^5 on a 2048-layer stack, where ``src`` has 6 x 10^5)
            ids = set(map(id, map(attrgetter("candidate"), near_misses)))
            carried = ids.intersection(map(id, map(attrgetter("candidate"), src)))
            every = len(carried) == len(ids)  # (the pipeline's case: cost scored them all)
            del ids
            seen: set[tuple[str, tuple[str, ...]]] | None = None
            for nm in () if every else near_misses:
                c = nm.candidate
                if id(c) in carried:
                    continue
                if seen is None:
                    seen = set(
                        zip(self._rules(src), map(attrgetter("candidate.nodes"), src), strict=True)
                    )
                if (c.rule, c.nodes) not in seen:
                    seen.add((c.rule, c.nodes))
                    src.append(nm)
                    verdicts.append("near_miss")
                    codes.append(nm.code)
        self._src: Sequence[Any] = src
        self._verdicts: Sequence[str] = verdicts
        self._codes: Sequence[str] = codes
        self._reasons = reasons

    def _from_arrays(self, scored: ScoredRecords, lost: LostCandidates, losers: RecordView) -> None:
        """The entries from the cost stage's arrays (``ScoredRecords``): the records not
        viable, then the losers, a record made only for an entry shown."""
        import numpy as np

        from ruleengine.cost.scored import FUSE_ID, VERDICT_ID, VERDICTS

        rejected = np.flatnonzero(scored.verdicts != FUSE_ID)
        n_r, n_l = len(rejected), len(losers)
        self._src = scored.view(np.concatenate([rejected, losers.positions]))
        lost_verdict = VERDICT_ID[Verdict.LOST_CONFLICT]
        verdict_names = [str(v) for v in VERDICTS]
        verdict_ids = np.concatenate(
            [scored.verdicts[rejected].astype(np.int64), np.full(n_l, lost_verdict, np.int64)]
        )
        code_names = [*scored.code_names, "lost-conflict"]
        code_ids = np.concatenate(
            [
                scored.codes[rejected].astype(np.int64),
                np.full(n_l, len(scored.code_names), np.int64),
            ]
        )
        self._verdicts = _Named(verdict_ids, verdict_names)
        self._codes = _Named(code_ids, code_names)
        rule_ids = scored.rules[self._src.positions].astype(np.int64)  # type: ignore[attr-defined]
        self._keys = (rule_ids, list(scored.rule_names), verdict_ids, verdict_names)
        self._reasons = {}
        self._lost = (n_r, n_r + n_l, lost)

    @staticmethod
    def _rules(src: list[Any]) -> Iterator[str]:
        return map(attrgetter("candidate.rule"), src)

    def __len__(self) -> int:
        return len(self._src)

    def __repr__(self) -> str:
        return f"RejectedCandidates({len(self)} rejected)"

    def all(self) -> tuple[Rejection, ...]:
        """Every rejection, sorted (built once)."""
        if self._all is None:
            out = [self._build(i) for i in range(len(self._src))]
            out.sort(key=attrgetter("rule", "nodes", "code"))  # stable: ties keep entry order
            self._all = tuple(out)
        return self._all

    def by_verdict(self) -> dict[str, int]:
        """How many rejections per verdict, in verdict order."""
        if self._keys is not None:  # counted by np.bincount
            import numpy as np

            _r, _rn, ids, names = self._keys
            got = np.bincount(ids, minlength=len(names)).tolist()
            return {v: got[k] for v, k in sorted((v, k) for k, v in enumerate(names)) if got[k]}
        counts = Counter(self._verdicts)
        return {str(v): counts[v] for v in sorted(counts)}

    def examples(self, per_key: int) -> tuple[Rejection, ...]:
        """The first ``per_key`` of each (rule, verdict) in sorted order: what
        ``shown_rejections`` lists, without sorting (or building) the others."""
        if self._all is not None:
            return _first_per_key(self._all, per_key)
        keep: list[int] = []
        for idxs in self._by_key().values():
            keep += self._smallest(idxs, per_key)
        return self._sorted(keep)

    def head(self, n: int) -> tuple[Rejection, ...]:
        """The first ``n`` rejections in sorted order (what a terminal shows)."""
        if self._all is not None:
            return self._all[:n]
        keep: list[int] = []
        for idxs in self._by_key().values():
            keep += self._smallest(idxs, n)
        return self._sorted(keep)[:n]

    def listed(self, per_key: int, first: int) -> tuple[Rejection, ...]:
        """Both of the above in one sorted tuple (each rejection once): what a compact
        plan keeps."""
        if self._all is not None:
            return _listed(self._all, per_key, first)
        examples: list[int] = []
        heads: list[int] = []
        for idxs in self._by_key().values():
            top = self._smallest(idxs, max(per_key, first))
            examples += top[:per_key]
            heads += top[:first]
        keep = set(examples) | set(self._order(heads)[:first])
        return tuple(map(self._build, self._order(keep)))

    def _by_key(self) -> dict[tuple[str, str], list[int]]:
        """Entry indices per (rule, verdict), ascending: the pairs numbered (C-level
        maps) and grouped by one stable argsort, not a Python step per entry."""
        if self._buckets is None:
            import numpy as np

            if self._keys is not None:
                r_ids, names, v_ids, verdicts = self._keys
                nv = len(verdicts)
                n = len(r_ids)
                key = r_ids * nv + v_ids
            else:
                rules = list(self._rules(self._src))
                rule_id = {r: k for k, r in enumerate(dict.fromkeys(rules))}
                verdict_id = {v: k for k, v in enumerate(dict.fromkeys(self._verdicts))}
                n = len(rules)
                key = np.fromiter(map(rule_id.__getitem__, rules), np.int64, n) * len(
                    verdict_id
                ) + np.fromiter(map(verdict_id.__getitem__, self._verdicts), np.int64, n)
                names = list(rule_id)
                verdicts = list(verdict_id)
                nv = len(verdict_id)
            order = np.argsort(key, kind="stable")
            cuts = np.flatnonzero(key[order][1:] != key[order][:-1]) + 1
            self._buckets = {
                (names[int(key[rows[0]]) // nv], verdicts[int(key[rows[0]]) % nv]): rows.tolist()
                for rows in (np.split(order, cuts) if n else ())
            }
        return self._buckets

    def _smallest(self, idxs: list[int], n: int) -> list[int]:
        """The ``n`` first of a bucket in plan order (nodes, code, entry), sorted; the
        rows are compared as tuples made by C-level maps (no key function per entry)."""
        codes = self._codes
        if self._in_order:
            # in key order (``from_cost``): the n first and those tied with the n-th on
            # nodes, the node tuples read for those only (not for 10^5-10^6 entries)
            cand = self._candidate
            if len(idxs) > n:
                last = cand(idxs[n - 1]).nodes
                k = n
                while k < len(idxs) and cand(idxs[k]).nodes == last:
                    k += 1
                idxs = idxs[:k]
            ns = [cand(i).nodes for i in idxs]
            rows = zip(ns, map(codes.__getitem__, idxs), idxs, strict=True)
            first = sorted(rows) if len(idxs) <= n else heapq.nsmallest(n, rows)
            return list(map(itemgetter(2), first))
        if self._nodes is None:
            self._nodes = list(map(attrgetter("candidate.nodes"), self._src))
        nodes = self._nodes
        if len(idxs) > n:
            # records come in key order (cost's and resolve's output): when the bucket's
            # node tuples do not decrease (compared by C-level maps), its n first are
            # among its first n and those tied with the n-th on nodes
            ns = list(map(nodes.__getitem__, idxs))
            if all(map(le, ns, islice(ns, 1, None))):
                k = n
                while k < len(ns) and ns[k] == ns[n - 1]:
                    k += 1
                idxs = idxs[:k]
        rows = zip(map(nodes.__getitem__, idxs), map(codes.__getitem__, idxs), idxs, strict=True)
        first = sorted(rows) if len(idxs) <= n else heapq.nsmallest(n, rows)
        return list(map(itemgetter(2), first))

    def _order(self, idxs: Iterable[int]) -> list[int]:
        """Entry indices in plan order: (rule, nodes, code), ties in entry order."""
        cand, codes = self._candidate, self._codes
        return sorted(idxs, key=lambda i: (cand(i).rule, cand(i).nodes, codes[i], i))

    def _sorted(self, idxs: list[int]) -> tuple[Rejection, ...]:
        return tuple(map(self._build, self._order(idxs)))

    def _candidate(self, i: int) -> Any:
        """Entry ``i``'s candidate (from the cost stage's arrays: no record made)."""
        src = self._src
        if isinstance(src, RecordView):
            return src.records.candidate(int(src.positions[i]))
        return src[i].candidate

    def _build(self, i: int) -> Rejection:
        src, code, reason = self._src[i], self._codes[i], self._reasons.get(i)
        if self._lost is not None and self._lost[0] <= i < self._lost[1]:
            reason = self._lost[2].why(i - self._lost[0])
        c, verdict = src.candidate, str(self._verdicts[i])
        if reason is None:  # the record's own, read only when shown
            return _LazyRejection(c.rule, c.nodes, verdict, code, src)
        return Rejection(c.rule, c.nodes, verdict, code, reason)


class _Named(Sequence[str]):
    """Names by id: ``names[ids[i]]`` per entry (no string list of 10^5-10^6 entries)."""

    def __init__(self, ids: Any, names: Sequence[str]) -> None:
        self.ids, self.names = ids, names

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self.names[k] for k in self.ids[i].tolist()]
        return self.names[int(self.ids[i])]

    def __iter__(self) -> Iterator[str]:
        return map(self.names.__getitem__, self.ids.tolist())


FIRST_KEPT = 100  # a compact plan also keeps the first rejections overall (a terminal: 25)


class ListedRejections(Sequence[Rejection]):
    """What a compact plan keeps of its rejections: how many there are per verdict, and
    the ones it lists (the first few per (rule, verdict) and the first ``first`` overall,
    sorted, reasons read), so that the per-candidate records they came from can be let
    go (``pipeline.fuse``: peak memory). Reading every rejection needs the full plan
    (``plan_detail="full"``)."""

    def __init__(
        self,
        total: int,
        counts: Mapping[str, int],
        kept: tuple[Rejection, ...],
        matched: Mapping[str, int],
        per_key: int,
        first: int,
    ) -> None:
        self.total, self.counts, self.kept = total, dict(counts), kept
        self.matched, self.per_key, self.first = dict(matched), per_key, first

    def __len__(self) -> int:
        return self.total

    def __getitem__(self, index: Any) -> Any:
        self._not_kept()

    def _not_kept(self) -> NoReturn:
        raise LookupError(
            f"a compact plan keeps {len(self.kept)} of its {self.total} rejections; "
            'fuse with plan_detail="full" to keep every one'
        )

    def __repr__(self) -> str:
        return f"ListedRejections({len(self.kept)} of {self.total} rejected)"

    def by_verdict(self) -> dict[str, int]:
        return dict(self.counts)

    def examples(self, per_key: int) -> tuple[Rejection, ...]:
        if per_key > self.per_key:
            self._not_kept()
        return _first_per_key(self.kept, per_key)

    def head(self, n: int) -> tuple[Rejection, ...]:
        if n > self.first and self.total > len(self.kept):
            self._not_kept()
        return self.kept[:n]

    def with_dropped(self, dropped: Sequence[FusedGroup]) -> ListedRejections:
        """The same with the groups safe mode dropped added (their code,
        verification-failed, ties with no other rejection's)."""
        if not dropped:
            return self
        extra = RejectedCandidates((), (), dropped).all()
        merged = sorted((*self.kept, *extra), key=attrgetter("rule", "nodes", "code"))
        counts = Counter(self.counts)
        counts.update(r.verdict for r in extra)
        return ListedRejections(
            self.total + len(extra),
            dict(sorted(counts.items())),
            _listed(merged, self.per_key, self.first),
            self.matched,
            self.per_key,
            self.first,
        )


def list_rejections(
    scored: Sequence[ScoredCandidate],
    lost: Sequence[tuple[ScoredCandidate, str]],
    match: MatchResult,
    per_key: int = EXAMPLES_PER_VERDICT,
    first: int = FIRST_KEPT,
    *,
    from_cost: bool = False,
) -> ListedRejections:
    """The counts and the listed rejections of a compact plan, reasons read: nothing in
    it refers to the per-candidate records any more. ``from_cost``: ``scored`` is
    ``score_candidates(match)`` and ``lost`` is ``resolve``'s (``RejectedCandidates``)."""
    rejected = RejectedCandidates(scored, lost, (), match.near_misses, from_cost=from_cost)
    return ListedRejections(
        len(rejected),
        rejected.by_verdict(),
        tuple(
            Rejection(r.rule, r.nodes, r.verdict, r.code, r.reason)
            for r in rejected.listed(per_key, first)
        ),
        match_counts(match),
        per_key,
        first,
    )


def _listed(rejected: Sequence[Rejection], per_key: int, first: int) -> tuple[Rejection, ...]:
    """Of a sorted sequence: the first ``per_key`` per (rule, verdict) and the first
    ``first``, in order."""
    keep = {id(r) for r in _first_per_key(rejected, per_key)} | {id(r) for r in rejected[:first]}
    return tuple(r for r in rejected if id(r) in keep)


def _first_per_key(rejected: Iterable[Rejection], per_key: int) -> tuple[Rejection, ...]:
    seen: dict[tuple[str, str], int] = {}
    out = []
    for r in rejected:
        k = (r.rule, r.verdict)
        seen[k] = seen.get(k, 0) + 1
        if seen[k] <= per_key:
            out.append(r)
    return tuple(out)


class _LazyRejection(Rejection):
    """A rejection whose reason is its scored record's (or near miss's), read when asked."""

    def __init__(self, rule: str, nodes: tuple[str, ...], verdict: str, code: str, src: Any):
        put = object.__setattr__
        put(self, "rule", rule)
        put(self, "nodes", nodes)
        put(self, "verdict", verdict)
        put(self, "code", code)
        self.__dict__["_src"] = src

    @property  # type: ignore[override]
    def reason(self) -> str:
        return self.__dict__["_src"].reason


def group_json(g: FusedGroup) -> dict[str, Any]:
    cost = g.scored.cost
    return {
        "id": g.id,
        "rule": g.rule,
        "alternative": g.scored.candidate.alternative,
        "target_op": g.target_op,
        "node": g.node_name,
        "function": {"domain": FUSED_DOMAIN, "name": g.target_op, "overload": g.overload},
        "nodes": list(g.nodes),
        "op_types": list(g.op_types),
        "inputs": list(g.inputs),
        "outputs": list(g.outputs),
        "bytes_before": cost.bytes_before if cost else None,
        "bytes_after": cost.bytes_after if cost else None,
        "bytes_saved": cost.bytes_saved if cost else 0,
        "net_bytes": cost.net_bytes if cost else 0,
        "hbm_accesses_before": cost.accesses_before if cost else None,
        "hbm_accesses_after": cost.accesses_after if cost else None,
        "ub_bytes": cost.ub_bytes if cost else 0,
        "ub_limit": cost.ub_limit if cost else None,
        "attributes": g.attributes or {},
        "tensor_layout": g.tensor_layout,
        "kernel_config": g.kernel_config or {},
        "port_map": [dict(p) for p in g.port_map],
        "contract": contract_json(g.contract),
        "kernel": {
            "kernel_name": g.kernel.kernel_name,
            "file_path": g.kernel.file_path,
            "compiler": g.kernel.compiler,
            "build_config": g.kernel.build_config or {},
            "debug_symbols": g.kernel.debug_symbols,
            "gen_dot_graph": g.kernel.gen_dot_graph,
            "dot_graph_path": g.kernel.dot_graph_path,
        },
    }


def contract_json(c: Any) -> dict[str, Any] | None:
    """The group's kernel contract: catalog entry, version, form, bound ports, how verified."""
    if c is None:
        return None
    return {
        "entry": c.entry,
        "version": c.version,
        "status": c.status,
        "form": c.form,
        "ports": {p: t for p, t in c.ports},
        "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in c.attributes},
        "verified": c.verified,
        "reason": c.reason,
    }


def _finite(x: float) -> float | None:
    """JSON has no inf/NaN: a missing or mis-shaped output is reported as null."""
    return x if math.isfinite(x) else None


def verification_json(v: Verification | None, *, memory: bool = False) -> dict[str, Any] | None:
    """The verification record as JSON. ``memory`` adds the estimate and the memory
    available behind the mode choice (report.json; plan.json stays reproducible)."""
    if v is None:
        return None
    extra: dict[str, Any] = {}
    if memory:
        extra = {
            "mode_reason": v.mode_reason,
            "estimate_bytes": v.estimate_bytes,
            "available_bytes": v.available_bytes,
        }
    return {
        "ok": v.ok,
        "inputs": v.inputs_source,
        "threshold": v.threshold,
        "runs": v.runs,
        "error": v.error,
        "dropped_groups": list(v.dropped_groups),
        "found_by": v.found_by,
        "mode": v.mode,
        **extra,
        "groups": [
            {
                "group": c.group,
                "rule": c.rule,
                "status": c.status,
                "error": c.error,
                "outputs": [_output_json(o) for o in c.outputs],
            }
            for c in v.groups
        ],
        "outputs": [_output_json(o) for o in v.outputs],
    }


def _output_json(o: OutputCheck) -> dict[str, Any]:
    return {
        "name": o.name,
        "cosine": _finite(o.cosine),
        "max_abs_error": _finite(o.max_abs_error),
        "max_rel_error": _finite(o.max_rel_error),
        "ok": o.ok,
    }


def shown_rejections(plan: Plan, detail: str = "compact") -> tuple[Rejection, ...]:
    """The rejected candidates a compact plan or report lists: the first few of each
    (rule, verdict), so every kind of "no" stays visible while the size stays bounded by
    the rule set, not by the graph (a 2048-layer stack has ~10^5 rejections). ``full``
    lists them all."""
    if detail == "full":
        return tuple(plan.rejected)
    if isinstance(plan.rejected, RejectedCandidates | ListedRejections):
        return plan.rejected.examples(EXAMPLES_PER_VERDICT)
    return _first_per_key(plan.rejected, EXAMPLES_PER_VERDICT)


def rejected_by_verdict(rejected: Sequence[Rejection]) -> dict[str, int]:
    """How many rejections per verdict, in verdict order (without building them when
    they are a ``RejectedCandidates``)."""
    if isinstance(rejected, RejectedCandidates | ListedRejections):
        return rejected.by_verdict()
    counts: dict[str, int] = {}
    for r in rejected:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    return dict(sorted(counts.items()))


def first_rejections(rejected: Sequence[Rejection], n: int) -> tuple[Rejection, ...]:
    """The first ``n`` rejections in plan order."""
    if isinstance(rejected, RejectedCandidates | ListedRejections):
        return rejected.head(n)
    return tuple(rejected[:n])


def plan_json(plan: Plan, detail: str = "compact") -> dict[str, Any]:
    """plan.json (schemas/plan.schema.json): the contract with the kernel generator.
    ``detail`` "compact" lists a few rejections per (rule, verdict) and counts them all;
    "full" lists every one (``--plan-detail full``)."""
    return {
        "schema_version": PLAN_SCHEMA_VERSION,
        "model": plan.model,
        "model_sha256": plan.model_sha256,
        "graph": plan.graph_name,
        "target": plan.target,
        "summary": {
            "nodes_before": plan.nodes_before,
            "nodes_after": plan.nodes_after,
            "groups": len(plan.groups),
            "hbm_bytes_before": plan.hbm_bytes_before,
            "hbm_bytes_after": plan.hbm_bytes_after,
            "gross_bytes_saved": plan.gross_bytes_saved,
            "overhead_bytes": plan.overhead_bytes,
            "net_bytes_saved": plan.net_bytes_saved,
            "launches_saved": plan.launches_saved,
            "time_saved_s": plan.time_saved_s,
            "solver": plan.solver,
            "status": plan.status,
            "objective": plan.objective,
            "bound": plan.bound,
            "compile_time_nodes": plan.compile_time_nodes,
            "unknown_size_tensors": plan.unknown_traffic_tensors,
            "unknown_size_min_bytes": plan.unknown_size_min_bytes,
        },
        "groups": [group_json(g) for g in plan.groups],
        "rejected": [
            {
                "rule": r.rule,
                "nodes": list(r.nodes),
                "verdict": r.verdict,
                "code": r.code,
                "reason": r.reason,
            }
            for r in shown_rejections(plan, detail)
        ],
        "detail": detail,
        "rejected_by_verdict": rejected_by_verdict(plan.rejected),
        "rules": [{"rule": s.rule, "matched": s.matched, "fused": s.fused} for s in plan.rules],
        "verification": verification_json(plan.verification),
    }
