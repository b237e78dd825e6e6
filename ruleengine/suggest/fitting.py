"""Drafts of a cluster that fit the matcher's clause budget, most general first.

Each cluster is written several ways: epilogue chains as repeated ops (``SPREADS``),
branches without its no-op Casts or with a BatchNormalization after bare Convs, and last
the pinned forms (attribute values, input counts, tensor sizes) the pruning may narrow a
draft to. What is written here is untested: ``draft_tests`` runs the generated tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ruleengine.suggest.model import BranchUnits, Cluster, DraftRule, Instance

if TYPE_CHECKING:
    from ruleengine.graph.model import Graph, Node

# Epilogue chains are written as repeated @epilogue ops of their length up to SPREADS[0]
# more (fewer where the clauses would exceed DRAFT_CLAUSES; None: the ops as found).
# Every clause is a query the matcher compiles and runs: a draft stays small.
SPREADS = (1, 0, None)
DRAFT_CLAUSES = 64

NO_BRANCH: BranchUnits = ((), ())


class Fitted(NamedTuple):
    """One draft of a cluster: its text, whether it is pinned (a narrowing only), and for
    a size-pinned one, the same draft unpinned and the ``memory_limit`` fields."""

    cluster: Cluster
    text: str
    pinned: bool
    unsized: tuple[str, Mapping[str, int]] | None = None
    branches: BranchUnits = NO_BRANCH  # what its branches are (``DraftRule.branches``)
    # the same draft with fewer branches, none last, each with its branches' units
    fewer: tuple[tuple[str, BranchUnits], ...] = ()


def alternatives(name: str, priority: int, fitted: Sequence[Fitted]) -> list[DraftRule]:
    """The cluster's drafts as rules (most general first), each knowing the size-pinned
    forms' unpinned drafts and limits (what the pruning compares, never read back)."""
    unsized = {f.text: f.unsized for f in fitted if f.unsized is not None}
    branches = {f.text: f.branches for f in fitted if f.branches != NO_BRANCH}
    # the fewer-branch forms' own branches too (what their tests are cut to)
    branches.update((t, u) for f in fitted for t, u in f.fewer if u != NO_BRANCH)
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


def clause_budget(spread: int | None) -> int:
    """The most clauses a draft written with ``spread`` may have."""
    from ruleengine.match.compile import MAX_CLAUSES_PER_RULE

    return MAX_CLAUSES_PER_RULE if spread is None else DRAFT_CLAUSES


class _Writer:
    """Writes one cluster's drafts, each with the most branches whose clauses fit and
    that leave no lint finding; records each text's branches and its fewer-branch forms
    in the maps it is given (shared by the cluster's two spellings)."""

    def __init__(
        self,
        cluster: Cluster,
        name: str,
        priority: int,
        target: str,
        tries: Sequence[tuple[tuple, tuple]],
        branches_of: dict[str, BranchUnits],
        fewer_of: dict[str, tuple[tuple[str, BranchUnits], ...]],
    ) -> None:
        self.cluster, self.name, self.priority, self.target = cluster, name, priority, target
        self.tries = tries
        self.branches_of, self.fewer_of = branches_of, fewer_of

    def text_of(
        self, spread: int | None, args: tuple, sizes: object, without: tuple, with_bn: tuple
    ) -> str:
        from ruleengine.suggest.emit import draft

        return draft(
            self.cluster,
            self.name,
            self.priority,
            self.target,
            spread,
            *args,
            sizes=sizes,
            drop=without,
            bn_after=with_bn,
        )[1]

    def write(self, spread: int | None, *args: object, sizes: object = None) -> str:
        """The draft with the first branches that fit (both, either, none)."""
        budget = clause_budget(spread)
        for k, (without, with_bn) in enumerate(self.tries[:-1]):
            text = self.text_of(spread, args, sizes, without, with_bn)
            if clause_count_of(text) <= budget and not lint_findings(text):
                self.branches_of[text] = (tuple(without), tuple(with_bn))
                self.fewer_of[text] = tuple(
                    (other, (tuple(w), tuple(b)))
                    for w, b in self.tries[k + 1 :]
                    if clause_count_of(other := self.text_of(spread, args, sizes, w, b)) <= budget
                )
                return text  # a branch leaving a finding (disconnected, views) is not
        return self.text_of(spread, args, sizes, (), ())


