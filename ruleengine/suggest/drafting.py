"""Drafting: each model analysed with the given rules, the regions they leave unfused
found (``regions``), clustered by structure across layers and models (``canon``), and
one tested rule drafted per cluster (``fitting``, ``draft_tests``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from ruleengine.suggest.analyses import Given
from ruleengine.suggest.beside import Later
from ruleengine.suggest.draft_tests import distinct, with_kernel, with_tests
from ruleengine.suggest.fitting import alternatives, fitting_drafts
from ruleengine.suggest.model import (
    Cluster,
    DraftRule,
    Instance,
    ModelBaseline,
    Progress,
    Region,
)

if TYPE_CHECKING:
    from ruleengine.cost.model import ScoredCandidate
    from ruleengine.coverage import FusableEdges
    from ruleengine.graph.model import Graph
    from ruleengine.pipeline import Analysis
    from ruleengine.suggest.canon import CanonicalRegion
    from ruleengine.suggest.regions import RegionSearch

# A compact region (ruleengine.suggest.regions.COMPACT_OPS) earns a rule only where it
# recurs (layers, models).
COMPACT_MIN_INSTANCES = 2

# Where the kernel pool hits its budget (``partition.MAX_POOL_SETS``) and the drafting
# partition's simulated selection captures less than WIDER_BELOW (issue 16's bar), the
# search runs again with a pool of WIDER_POOL_SETS sets.
WIDER_BELOW = 0.9
WIDER_POOL_SETS = 48_000
# the memo entry naming the models whose drafting used the wider pool
WIDER_USED = "wider pool used"

# per model key: (its analysis, its fusable edges, what its region search does not redo)
Held = tuple["Analysis", "FusableEdges", dict]


def instance_of(
    model: str,
    graph: Graph,
    region: Region,
    canon: CanonicalRegion,
    chosen: Iterable[ScoredCandidate],
) -> Instance:
    """The region as an instance of its cluster: its canonical units, whether an
    intermediate escapes, its data dtypes and the given rules' groups it swallows."""
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


def draft_rules(
    models: Sequence[str | Path],
    given: Given,
    min_bytes: int,
    max_rules: int | None,
    note: Progress,
    names: Sequence[str] | None = None,
    twins: bool = False,
    memo: dict | None = None,
    narrow: bool = False,
    taken: Iterable[str] = (),
) -> tuple[list[ModelBaseline], list[DraftRule], list[tuple[str, str]], dict[str, Graph]]:
    """Per model the figures before (``baseline``); the drafted rules with their tests
    and kernel entries; the clusters without a rule and why; the graphs by model name.
    ``memo``: kept across calls (the first drafting and the further one for twins, from
    the same rules): each model's analysis and what its region search does not redo.
    ``narrow``: the first search's pool alone, never the wider one; ``taken``: names the
    drafts must not take (drafts already written)."""
    clusters: dict[tuple, list[Instance]] = {}
    largest: set[tuple] = set()  # keys of clusters holding a largest region
    baseline = []
    names = list(names) if names is not None else display_names(models)
    priorities: dict[str, int] = {}
    graphs = {}
    for path, name in zip(models, names, strict=True):
        held = _analysed(path, name, given, memo, note)
        analysis, edges, search_memo = held
        priorities.update({r.name: r.priority for r in analysis.rule_set.rules})
        graphs[name] = analysis.graph
        search = _searched(name, analysis, edges, search_memo, twins, narrow, memo, note)
        _add_regions(clusters, largest, name, analysis, search, edges)
        baseline.append(_baseline_of(path, name, analysis, search, edges))
    kept, dropped = _within_limits(ranked_clusters(clusters, largest), min_bytes, max_rules)
    drafts, unfit = _drafts_of(kept, priorities, set(priorities) | set(taken), given.target, graphs)
    dropped += unfit
    note("generating and running the rule tests")
    drafts, failed = with_tests(drafts, graphs, note)
    dropped += failed
    drafts, alike = distinct(drafts, given)
    dropped += alike
    drafts = [with_kernel(d, graphs) for d in drafts]
    return baseline, drafts, dropped, graphs


