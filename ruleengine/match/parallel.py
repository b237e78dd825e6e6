"""Matching on several cores: the rule set split across worker processes.

Every rule's candidates and near misses depend on that rule and the graph only (the
result is sorted by candidate key, and de-duplicated per rule), so matching disjoint
rule subsets in separate processes and merging the sorted results gives exactly the
serial answer. Processes, not threads: pyDatalog holds the GIL and keeps global state.
Workers are forked, so the immutable graph is shared copy-on-write instead of pickled;
only the (much smaller) results travel back.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from collections.abc import Sequence
from dataclasses import replace

from ruleengine.graph.model import Graph
from ruleengine.match.kept import kept_store
from ruleengine.match.matcher import default_aliases, find_candidates
from ruleengine.match.memo import find_memo, memo_applies
from ruleengine.match.model import MatchResult
from ruleengine.procs import FORK_FROM_NODES, die_with_parent
from ruleengine.rules.model import Rule, RuleSet
from ruleengine.runtime import paused_gc

PARALLEL_FROM_NODES = FORK_FROM_NODES

_WORK: tuple[Graph, RuleSet] | None = None  # set in the parent before forking


def _split(rules: Sequence[Rule], jobs: int) -> list[tuple[Rule, ...]]:
    """Rules in ``jobs`` chunks of about equal size (op count as the cost guess),
    largest first into the lightest chunk; rule order kept inside a chunk."""
    chunks: list[list[tuple[int, Rule]]] = [[] for _ in range(jobs)]
    load = [0] * jobs
    weight = {r.name: sum(len(a.ops) for a in r.alternatives) for r in rules}
    for i, r in sorted(enumerate(rules), key=lambda ir: (-weight[ir[1].name], ir[0])):
        k = load.index(min(load))
        chunks[k].append((i, r))
        load[k] += weight[r.name]
    return [tuple(r for _, r in sorted(c, key=lambda ir: ir[0])) for c in chunks if c]


def _worker_init() -> None:
    """Workers die on SIGTERM and leave Ctrl-C to the parent: the parent's handlers
    (SIGTERM raising an exception, ruleengine.runtime) must not run in a worker, where
    unwinding at an arbitrary point can leave a lock held and the pool waiting forever."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()  # no worker outlives a parent that ended without terminating them


def _match_chunk(rules: tuple[Rule, ...]) -> MatchResult:
    assert _WORK is not None
    graph, rule_set = _WORK
    return find_candidates(graph, replace(rule_set, rules=rules), memo=False)


def find_candidates_parallel(graph: Graph, rule_set: RuleSet, jobs: int) -> MatchResult:
    """``find_candidates`` with the rules split over ``jobs`` processes (the same result);
    within ``match.kept.kept_matches``, the rules matched on this graph before are not
    matched again."""
    kept = kept_store()
    if kept is not None and not memo_applies(graph):
        return kept.matched_with(graph, rule_set, lambda rules: _matched(graph, rules, jobs))
    return _matched(graph, rule_set, jobs)


def _matched(graph: Graph, rule_set: RuleSet, jobs: int) -> MatchResult:
    # A repeated structure is matched once (match.memo), in this process: the rest is
    # translation, cheaper than forking and sending every translated binding back. Only
    # when the memo declines (little repetition) are the rules split over processes.
    if memo_applies(graph):
        # the window's Datalog (its clauses dealt out to forked children: backend)
        shared = jobs if len(graph.nodes) >= PARALLEL_FROM_NODES else 1
        with paused_gc():
            found = find_memo(graph, rule_set, default_aliases(), jobs=shared)
        if found is not None:
            return found
    rules = tuple(r for r in rule_set.rules if r.enabled)
    jobs = min(jobs, len(rules))
    if (
        jobs <= 1
        or len(graph.nodes) < PARALLEL_FROM_NODES
        or "fork" not in multiprocessing.get_all_start_methods()
        # A fork while another thread holds a lock leaves the child waiting on it for
        # ever (seen as a hung worker after onnxruntime or solver threads had run).
        or threading.active_count() > 1
    ):
        return find_candidates(graph, rule_set, memo=False)
    global _WORK
    _WORK = (graph, rule_set)
    try:
        ctx = multiprocessing.get_context("fork")
        pool = ctx.Pool(jobs, initializer=_worker_init)
        try:
            parts = pool.map(_match_chunk, _split(rules, jobs), chunksize=1)
            pool.close()  # workers exit on their own once the queue is drained
        except BaseException:
            pool.terminate()
            raise
        finally:
            pool.join()
    finally:
        _WORK = None
    return MatchResult(
        candidates=tuple(sorted((c for p in parts for c in p.candidates), key=lambda c: c.key)),
        near_misses=tuple(
            sorted((n for p in parts for n in p.near_misses), key=lambda n: n.candidate.key)
        ),
        seconds=max(p.seconds for p in parts),
        facts=sum(p.facts for p in parts),
    )