def _node_of(graphs: Mapping[str, Graph], model: str, name: str) -> Node:
    return graphs[model].node(name)


def _is_noop(graphs: Mapping[str, Graph], model: str, name: str) -> bool:
    return noop_cast(graphs[model], name)


def _is_bare(graphs: Mapping[str, Graph], model: str, name: str) -> bool:
    return bare_conv(graphs[model], name)


def _branch_tries(cluster: Cluster, graphs: Mapping[str, Graph]) -> list[tuple[tuple, tuple]]:
    """The branches (no-op Casts away, BatchNorm after bare Convs) to try, while the
    clauses still fit: both, either, none."""
    from ruleengine.suggest.emit import bare_convs, noop_casts

    drop = noop_casts(cluster, partial(_is_noop, graphs))
    bn = bare_convs(cluster, partial(_is_bare, graphs))
    return list(dict.fromkeys([(drop, bn), (drop, ()), ((), bn), ((), ())]))


def _plain_drafts(writer: _Writer, cluster: Cluster) -> tuple[dict[str, Cluster], list]:
    """The unpinned drafts that fit, one per spread (text -> cluster), and their spreads."""
    from ruleengine.suggest.emit import chains

    out: dict[str, Cluster] = {}
    spreads: list = []
    whole = [list(range(len(cluster.instances[0].units)))]
    for spread in SPREADS:
        if spread is not None and chains(cluster) == whole:
            continue
        text = writer.write(spread)
        if clause_count_of(text) <= clause_budget(spread) and text not in out:
            out[text] = cluster
            spreads.append(spread)
    return out, spreads


def _pinned_drafts(
    writer: _Writer,
    cluster: Cluster,
    graphs: Mapping[str, Graph],
    out: Mapping[str, Cluster],
    spreads: Sequence[int | None],
) -> tuple[dict[str, Cluster], dict[str, tuple[str, Mapping[str, int]]]]:
    """The same drafts pinned, last: what the pruning narrows a draft to where its other
    matches lower coverage. First the attribute values and input counts of the regions,
    then each draft with its regions' largest tensors as a memory_limit: the same
    structure on larger tensors elsewhere (a longer sequence) no longer matches, where
    neither attributes nor input counts tell it apart. Returns (text -> cluster, per
    size-pinned text its unpinned draft and limits)."""
    from ruleengine.suggest.emit import shared_params, size_limit

    pins = shared_params(cluster, partial(_node_of, graphs))
    counts = io_counts(cluster, graphs)
    pinned: dict[str, Cluster] = {}
    for how in ({}, pins) if pins else ({},):
        for spread in spreads:
            text = writer.write(spread, how, counts)
            if text not in out and clause_count_of(text) <= clause_budget(spread):
                pinned.setdefault(text, cluster)
    sizes = largest_sizes(cluster, graphs)
    unsized: dict[str, tuple[str, Mapping[str, int]]] = {}
    if sizes != (None, None):
        plain = list(out)  # the unpinned drafts, one per spread, in order
        for spread, was in zip(spreads, plain, strict=True):
            text = writer.write(spread, sizes=sizes)
            if text not in pinned:
                pinned[text] = cluster
                unsized[text] = (was, size_limit(sizes))
    return pinned, unsized


