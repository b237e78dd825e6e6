"""Records produced by matching: every binding of a rule's ops to graph nodes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_MISSING = object()


@dataclass(frozen=True, eq=False)
class Candidate:
    """One subgraph a rule matched. Overlapping candidates are all kept; solving picks.

    Equality and hashing are by value whatever the class (``match.memo`` makes
    translated candidates whose bindings and tensors are spelled out on first read).
    Records have slots, no ``__dict__`` (~360 B less each: 10^5-10^6 per big model).
    """

    __slots__ = ("rule", "alternative", "bindings", "inputs", "outputs", "_nodes", "_key")

    rule: str  # rule name
    alternative: int  # which alternative of the rule matched (0 = match.ops)
    # One entry per pattern op, in the rule's op order; an op that is a composite (e.g.
    # Swish = x*Sigmoid(x)) or a repeat binds several nodes.
    bindings: tuple[tuple[str, ...], ...]
    inputs: tuple[str, ...]  # tensors read from outside the candidate, first-use order
    outputs: tuple[str, ...]  # tensors produced inside and used outside (or graph outputs)

    # Derived views are computed once per record and kept in a slot (they are not
    # fields, so equality, hashing and repr are unchanged). Scoring and resolving read
    # them often.
    @property
    def nodes(self) -> tuple[str, ...]:
        """Node names in the rule's op order (each op's nodes in topological order)."""
        got = getattr(self, "_nodes", _MISSING)
        if got is _MISSING:
            got = tuple(n for group in self.bindings for n in group)
            object.__setattr__(self, "_nodes", got)
        return got  # type: ignore[return-value]

    @property
    def node_set(self) -> frozenset[str]:
        """The nodes as a set, made on each read (not kept: ~1 KB a record)."""
        return frozenset(self.nodes)

    @property
    def key(self) -> tuple:
        """Deterministic sort key."""
        got = getattr(self, "_key", _MISSING)
        if got is _MISSING:
            got = (self.rule, self.nodes, self.alternative)
            object.__setattr__(self, "_key", got)
        return got  # type: ignore[return-value]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Candidate):
            return NotImplemented
        if self is other:
            return True
        return self.key == other.key and (self.bindings, self.inputs, self.outputs) == (
            other.bindings,
            other.inputs,
            other.outputs,
        )

    def __hash__(self) -> int:
        return hash(self.key)

    def __reduce__(self) -> tuple:
        # a plain record of the same values (another process: parallel matching)
        return (Candidate, (self.rule, self.alternative, self.bindings, self.inputs, self.outputs))


@dataclass(frozen=True, eq=False)
class NearMiss:
    """A structural match that a Python-side check rejected; kept so `explain` can say why.

    ``code`` is a stable reason code, e.g. ``intermediate-escapes``, ``input-count``,
    ``output-count``, ``param-mismatch`` (shape-computed params), ``dynamic-shape``.
    A subclass may compute ``reason`` on first read (``match.memo``); equality and hashing
    are by value whatever the class.
    """

    __slots__ = ("candidate", "code", "reason")

    candidate: Candidate
    code: str
    reason: str

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NearMiss):
            return NotImplemented
        return (self.candidate, self.code, self.reason) == (
            other.candidate,
            other.code,
            other.reason,
        )

    def __hash__(self) -> int:
        return hash((self.candidate, self.code, self.reason))

    def __reduce__(self) -> tuple:
        return (NearMiss, (self.candidate, self.code, self.reason))


class TwinMap(Mapping[int, tuple[int, int]]):
    """``MatchResult.twins`` as three int arrays (candidate index ascending, the index
    of the candidate it translates, the index offset) instead of a dict of tuples
    (~190 B an entry; 4 x 10^5 entries on a 2048-layer stack); equal to that dict."""

    __slots__ = ("index", "source", "shift")

    def __init__(self, index: Any, source: Any, shift: Any) -> None:
        import numpy as np

        self.index = np.asarray(index, dtype=np.int64)
        self.source = np.asarray(source, dtype=np.int64)
        self.shift = np.asarray(shift, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.index)

    def __iter__(self) -> Iterator[int]:
        return iter(self.index.tolist())

    def _find(self, i: object) -> int | None:
        if not isinstance(i, int) or not len(self.index):
            return None
        k = int(self.index.searchsorted(i))
        return k if k < len(self.index) and int(self.index[k]) == i else None

    def __contains__(self, i: object) -> bool:
        return self._find(i) is not None

    def __getitem__(self, i: int) -> tuple[int, int]:
        k = self._find(i)
        if k is None:
            raise KeyError(i)
        return int(self.source[k]), int(self.shift[k])

    def items(self) -> Iterator[tuple[int, tuple[int, int]]]:  # type: ignore[override]
        return zip(
            self.index.tolist(),
            zip(self.source.tolist(), self.shift.tolist(), strict=True),
            strict=True,
        )

    def __repr__(self) -> str:
        return f"TwinMap({len(self)} twins)"


@dataclass(frozen=True)
class MatchResult:
    # sorted by Candidate.key; the memo's are a sequence whose records are made on first
    # read (``match.lazy.CandRows``: the rules by ``rule_at``)
    candidates: Sequence[Candidate]
    # sorted by their candidates' keys; the memo's are a sequence whose records are made
    # on first read (``match.lazy.NearRows``: the codes as ``code_ids``, ``code_names``)
    near_misses: Sequence[NearMiss] = ()
    seconds: float = 0.0
    facts: int = 0  # Datalog facts asserted
    # Candidate index -> (index of the candidate it translates, index offset), for
    # candidates the repeated-structure memo (``match.memo``) found by translation and
    # whose whole index span is verified alike: costing may take the twin's numbers
    # (the memo gives a ``TwinMap``).
    twins: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    # Where the near misses fall among the candidates in key order, when the matcher
    # knows it (``match.memo``: every key distinct, and no near miss has the rule and
    # node set of a candidate): near miss k sorts right before candidate ``near_at[k]``
    # (an int array, ascending). Cost merges its records by it and the plan counts
    # matches by it instead of sorting or hashing 10^5-10^6 keys; None: not known.
    near_at: Any = field(default=None, compare=False)
    # Per rule, how many distinct node tuples its candidates and near misses have (what
    # the plan counts as its matches), when the matcher counted them (``match.memo``,
    # as rows of ints); None: the plan counts them from the records.
    matched: Mapping[str, int] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class WhyPlace:
    """One place in the graph where a rule's pattern got closest (``match.whynot``)."""

    nodes: tuple[str, ...]  # the matched prefix, in pattern-op order
    node: str | None  # the node where the failing op was looked for (None: nowhere)
    text: str  # what is there instead, e.g. "p2o.Mul.2 reads p2o.Add.3 (op 1) on input0"


@dataclass(frozen=True)
class WhyNot:
    """Why a rule does not match a graph: how far its compiled clauses got, which pattern
    op failed on which condition, where, and how to fix it (``match.whynot``)."""

    rule: str
    candidates: int  # candidates the rule has on the graph (0: it never matches)
    alternative: int  # the alternative that got furthest (0 = match.ops)
    op: int | None  # the failing pattern op, 0-based as ``from_op`` counts it
    op_type: str
    condition: str  # e.g. "op-type", "link", "port", "constant", "repeat", a near-miss code
    message: str
    hint: str  # how to fix it
    location: str | None  # "file:line:col" of the failing op (or its input/param)
    matched_ops: int  # pattern ops fully matched before the failure
    prefix_places: int  # places where those ops matched
    places: tuple[WhyPlace, ...] = ()
    also: tuple[str, ...] = ()  # other alternatives, one line each
