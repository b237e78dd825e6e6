"""Records whose numbers or words are computed on first read.

A big decoder has 10^5 near misses and 10^5-10^6 candidates that translate another
(``MatchResult.twins``); their records are made without ``__init__`` and fill in what
only ``explain`` shows (a near miss's numbers, a twin's reason and details) when read.
The values are exactly those ``score_one`` would compute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from ruleengine.cost.formula import compute_cost
from ruleengine.cost.model import Cost, ScoredCandidate, Target, Verdict
from ruleengine.cost.traffic import group_io, traffic
from ruleengine.cost.ub import ub_need
from ruleengine.cost.verdicts import score_one
from ruleengine.graph.model import Graph
from ruleengine.match.model import Candidate, NearMiss
from ruleengine.rules.model import Rule

# Near-miss codes from matching -> the verdict explain shows for them.
NEAR_MISS_VERDICTS = {
    "intermediate-escapes": Verdict.INTERMEDIATE_ESCAPES,
    "dynamic-shape": Verdict.DYNAMIC_SHAPE,
    "not-convex": Verdict.NOT_CONVEX,
    "too-many-inputs": Verdict.TOO_MANY_INPUTS,
    "param-mismatch": Verdict.PARAM_MISMATCH,
    "const-value": Verdict.CONST_VALUE,
    "input-count": Verdict.PATTERN_MISMATCH,
    "input-source": Verdict.PATTERN_MISMATCH,
    "output-count": Verdict.PATTERN_MISMATCH,
}


def _put_fields(obj: object, **values: object) -> None:
    """Set fields of a frozen, slotted record (its ``__setattr__`` refuses)."""
    for name, value in values.items():
        object.__setattr__(obj, name, value)


class NearMissScored(ScoredCandidate):
    """A near miss's record whose ``cost`` and ``details`` are computed on first read.

    A near miss's verdict and reason come from the matcher; its numbers (what fusing it
    would have been worth) are only shown by ``explain``. A big decoder has tens of
    thousands of near misses, so scoring computes their traffic and UB need only when
    something reads them; the values are exactly those ``score_one`` would compute.
    """

    # _text/_near: the reason given, or the near miss to read it from (a translated near
    # miss computes it on first read: match.memo); _lazy: (cost, details) once known;
    # _pending: (graph, target) to compute them with
    __slots__ = ("_text", "_near", "_lazy", "_pending")

    def __init__(
        self,
        candidate: Candidate,
        priority: int,
        verdict: Verdict,
        reason: str | None,
        code: str,
        cost: Cost | None = None,
        details: object = None,
        *,
        _graph: Graph | None = None,
        _target: Target | None = None,
        _near: NearMiss | None = None,
    ) -> None:
        put = object.__setattr__
        _put_fields(
            self,
            candidate=candidate,
            priority=priority,
            verdict=verdict,
            code=code,
            _text=reason,
            _near=_near,
        )
        if _graph is None:  # dataclasses.replace(): the numbers are given
            put(self, "_lazy", (cost, details))
            put(self, "_pending", None)
        else:
            put(self, "_pending", (_graph, _target))

    @property  # type: ignore[override]
    def reason(self) -> str:
        text, near = self._text, self._near
        return near.reason if text is None and near is not None else (text or "")

    def _numbers(self) -> tuple[Cost | None, object]:
        got = getattr(self, "_lazy", None)
        if got is None:
            graph, target = self._pending  # type: ignore[misc]
            io = group_io(graph, self.candidate.nodes)
            tr = traffic(graph, io)
            details: dict[str, object] = {"inputs": io.inputs, "outputs": io.outputs}
            cost = None
            if not tr.unknown:
                ub = ub_need(graph, io, target)
                cost = compute_cost(graph, io, tr, ub, target)
                details["ub_buffers"] = ub.buffers
            got = (cost, MappingProxyType(details))
            object.__setattr__(self, "_lazy", got)
            object.__setattr__(self, "_pending", None)
        return got

    @property  # type: ignore[override]
    def cost(self) -> Cost | None:
        return self._numbers()[0]

    @property  # type: ignore[override]
    def details(self) -> Mapping[str, object]:
        return self._numbers()[1]  # type: ignore[return-value]


def from_near_miss(
    graph: Graph, nm: NearMiss, rule: Rule | None, target: Target
) -> ScoredCandidate:
    """A near miss keeps the matcher's code and reason; its numbers show what was at stake."""
    return NearMissScored(
        nm.candidate,
        rule.priority if rule else 0,
        NEAR_MISS_VERDICTS.get(nm.code, Verdict.CONSTRAINT_FAILED),
        None,
        nm.code,
        _graph=graph,
        _target=target,
        _near=nm,
    )