def fitting_drafts(
    c: Cluster, name: str, priority: int, target: str, graphs: Mapping[str, Graph]
) -> list[Fitted]:
    """The cluster's drafts whose clauses fit the matcher's budget, most general first
    (epilogue chains +-1, as found, ops as found); composites in a row multiply clauses,
    so where none fits they are spelled out as ONNX ops. A pattern that would be one
    repeated op (a bare elementwise chain) keeps its ops."""
    # text -> its branches' units (a text names its cluster's ops: one map serves both)
    branches_of: dict[str, BranchUnits] = {}
    # a branched text -> the same draft with fewer branches, none last, with their units
    # (written unlinted: linted where taken, ``draft_tests.tested``)
    fewer_of: dict[str, tuple[tuple[str, BranchUnits], ...]] = {}
    for spelled_out in (False, True):
        cluster = spelled_out_cluster(c, graphs) if spelled_out else c
        tries = _branch_tries(cluster, graphs)
        writer = _Writer(cluster, name, priority, target, tries, branches_of, fewer_of)
        out, spreads = _plain_drafts(writer, cluster)
        if not out:
            continue
        pinned, unsized = _pinned_drafts(writer, cluster, graphs, out, spreads)
        plain = [
            Fitted(cl, text, False, None, branches_of.get(text, NO_BRANCH), fewer_of.get(text, ()))
            for text, cl in out.items()
        ]
        narrowings = [
            Fitted(
                cl,
                text,
                True,
                unsized.get(text),
                branches_of.get(text, NO_BRANCH),
                fewer_of.get(text, ()),
            )
            for text, cl in pinned.items()
        ]
        return [*plain, *narrowings]
    return []


def noop_cast(graph: Graph, name: str) -> bool:
    """A Cast node to the dtype its input already has: it computes nothing."""
    from ruleengine.graph.values import dtype_name  # the names the loader gives dtypes

    node = graph.node(name)
    if node.op_type != "Cast" or not node.inputs or not node.inputs[0]:
        return False
    tensor = graph.tensors.get(node.inputs[0])
    to = node.attributes.get("to")
    if tensor is None or tensor.dtype is None or not isinstance(to, int):
        return False
    return dtype_name(to) == tensor.dtype


def bare_conv(graph: Graph, name: str) -> bool:
    """A Conv whose output no BatchNormalization reads (the exporter folded it, if any)."""
    node = graph.node(name)
    if node.op_type != "Conv" or not node.outputs or not node.outputs[0]:
        return False
    tensor = graph.tensors.get(node.outputs[0])
    readers = tensor.consumers if tensor is not None else ()
    return not any(graph.node(c).op_type == "BatchNormalization" for c, _ in readers)


def largest_sizes(c: Cluster, graphs: Mapping[str, Graph]) -> tuple[int | None, int | None]:
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


def io_counts(c: Cluster, graphs: Mapping[str, Graph]) -> tuple[int, int, int | None]:
    """(fewest, most) non-constant input tensors and the output count (None where they
    differ) of the cluster's regions, as the matcher counts them for ``subgraph``."""
    from ruleengine.match.tensors import readers as tensor_readers

    ins, outs = [], set()
    for inst in c.instances:
        graph = graphs[inst.model]
        readers = tensor_readers(graph)
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


def lint_findings(text: str) -> int:
    """The findings `check --strict` has on a drafted rule alone (warnings too): a branch
    drafted away from no-op Casts can be disconnected (a root Cast read by several ops)
    or fuse only views; such a branch is not written (the draft without it has none)."""
    from ruleengine.rules.lint import lint_file

    return len(lint_file(Path("<draft>"), "<draft>", text, set_checks=True).diagnostics)


def clause_count_of(text: str) -> int:
    """How many Datalog clauses the matcher would make of a drafted rule."""
    from ruleengine.match.compile import clause_count
    from ruleengine.ops.aliases import alias_table
    from ruleengine.rules.lint import lint_file

    rules = lint_file(Path("<draft>"), "<draft>", text).rules
    return max((clause_count(r, alias_table()) for r in rules), default=0)


def spelled_out_cluster(c: Cluster, graphs: Mapping[str, Graph]) -> Cluster:
    """The cluster with every composite spelled out as its ONNX ops (one clause per
    pattern instead of one per combination of forms); instances whose spelled-out
    structure differs from the first one's are left out."""
    from ruleengine.suggest.canon import canonicalize

    by_key: dict[tuple, list[Instance]] = {}
    for inst in c.instances:
        canon = canonicalize(graphs[inst.model], inst.region.nodes, ())
        by_key.setdefault(canon.key, []).append(replace(inst, units=canon.units))
    first = canonicalize(graphs[c.instances[0].model], c.instances[0].region.nodes, ()).key
    return Cluster(first, tuple(by_key[first]))
