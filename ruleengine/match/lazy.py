"""Lazy records: the memo's candidates and near misses, made on first read.

A representative's binding translated onto a member is a ``Translated`` candidate (its
bindings and tensors spelled out when read) or a ``MappedNearMiss`` (its reason found
again when read). ``CandRows`` and ``NearRows`` hold them in key order as a tuple does,
making each record when it is first read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ruleengine.graph.model import Graph
from ruleengine.match.binding import Reject, build_candidate
from ruleengine.match.checks import check_binding, nothing_per_op
from ruleengine.match.compile import Concrete
from ruleengine.match.model import Candidate, NearMiss
from ruleengine.match.outcomes import Outcome
from ruleengine.ops.model import OpAlias
from ruleengine.records import LazyTuple
from ruleengine.rules.model import Rule


class MappedNearMiss(NearMiss):
    """A near miss translated from a representative's: the code is known; the reason
    (it names nodes and tensors) is computed on first read by checking the binding."""

    __slots__ = ("_redo", "_text")

    def __init__(self, candidate: Candidate, code: str, redo: tuple) -> None:
        # ``redo``: (graph, rule, clause, aliases, plan), shared by the translations of
        # one outcome; the row's node names are read from the candidate (``_o``, ``_v``)
        put = object.__setattr__
        put(self, "candidate", candidate)
        put(self, "code", code)
        put(self, "_redo", redo)

    @property  # type: ignore[override]
    def reason(self) -> str:
        text = getattr(self, "_text", None)
        if text is None:
            c = self.candidate
            o, v = c._o, c._v  # type: ignore[attr-defined]
            names = o.site[1]
            graph, rule, conc, aliases, plan = self._redo
            text = _recheck(graph, rule, conc, [names[v + k] for k in o.offs], aliases, plan)
            object.__setattr__(self, "_text", text)
        return text


def _recheck(
    graph: Graph,
    rule: Rule,
    conc: Concrete,
    names: Sequence[str],
    aliases: Mapping[str, OpAlias],
    plan: tuple,
) -> str:
    """The reason a translated near miss's binding fails its check."""
    lean = conc.single_nodes and nothing_per_op(plan)
    cand, bindings = build_candidate(graph, rule, conc, list(names), lean=lean)
    try:
        check_binding(graph, rule, conc, cand, bindings, aliases, plan)
    except Reject as rej:
        return rej.reason
    raise AssertionError(f"memo: {rule.name} binding {names} is no near miss")  # pragma: no cover


class Translated(Candidate):
    """A representative's candidate translated onto a member: key and nodes are known;
    bindings, inputs and outputs are spelled out on first read (few stages read them).
    ``_o`` is the outcome it translates (which knows the graph and the node names);
    the member it is translated onto (``_v``) follows from its first node's position,
    so no int object is kept per record (10^5-10^6 on a stack)."""

    __slots__ = ("_o", "_spelled")
    # ``nodes`` reads the ``_nodes`` slot (always set here) directly, not through the
    # base class's property: every stage reads it, 10^6 times on a stack
    nodes = Candidate._nodes  # type: ignore[assignment]

    @classmethod
    def make(cls, key: tuple, o: Outcome) -> Translated:
        """The translation of ``o`` whose key is ``key`` (made without ``__init__``: one
        per translated record), for an outcome whose ``site`` is set. Its node set is
        made when read, not kept (~1 KB a record); the key tuple is not kept either
        (64 B a record): ``key`` makes it when read."""
        obj = object.__new__(cls)
        put = object.__setattr__
        put(obj, "rule", key[0])
        put(obj, "alternative", key[2])
        put(obj, "_nodes", key[1])
        put(obj, "_o", o)
        return obj

    @classmethod
    def make_nodes(cls, rule: str, nodes: tuple, alternative: int, o: Outcome) -> Translated:
        """``make((rule, nodes, alternative), o)`` without the key tuple."""
        obj = object.__new__(cls)
        put = object.__setattr__
        put(obj, "rule", rule)
        put(obj, "alternative", alternative)
        put(obj, "_nodes", nodes)
        put(obj, "_o", o)
        return obj

    @property
    def _v(self) -> int:
        """The member this translates the representative's binding onto."""
        o = self._o
        return o.site[2][self._nodes[0]] - o.flat[0]  # type: ignore[index]

    def _spell(self) -> tuple:
        got = getattr(self, "_spelled", None)
        if got is None:
            o, v = self._o, self._v
            graph, names, _pos = o.site
            nodes = graph.nodes
            got = (
                tuple(tuple(names[v + k] for k in g) for g in o.groups),
                tuple(nodes[v + k].inputs[p] for k, p in o.inputs),
                tuple(nodes[v + k].outputs[q] for k, q in o.outputs),
            )
            object.__setattr__(self, "_spelled", got)
        return got

    @property  # type: ignore[override]
    def bindings(self) -> tuple[tuple[str, ...], ...]:
        return self._spell()[0]

    @property  # type: ignore[override]
    def inputs(self) -> tuple[str, ...]:
        return self._spell()[1]

    @property  # type: ignore[override]
    def outputs(self) -> tuple[str, ...]:
        return self._spell()[2]


