"""The cost stage's records as columns (``ScoredRecords``): verdicts, codes, rules and
net bytes as arrays in key order, each record made when read (10^5-10^6 records on a
stack)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from ruleengine.cost.lazy import NEAR_MISS_VERDICTS, TwinScored
from ruleengine.cost.model import ScoredCandidate, Verdict
from ruleengine.cost.scored import VERDICT_ID, ScoredRecords
from ruleengine.cost.twin_templates import RecordBook
from ruleengine.match.model import Candidate, NearMiss


def key_ordered_records(
    book: RecordBook,
    near: Sequence[NearMiss],
    near_at: Any,
    verdict_c: np.ndarray,
    near_record: Callable[[NearMiss], ScoredCandidate],
    priority: Mapping[str, int],
    twins: Mapping[int, tuple[int, int]],
) -> ScoredRecords:
    """The candidates' records (in key order) and the near misses' (in key order) in one
    key order, near miss ``k`` right before candidate ``near_at[k]`` (``MatchResult``:
    all keys distinct): what sorting them by (key, verdict) gives, without reading a key
    (10^5-10^6 records on a stack); each record made when read."""
    candidates = book.candidates
    n_c, n_n = len(candidates), len(near)
    at = np.asarray(near_at, dtype=np.int64)
    origin = np.empty(n_c + n_n, dtype=np.int64)
    # candidate i: after itself and the near misses that sort before it
    origin[np.arange(n_c) + np.searchsorted(at, np.arange(n_c), "right")] = np.arange(n_c)
    origin[at + np.arange(n_n)] = np.arange(n_c, n_c + n_n)
    code_names: dict[str, int] = {}
    code_c, net_c, costed_c = _candidate_columns(book, code_names)
    code_n, verdict_n = _near_columns(near, code_names)
    rules, rule_names = _rule_column(candidates, near)
    return ScoredRecords(
        origin=origin,
        candidates=candidates,
        near=near,
        made=book.made,
        template=book.template,
        templates=book.templates,
        twin=TwinScored.like,
        near_record=near_record,
        verdicts=np.concatenate([verdict_c, verdict_n])[origin].astype(np.int8),
        codes=np.concatenate([code_c, code_n])[origin].astype(np.int32),
        code_names=list(code_names),
        rules=rules[origin].astype(np.int32),
        rule_names=rule_names,
        rule_priority=[priority.get(r, 0) for r in rule_names],
        nets=np.concatenate([net_c, np.zeros(n_n, dtype=np.int64)])[origin],
        costed=np.concatenate([costed_c, np.zeros(n_n, dtype=bool)])[origin],
        twins=twins,
    )


def _candidate_columns(
    book: RecordBook, code_names: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per candidate its code id (numbered into ``code_names``), net bytes and whether
    it has a cost: from its template or its record."""
    templates, template = book.templates, book.template
    n_c = len(template)
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
    for i, rec in book.made.items():
        code_c[i] = code_names.setdefault(rec.code, len(code_names))
        cost = rec.cost
        if cost is not None:
            net_c[i] = cost.net_bytes
            costed_c[i] = True
    return code_c, net_c, costed_c


def _near_columns(
    near: Sequence[NearMiss], code_names: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Per near miss its code id (numbered into ``code_names``) and verdict id."""
    n_n = len(near)
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
        code_names[c]: VERDICT_ID[NEAR_MISS_VERDICTS.get(c, Verdict.CONSTRAINT_FAILED)]
        for c in distinct
    }
    verdict_n = np.zeros(n_n, dtype=np.int64)
    for k, v in verdict_of.items():
        verdict_n[code_n == k] = v
    return code_n, verdict_n


def _rule_column(
    candidates: Sequence[Candidate], near: Sequence[NearMiss]
) -> tuple[np.ndarray, list[str]]:
    """Rule ids of the candidates, then of the near misses (in their own orders), and
    the rule names: each comes in runs of one rule (key order)."""
    rule_names: dict[str, int] = {}
    per: list[Any] = []
    for seq, get in ((candidates, attrgetter("rule")), (near, attrgetter("candidate.rule"))):
        names, sizes = _rule_runs(seq, get)
        ids = [rule_names.setdefault(r, len(rule_names)) for r in names]
        per.append(np.repeat(np.asarray(ids, dtype=np.int64), sizes))
    return np.concatenate(per), list(rule_names)


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
