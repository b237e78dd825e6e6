"""``score_candidates``' output at LLM scale: every record's verdict, code, rule and net
bytes as arrays, each record made on first read (issue 13).

A 2048-layer stack has ~6.6 x 10^5 scored records (4.5 x 10^5 candidates, 2 x 10^5 near
misses) while a compact ``fuse`` reads a few thousand of them: the chosen groups, the
duplicates' rivals, the few rejections a plan lists. Resolve, the plan's counts and its
listing read the arrays (``verdicts``, ``codes``, ``rules``, ``nets``) and the matcher's
candidates (``candidate``, ``nodes``); a record is made when something reads it, and kept,
so reading one twice gives the same object. Iterating makes every record, exactly the
ones the eager tuple held (``tests/cost/test_twins.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ruleengine.cost.model import ScoredCandidate, Verdict
from ruleengine.match.model import Candidate, TwinMap
from ruleengine.records import LazyTuple

VERDICTS: tuple[Verdict, ...] = tuple(Verdict)
VERDICT_ID: dict[Verdict, int] = {v: k for k, v in enumerate(VERDICTS)}
FUSE_ID = VERDICT_ID[Verdict.FUSE]


class ScoredRecords(LazyTuple[ScoredCandidate]):
    """The scored records in candidate key order (near misses merged in), equal to the
    tuple of them. Position ``p`` stands for candidate ``origin[p]`` when that is below
    ``n_c``, else for near miss ``origin[p] - n_c``.

    Arrays per position: ``verdicts`` (index into ``VERDICTS``), ``codes`` (into
    ``code_names``), ``rules`` (into ``rule_names``; ``rule_priority`` alike), ``nets``
    (the cost's net bytes, 0 without a cost) and ``costed`` (a cost is known)."""

    def __init__(
        self,
        *,
        origin: np.ndarray,
        candidates: Sequence[Candidate],
        near: Sequence[Any],
        made: dict[int, ScoredCandidate],
        template: np.ndarray,
        templates: Sequence[tuple],
        twin: Callable[[Candidate, tuple], ScoredCandidate],
        near_record: Callable[[Any], ScoredCandidate],
        verdicts: np.ndarray,
        codes: np.ndarray,
        code_names: Sequence[str],
        rules: np.ndarray,
        rule_names: Sequence[str],
        rule_priority: Sequence[int],
        nets: np.ndarray,
        costed: np.ndarray,
        twins: Mapping[int, tuple[int, int]] | None = None,
    ) -> None:
        """``made``: records already made, by candidate index; ``template``: per
        candidate index, the template ``twin`` makes its record from (-1: in ``made``)."""
        n = len(origin)
        self._origin = origin
        self._n_c = len(candidates)
        self._cands = candidates
        self._near = near
        self._template = template
        self._templates = templates
        self._twin = twin
        self._near_record = near_record
        self._cache = np.empty(n, dtype=object)
        self._have = np.zeros(n, dtype=bool)  # which records are made
        if made:
            at = self.positions_of(np.fromiter(made, np.int64, len(made)))
            self._cache[at] = np.fromiter(made.values(), object, len(made))
            self._have[at] = True
        self.verdicts = verdicts
        self.codes = codes
        self.code_names = tuple(code_names)
        self.rules = rules
        self.rule_names = tuple(rule_names)
        self.rule_priority = tuple(rule_priority)  # every record's priority is its rule's
        self.nets = nets
        self.costed = costed
        self._whole = False
        self._twins = twins if twins is not None else {}

    # ---- reading without records

    def positions_of(self, cand_idx: np.ndarray) -> np.ndarray:
        """The positions of candidates ``cand_idx`` (near misses sort before some)."""
        cand_pos = getattr(self, "_cand_pos", None)
        if cand_pos is None:
            cand_pos = np.empty(self._n_c, dtype=np.int64)
            at = np.flatnonzero(self._origin < self._n_c)
            cand_pos[self._origin[at]] = at
            self._cand_pos = cand_pos
        return cand_pos[cand_idx]

    def viable(self) -> np.ndarray:
        """Positions whose verdict is ``fuse`` and whose cost is known, ascending."""
        return np.flatnonzero((self.verdicts == FUSE_ID) & self.costed)

    def candidate(self, p: int) -> Candidate:
        """The candidate of position ``p`` (no scored record made)."""
        o = int(self._origin[p])
        return self._cands[o] if o < self._n_c else self._near[o - self._n_c].candidate

    def nodes(self, positions: np.ndarray) -> list[tuple[str, ...]]:
        """The node tuples of candidate positions (no scored record made)."""
        o = self._origin[positions]
        n_c = self._n_c
        if len(o) and int(o.max()) >= n_c:
            return [self.candidate(p).nodes for p in positions.tolist()]
        return [c.nodes for c in map(self._cands.__getitem__, o.tolist())]

    def node_positions(
        self, positions: np.ndarray, where: Mapping[str, int]
    ) -> list[tuple[int, ...]]:
        """The node tuples of candidate positions as node positions (``where``: a node's
        position): a twin's are its source's plus its offset (``MatchResult.twins``), so
        only the candidates that are no twin, and the sources, are read by name."""
        o = self._origin[positions]
        assert not len(o) or int(o.max()) < self._n_c, "candidates only"
        out: list[Any] = [None] * len(o)
        twins, cands, get = self._twins, self._cands, where.__getitem__
        if isinstance(twins, TwinMap) and len(twins):
            k = np.minimum(twins.index.searchsorted(o), len(twins) - 1)
            is_twin = twins.index[k] == o
        else:
            k = np.zeros(len(o), dtype=np.int64)
            is_twin = np.zeros(len(o), dtype=bool)
        for r in np.flatnonzero(~is_twin).tolist():
            out[r] = tuple(map(get, cands[int(o[r])].nodes))
        rows = np.flatnonzero(is_twin)
        if len(rows):
            k = k[rows]
            src, shift = twins.source[k], twins.shift[k]  # type: ignore[union-attr]
            by = np.argsort(src, kind="stable")
            cuts = np.flatnonzero(src[by][1:] != src[by][:-1]) + 1
            for group in np.split(by, cuts):
                nodes = cands[int(src[group[0]])].nodes
                base = np.fromiter(map(get, nodes), np.int64, len(nodes))
                got = (shift[group][:, None] + base[None, :]).tolist()
                for r, t in zip(rows[group].tolist(), map(tuple, got), strict=True):
                    out[r] = t
        return out

    def view(self, positions: np.ndarray) -> RecordView:
        return RecordView(self, np.asarray(positions, dtype=np.int64))

    # ---- records

    def __len__(self) -> int:
        return len(self._origin)

    def _make(self, p: int) -> ScoredCandidate:
        o = int(self._origin[p])
        if o < self._n_c:
            rec = self._twin(self._cands[o], self._templates[int(self._template[o])])
        else:
            rec = self._near_record(self._near[o - self._n_c])
        self._cache[p] = rec
        self._have[p] = True
        return rec

    def made(self, positions: np.ndarray) -> list[Any]:
        """The records of ``positions`` made so far, None for the others."""
        return self._cache[positions].tolist()

    def record(self, p: int) -> ScoredCandidate:
        return self._cache[p] if self._have[p] else self._make(p)

    def fill(self, positions: np.ndarray) -> None:
        """Make the records of ``positions`` not made yet (C-level maps where it counts)."""
        if self._whole:
            return
        positions = np.asarray(positions, dtype=np.int64)
        cache = self._cache
        todo = positions[~self._have[positions]]
        if not len(todo):
            return
        self._have[todo] = True
        o = self._origin[todo]
        twin = o < self._n_c
        at, oc = todo[twin], o[twin]
        if len(at):
            cands = map(self._cands.__getitem__, oc.tolist())
            temps = map(self._templates.__getitem__, self._template[oc].tolist())
            got = np.empty(len(at), dtype=object)
            got[:] = list(map(self._twin, cands, temps))
            cache[at] = got
        at, on = todo[~twin], o[~twin] - self._n_c
        if len(at):
            got = np.empty(len(at), dtype=object)
            got[:] = list(map(self._near_record, map(self._near.__getitem__, on.tolist())))
            cache[at] = got

    def all(self) -> list[ScoredCandidate]:
        if not self._whole:
            self.fill(np.arange(len(self)))
            self._whole = True
        return self._cache.tolist()

    def _record(self, k: int) -> ScoredCandidate:
        return self.record(k)

    def __repr__(self) -> str:
        return f"ScoredRecords({len(self)} scored)"


class RecordView(LazyTuple[ScoredCandidate]):
    """Some positions of a ``ScoredRecords``, in order; records made on first read."""

    def __init__(self, records: ScoredRecords, positions: np.ndarray) -> None:
        self.records = records
        self.positions = positions

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return RecordView(self.records, self.positions[index])
        return self.records.record(int(self.positions[index]))

    def all(self) -> list[ScoredCandidate]:
        self.records.fill(self.positions)
        return self.records._cache[self.positions].tolist()

    def view(self, idx: Any) -> RecordView:
        """The sub-view at indices ``idx`` of this one."""
        return RecordView(self.records, self.positions[np.asarray(idx, dtype=np.int64)])

    def __repr__(self) -> str:
        return f"RecordView({len(self)} of {len(self.records)} scored)"