def _analysed(
    path: str | Path,
    name: str,
    given: Given,
    memo: dict | None,
    note: Progress,
) -> Held:
    """The model analysed with the given rules (from ``memo`` where it holds it)."""
    from ruleengine import coverage

    key = (
        str(path),
        tuple(map(str, given.rules)),
        given.preset,
        given.target,
        tuple(sorted((given.dims or {}).items())),
    )
    held = memo.get(key) if memo is not None else None
    if held is None:
        note(f"analysing {name}")
        analysis = given.analyze(path)
        held = (analysis, coverage.fusable_edges(analysis.graph), {})
        if memo is not None:
            memo[key] = held
    return held


def _searched(
    name: str,
    analysis: Analysis,
    edges: FusableEdges,
    search_memo: dict,
    twins: bool,
    narrow: bool,
    memo: dict | None,
    note: Progress,
) -> RegionSearch:
    """The region search of one model, with the wider pool where the first one hit its
    budget under the bar (unless ``narrow``)."""
    from ruleengine.suggest.regions import search_regions

    chosen = analysis.resolution.chosen
    rivals = [
        (sc.candidate.node_set, sc.cost.net_bytes)
        for sc in analysis.scored
        if sc.viable and sc.cost is not None
    ]
    search_with = partial(
        search_regions,
        analysis.graph,
        [sc.candidate.nodes for sc in chosen],
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
        if search.twin_ceiling is not None:  # the wider search's ceiling is reported
            search.twin_ceiling.put_off()
        search = search_with(max_sets=WIDER_POOL_SETS)
    return search


def _add_regions(
    clusters: dict[tuple, list[Instance]],
    largest: set[tuple],
    name: str,
    analysis: Analysis,
    search: RegionSearch,
    edges: FusableEdges,
) -> None:
    """Add the model's regions, and each region's core, to the clusters of their
    structure (``largest``: the keys of clusters holding a largest region)."""
    from ruleengine.suggest.canon import canonicalize, composite_instances
    from ruleengine.suggest.regions import core_region

    graph, chosen = analysis.graph, analysis.resolution.chosen
    regions, compact = search.regions, search.compact
    composites = composite_instances(graph) if regions else ()
    seen: set[tuple[str, ...]] = set()
    cores = []
    for region in (*regions, *compact):
        if region.nodes in seen:
            continue
        seen.add(region.nodes)
        canon = canonicalize(graph, region.nodes, composites)
        clusters.setdefault(canon.key, []).append(instance_of(name, graph, region, canon, chosen))
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
        clusters.setdefault(canon.key, []).append(instance_of(name, graph, core, canon, chosen))
        if of_largest:
            largest.add(canon.key)


def _baseline_of(
    path: str | Path,
    name: str,
    analysis: Analysis,
    search: RegionSearch,
    edges: FusableEdges,
) -> ModelBaseline:
    """The model's figures with the given rules, and what its drafting reached."""
    from ruleengine import coverage
    from ruleengine.suggest.regions import edge_ceiling

    graph = analysis.graph
    groups = [sc.candidate.nodes for sc in analysis.resolution.chosen]
    fusable = edges.fusable_bytes or 1

    def ceilings() -> tuple[float, bool, float, bool]:
        return (
            *ceiling_of(search, edges.fusable_bytes),
            search.ceiling.captured / fusable if edges.fusable_bytes else 1.0,
            search.ceiling.exact,
        )

    return ModelBaseline(
        path,
        name,
        coverage.measure(graph, groups, edges),
        search.selected / fusable if edges.fusable_bytes else 1.0,
        Later(ceilings),  # the ceiling under twins is computed beside, read when reported
        edge_ceiling(graph, edges, analysis.target),
    )


def _by_saving(c: Cluster) -> tuple:
    return (-c.bytes_saved, -len(c.instances), repr(c.key))


def _by_model(i: Instance) -> str:
    return i.model


def ranked_clusters(
    clusters: Mapping[tuple, Sequence[Instance]], largest: set[tuple] | None = None
) -> list[Cluster]:
    """The clusters, most bytes saved first; with ``largest``, a compact region's only
    where it recurs (layers, models). Instances by model name (stable: graph order
    within a model), so the rules do not depend on the order the models were given in."""
    return sorted(
        (
            Cluster(key, tuple(sorted(insts, key=_by_model)))
            for key, insts in clusters.items()
            if largest is None or key in largest or len(insts) >= COMPACT_MIN_INSTANCES
        ),
        key=_by_saving,
    )


def _within_limits(
    ranked: Sequence[Cluster], min_bytes: int, max_rules: int | None
) -> tuple[list[Cluster], list[tuple[str, str]]]:
    """The clusters within --min-bytes and --max-rules; the others with why."""
    dropped: list[tuple[str, str]] = []
    kept: list[Cluster] = []
    for c in ranked:
        if c.bytes_saved < min_bytes:
            dropped.append((cluster_label(c), f"saves {c.bytes_saved} B < --min-bytes {min_bytes}"))
        elif max_rules is not None and len(kept) >= max_rules:
            dropped.append((cluster_label(c), f"beyond --max-rules {max_rules}"))
        else:
            kept.append(c)
    return kept, dropped


def alternatives_for(
    c: Cluster,
    taken: set[str],
    priorities: Mapping[str, int],
    target: str,
    graphs: Mapping[str, Graph],
) -> tuple[str, list[DraftRule]]:
    """The cluster's rule name (added to ``taken``) and its drafts, most general first
    (none where no draft fits the matcher's clause budget)."""
    from ruleengine.suggest.emit import fitting_priority, rule_name

    name = rule_name(c, taken)
    absorbed = set().union(*(i.absorbed_rules for i in c.instances))
    priority = fitting_priority(absorbed, priorities)
    fitted = fitting_drafts(c, name, priority, target, graphs)
    return name, alternatives(name, priority, fitted) if fitted else []


def _drafts_of(
    kept: Sequence[Cluster],
    priorities: Mapping[str, int],
    taken: set[str],
    target: str,
    graphs: Mapping[str, Graph],
) -> tuple[list[list[DraftRule]], list[tuple[str, str]]]:
    """Per cluster its drafts; the clusters none of whose drafts fits, with why."""
    drafts, dropped = [], []
    for c in kept:
        name, drafted = alternatives_for(c, taken, priorities, target, graphs)
        if not drafted:
            dropped.append((name, "its pattern exceeds the matcher's clause budget"))
            continue
        drafts.append(drafted)
    return drafts, dropped


def ceiling_of(search: RegionSearch, fusable: int) -> tuple[float, bool]:
    """The bar's ceiling and whether it is proven: where the twins of the selectable
    ceiling's drafted groups displace it (a rule drafted from one group matches its twins
    too), the ceiling under twins (``twins.twin_ceiling``); else the selectable ceiling,
    or the drafting's simulated pick where a solve cut short found less (itself
    selectable)."""
    if not fusable:
        return 1.0, search.selectable.exact
    twin = search.twin_ceiling.get() if search.twin_ceiling is not None else None
    if twin is not None and twin is not search.selectable:  # its twins displace it
        return twin.captured / fusable, twin.exact
    return max(search.selectable.captured, search.selected) / fusable, search.selectable.exact


def display_names(models: Sequence[str | Path]) -> list[str]:
    """Model file names, with the parent folder where two files share a name."""
    paths = [Path(m) for m in models]
    names = [p.name for p in paths]
    return [f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name for p in paths]


def cluster_label(c: Cluster) -> str:
    """The cluster's ops, as the summary names a cluster that got no rule."""
    return " ".join(u.label for u in c.instances[0].units)