class NearRows(LazyTuple[NearMiss]):
    """The memo's near misses in key order, equal to the tuple of their records, each
    record made on first read (2 x 10^5 on a 2048-layer stack; explain and the full
    plan read them, a compact ``fuse`` reads the codes: ``code_ids``, ``code_names``).
    Place ``k`` is a record made already, or outcome ``outs[which[k]]`` translated onto
    member ``member[k]`` (a ``MappedNearMiss``)."""

    def __init__(
        self,
        blocks: Sequence[tuple[str, tuple[dict[int, NearMiss], list[tuple], Any, Any]]],
    ) -> None:
        outs: list[tuple] = []  # (outcome, redo, rule name)
        which: list[Any] = []
        member: list[Any] = []
        made: dict[int, NearMiss] = {}
        base = 0
        for name, (got, block_outs, w, m) in blocks:
            w = np.where(w >= 0, w + len(outs), -1)
            outs.extend((o, redo, name) for o, redo in block_outs)
            made.update((base + k, rec) for k, rec in got.items())
            which.append(w)
            member.append(m)
            base += len(w)
        self._outs = outs
        self._which = np.concatenate(which) if which else np.zeros(0, dtype=np.int64)
        self._member = np.concatenate(member) if member else np.zeros(0, dtype=np.int64)
        n = len(self._which)
        self._cache = np.empty(n, dtype=object)
        self._have = np.zeros(n, dtype=bool)
        if made:
            at = np.fromiter(made, np.int64, len(made))
            self._cache[at] = np.fromiter(made.values(), object, len(made))
            self._have[at] = True
        # codes per place: the outcome's, or the record's
        names: dict[str, int] = {}
        o_code = np.fromiter(
            (names.setdefault(o.code, len(names)) for o, _r, _n in outs), np.int64, len(outs)
        )
        ids = np.empty(n, dtype=np.int64)
        lazy = self._which >= 0
        ids[lazy] = o_code[self._which[lazy]]
        for k, rec in made.items():
            ids[k] = names.setdefault(rec.code, len(names))
        self.code_ids = ids
        self.code_names = tuple(names)
        self._whole = False

    def __len__(self) -> int:
        return len(self._which)

    def _make(self, k: int) -> NearMiss:
        o, redo, name = self._outs[int(self._which[k])]
        v = int(self._member[k])
        label = o.site[1]  # type: ignore[index]
        cand = Translated.make_nodes(name, tuple([label[v + f] for f in o.flat]), o.alternative, o)
        rec = MappedNearMiss(cand, o.code, redo)  # type: ignore[arg-type]
        self._cache[k] = rec
        self._have[k] = True
        return rec

    def _record(self, k: int) -> Any:
        return self._cache[k] if self._have[k] else self._make(k)

    def all(self) -> list[NearMiss]:
        if not self._whole:
            for k in np.flatnonzero(~self._have).tolist():
                self._make(k)
            self._whole = True
        return self._cache.tolist()

    def __repr__(self) -> str:
        return f"_NearRows({len(self)} near misses)"


