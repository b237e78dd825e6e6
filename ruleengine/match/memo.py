"""Matching once per repeated structure: the repeated-layer memo.

A decoder stack repeats one layer hundreds of times; matching every copy finds the same
bindings under other names. Here every node gets a *signature*: its op type, domain,
attributes, match type, and for each input and output tensor its dtype, shape, constness
(also through Identity/Cast), const value, graph input/output flags, consumer count and
*where its neighbours are*, as index offsets (the producer of an input is 7 nodes
before, the readers of an output are 2 and 9 nodes after). Two nodes ``r`` and
``v = r + d`` whose neighbourhoods of radius ``R`` have equal signatures node by node
(node ``x`` near ``r`` and node ``x + d`` near ``v``) have isomorphic neighbourhoods
under the translation ``x -> x + d``, everything the matcher reads included. Each
clause anchors its bindings at one of its nodes, a *centre* of the clause (the node
with the least farthest distance to the others, over the links its facts state; not a
fan-out sibling, whose place in a row follows the node names), and ``R`` is the largest
such farthest distance over the rules' clauses, plus one hop for the Python-side checks
(consumers of outputs, producers of inputs): a chain of 15 ops needs 8 hops from its
middle where it needed 15 from its first op, so fewer layers near the ends of a stack
differ within ``R`` and fewer representatives and a smaller window remain. So every
binding anchored at ``v`` is the translation of a binding anchored at ``r``, with the
same check outcome, and vice versa.

How: a Weisfeiler-Lehman colouring of ``R`` rounds over the signatures groups nodes into
classes (cheap, numpy); within a class, each member's neighbourhood is *verified*
against the representative's (signature equality at every offset of the ball, numpy);
a member that fails becomes a representative of its own. pyDatalog then runs on the
facts of the union of the representatives' balls only, the bindings anchored at each
representative are built and checked in Python as before, and each member's bindings
are the representative's, translated. The merged result is exactly the unmemoised one
(same candidates, same near misses, same order; ``tests/match/test_memo.py``); a near
miss's reason (it names nodes) is computed on first read. Keys are ordered and
de-duplicated as rows of name ranks (numpy), and a record is made for each winner only.

Where the translation cannot be trusted, the memo steps aside rule by rule: a rule whose
clauses have a part not connected to the anchor, or that reads a fact through a *hub*
tensor (more than ``HUB`` readers, e.g. a mask computed once and read by every layer,
whose edges would join far-apart layers in one binding), is matched on the whole graph
as before. A graph with little repetition (more representatives than half the nodes)
is matched the plain way too.

The steps live in modules of their own: ``anchors`` (clause anchors and radii),
``signatures`` (node signatures), ``classes`` (the colouring and its verification),
``window`` (Datalog on the window, outcomes translated), ``outcomes``, ``keyrows``
(de-duplication as int rows) and ``lazy`` (records made on first read).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ruleengine.graph.model import Graph
from ruleengine.match.anchors import clause_anchor, edge_reach, rule_preds, sibling_groups
from ruleengine.match.classes import ball, classify
from ruleengine.match.compile import Program
from ruleengine.match.facts import match_type
from ruleengine.match.model import MatchResult
from ruleengine.match.plain import find_plain, kept_program
from ruleengine.match.signatures import PendingStructure, Structure, structure
from ruleengine.match.window import match_window
from ruleengine.ops.model import OpAlias
from ruleengine.rules.model import Rule, RuleSet

# Below this many nodes the memo costs more than it saves (classes, verification).
MEMO_FROM_NODES = 3000
# The memo is given up when the representatives' balls cover more than this share of
# the graph (little repetition: plain matching is cheaper).
MAX_COVER = 0.5


def memo_applies(graph: Graph) -> bool:
    """Whether the graph is large enough for the memo to pay."""
    return len(graph.nodes) >= MEMO_FROM_NODES


def _anchors(
    prog: Program, rules: Sequence[Rule], hub_types: frozenset[str] = frozenset()
) -> tuple[dict[str, int | None], dict[str, dict[str, int]]]:
    """Per clause, the head position its bindings are anchored at (a centre of the
    clause); per rule, the farthest hop from an anchor (None: the rule cannot be
    memoised). ``hub_types``: the op types reading a hub that has shared-input facts;
    a rule reading those facts reaches as far as its links other than such shared
    inputs reach from the anchor, and is not memoised where only such a shared input
    joins its nodes (a hub's readers are not neighbours in the balls)."""
    radius_of: dict[str, int | None] = {}
    anchor_of: dict[str, dict[str, int]] = {}
    for rule in rules:
        at: dict[str, int] = {}
        radius: int | None = None
        hubbed = bool(hub_types) and "tin" in rule_preds(prog, rule.name)
        for combo, conc in prog.rules[rule.name][2].items():
            avoid = {p - 1 for g in sibling_groups(prog, rule.name, conc) for p in g}
            got = clause_anchor(conc, avoid)
            reach = got and (edge_reach(conc, got, hub_types) if hubbed else got[1])
            if got is None or reach is None:
                radius = None
                break
            at[combo] = got[0]
            radius = max(radius or 0, got[1], reach)
        radius_of[rule.name] = radius
        anchor_of[rule.name] = at
    return radius_of, anchor_of


def _balls(
    st: Structure, reps: Sequence[int], radius: int
) -> tuple[dict[int, list[int]], set[int]]:
    """Each representative's ball, and their union (the window Datalog runs on)."""
    balls = {r: ball(st, r, radius) for r in reps}
    window: set[int] = set()
    for b in balls.values():
        window.update(b)
    return balls, window


def _joined(parts: Sequence[MatchResult], seconds: float) -> MatchResult:
    """The memo's result and the plain one, in key order."""
    if len(parts) == 1:
        return replace(parts[0], seconds=seconds)
    return MatchResult(
        candidates=tuple(sorted((c for p in parts for c in p.candidates), key=lambda c: c.key)),
        near_misses=tuple(
            sorted((n for p in parts for n in p.near_misses), key=lambda n: n.candidate.key)
        ),
        seconds=seconds,
        facts=sum(p.facts for p in parts),
    )


def find_memo(
    graph: Graph,
    rule_set: RuleSet,
    aliases: Mapping[str, OpAlias],
    stats: dict[str, Any] | None = None,
    jobs: int = 1,
) -> MatchResult | None:
    """``find_candidates`` through the memo; None when the memo does not pay here.
    ``jobs`` > 1: the window's Datalog is shared among that many processes."""
    t0 = time.perf_counter()
    # the graph's signatures in a forked child while this process compiles the rules
    # (neither reads the other: ~0.7 s CPU each at 2048 layers)
    pending = PendingStructure(graph) if jobs > 1 else None
    rules = tuple(r for r in rule_set.rules if r.enabled)
    prog = kept_program(rules, aliases)
    st = structure(graph) if pending is None else pending.result()
    del pending
    # a hub's edges: the rules reading them go the plain way; its shared-input facts
    # only those whose edges alone do not join their nodes (``_anchors``)
    hub_preds, hub_types = _hub_predicates(graph, st, prog)
    radius_of, anchor_of = _anchors(prog, rules, hub_types)
    memo_rules = tuple(
        r
        for r in rules
        if radius_of[r.name] is not None and not (rule_preds(prog, r.name) & hub_preds)
    )
    if not memo_rules:
        return None
    rows_radius = max(radius_of[r.name] or 0 for r in memo_rules)
    classes = classify(st, rows_radius + 1)
    t1 = time.perf_counter()
    reps = [int(r) for r in classes.reps]
    balls, window = _balls(st, reps, rows_radius)
    if len(window) > MAX_COVER * len(graph.nodes):
        return None
    plain_rules = tuple(r for r in rules if r not in memo_rules)
    result, redo = match_window(
        graph,
        replace(rule_set, rules=memo_rules),
        aliases,
        st,
        classes,
        balls,
        window,
        anchor_of,
        stats,
        prog if memo_rules == rules else None,
        jobs,
    )
    parts = [result]
    if redo:
        plain_rules = tuple(r for r in rules if r in plain_rules or r.name in redo)
    if plain_rules:
        parts.append(find_plain(graph, replace(rule_set, rules=plain_rules), aliases, None, jobs))
    t2 = time.perf_counter()
    if stats is not None:
        stats.update(
            memo_s=t1 - t0,
            classes=float(len(reps)),
            window_nodes=float(len(window)),
            plain_rules=float(len(plain_rules)),
        )
    return _joined(parts, t2 - t0)


def _hub_predicates(graph: Graph, st: Structure, prog: Program) -> tuple[set[str], frozenset[str]]:
    """Edge predicates with a fact through a hub tensor (from its producer to a reader),
    and the op types of the readers with a shared-input fact on a hub."""
    out: set[str] = set()
    tin_types: set[str] = set()
    if not st.hubs:
        return out, frozenset()
    nodes = graph.nodes
    ntype = {n.name: match_type(n) for n in nodes}
    for t in st.hubs:
        T = graph.tensors[t]
        readers = [(c, p) for c, p in T.consumers if p >= 0]
        if T.producer is not None:
            src = ntype[T.producer]
            for pred, (a, b) in prog.edge_preds.items():
                if src in a and any(ntype[c] in b for c, _ in readers):
                    out.add(pred)
        if prog.tin_types and not T.is_constant:
            shared = [ntype[c] for c, _ in readers if ntype[c] in prog.tin_types]
            if len(shared) >= 2:
                tin_types.update(shared)
    return out, frozenset(tin_types)
