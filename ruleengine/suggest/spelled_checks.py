"""Each model measured again in its other spelling, with bridge rules where it falls.

A model's other spelling (``spelled.decomposed``) has its composite ops written out, as
another exporter writes them. A drafted rule may take an op that, in that spelling, a
given rule needs together with the written-out composite (the embeddings' sum Add of
``embedding_norm``): there it displaces the given rule's group and coverage falls,
though where it was drafted it raises it (the family's other exports fall the same way:
roberta ts -> ts14). Where it falls, a *bridge* is drafted in that spelling: the drafted
group with the groups it displaces, one region, its composites left written out (so it
matches only where they are: the source is not changed by it)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ruleengine.suggest.analyses import Given, analysis_with_drafts, covered
from ruleengine.suggest.draft_tests import with_kernel, with_tests
from ruleengine.suggest.drafting import instance_of
from ruleengine.suggest.fitting import alternatives, fitting_drafts
from ruleengine.suggest.model import (
    Cluster,
    DraftRule,
    ModelCoverage,
    Progress,
    Region,
    SpelledCoverage,
)

if TYPE_CHECKING:
    from ruleengine.cost.model import ScoredCandidate
    from ruleengine.cost.scoring import GroupMemo
    from ruleengine.pipeline import Analysis

# a fall in the other spelling's coverage smaller than this is not one (figures print
# to 0.1%)
SPELLED_TOLERANCE = 0.0005
# what a model's other spelling is called in the descriptions of the drafts made there
SPELLED_SUFFIX = "(composites written out)"
# Bridges are drafted where a drafted rule lowers a model's other spelling.
SPELLED_BRIDGES = True


def spelled_checks(
    models: Sequence[str | Path],
    report: Sequence[ModelCoverage],
    drafts: Sequence[DraftRule],
    given: Given,
    note: Progress,
) -> tuple[list[DraftRule], tuple[ModelCoverage, ...]]:
    """Each model measured again in its other spelling, with the given rules and with
    the drafted rules beside them; where it falls, bridges drafted there (a rule as any
    region's, ``bridge_rules``) are kept where every model given keeps its coverage and
    the other spelling's rises; the drafted rules still lowering it are named in the
    summary (``ModelCoverage.spelled``)."""
    out = list(report)
    drafts = list(drafts)
    with tempfile.TemporaryDirectory(prefix="autofusion-spelled-") as tmp:
        for k, (path, m) in enumerate(zip(models, report, strict=True)):
            folder = Path(tmp) / f"model-{k}"
            folder.mkdir()
            twin = _other_spelling(path, folder, m.model, note)
            if twin is not None:
                drafts, out = _check(k, m.model, twin, models, drafts, out, given, note)
    return drafts, tuple(out)


def _other_spelling(path: str | Path, folder: Path, name: str, note: Progress) -> Path | None:
    """The model with its composites written out into ``folder``; None where it has
    none or they cannot be written out (the model itself was analysed: a check)."""
    from ruleengine.suggest.spelled import decomposed

    try:
        return decomposed(path, folder)
    except Exception as e:
        note(f"{name}: its composites not written out ({type(e).__name__}: {e})")
        return None


def _check(
    k: int,
    name: str,
    twin: Path,
    models: Sequence[str | Path],
    drafts: list[DraftRule],
    out: list[ModelCoverage],
    given: Given,
    note: Progress,
) -> tuple[list[DraftRule], list[ModelCoverage]]:
    """Model ``k``'s other spelling (``twin``) measured, bridged where it falls."""
    note(f"measuring {name} with its composites written out")
    before = given.analyze(twin)
    after = analysis_with_drafts(twin, drafts, given)
    was, now = covered(before), covered(after)
    if now + SPELLED_TOLERANCE < was and SPELLED_BRIDGES:
        bridged = _bridged(name, twin, models, before, after, now, drafts, out, given, note)
        if bridged is not None:
            drafts, after, now, out = bridged
    lowered = displaced(before, after, drafts) if now + SPELLED_TOLERANCE < was else {}
    lowered_by = tuple(
        (r, tuple(sorted({b.candidate.rule for g in v.values() for b in g})))
        for r, v in sorted(lowered.items())
    )
    out[k] = replace(out[k], spelled=SpelledCoverage(was, now, lowered_by))
    return drafts, out


def _bridged(
    name: str,
    twin: Path,
    models: Sequence[str | Path],
    before: Analysis,
    after: Analysis,
    now: float,
    drafts: list[DraftRule],
    out: Sequence[ModelCoverage],
    given: Given,
    note: Progress,
) -> tuple[list[DraftRule], Analysis, float, list[ModelCoverage]] | None:
    """The drafts with bridges for the other spelling, its analysis and coverage with
    them, and every model's figures with them; None where they are not kept."""
    bridges = bridge_rules(f"{name} {SPELLED_SUFFIX}", before, after, drafts, note)
    if not bridges:
        return None
    trial = [*drafts, *bridges]
    note(f"measuring {name} with {len(bridges)} bridge rule(s)")
    kept = [analysis_with_drafts(p, trial, given) for p in models]
    twin_after = analysis_with_drafts(twin, trial, given)
    if not (
        covered(twin_after) > now + 1e-9
        and all(covered(a) + 1e-9 >= r.after for a, r in zip(kept, out, strict=True))
    ):
        return None
    names = {d.name for d in trial}
    figures = [
        replace(
            r,
            after=covered(a),
            groups_after=len(a.resolution.chosen),
            suggested_groups=sum(1 for sc in a.resolution.chosen if sc.candidate.rule in names),
        )
        for a, r in zip(kept, out, strict=True)
    ]
    return trial, twin_after, covered(twin_after), figures


def displaced(
    before: Analysis, after: Analysis, drafts: Sequence[DraftRule]
) -> dict[str, dict[frozenset[str], list[ScoredCandidate]]]:
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


def bridge_rules(
    name: str, before: Analysis, after: Analysis, drafts: Sequence[DraftRule], note: Progress
) -> list[DraftRule]:
    """Rules for the other spelling: each drafted group there that displaces groups of
    the given rules, together with them, as one region (where the cost model fuses it),
    drafted with its composites written out, tested on that spelling's graph."""
    from ruleengine.cost.scoring import GroupMemo
    from ruleengine.cost.traffic import topo_position

    graph = after.graph
    graphs = {name: graph}
    pos = topo_position(graph)
    memo = GroupMemo(graph, after.target)
    priorities = {r.name: r.priority for r in after.rule_set.rules}
    taken = set(priorities)
    seen: set[frozenset[str]] = set()
    drafted = []
    for rule, groups in sorted(displaced(before, after, drafts).items()):
        for group, hit in sorted(groups.items(), key=lambda g: min(pos[n] for n in g[0])):
            nodes = frozenset(group).union(*(b.candidate.node_set for b in hit))
            if nodes in seen:
                continue
            seen.add(nodes)
            region = _fused_region(after, nodes, pos, memo)
            if region is None:
                continue
            found = _bridge_drafts(name, region, rule, before, after, priorities, taken)
            if found:
                drafted.append(found)
    if not drafted:
        return []
    note(f"drafting {len(drafted)} bridge rule(s) for {name}")
    tested, _ = with_tests(drafted, graphs, note)
    return [with_kernel(d, graphs) for d in tested]


def _fused_region(
    after: Analysis, nodes: frozenset[str], pos: Mapping[str, int], memo: GroupMemo
) -> Region | None:
    """The node set as a region, where the cost model fuses it."""
    from ruleengine.cost.model import Verdict
    from ruleengine.cost.scoring import score_one
    from ruleengine.suggest.regions import group_candidate

    graph = after.graph
    scored = score_one(graph, group_candidate(graph, nodes), None, after.target, memo=memo)
    if scored.verdict is not Verdict.FUSE:
        return None
    cost = scored.cost  # type: ignore[attr-defined]
    return Region(tuple(sorted(nodes, key=pos.__getitem__)), cost.bytes_saved, cost.net_bytes)


def _bridge_drafts(
    name: str,
    region: Region,
    rule: str,
    before: Analysis,
    after: Analysis,
    priorities: Mapping[str, int],
    taken: set[str],
) -> list[DraftRule]:
    """The drafts of one bridge (a cluster of its one region), most general first."""
    from ruleengine.suggest.canon import canonicalize
    from ruleengine.suggest.emit import fitting_priority, rule_name

    graph = after.graph
    canon = canonicalize(graph, region.nodes)  # composites stay written out
    inst = instance_of(name, graph, region, canon, before.resolution.chosen)
    cluster = Cluster(canon.key, (inst,))
    bridge = rule_name(cluster, taken)
    priority = fitting_priority({*inst.absorbed_rules, rule}, priorities)
    fitted = fitting_drafts(cluster, bridge, priority, after.target.name, {name: graph})
    return alternatives(bridge, priority, fitted) if fitted else []
