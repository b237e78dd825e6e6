"""Matches kept per model and rule, for a caller that matches one model many times.

``suggest`` runs the whole pipeline again and again on the same model: once per measure,
once per drafted rule scored alone, with the given rules beside a few drafts that change.
Each run matched every rule again, the bundled library's 84 rules included. A rule's
candidates and near misses depend on that rule and the graph only (``match.parallel``
relies on the same fact), and a match result is sorted by candidate key, which starts
with the rule's name: so a rule set's result is its rules' results merged in key order,
and each rule needs matching once per graph.

``kept_matches()`` installs the store; ``match.parallel.find_candidates_parallel`` asks
it (``matched_with``) and matches only the rules it does not hold. Outside it nothing is
kept. A graph is known by its file (path, size, modification time) and a digest of what
the loader made of it (nodes, tensors, bound dims), never by object identity: every
analysis loads its model again. Graphs without a file, and graphs the repeated-structure
memo matches (its results carry translation tables that do not split by rule), are
matched as usual.
"""

from __future__ import annotations

import hashlib
import os
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace

from ruleengine.graph.model import Graph
from ruleengine.match.model import Candidate, MatchResult, NearMiss
from ruleengine.rules.model import Rule, RuleSet

# A rule's candidates and near misses on one graph.
_PerRule = tuple[tuple[Candidate, ...], tuple[NearMiss, ...]]


@dataclass
class KeptMatches:
    """Per graph key, per rule: what matching found (``held``); ``matched``: how many
    rules were handed to the matcher."""

    held: dict[bytes, dict[Rule, _PerRule]] = field(default_factory=dict)
    matched: int = 0

    def matched_with(
        self, graph: Graph, rule_set: RuleSet, match: Callable[[RuleSet], MatchResult]
    ) -> MatchResult:
        """``match(rule_set)``'s result, matching only the enabled rules not held for
        ``graph``."""
        key = graph_key(graph)
        if key is None:
            return match(rule_set)
        per_rule = self.held.setdefault(key, {})
        rules = [r for r in rule_set.rules if r.enabled]
        new = tuple(dict.fromkeys(r for r in rules if r not in per_rule))
        self.matched += len(new)
        found = MatchResult(())
        if new:
            found = match(replace(rule_set, rules=new))
            per_rule.update(_split(found, new))
        return MatchResult(
            candidates=tuple(
                sorted((c for r in rules for c in per_rule[r][0]), key=lambda c: c.key)
            ),
            near_misses=tuple(
                sorted((n for r in rules for n in per_rule[r][1]), key=lambda n: n.candidate.key)
            ),
            seconds=found.seconds,
            facts=found.facts,
        )


def _split(found: MatchResult, rules: tuple[Rule, ...]) -> dict[Rule, _PerRule]:
    """``found``'s candidates and near misses by rule."""
    by_name: dict[str, tuple[list[Candidate], list[NearMiss]]] = {r.name: ([], []) for r in rules}
    for c in found.candidates:
        by_name[c.rule][0].append(c)
    for n in found.near_misses:
        by_name[n.candidate.rule][1].append(n)
    return {r: (tuple(by_name[r.name][0]), tuple(by_name[r.name][1])) for r in rules}


_STORE: ContextVar[KeptMatches | None] = ContextVar("kept_matches", default=None)


@contextmanager
def kept_matches() -> Iterator[KeptMatches]:
    """Within it, matching keeps each rule's result per graph (the enclosing store where
    already inside)."""
    current = _STORE.get()
    if current is not None:
        yield current
        return
    store = KeptMatches()
    token = _STORE.set(store)
    try:
        yield store
    finally:
        _STORE.reset(token)


def kept_store() -> KeptMatches | None:
    """The store installed by ``kept_matches``, if any."""
    return _STORE.get()


# per graph object (held while it lives): its key
_KEYS: dict[int, tuple[weakref.ref, bytes | None]] = {}


def graph_key(graph: Graph) -> bytes | None:
    """What a match of ``graph`` depends on: its file as it is now and a digest of the
    loaded graph; None for a graph without a file."""
    held = _KEYS.get(id(graph))
    if held is not None and held[0]() is graph:
        return held[1]
    key = _graph_key(graph)
    gone = id(graph)
    _KEYS[gone] = (weakref.ref(graph, lambda _: _KEYS.pop(gone, None)), key)
    return key


def _graph_key(graph: Graph) -> bytes | None:
    if graph.model_path is None:
        return None
    try:
        st = os.stat(graph.model_path)
    except OSError:
        return None
    h = hashlib.blake2b(digest_size=20)
    h.update(repr((graph.model_path, st.st_size, st.st_mtime_ns)).encode())
    h.update(repr((graph.name, graph.inputs, graph.outputs, graph.opset)).encode())
    h.update(repr(sorted(graph.bound_dims.items())).encode())
    h.update(repr((graph.compile_time_nodes, graph.opaque_nodes)).encode())
    for node in graph.nodes:
        h.update(repr(node).encode())
    for name in sorted(graph.tensors):
        h.update(repr(graph.tensors[name]).encode())
    return h.digest()
