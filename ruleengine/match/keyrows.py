"""Candidate keys as rows of ints: ordering and de-duplication in numpy.

The plain matcher keeps, per rule and node set, the first key in key order (a key is
``(rule, node names, alternative)``); ``KeyRows`` does the same on rows of name ranks.
``RuleRows`` holds one rule's bindings (translated or checked directly) and picks the
winners as the plain matcher would, without making a record per binding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from ruleengine.match.model import Candidate, NearMiss
from ruleengine.match.outcomes import Outcome

_PAD_LAST = np.iinfo(np.int32).max  # pads a node set's sorted ranks at its end
_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)


class KeyRows:
    """Candidate keys ``(rule, node names, alternative)`` as rows of ints: the rule's
    rank among the rule names, each node's name rank + 1 (0 pads a shorter tuple, so a
    prefix sorts first, as in tuple order), the alternative; and the node set of each
    key as its sorted ranks. ``entries[i]`` is key i's winning row: ``(outcome,
    member)`` (translated: the ranks are read in one numpy step per outcome) or a row of
    its own (``(None, ...)``: read from the names)."""

    def __init__(
        self,
        keys: Sequence[tuple],
        entries: Sequence[tuple],
        rank: np.ndarray,
        pos: Mapping[str, int],
        rule_rank: Mapping[str, int],
        keep_keys: bool = False,
    ) -> None:
        n = len(keys)
        width = max(map(len, map(_SECOND, keys)), default=0)
        nodes = np.zeros((n, width), dtype=np.int32)  # name ranks < 2**31
        if n:
            # entries grouped by outcome (one numpy step each); stable: row order kept
            outs = list(map(_FIRST, entries))
            ids = np.fromiter(map(id, outs), dtype=np.uint64, count=n)
            by = np.argsort(ids, kind="stable")
            cuts = np.flatnonzero(ids[by][1:] != ids[by][:-1]) + 1
            for rows in np.split(by, cuts):
                o = outs[rows[0]]
                if o is None:  # rows of their own: read from the names
                    for i in rows.tolist():
                        names = keys[i][1]
                        nodes[i, : len(names)] = rank[[pos[x] for x in names]] + 1
                    continue
                got = rows.tolist()
                vs = np.fromiter(map(_SECOND, map(entries.__getitem__, got)), np.int64, len(got))
                flat = np.asarray(o.flat, dtype=np.int64)
                at = vs[:, None] + flat[None, :]
                nodes[rows[:, None], np.arange(len(flat))[None, :]] = rank[at] + 1
        rules = np.fromiter(map(rule_rank.__getitem__, map(_FIRST, keys)), dtype=np.int32, count=n)
        alts = np.fromiter(map(_THIRD, keys), dtype=np.int32, count=n)
        self._setup(nodes, rules, alts, keep_keys)

    @classmethod
    def from_ranks(
        cls, nodes: np.ndarray, alts: np.ndarray, rule_rank: int, keep_keys: bool = False
    ) -> KeyRows:
        """Keys of one rule given as rows: ``nodes`` (int32) each node's name rank + 1,
        0 padding; ``alts`` the alternatives (``nodes`` is taken over)."""
        obj = object.__new__(cls)
        rules = np.full(len(nodes), rule_rank, dtype=np.int32)
        obj._setup(nodes, rules, np.asarray(alts, dtype=np.int32), keep_keys)
        return obj

    def _setup(self, nodes: np.ndarray, rules: np.ndarray, alts: np.ndarray, keep: bool) -> None:
        n, width = nodes.shape
        self.rules = rules
        # key order: rule, then the node ranks column by column, then the alternative
        columns = [alts, *(nodes[:, j] for j in range(width - 1, -1, -1)), self.rules]
        self.order = np.lexsort(columns) if n else np.zeros(0, dtype=np.int64)
        # the key rows, for ``merge_points`` and ``distinct_nodes`` (when asked:
        # transient memory, per rule)
        self.keys, self.alts = (nodes.copy(), alts) if keep else (None, None)
        # node sets: the ranks sorted, padding last
        nodes[nodes == 0] = _PAD_LAST
        nodes.sort(axis=1)
        self.sets = nodes

    def _set_rows(self, width: int) -> np.ndarray:
        """(rule, node set) per key, padded to ``width`` node columns."""
        sets = self.sets
        if sets.shape[1] < width:
            pad = np.full((len(sets), width - sets.shape[1]), _PAD_LAST, dtype=np.int32)
            sets = np.hstack((sets, pad))
        return np.column_stack((self.rules, sets))

    def first_per_set(
        self, codes: Sequence[str] | np.ndarray | None = None, outside: KeyRows | None = None
    ) -> list[int]:
        """Key indices, in key order, of the first key per (rule, node set) (and code,
        when given), leaving out the node sets ``outside`` has for the same rule."""
        n = len(self.order)
        if not n:
            return []
        width = max(self.sets.shape[1], 0 if outside is None else outside.sets.shape[1])
        keep = np.ones(n, dtype=bool)
        if outside is not None and len(outside.order):
            ids = row_ids(np.vstack((self._set_rows(width), outside._set_rows(width))))
            keep = ~np.isin(ids[:n], ids[n:])
        # (rule, node set[, code]) as columns, not rows: equal keys get equal ids in any
        # order, so the ids of the rows in key order are these ids taken in key order
        columns = [self.rules, *(self.sets[:, j] for j in range(self.sets.shape[1]))]
        if isinstance(codes, np.ndarray):  # code ids already
            columns.append(codes.astype(np.int32))
        elif codes is not None:
            code_id = {c: k for k, c in enumerate(sorted(set(codes)))}
            columns.append(np.fromiter((code_id[c] for c in codes), dtype=np.int32, count=n))
        order = self.order[keep[self.order]]
        if not len(order):
            return []
        ids = column_ids(columns)[order]
        first = np.zeros(len(order), dtype=bool)
        first[np.unique(ids, return_index=True)[1]] = True
        return order[first].tolist()

    def distinct_nodes(self, mine: Sequence[int]) -> int:
        """How many distinct node tuples the keys ``mine`` (ascending) have: equal ones
        are neighbours in key order (only the alternative follows the nodes)."""
        rows = self.keys[mine]
        return 1 + int((rows[1:] != rows[:-1]).any(axis=1).sum()) if len(rows) else 0

    def merge_points(self, mine: Sequence[int], other: KeyRows, theirs: Sequence[int]) -> Any:
        """For each key ``theirs[k]`` of ``other`` (same rule, ascending keys), how many
        keys of ``mine`` (ascending) sort before it: where it falls among them. Every
        key of both is distinct (a key is a candidate's or a near miss's, never both)."""
        a, b = self.keys[mine], other.keys[theirs]
        width = max(a.shape[1], b.shape[1])
        rows = np.zeros((len(a) + len(b), width), dtype=np.int32)
        rows[: len(a), : a.shape[1]] = a
        rows[len(a) :, : b.shape[1]] = b
        alts = np.concatenate((self.alts[mine], other.alts[theirs]))
        order = np.lexsort([alts, *(rows[:, j] for j in range(width - 1, -1, -1))])
        theirs_at = order >= len(a)
        before = np.cumsum(~theirs_at)  # keys of ``mine`` up to each place in key order
        out = np.empty(len(b), dtype=np.int64)
        out[order[theirs_at] - len(a)] = before[theirs_at]
        return out


class RuleRows:
    """One rule's bindings as int rows, de-duplicated as the plain matcher does: per
    candidate key the first row in row order, candidates before near misses; then per
    node set the first key in key order (``KeyRows``). A translated binding is a row
    (outcome, member): its key's nodes are ``member + outcome.flat`` (node positions,
    compared in numpy); a row checked directly (fan-out siblings) is one of ``own``.
    Records are made for the winners only, when asked (``candidates``, ``near_misses``)."""

    def __init__(
        self,
        name: str,
        outs: list[Outcome],
        blocks: list[Any],
        own: list[tuple],
        label: Sequence[str],
        label_arr: np.ndarray,
        rank_p: np.ndarray,
        pos: Mapping[str, int],
        rule_rank: int,
        redo: tuple,
    ) -> None:
        self.name, self.outs, self.own, self.label_arr, self.redo = name, outs, own, label_arr, redo
        lens = np.fromiter(map(len, blocks), dtype=np.int64, count=len(blocks))
        n_t = int(lens.sum())
        self.n_t = n_t
        self.eo = eo = np.repeat(np.arange(len(outs), dtype=np.int64), lens)
        self.ev = np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.int64)
        n = n_t + len(own)
        width = max(
            max((len(o.flat) for o in outs), default=0),
            max((len(x[2].nodes) for x in own), default=0),
        )
        at = np.full((n, width), -1, dtype=np.int32)  # node positions, -1 pads
        start = 0
        for o, vs in zip(outs, blocks, strict=True):
            end = start + len(vs)
            at[start:end, : len(o.flat)] = vs[:, None] + np.asarray(o.flat, dtype=np.int64)
            start = end
        alts = np.empty(n, dtype=np.int32)
        is_c = np.empty(n, dtype=bool)
        texts = {o.code or "" for o in outs} | {x[3] or "" for x in own}
        codes = {c: k for k, c in enumerate(sorted(texts))}
        code = np.empty(n, dtype=np.int32)
        if outs:
            alts[:n_t] = np.fromiter((o.alternative for o in outs), np.int32, len(outs))[eo]
            is_c[:n_t] = np.fromiter((o.code is None for o in outs), bool, len(outs))[eo]
            code[:n_t] = np.fromiter((codes[o.code or ""] for o in outs), np.int32, len(outs))[eo]
        for j, (_v, _row, cand, c, _reason) in enumerate(own, n_t):
            ns = cand.nodes
            at[j, : len(ns)] = [pos[x] for x in ns]
            alts[j] = cand.alternative
            is_c[j] = c is None
            code[j] = codes[c or ""]
        # one id per distinct key (alternative and node positions; -1 pads, so a shorter
        # tuple is another key); per key the first row in row order
        ids = column_ids([alts, *(at[:, j] for j in range(at.shape[1]))])
        c_win = self._first_rows(ids, np.flatnonzero(is_c), label)
        n_win = self._first_rows(ids, np.flatnonzero(~is_c), label)
        n_win = n_win[~np.isin(ids[n_win], ids[c_win])]  # a candidate key wins
        # per node set the first key in key order, keys as rows of name ranks
        c_rows = KeyRows.from_ranks(rank_p[at[c_win]], alts[c_win], rule_rank, keep_keys=True)
        c_won = c_rows.first_per_set()
        self.c_sel = c_win[c_won] if len(c_won) else np.zeros(0, dtype=np.int64)
        self.matched = c_rows.distinct_nodes(c_won) if len(c_won) else 0
        self.near_matched = 0
        self.n_sel = None
        if len(n_win):
            n_rows = KeyRows.from_ranks(rank_p[at[n_win]], alts[n_win], rule_rank, keep_keys=True)
            n_won = n_rows.first_per_set(code[n_win], outside=c_rows)
            self.n_sel = n_win[n_won] if len(n_won) else np.zeros(0, dtype=np.int64)
            self.near_at = c_rows.merge_points(c_won, n_rows, n_won)
            if len(n_won):
                self.near_matched = n_rows.distinct_nodes(n_won)

    def _row(self, i: int, label: Sequence[str]) -> tuple:
        if i >= self.n_t:
            return self.own[i - self.n_t][1]
        o, v = self.outs[self.eo[i]], int(self.ev[i])
        return (o.combo, *(label[v + k] for k in o.offs))

    def _first_rows(self, ids: np.ndarray, idx: np.ndarray, label: Sequence[str]) -> np.ndarray:
        """Of the rows ``idx``: per key id, the first in row order (rows are spelled out
        only where two share a key)."""
        if not len(idx):
            return idx
        order = np.argsort(ids[idx], kind="stable")
        srt = ids[idx][order]
        starts = np.flatnonzero(np.r_[True, srt[1:] != srt[:-1]])
        win = idx[order[starts]]
        sizes = np.diff(np.r_[starts, len(srt)])
        for g in np.flatnonzero(sizes > 1).tolist():
            rows = idx[order[starts[g] : starts[g] + sizes[g]]].tolist()
            win[g] = min(rows, key=lambda i: self._row(i, label))
        return win

    def candidates(
        self, site: tuple, base: int, own: dict[int, int]
    ) -> tuple[tuple[dict[int, Candidate], list[Outcome], Any, Any], tuple | None]:
        """The winning candidates in key order (the first at index ``base``) as a block of
        ``CandRows``: (records made now by place: rows of their own and the
        representatives' own candidates; the outcomes translated here; each place's
        index into those, -1 for one made; each place's member); and the translated ones
        as (their indices, the outcomes, each one's outcome, each one's member). ``own``
        gets the index of each representative's own."""
        sel = self.c_sel
        made: dict[int, Candidate] = {}
        for k in np.flatnonzero(sel >= self.n_t).tolist():
            made[k] = self.own[int(sel[k]) - self.n_t][2]
        which = np.full(len(sel), -1, dtype=np.int64)
        member = np.zeros(len(sel), dtype=np.int64)
        outs: list[Outcome] = []
        index: list[Any] = []
        which_t: list[Any] = []
        vs_l: list[Any] = []
        tr = np.flatnonzero(sel < self.n_t)
        if len(tr):
            u = self.eo[sel[tr]]
            v = self.ev[sel[tr]]
            by = np.argsort(u, kind="stable")
            cuts = np.flatnonzero(u[by][1:] != u[by][:-1]) + 1
            for rows in np.split(by, cuts):
                o = self.outs[int(u[rows[0]])]
                places = tr[rows]
                vs = v[rows]
                at_anchor = vs == o.anchor
                if at_anchor.any():
                    k = int(places[int(np.flatnonzero(at_anchor)[0])])
                    made[k] = o.candidate
                    own[id(o.candidate)] = base + k
                o.site = site
                keep = ~at_anchor
                if keep.any():
                    which[places[keep]] = len(outs)
                    member[places[keep]] = vs[keep]
                    index.append(base + places[keep])
                    which_t.append(np.full(int(keep.sum()), len(outs), dtype=np.int64))
                    vs_l.append(vs[keep])
                    outs.append(o)
        block = (made, outs, which, member)
        if not outs:
            return block, None
        return block, (np.concatenate(index), outs, np.concatenate(which_t), np.concatenate(vs_l))

    def near_block(self, site: tuple) -> tuple[dict[int, NearMiss], list[tuple], Any, Any]:
        """The winning near misses in key order, as (records made now by place: rows of
        their own and the representatives' own near misses; per outcome translated
        here, (outcome, its redo); each place's index into those, -1 for one made;
        each place's member)."""
        sel = self.n_sel
        made: dict[int, NearMiss] = {}
        for k in np.flatnonzero(sel >= self.n_t).tolist():
            _v, _row, cand, code, reason = self.own[int(sel[k]) - self.n_t]
            made[k] = NearMiss(cand, code, reason)
        graph, rule, combos, aliases, plans = self.redo
        which = np.full(len(sel), -1, dtype=np.int64)
        member = np.zeros(len(sel), dtype=np.int64)
        outs: list[tuple] = []
        tr = np.flatnonzero(sel < self.n_t)
        if len(tr):
            u = self.eo[sel[tr]]
            v = self.ev[sel[tr]]
            used, back = np.unique(u, return_inverse=True)
            anchors = np.fromiter((self.outs[i].anchor for i in used.tolist()), np.int64)
            at_anchor = anchors[back] == v
            for i in used.tolist():
                o = self.outs[i]
                conc = combos[o.combo]
                o.site = site
                outs.append((o, (graph, rule, conc, aliases, plans[conc.alternative])))
            for k, b in zip(tr[at_anchor].tolist(), back[at_anchor].tolist(), strict=True):
                o = outs[b][0]
                made[k] = NearMiss(o.candidate, o.code, o.reason or "")
            lazy = ~at_anchor
            which[tr[lazy]] = back[lazy]
            member[tr[lazy]] = v[lazy]
        return made, outs, which, member


def row_ids(rows: np.ndarray) -> np.ndarray:
    """One int per row, equal for equal rows (lexsort and a scan; ``np.unique`` with
    ``axis=0`` sorts a structured view, several times slower)."""
    return column_ids([rows[:, j] for j in range(rows.shape[1])])


def column_ids(columns: Sequence[np.ndarray]) -> np.ndarray:
    """``row_ids`` of the rows these columns make, without making them: a column at a
    time (the rows of one rule at 2048 layers are 1.5 M x 13; a sorted copy of them and
    its comparison matrix were the peak of matching)."""
    n = len(columns[0]) if columns else 0
    if not n:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(columns[::-1])
    new = np.ones(n, dtype=bool)
    new[1:] = False
    for col in columns:
        srt = col[order]
        new[1:] |= srt[1:] != srt[:-1]
        del srt
    ids = np.empty(n, dtype=np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids
