"""Window matching: Datalog on the representatives' balls, outcomes translated onto members.

Each representative's bindings are built and checked as the plain matcher does; each
member gets them translated by its offset. Per rule, the bindings are de-duplicated as
int rows (``keyrows``) and the winners kept as lazy records (``lazy``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ruleengine.graph.model import Graph
from ruleengine.match.anchors import sibling_groups
from ruleengine.match.binding import Reject, build_candidate
from ruleengine.match.checks import check_binding, nothing_per_op, op_plan
from ruleengine.match.classes import Classes
from ruleengine.match.compile import PAD, Concrete, Program, compile_rule_set
from ruleengine.match.datalog import datalog_answers
from ruleengine.match.keyrows import RuleRows
from ruleengine.match.lazy import CandRows, NearRows
from ruleengine.match.model import Candidate, MatchResult, TwinMap
from ruleengine.match.outcomes import Outcome, make_outcome, reorder, sibling_order, undercut
from ruleengine.match.signatures import Structure
from ruleengine.ops.model import OpAlias
from ruleengine.rules.model import Rule, RuleSet


def twin_map(
    st: Structure,
    index: np.ndarray,
    outs: Sequence[Outcome],
    which: np.ndarray,
    vs: np.ndarray,
    own: Mapping[int, int],
) -> TwinMap:
    """Candidate index -> (index of the representative's candidate it translates, offset),
    for members whose signatures agree over the whole index span of the representative's
    candidates (costing reads paths inside a group's span: convexity). The translated
    candidates as rows: ``index[k]`` translates outcome ``outs[which[k]]`` onto member
    ``vs[k]``; ``own``: id of a representative's own candidate -> its index."""
    if not len(index):
        return TwinMap((), (), ())
    by = np.argsort(index, kind="stable")  # candidate index ascending
    index, which, vs = index[by], which[by], vs[by]
    # per outcome (a few thousand): its representative, span and own candidate
    spans: dict[int, tuple[int, int]] = {}
    for o in outs:
        lo, hi = spans.get(o.anchor, (0, 0))
        spans[o.anchor] = (min(lo, *o.offs), max(hi, *o.offs))
    n_o = len(index)
    anchors = np.fromiter((o.anchor for o in outs), dtype=np.int64, count=len(outs))
    source = np.fromiter((own.get(id(o.candidate), -1) for o in outs), np.int64, len(outs))
    at = anchors[which]
    sig = st.sig
    n = len(sig)
    alike = np.zeros(n_o, dtype=bool)
    by = np.argsort(at, kind="stable")
    cuts = np.flatnonzero(at[by][1:] != at[by][:-1]) + 1
    for rows in np.split(by, cuts):
        r = int(at[rows[0]])
        lo, hi = spans[r]
        if r + lo < 0 or r + hi >= n:
            continue
        offs = np.arange(lo, hi + 1, dtype=np.int64)
        members, back = np.unique(vs[rows], return_inverse=True)
        idx = members[:, None] + offs[None, :]
        ok = ((idx >= 0) & (idx < n)).all(axis=1)
        good = np.zeros(len(members), dtype=bool)
        if ok.any():
            good[ok] = (sig[idx[ok]] == sig[r + offs][None, :]).all(axis=1)
        alike[rows] = good[back.reshape(-1)]
    src = source[which]
    keep = np.flatnonzero(alike & (src >= 0))
    return TwinMap(index[keep], src[keep], vs[keep] - at[keep])


@dataclass
class _Site:
    """What each rule's step reads: the graph, its classes and its names as ranks."""

    graph: Graph
    aliases: Mapping[str, OpAlias]
    prog: Program
    pos: Mapping[str, int]
    is_rep: np.ndarray  # bool per node
    members: dict[int, list[int]]  # representative -> its other members
    ball_sets: dict[int, set[int]]  # representative -> its ball
    label: list[str]  # node names by position
    label_arr: np.ndarray
    # keys are ordered as rows of name ranks: rank + 1 per node position, 0 for the
    # padding (position -1, the last entry)
    rank_p: np.ndarray
    rule_rank: dict[str, int]


def _site(
    graph: Graph,
    aliases: Mapping[str, OpAlias],
    prog: Program,
    st: Structure,
    classes: Classes,
    balls: Mapping[int, list[int]],
    rules: Sequence[Rule],
) -> _Site:
    nodes = graph.nodes
    rep_of = classes.rep
    is_rep = np.zeros(len(nodes), dtype=bool)
    is_rep[classes.reps] = True
    members: dict[int, list[int]] = {}
    for v in np.flatnonzero(~is_rep):
        members.setdefault(int(rep_of[v]), []).append(int(v))
    label = [n.name for n in nodes]
    rank_p = np.zeros(len(nodes) + 1, dtype=np.int32)
    rank_p[sorted(range(len(nodes)), key=label.__getitem__)] = np.arange(1, len(nodes) + 1)
    return _Site(
        graph,
        aliases,
        prog,
        st.pos,
        is_rep,
        members,
        {r: set(b) for r, b in balls.items()},
        label,
        np.array(label, dtype=object),
        rank_p,
        {name: k for k, name in enumerate(sorted(r.name for r in rules))},
    )


def _checked(
    graph: Graph,
    rule: Rule,
    conc: Concrete,
    names: list[str],
    aliases: Mapping[str, OpAlias],
    plan: tuple,
) -> tuple[Candidate, str | None, str | None] | None:
    """One row built and checked: None when it is structurally no match, else its
    candidate and, for a near miss, the code and reason."""
    lean = conc.single_nodes and nothing_per_op(plan)
    try:
        cand, bindings = build_candidate(graph, rule, conc, names, lean=lean)
    except Reject:
        return None
    try:
        check_binding(graph, rule, conc, cand, bindings, aliases, plan)
    except Reject as rej:
        return cand, rej.code, rej.reason
    return cand, None, None


def _rep_outcomes(
    site: _Site,
    rule: Rule,
    answers: Mapping[str, list[tuple]],
    anchor_at: Mapping[str, int],
    plans: dict[int, tuple],
) -> dict[int, list[Outcome]] | None:
    """The representatives' bindings of ``rule``, checked, as outcomes per
    representative; None when a binding leaves its representative's ball."""
    graph, pos, is_rep = site.graph, site.pos, site.is_rep
    head, _arity, combos = site.prog.rules[rule.name]
    per_rep: dict[int, list[Outcome]] = {}
    for row in answers.get(head, ()):
        conc = combos[row[0]]
        names = row[1 : 1 + conc.n_head]
        if PAD in names:
            continue
        anchor = pos[names[anchor_at[row[0]]]]
        if not is_rep[anchor]:
            continue
        idx = [pos[n] for n in names]
        if not all(i in site.ball_sets[anchor] for i in idx):
            return None
        plan = plans.get(conc.alternative)
        if plan is None:
            plan = plans[conc.alternative] = op_plan(rule, conc.alternative, site.aliases)
        checked = _checked(graph, rule, conc, list(names), site.aliases, plan)
        if checked is None:
            continue
        cand, code, reason = checked
        per_rep.setdefault(anchor, []).append(
            make_outcome(graph, pos, anchor, row[0], idx, cand, code, reason)
        )
    return per_rep


def _in_name_order(
    site: _Site,
    rule: Rule,
    o: Outcome,
    vs: np.ndarray,
    groups: tuple,
    plans: Mapping[int, tuple],
    own_rows: list[tuple],
) -> np.ndarray:
    """The members ``vs`` at which ``o``'s fan-out siblings sort in name order (the
    representative, first, always). Fan-out siblings are bound in name order (``<`` in
    Datalog): at the other members the names sort the other way, so the row is another
    one, checked directly and added to ``own_rows`` as (member, row, candidate, code,
    reason)."""
    in_order = np.asarray(sibling_order(site.label_arr, vs, o, groups), dtype=bool)
    in_order[0] = True
    label = site.label
    for v in vs[~in_order].tolist():
        row = reorder((o.combo, *(label[v + k] for k in o.offs)), groups)
        conc = site.prog.rules[rule.name][2][o.combo]
        plan = plans[conc.alternative]
        checked = _checked(site.graph, rule, conc, list(row[1:]), site.aliases, plan)
        if checked is not None:
            own_rows.append((v, row, *checked))
    return vs[in_order]


def _rule_rows(
    site: _Site, rule: Rule, per_rep: Mapping[int, list[Outcome]], plans: dict[int, tuple]
) -> RuleRows | None:
    """Every binding of ``rule`` (the representatives' and the translated ones) as int
    rows. Per subgraph (candidate key) the plain matcher keeps the first row, in row
    order, that is a candidate, else the first that is a near miss. The translated
    bindings are rows (outcome, member): their keys are compared as rows of node
    positions (numpy), and rows are spelled out only where two give the same key."""
    name = rule.name
    combos = site.prog.rules[name][2]
    sibs: dict[str, tuple] = {}
    for outs in per_rep.values():
        for o in outs:
            if o.combo not in sibs:
                sibs[o.combo] = sibling_groups(site.prog, name, combos[o.combo])
    outs_r: list[Outcome] = []  # this rule's outcomes
    blk_v: list[Any] = []  # per outcome: the members it is translated onto
    own_rows: list[tuple] = []  # rows checked directly (fan-out siblings)
    for r, outs in per_rep.items():
        # the representative and its members, all bindings of one outcome at once
        vs = np.fromiter((r, *site.members.get(r, ())), dtype=np.int64)
        for o in undercut(outs, sibs) if len(vs) > 1 else outs:
            groups = sibs[o.combo]
            take = _in_name_order(site, rule, o, vs, groups, plans, own_rows) if groups else vs
            blk_v.append(take)
            outs_r.append(o)
    if not (outs_r or own_rows):
        return None
    return RuleRows(
        name,
        outs_r,
        blk_v,
        own_rows,
        site.label,
        site.label_arr,
        site.rank_p,
        site.pos,
        site.rule_rank[name],
        (site.graph, rule, combos, site.aliases, plans),
    )


@dataclass
class _Merged:
    """The rules' winners in key order, as blocks for ``CandRows`` and ``NearRows``."""

    cand_blocks: list[tuple[str, tuple]] = field(default_factory=list)
    near_blocks: list[tuple[str, tuple]] = field(default_factory=list)
    # per rule's near misses: where they fall among the candidates (cost merges by it)
    near_at: list[Any] = field(default_factory=list)
    matched: dict[str, int] = field(default_factory=dict)
    # translated candidates (not a representative's own): index, outcome, member
    t_index: list[Any] = field(default_factory=list)
    t_outs: list[Outcome] = field(default_factory=list)
    t_which: list[Any] = field(default_factory=list)
    t_vs: list[Any] = field(default_factory=list)
    own: dict[int, int] = field(default_factory=dict)  # id of a rep's own candidate -> index


def _merge(site: _Site, per_rule: dict[str, RuleRows]) -> _Merged:
    """Same de-duplication as the plain matcher: per rule and node set the first key in
    key order; records are made for the winners only. Rule by rule in rule name order
    (keys of two rules never tie: the rule name comes first)."""
    out = _Merged()
    n_final = 0
    near_matched: dict[str, int] = {}
    site_t = (site.graph, site.label, site.pos)  # where translated records spell names
    for name in sorted(per_rule):
        got = per_rule.pop(name)
        base = n_final
        block, origin = got.candidates(site_t, base, out.own)
        out.cand_blocks.append((name, block))
        n_final += len(block[2])
        if origin is not None:
            out.t_index.append(origin[0])
            out.t_which.append(origin[2] + len(out.t_outs))
            out.t_vs.append(origin[3])
            out.t_outs.extend(origin[1])
        if got.n_sel is not None:
            out.near_blocks.append((name, got.near_block(site_t)))
            out.near_at.append(base + got.near_at)
        if got.matched:
            out.matched[name] = got.matched
        if got.near_matched:
            near_matched[name] = got.near_matched
    # per rule, its distinct node tuples (what the plan counts as its matches), rules in
    # the order candidates then near misses first show them; a near miss never has a
    # candidate's node set (``first_per_set(outside=)``), so the two counts add up
    for name, k in near_matched.items():
        out.matched[name] = out.matched.get(name, 0) + k
    return out


def _twins(st: Structure, merged: _Merged) -> TwinMap:
    if not merged.t_index:
        return TwinMap((), (), ())
    return twin_map(
        st,
        np.concatenate(merged.t_index),
        merged.t_outs,
        np.concatenate(merged.t_which),
        np.concatenate(merged.t_vs),
        merged.own,
    )


def match_window(
    graph: Graph,
    rule_set: RuleSet,
    aliases: Mapping[str, OpAlias],
    st: Structure,
    classes: Classes,
    balls: Mapping[int, list[int]],
    window: set[int],
    anchor_of: Mapping[str, Mapping[str, int]],
    stats: dict[str, Any] | None,
    prog: Program | None = None,
    jobs: int = 1,
) -> tuple[MatchResult, set[str]]:
    """Datalog on the window's facts; the representatives' bindings checked, then
    translated onto every member. Returns the result and the rules whose bindings left
    a representative's ball (to be matched the plain way; never seen so far)."""
    t0 = time.perf_counter()
    nodes = graph.nodes
    rules = rule_set.rules
    if prog is None:
        prog = compile_rule_set(rules, aliases, tabled_forms=True)
    names_in = {nodes[i].name for i in window}
    reps = [nodes[int(r)].name for r in classes.reps]
    answers, _timings, t1, n_facts = datalog_answers(graph, prog, names_in, jobs, (anchor_of, reps))
    t2 = time.perf_counter()
    site = _site(graph, aliases, prog, st, classes, balls, rules)
    redo: set[str] = set()
    per_rule: dict[str, RuleRows] = {}  # per rule: its bindings as int rows, de-duplicated
    for rule in rules:
        plans: dict[int, tuple] = {}
        per_rep = _rep_outcomes(site, rule, answers, anchor_of[rule.name], plans)
        if per_rep is None:
            redo.add(rule.name)
            continue
        rows = _rule_rows(site, rule, per_rep, plans)
        if rows is not None:
            per_rule[rule.name] = rows
    t3 = time.perf_counter()
    merged = _merge(site, per_rule)
    final = CandRows(merged.cand_blocks)
    twins = _twins(st, merged)
    t4 = time.perf_counter()
    if stats is not None:
        stats.update(
            compile_s=t1 - t0,
            datalog_s=t2 - t1,
            check_s=t3 - t2,
            dedup_s=t4 - t3,
            facts=float(n_facts),
        )
    near_at = merged.near_at
    return (
        MatchResult(
            candidates=final,
            near_misses=NearRows(merged.near_blocks),
            seconds=t4 - t0,
            facts=n_facts,
            twins=twins,
            near_at=np.concatenate(near_at) if near_at else np.zeros(0, dtype=np.int64),
            matched=merged.matched,
        ),
        redo,
    )
