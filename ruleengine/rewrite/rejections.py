"""The candidates that did not become groups, as the plan lists them: every one with its
verdict, a stable code and a sentence, counted per rule and verdict, built lazily (a large
model has ~10^6 of them and a compact plan lists a few per rule and verdict)."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain, compress, groupby, islice, repeat
from operator import attrgetter, is_not, itemgetter, le, ne
from typing import Any, NoReturn

from ruleengine.cost.model import ScoredCandidate, Verdict
from ruleengine.cost.scored import RecordView, ScoredRecords
from ruleengine.match.model import MatchResult
from ruleengine.records import LazyTuple
from ruleengine.resolve.lost import LostCandidates
from ruleengine.rewrite.model import (
    FusedGroup,
    Plan,
    Rejection,
)

EXAMPLES_PER_VERDICT = 3  # compact detail: rejected candidates kept per (rule, verdict)


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
            self._add_near_misses(near_misses, src, verdicts, codes)
        self._src: Sequence[Any] = src
        self._verdicts: Sequence[str] = verdicts
        self._codes: Sequence[str] = codes
        self._reasons = reasons

    def _add_near_misses(
        self, near_misses: Sequence[Any], src: list[Any], verdicts: list[str], codes: list[str]
    ) -> None:
        """Add to the entries each near miss whose candidate no entry carries (once per
        rule and node tuple)."""
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
