"""Score every candidate: traffic, overhead, UB need, constraints, and a verdict.

Every "no" is kept: a rejected candidate carries its verdict, a stable code and a
reason, and near misses from matching come through with theirs, so ``explain`` can
answer "why was this not fused?".

The stage, in order: each candidate that is no twin is judged (``verdicts.score_one``),
each twin takes its source's record as a template (``twin_templates``), duplicates lose
to the highest priority (``duplicates``), and the records come back in key order
(``columns``). The modules it calls hold the cost formula (``formula``), the kernel's
inputs (``inputs``), the shared numbers of repeated layers (``group_memo``), the records
computed on first read (``lazy``) and the words of the reasons (``display``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter

import numpy as np

from ruleengine.cost.columns import key_ordered_records
from ruleengine.cost.contracts import mark_misfits
from ruleengine.cost.display import human_bytes, kb
from ruleengine.cost.duplicates import duplicate_groups, duplicate_losers, reduce_duplicates
from ruleengine.cost.formula import compute_cost, overhead_bytes
from ruleengine.cost.group_memo import GroupMemo
from ruleengine.cost.inputs import constant_root, folded_bn_inputs
from ruleengine.cost.lazy import near_record_maker, relabel
from ruleengine.cost.model import ScoredCandidate, Target, Verdict
from ruleengine.cost.scored import FUSE_ID, VERDICT_ID
from ruleengine.cost.twin_templates import (
    RecordBook,
    TwinSources,
    assign_twins,
    not_twins,
    rules_at,
)
from ruleengine.cost.verdicts import score_one
from ruleengine.graph.model import Graph
from ruleengine.kernels.model import Catalog
from ruleengine.match.model import Candidate, MatchResult
from ruleengine.rules.model import Rule, RuleSet
from ruleengine.runtime import paused_gc

# Names other packages import from here (their homes are the modules above).
__all__ = [
    "GroupMemo",
    "compute_cost",
    "constant_root",
    "folded_bn_inputs",
    "human_bytes",
    "kb",
    "overhead_bytes",
    "reduce_duplicates",
    "relabel",
    "score_candidates",
    "score_one",
]


def score_candidates(
    graph: Graph,
    match_result: MatchResult | Sequence[Candidate],
    rule_set: RuleSet,
    target: Target,
    *,
    benefit_threshold: float | None = None,
    catalog: Catalog | None = None,
) -> Sequence[ScoredCandidate]:
    """Score every candidate and near miss; sorted by candidate key (deterministic).

    ``benefit_threshold`` overrides every rule's own threshold when given. With a kernel
    ``catalog``, a viable candidate no form of its kernel accepts is
    ``contract_mismatch`` (``contracts``), before duplicates are decided. On the
    memo's result (``MatchResult.near_at`` known) the records come as a
    ``ScoredRecords``: verdicts, codes, rules and net bytes as arrays, each record made
    on first read; else as a tuple.
    """
    if isinstance(match_result, MatchResult):
        candidates, near = match_result.candidates, match_result.near_misses
        twins, near_at = match_result.twins, match_result.near_at
    else:
        candidates, near, twins, near_at = tuple(match_result), (), {}, None
    rules = rule_set.by_name()
    with paused_gc():
        book = _judge_all(graph, candidates, twins, rules, target, benefit_threshold)
        if catalog is not None:
            mark_misfits(graph, book, rules, catalog)
        verdict_c = _verdict_ids(book)
        _mark_duplicates(graph, book, verdict_c, twins)
        near_record = near_record_maker(graph, rules, target)
        if near_at is None or len(near_at) != len(near):
            scored = list(map(book.get, range(len(candidates))))
            from_near = list(map(near_record, near))
            # (candidate key, verdict), the key's parts read one by one (a translated
            # candidate keeps no key tuple): a StrEnum sorts as its value
            order = attrgetter(
                "candidate.rule", "candidate.nodes", "candidate.alternative", "verdict"
            )
            return tuple(sorted(scored + from_near, key=order))
        priority = {name: r.priority for name, r in rules.items()}
        return key_ordered_records(book, near, near_at, verdict_c, near_record, priority, twins)


def _judge_all(
    graph: Graph,
    candidates: Sequence[Candidate],
    twins: Mapping[int, tuple[int, int]],
    rules: Mapping[str, Rule],
    target: Target,
    benefit_threshold: float | None,
) -> RecordBook:
    """Every candidate's record: judged for the candidates that are no twin, from
    their source's template for the twins (``assign_twins``)."""
    memo = GroupMemo(graph, target)
    book = RecordBook(candidates)

    def judge(i: int) -> ScoredCandidate:
        c = candidates[i]
        return score_one(graph, c, rules.get(c.rule), target, benefit_threshold, memo=memo)

    for i in not_twins(twins, len(candidates)):
        book.made[i] = judge(i)
    sources = TwinSources(graph, rules, target, benefit_threshold, memo)
    assign_twins(book, sources, twins, judge)
    return book


def _verdict_ids(book: RecordBook) -> np.ndarray:
    """Each candidate's verdict id (``VERDICT_ID``), read from templates and records."""
    templates, template = book.templates, book.template
    t_verdict = np.fromiter((VERDICT_ID[t[1]] for t in templates), np.int64, len(templates))
    verdict_c = np.full(len(template), -1, dtype=np.int64)
    has_t = template >= 0
    verdict_c[has_t] = t_verdict[template[has_t]]
    for i, rec in book.made.items():
        verdict_c[i] = VERDICT_ID[rec.verdict]
    return verdict_c


def _mark_duplicates(
    graph: Graph,
    book: RecordBook,
    verdict_c: np.ndarray,
    twins: Mapping[int, tuple[int, int]],
) -> None:
    """Among viable candidates with one node set, all but the highest priority's (then
    least key) become duplicates, in ``book`` and ``verdict_c``."""
    candidates = book.candidates
    viable = np.flatnonzero(verdict_c == FUSE_ID).tolist()
    groups = duplicate_groups(graph, viable, lambda i: candidates[i].nodes, twins)
    in_groups = [i for g in groups for i in g]
    rule_of = dict(zip(in_groups, rules_at(candidates, in_groups), strict=True))
    for i, why in duplicate_losers(
        groups, book.priority_of, rule_of.__getitem__, lambda i: candidates[i].key
    ):
        verdict_c[i] = VERDICT_ID[Verdict.DUPLICATE]
        book.mark_duplicate(i, why)
