"""Suggest stage: draft rules for the fusable traffic that no rule captures.

analyze each model with the given rules -> regions the chosen groups leave unfused
(``regions``) -> canonical form and clusters across layers and models (``canon``) ->
one drafted rule per cluster (``emit``) -> coverage before and after, measured by
running the real pipeline again with the drafted rules added.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from itertools import combinations
from pathlib import Path
from typing import NamedTuple

from ruleengine.suggest.model import (
    BranchUnits,
    Cluster,
    DraftRule,
    Instance,
    ModelCoverage,
    Region,
    SpelledCoverage,
    Suggestion,
)

__all__ = [
    "Cluster",
    "DraftRule",
    "Instance",
    "ModelCoverage",
    "Region",
    "SpelledCoverage",
    "Suggestion",
    "suggest",
]

Progress = Callable[[str], None]

# A compact region (ruleengine.suggest.regions.COMPACT_OPS) earns a rule only where it
# recurs (layers, models).
COMPACT_MIN_INSTANCES = 2


def _instance(model: str, graph, region: Region, canon, chosen) -> Instance:
    from ruleengine.cost.traffic import group_io

    inside = set(region.nodes)
    io = group_io(graph, region.nodes)
    escapes = False
    for t in io.outputs:
        tensor = graph.tensors[t]
        if any(c in inside for c, _ in tensor.consumers):
            escapes = True
    dtypes = set()
    for t in (*io.inputs, *(x for n in io.nodes for x in n.outputs if x)):
        tensor = graph.tensors.get(t)
        if tensor is None or tensor.dtype is None:
            continue
        if t in io.inputs and not tensor.dtype.startswith(("float", "bfloat")):
            continue  # integer side inputs are not checked by dtype_match
        dtypes.add(tensor.dtype)
    absorbed = frozenset(sc.candidate.rule for sc in chosen if sc.candidate.node_set <= inside)
    return Instance(model, region, canon.units, escapes, frozenset(dtypes), absorbed)


# Rounds of drafting again where the rules written reach less than the drafting
# partition's simulated selection (a drafted rule matches its structure elsewhere too and
# the selection tiles the model with those groups): the regions left once the rules
# written are in use are drafted too, and kept where coverage rises.
REDRAFT_ROUNDS = 2
REDRAFT_GAP = 0.0005  # coverage below reach by more than this (figures print to 0.1%)

# Where the kernel pool hits its budget (``partition.MAX_POOL_SETS``) and the drafting
# partition's simulated selection captures less than WIDER_BELOW (issue 16's bar), the
# search runs again with a pool of WIDER_POOL_SETS sets.
WIDER_BELOW = 0.9
WIDER_POOL_SETS = 48_000
# the memo entry naming the models whose drafting used the wider pool
WIDER_USED = "wider pool used"

# A drafted rule's match elsewhere that is no kernel for one of these reasons has a
# smaller form drafted too (``_smaller_round``).
TRIMMED_VERDICTS = frozenset({"INTERMEDIATE_ESCAPES", "NOT_CONVEX"})

# Every selection stage suggest runs (``pipeline.analyze``'s and the pruning's own
# ``resolve``) stops its CP-SAT solves on this much deterministic time in all, as the
# partition solves do (``partition.SOLVE_SECONDS``): the drafts and figures must not
# depend on the machine's load (a wall limit cut short a solve of bart-tiny.ts run at a
# small share of a loaded machine: 90.25% and 26 rules against 90.23% and 24).
RESOLVE_SECONDS = 30.0


def suggest(
    models: Sequence[str | Path],
    rules: Sequence[str | Path] = (),
    *,
    preset: str | None = None,
    target: str = "ascend910b",
    dims: Mapping[str, int] | None = None,
    min_bytes: int = 0,
    max_rules: int | None = None,
    progress: Progress | None = None,
) -> Suggestion:
    """Draft rules for what the given rules leave unfused in ``models`` and measure them.

    Deterministic: every solve is bounded by CP-SAT's deterministic time, not wall time
    (``RESOLVE_SECONDS``, ``partition.SOLVE_SECONDS``)."""
    from ruleengine.resolve import deterministic_budget

    with deterministic_budget(RESOLVE_SECONDS):
        return _suggest(models, rules, preset, target, dims, min_bytes, max_rules, progress)


def _suggest(  # noqa: ANN001, PLR0913
    models, rules, preset, target, dims, min_bytes, max_rules, progress
) -> Suggestion:
    from ruleengine.pipeline import DEFAULT_PRESET

    if not rules and preset is None:
        preset = DEFAULT_PRESET
    note = progress or (lambda _m: None)
    memo: dict = {}  # the first drafting's analyses and searches, for the twin round
    baseline, drafts, dropped, graphs = _draft(
        models, rules, preset, target, dims, min_bytes, max_rules, note, memo=memo
    )
    drafts, pruned, report = _measure_after(
        baseline, drafts, rules, preset, target, dims, note, graphs
    )
    dropped += pruned
    if max_rules is None and drafts and memo.get(WIDER_USED):
        first = _first_pool_round(
            models, baseline, drafts, report, rules, preset, target, dims, min_bytes, note, memo
        )
        if first is not None:
            drafts, report, more_dropped = first
            dropped += more_dropped
    for _ in range(REDRAFT_ROUNDS if max_rules is None else 0):
        rose = False
        # one model at a time: drafts that lower another model's coverage do not hold
        # back the drafts of the rest
        for k, model in enumerate(models):
            m = report[k]
            if not drafts or m.after + REDRAFT_GAP >= m.reach:
                continue
            note(f"drafting again for {m.model}: {m.after:.1%}, its drafting reached {m.reach:.1%}")
            again = _redraft(
                model,
                m.model,
                baseline,
                drafts,
                report,
                rules,
                preset,
                target,
                dims,
                min_bytes,
                note,
                graphs,
            )
            if again is not None:
                baseline, graphs, drafts, report, more_dropped = again
                dropped += more_dropped
                rose = True
        if not rose:
            break
    if max_rules is None and drafts and any(m.after + REDRAFT_GAP < m.reach for m in report):
        twin = _twin_round(
            models, baseline, drafts, report, rules, preset, target, dims, min_bytes, note, memo
        )
        if twin is not None:
            baseline, drafts, dropped, report, graphs = twin
    if max_rules is None and drafts:
        smaller = _smaller_round(
            baseline, drafts, report, rules, preset, target, dims, note, graphs
        )
        if smaller is not None:
            drafts, report, more_dropped = smaller
            dropped += more_dropped
    drafts, report = _spelled_checks(models, report, drafts, rules, preset, target, dims, note)
    return Suggestion(tuple(drafts), tuple(dropped), report, target)


def _first_pool_round(  # noqa: ANN001, PLR0913
    models, baseline, drafts, report, rules, preset, target, dims, min_bytes, note, memo
) -> tuple | None:
    """Where the wider pool was searched (``WIDER_BELOW``), also the drafts of the first
    search (``partition.MAX_POOL_SETS`` sets), carried over where they lower no model's
    coverage (``_carry``, as the twin round carries earlier drafts): the wider search's
    drafts raise the model they are drafted from, the first search's may be the ones
    another export takes (stablelm ts -> dynamo: 87.8% with the first search's 7 drafts,
    84.7% with the wider search's 9). The new state (drafts, report, dropped), else None."""
    note("the first search's drafts too, where the wider pool was searched")
    drafted = {d.cluster.key for d in drafts}
    _, first, _, graphs = _draft(
        models,
        rules,
        preset,
        target,
        dims,
        min_bytes,
        None,
        note,
        memo=memo,
        narrow=True,
        taken={d.name for d in drafts},
    )
    extra = [d for d in first if d.cluster.key not in drafted]
    both, alike = _distinct([*drafts, *extra], rules, preset)
    more = both[len(drafts) :]
    if len(both) < len(drafts) or not more:
        return None
    why = "a draft of the first search not carried over: it lowers coverage"
    out = _carried_round(
        baseline, drafts, more, report, rules, preset, target, dims, note, graphs, why
    )
    return None if out is None else (out[0], out[1], [*alike, *out[2]])


def _smaller_round(  # noqa: ANN001, PLR0913
    baseline, drafts, report, rules, preset, target, dims, note, graphs
) -> tuple | None:
    """Draft the largest smaller form of every drafted rule's match that is no kernel.

    A drafted rule matches its structure at other occurrences too (another layer here,
    the same layer in another export). Where such a match is not viable because an
    intermediate is read outside it (a residual sum the next layer also reads) or it
    leaves and re-enters itself (not convex), the rule gives nothing there, and the same
    end differs in the other exports of the architecture (bloom: the 11-op draft's
    residual sum escapes in the dynamo export, where an 8-op form used to fuse). So each
    such match's largest trim that the cost model fuses (``regions.largest_viable_form``)
    is drafted as a region of its own, and these drafts are carried over where they
    lower no model's coverage (``_carry``; they may fuse nothing in the models given).
    The new state (drafts, report, dropped), else None."""
    from ruleengine import coverage
    from ruleengine.cost.scoring import GroupMemo
    from ruleengine.suggest.canon import canonicalize, composite_instances
    from ruleengine.suggest.emit import fitting_priority, rule_name
    from ruleengine.suggest.regions import largest_viable_form

    analyses = _analyses(baseline, drafts, rules, preset, target, dims, note)
    names = {d.name for d in drafts}
    drafted = {d.cluster.key for d in drafts}
    clusters: dict[tuple, list[Instance]] = {}
    priorities: dict[str, int] = {}
    for (_path, name, *_), analysis in zip(baseline, analyses, strict=True):
        priorities.update({r.name: r.priority for r in analysis.rule_set.rules})
        misses = {
            sc.candidate.node_set
            for sc in analysis.scored
            if sc.candidate.rule in names and sc.verdict.name in TRIMMED_VERDICTS
        }
        if not misses:
            continue
        note(f"smaller forms of {len(misses)} drafted match(es) not viable in {name}")
        graph = analysis.graph
        edges = coverage.fusable_edges(graph)
        composites = composite_instances(graph)
        memo = GroupMemo(graph, analysis.target)
        chosen = analysis.resolution.chosen
        seen: set[tuple[str, ...]] = set()
        for miss in sorted(misses, key=sorted):
            region = largest_viable_form(graph, miss, analysis.target, edges, {miss}, memo)
            if region is None or region.nodes in seen:
                continue
            seen.add(region.nodes)
            canon = canonicalize(graph, region.nodes, composites)
            if canon.key in drafted:
                continue
            clusters.setdefault(canon.key, []).append(_instance(name, graph, region, canon, chosen))
    if not clusters:
        return None
    ranked = sorted(
        (Cluster(k, tuple(sorted(v, key=lambda i: i.model))) for k, v in clusters.items()),
        key=lambda c: (-c.bytes_saved, -len(c.instances), repr(c.key)),
    )
    taken = set(priorities) | names
    alternatives = []
    for c in ranked:
        name = rule_name(c, taken)
        absorbed = set().union(*(i.absorbed_rules for i in c.instances))
        priority = fitting_priority(absorbed, priorities)
        fitted = _fitting_drafts(c, name, priority, target, graphs)
        if fitted:
            alternatives.append(_alternatives(name, priority, fitted))
    note("generating and running the rule tests of the smaller forms")
    more, failed = _with_tests(alternatives, graphs, note)
    both, alike = _distinct([*drafts, *more], rules, preset)
    more = [_with_kernel(d, graphs) for d in both[len(drafts) :]]
    if len(both) < len(drafts) or not more:
        return None
    why = "a smaller form not carried over: it lowers coverage"
    out = _carried_round(
        baseline, drafts, more, report, rules, preset, target, dims, note, graphs, why, analyses
    )
    return None if out is None else (out[0], out[1], [*failed, *alike, *out[2]])


def _carried_round(  # noqa: ANN001, PLR0913
    baseline, drafts, more, report, rules, preset, target, dims, note, graphs, why, analyses=None
) -> tuple | None:
    """The drafts of ``more`` carried over beside ``drafts`` (``_carry``) and the whole
    set measured again: (kept, report, dropped with ``why`` or the pruning's reason), or
    None where nothing is carried or the measured set lowers a model (a round that
    carries drafts over must never cost coverage)."""
    carried = _carry(baseline, drafts, more, report, rules, preset, target, dims, note, analyses)
    if not carried:
        return None
    kept, pruned, trial = _measure_after(
        baseline, [*drafts, *carried], rules, preset, target, dims, note, graphs
    )
    if any(t.after + 1e-9 < m.after for t, m in zip(trial, report, strict=True)):
        return None
    left = [(d.name, why) for d in more if d not in carried]
    return kept, trial, [*left, *pruned]


# a fall in the other spelling's coverage smaller than this is not one (figures print
# to 0.1%)
SPELLED_TOLERANCE = 0.0005
# what a model's other spelling is called in the descriptions of the drafts made there
SPELLED_SUFFIX = "(composites written out)"


def _with_drafts(path, drafts, rules, preset, target, dims):  # noqa: ANN001, ANN202
    """The analysis of ``path`` with the drafted rules beside the given ones."""
    from ruleengine.pipeline import analyze

    with tempfile.TemporaryDirectory(prefix="autofusion-suggest-") as tmp:
        for d in drafts:
            (Path(tmp) / f"{d.name}.yaml").write_text(d.text, encoding="utf-8")
        extra = [tmp] if drafts else []
        return analyze(path, [*rules, *extra], preset=preset, target=target, dims=dims)


def _covered(analysis) -> float:  # noqa: ANN001
    from ruleengine import coverage

    chosen = analysis.resolution.chosen
    return coverage.measure(analysis.graph, [sc.candidate.nodes for sc in chosen]).coverage


def _displaced(before, after, drafts) -> dict[str, dict[frozenset[str], list]]:  # noqa: ANN001
    """Per drafted rule, its chosen groups in ``after`` that take ops of groups chosen in
    ``before`` (no longer chosen), with those groups."""
    names = {d.name for d in drafts}
    kept = {sc.candidate.node_set for sc in after.resolution.chosen}
    out: dict[str, dict[frozenset[str], list]] = {}
    for sc in after.resolution.chosen:
        if sc.candidate.rule not in names:
            continue
        hit = [
            b
            for b in before.resolution.chosen
            if b.candidate.node_set not in kept and b.candidate.node_set & sc.candidate.node_set
        ]
        if hit:
            out.setdefault(sc.candidate.rule, {})[sc.candidate.node_set] = hit
    return out


def _spelled_checks(  # noqa: ANN001, PLR0913, C901
    models, report, drafts, rules, preset, target, dims, note
) -> tuple[list[DraftRule], tuple[ModelCoverage, ...]]:
    """Each model measured again in its other spelling (``spelled.decomposed``: composite
    ops written out, as another exporter writes them), with the given rules and with the
    drafted rules beside them. A drafted rule may take an op that, in that spelling, a
    given rule needs together with the written-out composite (the embeddings' sum Add of
    ``embedding_norm``): there it displaces the given rule's group and coverage falls,
    though where it was drafted it raises it (the family's other exports fall the same
    way: roberta ts -> ts14). Where it falls, a *bridge* is drafted in that spelling:
    the drafted group with the groups it displaces, one region, its composites left
    written out (so it matches only where they are: the source is not changed by it),
    a rule as any region's (``_bridges``). The bridges are kept where every model given
    keeps its coverage and the other spelling's rises; the drafted rules still lowering
    it are named in the summary."""
    from dataclasses import replace

    from ruleengine.pipeline import analyze
    from ruleengine.suggest.spelled import decomposed

    out = list(report)
    drafts = list(drafts)
    with tempfile.TemporaryDirectory(prefix="autofusion-spelled-") as tmp:
        for k, (path, m) in enumerate(zip(models, report, strict=True)):
            folder = Path(tmp) / f"model-{k}"
            folder.mkdir()
            try:
                twin = decomposed(path, folder)
            except Exception as e:  # noqa: BLE001 - the model itself was analysed: a check
                note(f"{m.model}: its composites not written out ({type(e).__name__}: {e})")
                continue
            if twin is None:
                continue
            note(f"measuring {m.model} with its composites written out")
            before = analyze(twin, rules, preset=preset, target=target, dims=dims)
            after = _with_drafts(twin, drafts, rules, preset, target, dims)
            was, now = _covered(before), _covered(after)
            if now + SPELLED_TOLERANCE < was and SPELLED_BRIDGES:
                bridges = _bridges(f"{m.model} {SPELLED_SUFFIX}", before, after, drafts, note)
                if bridges:
                    trial = [*drafts, *bridges]
                    note(f"measuring {m.model} with {len(bridges)} bridge rule(s)")
                    kept = [_with_drafts(p, trial, rules, preset, target, dims) for p in models]
                    twin_after = _with_drafts(twin, trial, rules, preset, target, dims)
                    if _covered(twin_after) > now + 1e-9 and all(
                        _covered(a) + 1e-9 >= r.after for a, r in zip(kept, out, strict=True)
                    ):
                        drafts, after, now = trial, twin_after, _covered(twin_after)
                        names = {d.name for d in drafts}
                        for j, (a, r) in enumerate(zip(kept, out, strict=True)):
                            chosen = a.resolution.chosen
                            out[j] = replace(
                                r,
                                after=_covered(a),
                                groups_after=len(chosen),
                                suggested_groups=sum(
                                    1 for sc in chosen if sc.candidate.rule in names
                                ),
                            )
            lowered = _displaced(before, after, drafts) if now + SPELLED_TOLERANCE < was else {}
            out[k] = replace(
                out[k],
                spelled=SpelledCoverage(
                    was,
                    now,
                    tuple(
                        (r, tuple(sorted({b.candidate.rule for g in v.values() for b in g})))
                        for r, v in sorted(lowered.items())
                    ),
                ),
            )
    return drafts, tuple(out)


# Bridges are drafted where a drafted rule lowers a model's other spelling.
SPELLED_BRIDGES = True


def _bridges(name: str, before, after, drafts, note) -> list[DraftRule]:  # noqa: ANN001
    """Rules for the other spelling: each drafted group there that displaces groups of
    the given rules, together with them, as one region (where the cost model fuses it),
    drafted with its composites written out, tested on that spelling's graph."""
    from ruleengine.cost.model import Verdict
    from ruleengine.cost.scoring import GroupMemo, score_one
    from ruleengine.cost.traffic import topo_position
    from ruleengine.suggest.canon import canonicalize
    from ruleengine.suggest.emit import fitting_priority, rule_name
    from ruleengine.suggest.regions import _candidate

    graph = after.graph
    graphs = {name: graph}
    pos = topo_position(graph)
    memo = GroupMemo(graph, after.target)
    priorities = {r.name: r.priority for r in after.rule_set.rules}
    taken = set(priorities)
    seen: set[frozenset[str]] = set()
    alternatives = []
    for rule, groups in sorted(_displaced(before, after, drafts).items()):
        for group, hit in sorted(groups.items(), key=lambda g: min(pos[n] for n in g[0])):
            nodes = frozenset(group).union(*(b.candidate.node_set for b in hit))
            if nodes in seen:
                continue
            seen.add(nodes)
            scored = score_one(graph, _candidate(graph, nodes), None, after.target, memo=memo)
            if scored.verdict is not Verdict.FUSE:
                continue
            cost = scored.cost  # type: ignore[attr-defined]
            region = Region(
                tuple(sorted(nodes, key=pos.__getitem__)), cost.bytes_saved, cost.net_bytes
            )
            canon = canonicalize(graph, region.nodes)  # composites stay written out
            inst = _instance(name, graph, region, canon, before.resolution.chosen)
            cluster = Cluster(canon.key, (inst,))
            bridge = rule_name(cluster, taken)
            priority = fitting_priority({*inst.absorbed_rules, rule}, priorities)
            fitted = _fitting_drafts(cluster, bridge, priority, after.target.name, graphs)
            if fitted:
                alternatives.append(_alternatives(bridge, priority, fitted))
    if not alternatives:
        return []
    note(f"drafting {len(alternatives)} bridge rule(s) for {name}")
    tested, _ = _with_tests(alternatives, graphs, note)
    return [_with_kernel(d, graphs) for d in tested]


def _twin_round(  # noqa: ANN001, PLR0913
    models, baseline, drafts, report, rules, preset, target, dims, min_bytes, note, memo=None
) -> tuple | None:
    """Draft again from the rules given, each drafting partition judged with every *twin*
    of its groups offered (``twins``: node sets no rule can tell apart, which a rule
    drafted from one matches too) and the most captured partition that stays picked so
    (``twins.structural_partition``) one more option. Where the rules drafted first reach
    less than their drafting simulated (``after`` < ``reach``), the selection has tiled the
    model with their groups' other occurrences, shifted (regnety: by a block in a stage);
    a partition stable under its twins is not displaced that way. Kept where the coverage
    summed over the models rises; then the first round's drafts that lower no model's
    coverage beside the new ones are carried over (they may carry to other exports).
    The new state (baseline, drafts, dropped, report, graphs), else None."""
    note("drafting again, each partition judged with the twins of its groups offered")
    again, more, dropped, graphs = _draft(
        models, rules, preset, target, dims, min_bytes, None, note, twins=True, memo=memo
    )
    if not more:
        return None
    more, pruned, trial = _measure_after(again, more, rules, preset, target, dims, note, graphs)
    if sum(m.after for m in trial) <= sum(m.after for m in report) + 1e-9:
        return None
    names, texts = {d.name for d in more}, {d.text for d in more}
    extra = [d for d in drafts if d.name not in names and d.text not in texts]
    carried = _carry(again, more, extra, trial, rules, preset, target, dims, note) if extra else []
    left = [
        (d.name, "not carried over: it lowers coverage beside the drafts for twins")
        for d in extra
        if d not in carried
    ]
    if carried:
        more, pruned2, trial = _measure_after(
            again, [*more, *carried], rules, preset, target, dims, note, graphs
        )
        pruned += pruned2
    return again, more, [*dropped, *pruned, *left], trial, graphs


def _carry(  # noqa: ANN001, PLR0913
    baseline, drafts, extra, report, rules, preset, target, dims, note, analyses=None
) -> list[DraftRule]:
    """The drafts of ``extra`` that, added one at a time (in rank order) beside
    ``drafts``, lower no model's coverage (the selection stage run over the scored
    candidates, as ``_prune`` runs it). ``analyses``: the models' with ``drafts``, where
    already run."""
    from ruleengine import coverage
    from ruleengine.cost.scoring import _reduce_duplicates
    from ruleengine.resolve import resolve

    if analyses is None:
        analyses = _analyses(baseline, drafts, rules, preset, target, dims, note)
    edges = [coverage.fusable_edges(a.graph) for a in analyses]
    scored = [list(a.scored) for a in analyses]
    now = [m.after for m in report]
    out = []
    for d in extra:
        note(f"carrying over {d.name}?")
        more = [_scored_rule(d.name, d.text, a) for a in analyses]
        trial_scored = [
            sorted(_reduce_duplicates([*s, *m]), key=lambda sc: sc.candidate.key)
            for s, m in zip(scored, more, strict=True)
        ]
        trial = [
            coverage.measure(
                a.graph, [sc.candidate.nodes for sc in resolve(a.graph, ts).chosen], e
            ).coverage
            for a, ts, e in zip(analyses, trial_scored, edges, strict=True)
        ]
        if all(t + 1e-9 >= n for t, n in zip(trial, now, strict=True)):
            out.append(d)
            scored, now = trial_scored, trial
    return out


def _redraft(  # noqa: ANN001, PLR0913
    model, name, baseline, drafts, report, rules, preset, target, dims, min_bytes, note, graphs
) -> tuple | None:
    """Draft again for one model with the drafted rules in use; everything measured and
    pruned together. The new state (baseline, graphs, drafts, report, dropped) when the
    coverage summed over the models rises, else None."""
    with tempfile.TemporaryDirectory(prefix="autofusion-suggest-") as tmp:
        for d in drafts:
            (Path(tmp) / f"{d.name}.yaml").write_text(d.text, encoding="utf-8")
        again, more, more_dropped, more_graphs = _draft(
            [model], [*rules, tmp], preset, target, dims, min_bytes, None, note, names=[name]
        )
    if not more:
        return None
    # the figures stay those of the rules given; reach: the better of the two rounds
    reach = {b[1]: b[3] for b in again}
    merged = [(*b[:3], max(b[3], reach.get(b[1], 0.0)), *b[4:]) for b in baseline]
    graphs = {**graphs, **more_graphs}
    kept, pruned, trial = _measure_after(
        merged, [*drafts, *more], rules, preset, target, dims, note, graphs
    )
    if sum(m.after for m in trial) <= sum(m.after for m in report) + 1e-9:
        return None
    return merged, graphs, kept, trial, [*more_dropped, *pruned]


def _draft(  # noqa: PLR0913
    models: Sequence[str | Path],
    rules: Sequence[str | Path],
    preset: str | None,
    target: str,
    dims: Mapping[str, int] | None,
    min_bytes: int,
    max_rules: int | None,
    note: Progress,
    names: Sequence[str] | None = None,
    twins: bool = False,
    memo: dict | None = None,
    narrow: bool = False,
    taken: Iterable[str] = (),
) -> tuple[list, list[DraftRule], list[tuple[str, str]], dict]:
    """Per model the figures before (``baseline``); the drafted rules with their tests
    and kernel entries; the clusters without a rule and why; the graphs by model name.
    ``memo``: kept across calls (the first drafting and the further one for twins, from
    the same rules): each model's analysis and what its region search does not redo.
    ``narrow``: the first search's pool alone, never the wider one; ``taken``: names the
    drafts must not take (drafts already written)."""
    from ruleengine import coverage
    from ruleengine.pipeline import analyze
    from ruleengine.suggest.canon import canonicalize, composite_instances
    from ruleengine.suggest.emit import fitting_priority, rule_name
    from ruleengine.suggest.regions import core_region, edge_ceiling, search_regions

    clusters: dict[tuple, list[Instance]] = {}
    largest: set[tuple] = set()  # keys of clusters holding a largest region
    baseline = []
    names = list(names) if names is not None else _display_names(models)
    priorities: dict[str, int] = {}
    graphs = {}
    for path, name in zip(models, names, strict=True):
        key = (
            str(path),
            tuple(map(str, rules)),
            preset,
            target,
            tuple(sorted((dims or {}).items())),
        )
        held = memo.get(key) if memo is not None else None
        if held is None:
            note(f"analysing {name}")
            analysis = analyze(path, rules, preset=preset, target=target, dims=dims)
            held = (analysis, coverage.fusable_edges(analysis.graph), {})
            if memo is not None:
                memo[key] = held
        analysis, edges, search_memo = held
        priorities.update({r.name: r.priority for r in analysis.rule_set.rules})
        graph = analysis.graph
        graphs[name] = graph
        chosen = analysis.resolution.chosen
        groups = [sc.candidate.nodes for sc in chosen]
        rivals = [
            (sc.candidate.node_set, sc.cost.net_bytes)
            for sc in analysis.scored
            if sc.viable and sc.cost is not None
        ]
        search_with = partial(
            search_regions,
            graph,
            groups,
            analysis.target,
            edges,
            rivals=rivals,
            net_floor=sum(sc.cost.net_bytes for sc in chosen if sc.cost is not None),
            twins=twins,
            memo=search_memo,
        )
        search = search_with()
        fusable = edges.fusable_bytes or 1
        if not narrow and not search.pool.complete and search.selected < WIDER_BELOW * fusable:
            # the pool hit its budget and what it offers falls short of the bar: the
            # groups that reach it may lie past the budget (stablelm-tiny.dynamo: 89.6%
            # with 12,000 sets, 91.1% with 48,000)
            note(f"{name}: the pool hit its budget under {WIDER_BELOW:.0%}: a wider pool")
            if memo is not None:
                memo.setdefault(WIDER_USED, set()).add(name)
            search = search_with(max_sets=WIDER_POOL_SETS)
        regions, compact = search.regions, search.compact
        composites = composite_instances(graph) if regions else ()
        seen: set[tuple[str, ...]] = set()
        cores = []
        for region in (*regions, *compact):
            if region.nodes in seen:
                continue
            seen.add(region.nodes)
            canon = canonicalize(graph, region.nodes, composites)
            inst = _instance(name, graph, region, canon, chosen)
            clusters.setdefault(canon.key, []).append(inst)
            if region in regions:
                largest.add(canon.key)
            core = core_region(graph, region, canon.units, analysis.target, edges)
            if core is not None:
                cores.append((core, region in regions))
        # each region's core (its end epilogue chains left out): in another export the
        # bundled rules may fuse those ends with their neighbours, and the core composes
        # with them where the whole region overlaps them (a rule as its region earns one:
        # always for a largest region's, where it recurs for a compact one's)
        for core, of_largest in cores:
            if core.nodes in seen:
                continue
            seen.add(core.nodes)
            canon = canonicalize(graph, core.nodes, composites)
            clusters.setdefault(canon.key, []).append(_instance(name, graph, core, canon, chosen))
            if of_largest:
                largest.add(canon.key)
        baseline.append(
            (
                path,
                name,
                coverage.measure(graph, groups, edges),
                search.selected / fusable if edges.fusable_bytes else 1.0,
                (
                    *_ceiling(search, edges.fusable_bytes),
                    search.ceiling.captured / fusable if edges.fusable_bytes else 1.0,
                    search.ceiling.exact,
                ),
                edge_ceiling(graph, edges, analysis.target),
            )
        )
    # a compact region earns a rule only where it recurs (layers, models)
    ranked = sorted(
        (
            # instances by model name (stable: graph order within a model), so the rules
            # do not depend on the order the models were given in
            Cluster(key, tuple(sorted(insts, key=lambda i: i.model)))
            for key, insts in clusters.items()
            if key in largest or len(insts) >= COMPACT_MIN_INSTANCES
        ),
        key=lambda c: (-c.bytes_saved, -len(c.instances), repr(c.key)),
    )
    dropped: list[tuple[str, str]] = []
    kept: list[Cluster] = []
    for c in ranked:
        if c.bytes_saved < min_bytes:
            dropped.append((_label(c), f"saves {c.bytes_saved} B < --min-bytes {min_bytes}"))
        elif max_rules is not None and len(kept) >= max_rules:
            dropped.append((_label(c), f"beyond --max-rules {max_rules}"))
        else:
            kept.append(c)
    taken = set(priorities) | set(taken)
    drafts = []
    for c in kept:
        name = rule_name(c, taken)
        absorbed = set().union(*(i.absorbed_rules for i in c.instances))
        priority = fitting_priority(absorbed, priorities)
        fitted = _fitting_drafts(c, name, priority, target, graphs)
        if not fitted:
            dropped.append((name, "its pattern exceeds the matcher's clause budget"))
            continue
        drafts.append(_alternatives(name, priority, fitted))
    note("generating and running the rule tests")
    drafts, failed = _with_tests(drafts, graphs, note)
    dropped += failed
    drafts, twins = _distinct(drafts, rules, preset)
    dropped += twins
    drafts = [_with_kernel(d, graphs) for d in drafts]
    return baseline, drafts, dropped, graphs


def _ceiling(search, fusable: int) -> tuple[float, bool]:  # noqa: ANN001
    """The bar's ceiling and whether it is proven: where the twins of the selectable
    ceiling's drafted groups displace it (a rule drafted from one group matches its twins
    too), the ceiling under twins (``twins.twin_ceiling``); else the selectable ceiling,
    or the drafting's simulated pick where a solve cut short found less (itself
    selectable)."""
    if not fusable:
        return 1.0, search.selectable.exact
    twin = search.twin_ceiling
    if twin is not None and twin is not search.selectable:  # its twins displace it
        return twin.captured / fusable, twin.exact
    return max(search.selectable.captured, search.selected) / fusable, search.selectable.exact


def _with_tests(
    alternatives: list[list[DraftRule]], graphs, note: Progress | None = None
) -> tuple[list[DraftRule], list[tuple[str, str]]]:  # noqa: ANN001
    """Per cluster, the first of its drafts (most general first) whose rule tests pass,
    each test run by the rule-test runner: a draft that does not find its own region is
    no rule; a negative that matches is cut elsewhere; a draft for which no near
    structure stays unmatched gives way to a less general one (or, when none has a
    negative, the least general draft that finds its region is kept with its positive).
    Drafts with pinned attribute values (last) are only narrowings for the pruning."""
    from dataclasses import replace

    out: list[DraftRule] = []
    failed: list[tuple[str, str]] = []
    for drafts in alternatives:
        chosen = None
        fallback = None
        for k, d in enumerate(drafts):
            if d.pinned:  # what the pruning may narrow a draft to, never where it starts
                break
            tested = _tested(d, graphs, fewer=True)
            if tested is None:
                continue
            if tested.text != d.text and note is not None:
                note(f"{d.name}: drafted with fewer branches (one does not find its region)")
            if len(tested.tests) > 1:
                chosen = (tested, k)
                break
            fallback = (tested, k)
        chosen = chosen or fallback
        if chosen is None:
            failed.append((drafts[0].name, "its generated tests do not pass"))
        else:
            after = drafts[chosen[1] + 1 :]
            out.append(replace(chosen[0], narrower=tuple((d.cluster, d.text) for d in after)))
    return out, failed


def _distinct(  # noqa: ANN001
    drafts: list[DraftRule], rules, preset
) -> tuple[list[DraftRule], list[tuple[str, str]]]:
    """Drafts that two clusters made alike once generalized (the set checks of `check`
    find them as AF302: the same pattern at one priority): the better-ranked one stays,
    the other is left out (the one kept matches its regions too)."""
    from ruleengine.rules.lint import lint_paths
    from ruleengine.rules.presets import preset_paths

    in_use = [*rules, *(preset_paths(preset) if preset else ())]
    dropped: list[tuple[str, str]] = []
    while True:
        with tempfile.TemporaryDirectory(prefix="autofusion-suggest-") as tmp:
            for d in drafts:
                (Path(tmp) / f"{d.name}.yaml").write_text(d.text, encoding="utf-8")
            found = lint_paths([tmp, *in_use], set_checks=True).diagnostics if drafts else ()
            rank = {str(Path(tmp) / f"{d.name}.yaml"): k for k, d in enumerate(drafts)}
            clash = None
            for diag in found:
                if diag.code != "AF302" or diag.location is None:
                    continue
                files = [diag.location.file, *(r.file for r in diag.related)]
                ours = sorted(rank[f] for f in files if f in rank)
                if len(ours) >= 2:
                    clash = (ours[0], ours[-1])
                    break
        if clash is None:
            return drafts, dropped
        kept, twin = drafts[clash[0]], drafts[clash[1]]
        dropped.append((twin.name, f"the same pattern as {kept.name} once generalized"))
        drafts = [d for k, d in enumerate(drafts) if k != clash[1]]


def _with_kernel(d: DraftRule, graphs) -> DraftRule:  # noqa: ANN001
    """The draft with the kernel catalog entry of its target_op."""
    from dataclasses import replace

    from ruleengine.suggest.emit import kernel_entry

    op_types = {
        graphs[inst.model].node(n).op_type
        for inst in d.cluster.instances
        for n in inst.region.nodes
    }
    return replace(d, kernel=kernel_entry(d.text, d.cluster, op_types))


def _tested(d: DraftRule, graphs, fewer: bool = False) -> DraftRule | None:  # noqa: ANN001
    """The draft with its passing tests (positive, and a negative where one is found;
    the same per branch it writes): None where a positive fails. With ``fewer``, where
    a branch's positive fails, the same draft with fewer branches (none last) whose
    tests pass: a branch that does not find its region as its export has it costs the
    draft that branch, not its generality (the pruning keeps ``fewer`` off: it measured
    the text it asks for)."""
    from dataclasses import replace

    tested = _region_tested(d, graphs)
    if tested is None or tested.branches == ((), ()):
        return tested
    branch = _branch_tested(d, graphs)
    if branch is not None:
        return replace(tested, tests={**tested.tests, **branch})
    for text in d.fewer_branches.get(d.text, ()) if fewer else ():
        if text != d.fewer_branches[d.text][-1] and _lint_findings(text):
            continue  # a branch leaving a finding is not written (none: as before)
        other = _tested(replace(d, text=text), graphs)
        if other is not None:
            return other
    return None


def _branch_tested(d: DraftRule, graphs) -> dict[str, str] | None:  # noqa: ANN001
    """The branch tests of a draft (``ruletests.branch_tests``) that pass; None where a
    branch's positive fails: the branch does not find the region as the export it is
    written for has it. Other node sets it matches there (overlapping: a generalized
    chain one op shorter) are expected too, as in the region's positive; a negative
    that matches is left out (a near structure the branch still takes)."""
    from ruleengine.ruletest.model import Status
    from ruleengine.ruletest.run import run_tests
    from ruleengine.suggest.ruletests import branch_tests

    graph = graphs[d.cluster.instances[0].model]
    tests = branch_tests(graph, d)
    outcomes = _run(d, tests, run_tests)
    also = {
        name: tuple(o.unexpected)
        for name, o in outcomes.items()
        if name.startswith("positive") and o.unexpected and not o.missing
    }
    if also:
        tests = branch_tests(graph, d, also)
        outcomes = _run(d, tests, run_tests)
    passed = {k for k, o in outcomes.items() if o.status is Status.PASS}
    if any(k.startswith("positive") and k not in passed for k in tests):
        return None
    return {k: v for k, v in tests.items() if k in passed}


def _region_tested(d: DraftRule, graphs) -> DraftRule | None:  # noqa: ANN001
    """The draft with its passing region tests (positive, and a negative where one is
    found)."""
    from dataclasses import replace

    from ruleengine.ruletest.model import Status
    from ruleengine.ruletest.run import run_tests
    from ruleengine.suggest.ruletests import MAX_CUT_ATTEMPTS, rule_tests

    graph = graphs[d.cluster.instances[0].model]
    also: tuple = ()
    attempt = 0
    while attempt < MAX_CUT_ATTEMPTS:
        tests = rule_tests(graph, d, attempt, also)
        outcomes = _run(d, tests, run_tests)
        positive = outcomes.get("positive_region.onnxtxt")
        if positive is None or positive.missing:
            return None  # the rule does not find its own region: no rule
        if positive.unexpected and not also:
            also = tuple(positive.unexpected)  # overlapping matches: expected too
            continue
        if positive.status is Status.PASS and all(
            o.status is Status.PASS for o in outcomes.values()
        ):
            return replace(d, tests=tests) if len(outcomes) == len(tests) else None
        attempt += 1
    # no negative stayed unmatched: the positive alone, if it passes
    tests = {k: v for k, v in rule_tests(graph, d, 0, also).items() if k.startswith("positive")}
    outcomes = _run(d, tests, run_tests)
    ok = all(o.status is Status.PASS for o in outcomes.values()) and len(outcomes) == 1
    return replace(d, tests=tests) if ok else None


# Epilogue chains are written as repeated @epilogue ops of their length up to SPREADS[0]
# more (fewer where the clauses would exceed DRAFT_CLAUSES; None: the ops as found).
# Every clause is a query the matcher compiles and runs: a draft stays small.
SPREADS = (1, 0, None)
DRAFT_CLAUSES = 64


class Fitted(NamedTuple):
    """One draft of a cluster: its text, whether it is pinned (a narrowing only), and for
    a size-pinned one, the same draft unpinned and the ``memory_limit`` fields."""

    cluster: Cluster
    text: str
    pinned: bool
    unsized: tuple[str, Mapping[str, int]] | None = None
    branches: BranchUnits = ((), ())  # what its branches are (``DraftRule.branches``)
    # the same draft with fewer branches, none last, each with its branches' units
    fewer: tuple[tuple[str, BranchUnits], ...] = ()


def _alternatives(name: str, priority: int, fitted: Sequence[Fitted]) -> list[DraftRule]:
    """The cluster's drafts as rules (most general first), each knowing the size-pinned
    forms' unpinned drafts and limits (what the pruning compares, never read back)."""
    unsized = {f.text: f.unsized for f in fitted if f.unsized is not None}
    branches = {f.text: f.branches for f in fitted if f.branches != ((), ())}
    # the fewer-branch forms' own branches too (what their tests are cut to)
    branches.update((t, u) for f in fitted for t, u in f.fewer if u != ((), ()))
    fewer = {f.text: tuple(t for t, _ in f.fewer) for f in fitted if f.fewer}
    return [
        DraftRule(
            name,
            f.text,
            f.cluster,
            priority,
            pinned=f.pinned,
            unsized=unsized,
            branch_units=branches,
            fewer_branches=fewer,
        )
        for f in fitted
    ]


def _fitting_drafts(  # noqa: ANN001
    c: Cluster, name: str, priority: int, target: str, graphs
) -> list[Fitted]:
    """The cluster's drafts whose clauses fit the matcher's budget, most general first
    (epilogue chains +-1, as found, ops as found); composites in a row multiply clauses,
    so where none fits they are spelled out as ONNX ops. A pattern that would be one
    repeated op (a bare elementwise chain) keeps its ops."""
    from ruleengine.match.compile import MAX_CLAUSES_PER_RULE
    from ruleengine.suggest.emit import (
        bare_convs,
        chains,
        draft,
        noop_casts,
        shared_params,
        size_limit,
    )

    def node_of(model: str, name: str):  # noqa: ANN202
        return graphs[model].node(name)

    def is_noop(model: str, name: str) -> bool:
        return _noop_cast(graphs[model], name)

    def is_bare(model: str, name: str) -> bool:
        return _bare_conv(graphs[model], name)

    # text -> its branches' units (a text names its cluster's ops: one map serves both)
    branches_of: dict[str, BranchUnits] = {}
    # a branched text -> the same draft with fewer branches, none last, with their units
    # (written unlinted: linted where taken, ``_tested``)
    fewer_of: dict[str, tuple[tuple[str, BranchUnits], ...]] = {}
    for spelled_out in (False, True):
        cluster = _primitive(c, graphs) if spelled_out else c
        drop = noop_casts(cluster, is_noop)
        bn = bare_convs(cluster, is_bare)
        # the branches (no-op Casts away, BatchNorm after bare Convs) where the clauses
        # still fit: both, either, none
        tries = list(dict.fromkeys([(drop, bn), (drop, ()), ((), bn), ((), ())]))

        def write(spread, *args, sizes=None, cluster=cluster, tries=tries) -> str:  # noqa: ANN001
            budget = MAX_CLAUSES_PER_RULE if spread is None else DRAFT_CLAUSES

            def text_of(without: tuple, with_bn: tuple) -> str:
                return draft(
                    cluster,
                    name,
                    priority,
                    target,
                    spread,
                    *args,
                    sizes=sizes,
                    drop=without,
                    bn_after=with_bn,
                )[1]

            for k, (without, with_bn) in enumerate(tries[:-1]):
                text = text_of(without, with_bn)
                if _clauses(text) <= budget and not _lint_findings(text):
                    branches_of[text] = (tuple(without), tuple(with_bn))
                    fewer_of[text] = tuple(
                        (other, (tuple(w), tuple(b)))
                        for w, b in tries[k + 1 :]
                        if _clauses(other := text_of(w, b)) <= budget
                    )
                    return text  # a branch leaving a finding (disconnected, views) is not
            return text_of((), ())

        out: dict[str, Cluster] = {}
        spreads: list = []
        whole = [list(range(len(cluster.instances[0].units)))]
        for spread in SPREADS:
            if spread is not None and chains(cluster) == whole:
                continue
            text = write(spread)
            budget = MAX_CLAUSES_PER_RULE if spread is None else DRAFT_CLAUSES
            if _clauses(text) <= budget and text not in out:
                out[text] = cluster
                spreads.append(spread)
        if out:
            # the same drafts with the attribute values of the regions pinned, last: what
            # the pruning narrows a draft to where its other matches lower coverage
            pins = shared_params(cluster, node_of)
            counts = _io_counts(cluster, graphs)
            pinned: dict[str, Cluster] = {}
            for how in ({}, pins) if pins else ({},):
                for spread in spreads:
                    text = write(spread, how, counts)
                    if text not in out and _clauses(text) <= (
                        MAX_CLAUSES_PER_RULE if spread is None else DRAFT_CLAUSES
                    ):
                        pinned.setdefault(text, cluster)
            # then each draft with its regions' largest tensors as a memory_limit: the
            # same structure on larger tensors elsewhere (a longer sequence) no longer
            # matches, where neither attributes nor input counts tell it apart
            sizes = _largest_sizes(cluster, graphs)
            unsized: dict[str, tuple[str, Mapping[str, int]]] = {}
            if sizes != (None, None):
                plain = list(out)  # the unpinned drafts, one per spread, in order
                for spread, was in zip(spreads, plain, strict=True):
                    text = write(spread, sizes=sizes)
                    if text not in pinned:
                        pinned[text] = cluster
                        unsized[text] = (was, size_limit(sizes))
            none: BranchUnits = ((), ())
            return [
                *(
                    Fitted(
                        cl, text, False, None, branches_of.get(text, none), fewer_of.get(text, ())
                    )
                    for text, cl in out.items()
                ),
                *(
                    Fitted(
                        cl,
                        text,
                        True,
                        unsized.get(text),
                        branches_of.get(text, none),
                        fewer_of.get(text, ()),
                    )
                    for text, cl in pinned.items()
                ),
            ]
    return []


def _noop_cast(graph, name: str) -> bool:  # noqa: ANN001
    """A Cast node to the dtype its input already has: it computes nothing."""
    from ruleengine.graph.loader import _dtype_name  # the names the loader gives dtypes

    node = graph.node(name)
    if node.op_type != "Cast" or not node.inputs or not node.inputs[0]:
        return False
    tensor = graph.tensors.get(node.inputs[0])
    to = node.attributes.get("to")
    if tensor is None or tensor.dtype is None or not isinstance(to, int):
        return False
    return _dtype_name(to) == tensor.dtype


def _bare_conv(graph, name: str) -> bool:  # noqa: ANN001
    """A Conv whose output no BatchNormalization reads (the exporter folded it, if any)."""
    node = graph.node(name)
    if node.op_type != "Conv" or not node.outputs or not node.outputs[0]:
        return False
    tensor = graph.tensors.get(node.outputs[0])
    readers = tensor.consumers if tensor is not None else ()
    return not any(graph.node(c).op_type == "BatchNormalization" for c, _ in readers)


def _largest_sizes(c: Cluster, graphs) -> tuple[int | None, int | None]:  # noqa: ANN001
    """The largest intermediate and output tensor (bytes) over the cluster's regions, as
    the ``memory_limit`` constraint measures them (``group_io``); None where no region
    has one of known size (a symbolic shape: nothing to pin)."""
    from ruleengine.cost.traffic import group_io

    inter: list[int] = []
    outs: list[int] = []
    for inst in c.instances:
        graph = graphs[inst.model]
        io = group_io(graph, inst.region.nodes)
        inter += [n for t in io.intermediates if (n := graph.tensors[t].nbytes)]
        outs += [n for t in io.outputs if (n := graph.tensors[t].nbytes)]
    return max(inter, default=None), max(outs, default=None)


def _io_counts(c: Cluster, graphs) -> tuple[int, int, int | None]:  # noqa: ANN001
    """(fewest, most) non-constant input tensors and the output count (None where they
    differ) of the cluster's regions, as the matcher counts them for ``subgraph``."""
    from ruleengine.match.matcher import _readers

    ins, outs = [], set()
    for inst in c.instances:
        graph = graphs[inst.model]
        readers = _readers(graph)
        inside = set(inst.region.nodes)
        produced = {t for n in inside for t in graph.node(n).outputs if t}
        read = {t for n in inside for t in graph.node(n).inputs if t and t not in produced}
        ins.append(sum(1 for t in read if not graph.tensors[t].is_constant))
        leaving = 0
        for t in produced:
            who = readers.get(t, frozenset())
            leaving += who is None or not who <= inside
        outs.add(leaving)
    return min(ins), max(ins), outs.pop() if len(outs) == 1 else None


def _label(c: Cluster) -> str:
    return " ".join(u.label for u in c.instances[0].units)


def _lint_findings(text: str) -> int:
    """The findings `check --strict` has on a drafted rule alone (warnings too): a branch
    drafted away from no-op Casts can be disconnected (a root Cast read by several ops)
    or fuse only views; such a branch is not written (the draft without it has none)."""
    from ruleengine.rules.lint import lint_file

    return len(lint_file(Path("<draft>"), "<draft>", text, set_checks=True).diagnostics)


def _clauses(text: str) -> int:
    """How many Datalog clauses the matcher would make of a drafted rule."""
    from ruleengine.match.compile import clause_count
    from ruleengine.ops.aliases import alias_table
    from ruleengine.rules.lint import lint_file

    rules = lint_file(Path("<draft>"), "<draft>", text).rules
    return max((clause_count(r, alias_table()) for r in rules), default=0)


def _primitive(c: Cluster, graphs) -> Cluster:  # noqa: ANN001
    """The cluster with every composite spelled out as its ONNX ops (one clause per
    pattern instead of one per combination of forms); instances whose spelled-out
    structure differs from the first one's are left out."""
    from dataclasses import replace

    from ruleengine.suggest.canon import canonicalize

    by_key: dict[tuple, list[Instance]] = {}
    for inst in c.instances:
        canon = canonicalize(graphs[inst.model], inst.region.nodes, ())
        by_key.setdefault(canon.key, []).append(replace(inst, units=canon.units))
    first = canonicalize(graphs[c.instances[0].model], c.instances[0].region.nodes, ()).key
    return Cluster(first, tuple(by_key[first]))


def _run(d: DraftRule, tests, run_tests) -> dict:
    """Run ``tests`` of draft ``d`` with the rule-test runner: file name -> outcome."""
    with tempfile.TemporaryDirectory(prefix="autofusion-suggest-") as tmp:
        folder = Path(tmp)
        (folder / f"{d.name}.yaml").write_text(d.text, encoding="utf-8")
        (folder / f"{d.name}.tests").mkdir()
        for fname, text in tests.items():
            (folder / f"{d.name}.tests" / fname).write_text(text, encoding="utf-8")
        run = run_tests([folder])
    return {Path(o.test_file).name: o for o in run.outcomes}


def _display_names(models: Sequence[str | Path]) -> list[str]:
    """Model file names, with the parent folder where two files share a name."""
    paths = [Path(m) for m in models]
    names = [p.name for p in paths]
    return [f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name for p in paths]


# Drafted rules may match node sets outside the partition they were drafted from (a
# generalized pattern, another layer's variant), and the selection stage picks such groups
# where they save more net bytes, even when they capture fewer fusable bytes. Each round,
# the drafted rule whose removal raises coverage most (summed over the models) is left
# out, decided by the real selection stage over the real candidates; at most this many.
PRUNE_ROUNDS = 12
# Where no single change raises coverage, pairs of rules left out together are tried
# among at most this many rules with stray groups (``_prune.best_pair``): 45 pairs.
MAX_PAIR_RULES = 10


def _measure_after(  # noqa: ANN001
    baseline, drafts, rules, preset, target, dims, note, graphs
) -> tuple[list[DraftRule], list[tuple[str, str]], tuple[ModelCoverage, ...]]:
    """Run the pipeline again with the drafted rules beside the given ones; drafted rules
    that lower coverage (``_prune``) are left out and the pipeline run again without them."""
    from ruleengine import coverage

    analyses = _analyses(baseline, drafts, rules, preset, target, dims, note)
    kept, pruned = _prune(drafts, analyses, [b[1] for b in baseline], graphs)
    # measured again when a rule was left out or narrowed (narrowing alone drops none:
    # the figures must be those of the rules written)
    changed = [d.text for d in kept] != [d.text for d in drafts]
    drafts = kept
    if changed:
        note("measuring again without the rules that lower coverage, or narrowed")
        analyses = _analyses(baseline, drafts, rules, preset, target, dims, note)
    suggested = {d.name for d in drafts}
    out = []
    for (_path, name, before, reach, ceilings, bound), analysis in zip(
        baseline, analyses, strict=True
    ):
        chosen = analysis.resolution.chosen
        after = coverage.measure(analysis.graph, [sc.candidate.nodes for sc in chosen])
        out.append(
            ModelCoverage(
                name,
                before.fusable_bytes,
                before.coverage,
                after.coverage,
                reach,
                *ceilings,
                bound=bound,
                groups_after=len(chosen),
                suggested_groups=sum(1 for sc in chosen if sc.candidate.rule in suggested),
                unknown_edges=before.unknown_edges,
            )
        )
    return drafts, pruned, tuple(out)


def _analyses(baseline, drafts, rules, preset, target, dims, note) -> list:  # noqa: ANN001
    from ruleengine.pipeline import analyze

    out = []
    with tempfile.TemporaryDirectory(prefix="autofusion-suggest-") as tmp:
        for d in drafts:
            (Path(tmp) / f"{d.name}.yaml").write_text(d.text, encoding="utf-8")
        extra = [tmp] if drafts else []
        for path, name, *_ in baseline:
            note(f"measuring {name} with the suggested rules")
            out.append(analyze(path, [*rules, *extra], preset=preset, target=target, dims=dims))
    return out


def _prune(  # noqa: ANN001, C901, PLR0915
    drafts: list[DraftRule], analyses, models: list[str], graphs=None
) -> tuple[list[DraftRule], list[tuple[str, str]]]:
    """Leave out or narrow the drafted rules that lower coverage: each round, the
    selection stage is run (``resolve``, as the pipeline runs it) over every model's
    scored candidates with one drafted rule's left out, or replaced by those of a less
    general draft of its cluster (``DraftRule.narrower``: matched and costed on the same
    graphs), for each drafted rule with a chosen group; the change that captures the
    most fusable bytes more (coverage summed over the models; ties: narrowing first, then
    the better-ranked rule) is made. A narrowed draft must pass its generated tests.
    Exact for what it tries: match and cost of a rule do not depend on the other rules
    but for duplicates, which ``_without`` and the cost stage's own rule settle (the
    pipeline is run again on the result all the same)."""
    from dataclasses import replace

    from ruleengine import coverage
    from ruleengine.cost.constraints import memory_limit_excess
    from ruleengine.cost.scoring import _reduce_duplicates
    from ruleengine.resolve import resolve
    from ruleengine.suggest.emit import PINNED_NOTE

    edges = [coverage.fusable_edges(a.graph) for a in analyses]
    current = {d.name: d for d in drafts}
    swapped: dict[str, list[tuple]] = {}  # rule -> per model, its candidates now (narrowed)
    out: set[str] = set()
    dropped: list[tuple[str, str]] = []
    alt_scored: dict[tuple[str, int], list[tuple]] = {}

    def scored_of(k: int, without: set[str], swap: dict[str, list[tuple]]) -> list:
        a = analyses[k]
        base = _without(a.scored, frozenset(without | set(swap)))
        if not swap:
            return base
        extra = [sc for name in sorted(swap) for sc in swap[name][k]]
        return sorted(_reduce_duplicates([*base, *extra]), key=lambda sc: sc.candidate.key)

    def select(without: set[str], swap: dict[str, list[tuple]]) -> tuple[list[float], set[str]]:
        shares, used = [], set()
        for k, (a, e) in enumerate(zip(analyses, edges, strict=True)):
            if not without and not swap:
                chosen = a.resolution.chosen
            else:
                chosen = resolve(a.graph, scored_of(k, without, swap)).chosen
            used.update(sc.candidate.rule for sc in chosen)
            shares.append(coverage.measure(a.graph, [sc.candidate.nodes for sc in chosen], e))
        return [m.coverage for m in shares], used

    def narrowed(d: DraftRule, i: int) -> list[tuple]:
        if (d.name, i) not in alt_scored:
            alt_scored[d.name, i] = [_scored_rule(d.name, d.narrower[i][1], a) for a in analyses]
        return alt_scored[d.name, i]

    tested_memo: dict[str, DraftRule | None] = {}

    def fits(sc, graph, limit: Mapping[str, int]) -> bool:  # noqa: ANN001
        return (
            memory_limit_excess(
                graph, sc.details.get("intermediates", ()), sc.details.get("outputs", ()), limit
            )
            is None
        )

    def no_change(d: DraftRule, i: int) -> bool:
        """A size-pinned narrowing whose unpinned draft is the rule's current one or a
        plain narrowing on offer, where every candidate of that draft fits the limit:
        the same candidates, judged alike (the constraint is the cost stage's, checked
        on each candidate), so its trial is the unpinned one's (no gain, or the plain
        narrowing's, which wins ties): not matched again."""
        got = d.unsized.get(d.narrower[i][1])
        if got is None:
            return False
        plain, limit = got
        if d.text == plain:
            base = swapped.get(d.name) or [
                [sc for sc in a.scored if sc.candidate.rule == d.name] for a in analyses
            ]
        else:
            j = next(
                (j for j, (_, text) in enumerate(d.narrower) if text == plain),
                None,
            )
            if j is None:
                return False
            base = narrowed(d, j)
        return all(
            fits(sc, a.graph, limit) for a, scs in zip(analyses, base, strict=True) for sc in scs
        )

    def best(trials: list[tuple]) -> tuple | None:
        for t in sorted(trials, key=lambda t: t[:4], reverse=True):
            if t[0] <= 1e-9:
                return None
            d, i = t[4], t[5]
            if i is None:
                return t
            cluster, text = d.narrower[i]
            if text not in tested_memo:
                tested_memo[text] = _tested(
                    replace(d, text=text, cluster=cluster, tests={}), graphs
                )
            if tested_memo[text] is not None:
                return (*t[:4], tested_memo[text], i, *t[6:])
        return None

    def strays() -> list[DraftRule]:
        """The drafted rules in use with a chosen group that is none of the regions they
        were drafted for, in rank order: a generalized match elsewhere."""
        found: set[str] = set()
        for k, a in enumerate(analyses):
            chosen = resolve(a.graph, scored_of(k, out, swapped)).chosen
            for sc in chosen:
                d = current.get(sc.candidate.rule)
                if d is None or d.name in out or d.name in found:
                    continue
                own = {
                    frozenset(i.region.nodes) for i in d.cluster.instances if i.model == models[k]
                }
                if frozenset(sc.candidate.nodes) not in own:
                    found.add(d.name)
        return [current[d.name] for d in drafts if d.name in found][:MAX_PAIR_RULES]

    def best_pair() -> tuple | None:
        """Where no single change raises coverage: the two drafted rules with stray
        groups whose leaving out together raises it most (each alone may lower it: two
        generalized matches that tile a stretch of layers between them, each of which
        alone the selection pairs with groups that capture more)."""
        found = None
        for a, b in combinations(strays(), 2):
            gone = {a.name, b.name}
            trial, trial_used = select(
                out | gone, {k: v for k, v in swapped.items() if k not in gone}
            )
            gain = sum(trial) - sum(now)
            if gain > 1e-9 and (found is None or gain > found[0]):
                found = (gain, (a, b), trial, trial_used)
        return None if found is None else found[1:]

    now, used = select(out, swapped)
    for _ in range(PRUNE_ROUNDS):
        trials = []
        pins = []  # (rank, draft, narrowing) of the pinned drafts
        for rank, d in enumerate(drafts):
            if d.name in out or d.name not in used:
                continue
            d = current[d.name]
            for i in range(len(d.narrower)):
                if PINNED_NOTE in d.narrower[i][1]:
                    pins.append((rank, d, i))
                    continue
                trial, trial_used = select(out, {**swapped, d.name: narrowed(d, i)})
                # ties: a less general draft first, then leaving the rule out
                trials.append((sum(trial) - sum(now), 2, -rank, -i, d, i, trial, trial_used))
            trial, trial_used = select(
                out | {d.name}, {k: v for k, v in swapped.items() if k != d.name}
            )
            trials.append((sum(trial) - sum(now), 1, -rank, 0, d, None, trial, trial_used))
        plain = best(trials)
        # pinned drafts (each matched anew on every model: the costly trials) of a rule
        # whose leaving out raises coverage (a pin may keep what it captures where it is
        # drafted), and of every rule in a round where no plainer change raises it
        gains = {t[4].name for t in trials if t[5] is None and t[0] > 1e-9}
        pins = [p for p in pins if plain is None or p[1].name in gains]
        for rank, d, i in pins:
            if no_change(d, i):
                continue
            trial, trial_used = select(out, {**swapped, d.name: narrowed(d, i)})
            # ties: after a less general draft and leaving the rule out
            trials.append((sum(trial) - sum(now), 0, -rank, -i, d, i, trial, trial_used))
        change = best(trials) if pins else plain
        if change is None:
            pair = best_pair()
            if pair is None:
                break
            (a, b), trial, trial_used = pair
            lost = _coverage_change(models, now, trial, "both")
            for d, other in ((a, b), (b, a)):
                why = f"lowers coverage with {other.name}: their groups win on net bytes ({lost})"
                dropped.append((d.name, why))
                out.add(d.name)
                swapped.pop(d.name, None)
            now, used = trial, trial_used
            continue
        _, _, _, _, d, i, trial, trial_used = change
        if i is None:
            lost = _coverage_change(models, now, trial, "it")
            dropped.append((d.name, f"lowers coverage: its groups win on net bytes ({lost})"))
            out.add(d.name)
            swapped.pop(d.name, None)
        else:
            swapped[d.name] = narrowed(current[d.name], i)
            current[d.name] = replace(d, narrower=current[d.name].narrower[i + 1 :])
            alt_scored = {k: v for k, v in alt_scored.items() if k[0] != d.name}
        now, used = trial, trial_used
    kept = [current[d.name] for d in drafts if d.name not in out]
    if graphs is not None:
        kept = [_with_kernel(d, graphs) if d.name in swapped else d for d in kept]
    return kept, dropped


def _coverage_change(
    models: Sequence[str], now: Sequence[float], trial: Sequence[float], kept: str
) -> str:
    """Per model whose coverage a left-out rule (or pair) changes: with ``kept``, without."""
    return ", ".join(
        f"{m}: {n:.1%} with {kept}, {t:.1%} without"
        for m, n, t in zip(models, now, trial, strict=True)
        if t != n
    )


def _scored_rule(name: str, text: str, analysis) -> list:  # noqa: ANN001
    """The scored candidates of one rule (YAML ``text``) on an analysis's graph."""
    from ruleengine.cost import score_candidates
    from ruleengine.match.parallel import find_candidates_parallel
    from ruleengine.rules.lint import load_rule_set

    with tempfile.TemporaryDirectory(prefix="autofusion-suggest-") as tmp:
        (Path(tmp) / f"{name}.yaml").write_text(text, encoding="utf-8")
        rule_set = load_rule_set([tmp])
    match = find_candidates_parallel(analysis.graph, rule_set, 1)
    return list(score_candidates(analysis.graph, match, rule_set, analysis.target))


def _without(scored, rules: frozenset[str]) -> list:  # noqa: ANN001
    """The scored candidates as the cost stage gives them without ``rules``: theirs left
    out, and a candidate it marked a duplicate of one of theirs (the same node set, lower
    priority) viable again (the highest priority of those, as the cost stage keeps)."""
    from ruleengine.cost.model import Verdict
    from ruleengine.cost.scoring import relabel

    gone = {sc.candidate.node_set for sc in scored if sc.viable and sc.candidate.rule in rules}
    kept = [sc for sc in scored if sc.candidate.rule not in rules]
    stays = {sc.candidate.node_set for sc in kept if sc.viable}
    back: dict[frozenset[str], int] = {}
    for i, sc in enumerate(kept):
        nodes = sc.candidate.node_set
        if sc.verdict is not Verdict.DUPLICATE or nodes not in gone or nodes in stays:
            continue
        j = back.get(nodes)
        if j is None or (-sc.priority, sc.candidate.key) < (
            -kept[j].priority,
            kept[j].candidate.key,
        ):
            back[nodes] = i
    for i in back.values():
        kept[i] = relabel(kept[i], Verdict.FUSE, "fuse", "")
    return kept