def near_record_maker(
    graph: Graph, rules: Mapping[str, Rule], target: Target
) -> Callable[[NearMiss], ScoredCandidate]:
    """``from_near_miss`` made without ``__init__`` (10^5 near misses on a 2048-layer
    stack): the same records, one (graph, target) pair shared by all."""
    priority = {name: r.priority for name, r in rules.items()}
    pending = (graph, target)
    verdicts = NEAR_MISS_VERDICTS
    failed = Verdict.CONSTRAINT_FAILED
    new = object.__new__
    put = object.__setattr__

    def make(nm: NearMiss) -> ScoredCandidate:
        c = nm.candidate
        code = nm.code
        obj = new(NearMissScored)
        put(obj, "candidate", c)
        put(obj, "priority", priority.get(c.rule, 0))
        put(obj, "verdict", verdicts.get(code, failed))
        put(obj, "code", code)
        put(obj, "_text", None)
        put(obj, "_near", nm)
        put(obj, "_pending", pending)
        return obj

    return make


def from_near_misses(
    graph: Graph, near: Sequence[NearMiss], rules: Mapping[str, Rule], target: Target
) -> list[ScoredCandidate]:
    """``from_near_miss`` of each (``near_record_maker``)."""
    return list(map(near_record_maker(graph, rules, target), near))


class TwinScored(ScoredCandidate):
    """A candidate the matcher found by translating another (``MatchResult.twins``):
    same local structure over its whole index span, so the same verdict, code and
    numbers; its reason and details name its own tensors and are computed on first
    read (by ``score_one``, so they are exactly what scoring it directly gives)."""

    # _given: the reason given (None: the scoring's own); _lazy: (reason, details) once
    # known; _redo: what score_one recomputes them with
    __slots__ = ("_given", "_lazy", "_redo")

    def __init__(
        self,
        candidate: Candidate,
        priority: int,
        verdict: Verdict,
        reason: str | None = None,
        code: str = "",
        cost: Cost | None = None,
        details: object = None,
        *,
        _redo: tuple | None = None,
    ) -> None:
        put = object.__setattr__
        _put_fields(
            self,
            candidate=candidate,
            priority=priority,
            verdict=verdict,
            code=code,
            cost=cost,
            _given=reason,  # _given None: the scoring's own reason
        )
        if _redo is None:  # dataclasses.replace(): everything is given
            put(self, "_lazy", (reason, details))
        else:
            put(self, "_redo", _redo)

    @classmethod
    def like(cls, candidate: Candidate, template: tuple) -> TwinScored:
        """A record of ``candidate`` taking ``template``'s priority, verdict, code, cost,
        given reason and ``_redo`` (``like_template``), made without ``__init__`` (10^5
        per stack). The one place a lazy record's slots are written (``relabel`` too)."""
        # one object.__setattr__ per field, not _put_fields: its keyword dict and loop
        # were ~40% of this function's time, 10^5-10^6 calls a stack
        obj = object.__new__(cls)
        put = object.__setattr__
        priority, verdict, code, cost, given, redo = template
        put(obj, "candidate", candidate)
        put(obj, "priority", priority)
        put(obj, "verdict", verdict)
        put(obj, "code", code)
        put(obj, "cost", cost)
        put(obj, "_given", given)  # None: the scoring's own reason
        put(obj, "_redo", redo)
        return obj

    @staticmethod
    def like_template(base: ScoredCandidate, redo: tuple) -> tuple:
        return (base.priority, base.verdict, base.code, base.cost, None, redo)

    def relabel(self, verdict: Verdict, code: str, reason: str) -> TwinScored:
        """``replace(self, verdict=, code=, reason=)`` without computing the details."""
        if getattr(self, "_lazy", None) is not None:
            return replace(self, verdict=verdict, code=code, reason=reason)
        return TwinScored.like(
            self.candidate, (self.priority, verdict, code, self.cost, reason, self._redo)
        )

    def _words(self) -> tuple[str, Mapping[str, object]]:
        got = getattr(self, "_lazy", None)
        if got is None:
            graph, rule, target, threshold, memo = self._redo
            sc = score_one(graph, self.candidate, rule, target, threshold, memo=memo)
            got = (sc.reason, sc.details)
            object.__setattr__(self, "_lazy", got)
            object.__delattr__(self, "_redo")
        return got  # type: ignore[return-value]

    @property  # type: ignore[override]
    def reason(self) -> str:
        given = self._given
        return given if given is not None else self._words()[0]

    @property  # type: ignore[override]
    def details(self) -> Mapping[str, object]:
        return self._words()[1]


def relabel(sc: ScoredCandidate, verdict: Verdict, code: str, reason: str) -> ScoredCandidate:
    """``dataclasses.replace(sc, verdict=, code=, reason=)`` that leaves numbers and details
    computed on first read as they are (``replace`` reads every field)."""
    if isinstance(sc, TwinScored):
        return sc.relabel(verdict, code, reason)
    if isinstance(sc, NearMissScored) and sc._pending is not None:
        graph, target = sc._pending
        return NearMissScored(
            sc.candidate, sc.priority, verdict, reason, code, _graph=graph, _target=target
        )
    return replace(sc, verdict=verdict, code=code, reason=reason)