class CandRows(LazyTuple[Candidate]):
    """The memo's candidates in key order, equal to the tuple of their records, each
    record made on first read (4.5 x 10^5 on a 2048-layer stack; a compact ``fuse``
    reads the few that are no twin, the sources, the chosen and the listed: cost reads
    the rules by ``rule_at``). Place ``k`` is a record made already, or outcome
    ``outs[which[k]]`` translated onto member ``member[k]`` (a ``Translated``)."""

    def __init__(self, blocks: Sequence[tuple[str, tuple]]) -> None:
        outs: list[tuple[Outcome, str]] = []
        which: list[Any] = []
        member: list[Any] = []
        made: dict[int, Candidate] = {}
        starts: list[int] = []
        rules: list[str] = []
        base = 0
        for name, (got, block_outs, w, m) in blocks:
            w = np.where(w >= 0, w + len(outs), -1)
            outs.extend((o, name) for o in block_outs)
            made.update((base + k, rec) for k, rec in got.items())
            which.append(w)
            member.append(m)
            starts.append(base)
            rules.append(name)
            base += len(w)
        self._outs = outs
        self._which = np.concatenate(which) if which else np.zeros(0, dtype=np.int64)
        self._member = np.concatenate(member) if member else np.zeros(0, dtype=np.int64)
        self._starts = np.asarray(starts, dtype=np.int64)
        self._rules = rules
        n = len(self._which)
        self._cache = np.empty(n, dtype=object)
        self._have = np.zeros(n, dtype=bool)
        if made:
            at = np.fromiter(made, np.int64, len(made))
            self._cache[at] = np.fromiter(made.values(), object, len(made))
            self._have[at] = True
        self._whole = False

    def rule_at(self, idx: Any) -> list[str]:
        """The rules of the candidates ``idx`` (no record made: blocks are per rule)."""
        block = np.searchsorted(self._starts, np.asarray(idx, dtype=np.int64), "right") - 1
        return list(map(self._rules.__getitem__, block.tolist()))

    def __len__(self) -> int:
        return len(self._which)

    def _make(self, k: int) -> Candidate:
        o, name = self._outs[int(self._which[k])]
        v = int(self._member[k])
        label = o.site[1]  # type: ignore[index]
        rec = Translated.make_nodes(name, tuple([label[v + f] for f in o.flat]), o.alternative, o)
        self._cache[k] = rec
        self._have[k] = True
        return rec

    def _record(self, k: int) -> Any:
        return self._cache[k] if self._have[k] else self._make(k)

    def all(self) -> list[Candidate]:
        """Every record (the missing ones made per outcome, names read by numpy)."""
        if not self._whole:
            todo = np.flatnonzero(~self._have)
            if len(todo):
                u = self._which[todo]
                by = np.argsort(u, kind="stable")
                cuts = np.flatnonzero(u[by][1:] != u[by][:-1]) + 1
                make = Translated.make_nodes
                cache = self._cache
                for rows in np.split(by, cuts):
                    o, name = self._outs[int(u[rows[0]])]
                    label_arr = np.asarray(o.site[1], dtype=object)  # type: ignore[index]
                    at = todo[rows]
                    vs = self._member[at]
                    names = label_arr[vs[:, None] + np.asarray(o.flat, dtype=np.int64)].tolist()
                    alt = o.alternative
                    for k, nm in zip(at.tolist(), names, strict=True):
                        cache[k] = make(name, tuple(nm), alt, o)
                self._have[todo] = True
            self._whole = True
        return self._cache.tolist()

    def __repr__(self) -> str:
        return f"_CandRows({len(self)} candidates)"
