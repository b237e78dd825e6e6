"""The engine of ``whynot``: a rule's compiled clauses cut into prefixes and relaxed.

No second matcher. Each concrete clause of the rule (``compile_rule_set``) is cut into
prefixes, slot by slot in pattern order (a slot is one pattern op, or one copy of a
repeated op): the prefix through slot m keeps the clause's literals whose node
variables all belong to slots before m. Every connected prefix is asked once (one
Datalog run for every rule asked), so the longest prefix with answers is where the
structure stops. The Python checks the matcher runs on a binding (``checks``) are run
op by op on those answers, so a prefix that Datalog finds but a check refuses counts
only up to the refused op. At the op where the structure stops, a second run asks the
clause with each of that op's literals dropped in turn, and with its type freed: the
relaxation that has answers names the failing condition, and its answers are the
nearest places. Literals are relaxed by kind-agnostic dropping, so a new kind of literal
is covered without a change here; what each kind means is told in ``whynot_text``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice, product

from ruleengine.graph.model import Graph
from ruleengine.match.binding import Reject, build_candidate
from ruleengine.match.checks import _check_intermediates, _check_ops, check_binding, op_plan
from ruleengine.match.compile import Concrete, Link, Literal, Program
from ruleengine.match.datalog import datalog_answers
from ruleengine.ops.model import OpAlias
from ruleengine.rules.model import Rule

ROWS_CHECKED = 200  # answers of one prefix checked in Python (bounded work per rule)
PRODUCT_ROWS = ROWS_CHECKED  # rows of a disconnected clause (its components' product)
CLAUSES_CHECKED = 8  # clauses of one rule whose prefixes are checked in Python
FREE = "W"  # the variable of a relaxed op whose type is freed


@dataclass
class Clause:
    """One concrete clause of a rule, its literals attributed to the slots they bind."""

    rule: Rule
    conc: Concrete
    lits: list[Literal]
    slot_of: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for i, slot in enumerate(self.conc.slots):
            for v in slot.node_vars():
                self.slot_of[v] = i
        self.lit_slots: dict[Literal, frozenset[int]] = {
            lit: frozenset(
                self.slot_of[a] for a in lit[1] if isinstance(a, str) and a in self.slot_of
            )
            for lit in self.lits
        }

    def slots_in(self, lit: Literal) -> frozenset[int]:
        got = self.lit_slots.get(lit)
        if got is None:
            got = frozenset(
                self.slot_of[a] for a in lit[1] if isinstance(a, str) and a in self.slot_of
            )
        return got

    def owner(self, lit: Literal) -> int:
        return max(self.slots_in(lit), default=-1)

    def vars_of(self, slots: Sequence[int]) -> list[str]:
        return [v for i in slots for v in self.conc.slots[i].node_vars()]

    def prefix(self, m: int, prog: Program) -> list[Literal]:
        """The literals of slots < m, with a type literal for a slot none of them binds."""
        lits = [lit for lit in self.lits if self.owner(lit) < m]
        return covered(self, lits, range(m), prog)

    def own(self, s: int, prog: Program) -> list[Literal]:
        """Slot s's literals that read no other slot (the slot alone)."""
        lits = [lit for lit in self.lits if self.slots_in(lit) == {s}]
        return covered(self, lits, [s], prog)

    def full_ops(self, m: int) -> list[int]:
        """Pattern ops all of whose slots are among the first m."""
        by_op = self.conc.slots_by_op
        return [op for op, idx in sorted(by_op.items()) if max(idx) < m]

    def prefix_concrete(self, m: int) -> Concrete:
        links = tuple(k for k in self.conc.links if k.src < m and k.dst < m)
        return Concrete(f"{self.conc.combo}p{m}", self.conc.alternative, self.conc.slots[:m], links)


def covered(cl: Clause, lits: list[Literal], slots: Sequence[int], prog: Program) -> list[Literal]:
    """``lits`` plus a node-type literal for every node variable of ``slots`` they miss."""
    bound = {a for lit in lits for a in lit[1]}
    out = list(lits)
    for i in slots:
        slot = cl.conc.slots[i]
        if slot.form is None:
            if slot.var not in bound:
                out.append((prog.node_pred(slot.types), (slot.var,)))
            continue
        for fnode, v in zip(slot.form.nodes, slot.node_vars(), strict=True):
            if v not in bound:
                out.append((prog.node_pred(frozenset({fnode.op})), (v,)))
    return out


def connected(lits: Sequence[Literal], variables: Sequence[str]) -> bool:
    """Whether the literals join every variable of ``variables`` into one component
    (a disconnected clause is a cross product: never asked)."""
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        while parent.setdefault(a, a) != a:
            a = parent[a]
        return a

    want = set(variables)
    for _pred, args in lits:
        vs = [a for a in args if isinstance(a, str) and a in want]
        for a in vs[1:]:
            parent[find(a)] = find(vs[0])
    return len({find(v) for v in want}) <= 1


class Asker:
    """Clauses to ask in one Datalog run, each under a head of its own (deduplicated).

    A clause whose literals fall into several components (no variable joins them: a
    relaxation that dropped the only link inside a composite form) is never asked whole:
    its answers are the cross product of its components', which grows as the layers'
    power. Each component is asked on its own (bounded per layer) and the clause's rows
    are their product, the first ``PRODUCT_ROWS`` of it (a disconnected clause is read
    for whether it has answers, never for its places)."""

    def __init__(self, prog: Program) -> None:
        self.prog = prog
        prog.rules, prog.rule_clauses = {}, {}
        self.heads: dict[tuple, str] = {}
        self.prefixes: dict[tuple, str] = {}  # (alternative, slots, links) -> head
        # head of a disconnected clause -> (head vars, [(component head, its head vars)])
        self.products: dict[str, tuple[list[str], list[tuple[str, list[str]]]]] = {}

    def add(self, lits: Sequence[Literal], head_vars: Sequence[str]) -> str:
        key = (frozenset(lits), tuple(head_vars))
        head = self.heads.get(key)
        if head is not None:
            return head
        lits = list(dict.fromkeys(lits))
        parts = components(lits)
        head = self.heads[key] = f"w_{len(self.heads)}"
        if len(parts) > 1:
            subs = []
            for part in parts:
                have = {a for _pred, args in part for a in args if _is_var(a)}
                mine = [v for v in head_vars if v in have] or sorted(have)[:1]
                subs.append((self.add(part, mine), mine))
            self.products[head] = (list(head_vars), subs)
            return head
        text = f"{head}('w', {', '.join(head_vars)})"
        self.prog.rules[head] = (head, len(head_vars), {})
        self.prog.rule_clauses[head] = [(text, lits)]
        return head

    def run(self, graph: Graph) -> dict[str, list[tuple[str, ...]]]:
        if not self.prog.rules:
            return {}
        answers, *_ = datalog_answers(graph, self.prog)
        out = {h: [tuple(r[1:]) for r in rows] for h, rows in answers.items()}
        for head, (head_vars, subs) in self.products.items():
            out[head] = _product_rows(head_vars, subs, out)
        return out


def _is_var(arg: object) -> bool:
    return isinstance(arg, str) and not arg.startswith("'")


def components(lits: Sequence[Literal]) -> list[list[Literal]]:
    """``lits`` split into groups no variable joins (ground literals join the first)."""
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        while parent.setdefault(a, a) != a:
            a = parent[a]
        return a

    for _pred, args in lits:
        vs = [a for a in args if _is_var(a)]
        for a in vs:
            parent[find(a)] = find(vs[0])
    groups: dict[str | None, list[Literal]] = {}
    for lit in lits:
        vs = [a for a in lit[1] if _is_var(a)]
        groups.setdefault(find(vs[0]) if vs else None, []).append(lit)
    ground = groups.pop(None, [])
    parts = list(groups.values()) or [[]]
    parts[0] = ground + parts[0]
    return parts


def _product_rows(
    head_vars: list[str], subs: list[tuple[str, list[str]]], answers: Mapping[str, list]
) -> list[tuple[str, ...]]:
    """A disconnected clause's rows from its components' answers: all of them when one
    component holds every head variable (the others only filter), else the first
    ``PRODUCT_ROWS`` of the cross product (sorted)."""
    got = [answers.get(h, []) for h, _ in subs]
    if not all(got):
        return []
    wide = [i for i, (_h, vs) in enumerate(subs) if set(vs) & set(head_vars)]
    if len(wide) == 1:
        i = wide[0]
        pos = [subs[i][1].index(v) for v in head_vars]
        return [tuple(row[p] for p in pos) for row in got[i]]
    where = {v: (i, subs[i][1].index(v)) for i in wide for v in subs[i][1] if v in head_vars}
    rows = []
    for combo in islice(product(*(got[i] for i in wide)), PRODUCT_ROWS):
        by_part = dict(zip(wide, combo, strict=True))
        rows.append(tuple(by_part[where[v][0]][where[v][1]] for v in head_vars))
    return sorted(rows)


def _links_within(conc: Concrete, m: int) -> tuple[tuple, ...]:
    return tuple((k.src, k.dst, k.port) for k in conc.links if k.src < m and k.dst < m)


@dataclass
class Ladder:
    """A clause's prefixes as asked: slot count -> head (connected prefixes only)."""

    clause: Clause
    levels: dict[int, str] = field(default_factory=dict)
    alone: dict[int, str] = field(default_factory=dict)  # slot -> head of the slot alone

    def ask(self, asker: Asker) -> None:
        """Ask every connected prefix and every slot alone. Connectivity is tracked on
        slots (a composite form is connected inside), growing with the prefix."""
        cl, prog = self.clause, asker.prog
        by_owner: dict[int, list[Literal]] = {}
        for lit in cl.lits:
            by_owner.setdefault(cl.owner(lit), []).append(lit)
        parent = list(range(len(cl.conc.slots)))

        def find(a: int) -> int:
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        lits: list[Literal] = list(by_owner.get(-1, ()))
        # slots by value, cheaply (a composite form hashes all its nodes)
        keys = tuple(
            (x.op, x.copy, x.types, x.form.name if x.form else None) for x in cl.conc.slots
        )
        for m in range(1, len(cl.conc.slots) + 1):
            s = m - 1
            mine = by_owner.get(s, [])
            lits.extend(mine)
            joined = False
            for lit in mine:
                for other in cl.slots_in(lit):
                    if other != s:
                        parent[find(other)] = find(s)
                        joined = True
            if len({find(i) for i in range(m)}) == 1:
                # clauses of one alternative share their prefixes: each is built once
                key = (cl.conc.alternative, keys[:m], _links_within(cl.conc, m))
                head = asker.prefixes.get(key)
                if head is None:
                    lits_m = covered(cl, lits, range(m), prog)
                    head = asker.prefixes[key] = asker.add(lits_m, cl.vars_of(range(m)))
                self.levels[m] = head
            if m == 1 or not joined or not self.levels.get(m):
                own = [lit for lit in mine if cl.slots_in(lit) == {s}]
                self.alone[s] = asker.add(covered(cl, own, [s], prog), cl.vars_of([s]))

    def reached(self, answers: Mapping[str, list]) -> int:
        """The longest asked prefix with answers (slots)."""
        return max((m for m, h in self.levels.items() if answers.get(h)), default=0)

    def failing_slot(self, answers: Mapping[str, list]) -> int | None:
        """The slot where the structure stops (None: every slot matched)."""
        n = len(self.clause.conc.slots)
        for s in range(self.reached(answers), n):
            lone = self.alone.get(s)
            if lone is not None and not answers.get(lone):
                return s
            if s + 1 in self.levels:
                return s
        return None


@dataclass
class Outcome:
    """How far one clause got once its answers are checked in Python."""

    ladder: Ladder
    matched: int  # pattern ops fully matched
    kind: str  # "struct" (slot ``slot`` fails in Datalog), "check", "subgraph", "match"
    rows: list[tuple[str, ...]]
    level: int  # the prefix (slots) the rows answer
    slot: int | None = None
    op: int | None = None
    reject: Reject | None = None
    places: int = 0
    reasons: list[str] = field(default_factory=list)  # per row, why a check refused it

    @property
    def rank(self) -> tuple:
        order = {"struct": 0, "check": 1, "subgraph": 2, "match": 3}
        return (self.matched, order[self.kind], -self.ladder.clause.conc.alternative)


def check_rows(
    graph: Graph,
    cl: Clause,
    m: int,
    rows: Sequence[tuple[str, ...]],
    aliases: Mapping[str, OpAlias],
) -> tuple[list, list]:
    """Per answer of prefix m, the first op whose Python checks fail: ([(op, reject,
    row)], [rows passing every op fully in the prefix])."""
    conc = cl.prefix_concrete(m)
    plan = op_plan(cl.rule, conc.alternative, aliases)
    ops = set(cl.full_ops(m))
    fails: list = []
    passing: list = []
    for row in rows[:ROWS_CHECKED]:
        try:
            cand, bindings = build_candidate(graph, cl.rule, conc, list(row))
        except Reject as rej:
            # a composite whose input comes from an op its form excludes is refused
            # there (a node bound twice is no place at all)
            excluded = [x.op for x in conc.slots if x.form and x.form.main_input_not_from]
            if excluded and "excluded" in rej.reason:
                fails.append((excluded[0], rej, row))
            continue
        inside = set(cand.nodes)
        failed = None
        for entry in plan:
            if entry[0] not in ops:
                continue
            try:
                _check_ops(graph, conc, bindings, (entry,), inside)
            except Reject as rej:
                failed = (entry[0], rej, row)
                break
        if failed is None:
            passing.append(row)
        else:
            fails.append(failed)
    return fails, passing


def outcome(
    graph: Graph,
    ladder: Ladder,
    answers: Mapping[str, list],
    aliases: Mapping[str, OpAlias],
    cache: dict | None = None,
) -> Outcome:
    """The clause's deepest point: its prefixes' answers, checked from the longest down
    (``cache``: the checks of a prefix several clauses share, made once)."""
    cl = ladder.clause
    n_slots = len(cl.conc.slots)
    top = ladder.reached(answers)
    slot = ladder.failing_slot(answers)
    best: Outcome | None = None
    for m in sorted((m for m in ladder.levels if m <= top), reverse=True):
        full = cl.full_ops(m)
        if best is not None and len(full) <= best.matched:
            break
        rows = sorted(
            set(answers.get(ladder.levels[m], ())),
            key=lambda row: [graph.node(n).index for n in row],
        )
        key = (cl.rule.name, ladder.levels[m])
        got = cache.get(key) if cache is not None else None
        if got is None:
            got = check_rows(graph, cl, m, rows, aliases)
            if cache is not None:
                cache[key] = got
        fails, passing = got
        if passing:
            here = _passing_outcome(graph, ladder, m, passing, slot, aliases, len(rows))
        elif fails:
            op = max(f[0] for f in fails)
            worst = [f for f in fails if f[0] == op]
            here = Outcome(ladder, op, "check", [f[2] for f in worst], m, None, op, worst[0][1])
            here.places = len(rows)
            here.reasons = [f[1].reason for f in worst]
        else:
            continue
        if best is None or here.rank > best.rank:
            best = here
    if best is None:  # not even the first op: no node of its type(s)
        s = slot if slot is not None else 0
        best = Outcome(ladder, 0, "struct", [], 0, s, cl.conc.slots[s].op if n_slots else 0)
    return best


def _passing_outcome(
    graph: Graph,
    ladder: Ladder,
    m: int,
    passing: list,
    slot: int | None,
    aliases: Mapping[str, OpAlias],
    n_rows: int,
) -> Outcome:
    cl = ladder.clause
    if m < len(cl.conc.slots):
        s = m if slot is None else slot
        op = cl.conc.slots[s].op
        out = Outcome(ladder, len(cl.full_ops(m)), "struct", passing, m, s, op)
        out.places = n_rows
        return out
    n_ops = len(cl.rule.alternatives[cl.conc.alternative].ops)
    out = _subgraph_outcome(graph, ladder, passing, aliases, n_ops)
    out.places = n_rows
    return out


def _subgraph_outcome(
    graph: Graph, ladder: Ladder, rows: list, aliases: Mapping[str, OpAlias], n_ops: int
) -> Outcome:
    """Full answers whose ops all pass: the subgraph's conditions, or a match."""
    cl = ladder.clause
    fails = []
    for row in rows:
        cand, bindings = build_candidate(graph, cl.rule, cl.conc, list(row))
        try:
            check_binding(graph, cl.rule, cl.conc, cand, bindings, aliases)
        except Reject as rej:
            fails.append((_escaping_op(graph, cand), rej, row))
            continue
        return Outcome(ladder, n_ops + 1, "match", [row], len(cl.conc.slots))
    op, rej, _ = fails[0]
    out = Outcome(ladder, n_ops, "subgraph", [f[2] for f in fails], len(cl.conc.slots))
    out.op, out.reject = op, rej
    out.reasons = [f[1].reason for f in fails]
    return out


def _escaping_op(graph: Graph, cand) -> int | None:
    """The first pattern op one of whose output tensors escapes the candidate."""
    inside = set(cand.nodes)
    for op, names in enumerate(cand.bindings):
        try:
            _check_intermediates(graph, names, inside)
        except Reject:
            return op
    return None


# ---------------------------------------------------------------- relaxations


@dataclass
class Relaxed:
    """One relaxation of the failing slot: which literal was dropped (None: the type
    was freed), its head and head variables, and whether it stayed connected."""

    dropped: Literal | None
    head: str
    head_vars: list[str]
    joined: bool
    freed: int | None = None  # the argument of ``dropped`` made a variable, not dropped
    rewired: bool = False  # ``dropped`` (a link) taken from another op of the pattern
    note: str = ""  # what the freed argument stood for (a constant's value)


def _is_const(arg: object) -> bool:
    return isinstance(arg, int) or (isinstance(arg, str) and arg.startswith("'"))


def relaxations(cl: Clause, s: int, asker: Asker, any_types: frozenset[str]) -> list[Relaxed]:
    """The clause through slot s with each of s's literals dropped in turn, and with s's
    type freed (``FREE`` bound to what reads its inputs instead)."""
    prog = asker.prog
    base = [lit for lit in cl.lits if cl.owner(lit) < s]
    new = [lit for lit in cl.lits if cl.owner(lit) == s]
    out: list[Relaxed] = []
    for lit in (x for x in new if not x[0].startswith("n_")):
        rest = covered(cl, base + [x for x in new if x != lit], range(s + 1), prog)
        variables = cl.vars_of(range(s + 1))
        note = _const_note(lit, prog)
        if connected(rest, variables):
            out.append(Relaxed(lit, asker.add(rest, variables), variables, True, note=note))
            continue
        mine = cl.vars_of([s])
        alone = covered(cl, [x for x in new if x != lit and cl.slots_in(x) == {s}], [s], prog)
        out.append(Relaxed(lit, asker.add(alone, mine), mine, False, note=note))
    for lit in new:
        for i, arg in enumerate(lit[1]):
            # an edge's port, or a composite constant's key, freed
            port = lit[0].startswith("e_") and i == 2
            if _is_const(arg) and (port or (isinstance(arg, str) and i > 0)):
                freed_lit = (lit[0], (*lit[1][:i], f"R{i}", *lit[1][i + 1 :]))
                rest = [freed_lit if x == lit else x for x in base + new]
                variables = cl.vars_of(range(s + 1))
                if connected(rest, variables):
                    head = asker.add(rest, variables)
                    key = str(arg).strip("'")
                    note = repr(prog.const_keys[key]) if key in prog.const_keys else str(arg)
                    out.append(Relaxed(lit, head, variables, True, freed=i, note=note))
    out.extend(_rewired(cl, s, base, new, asker))
    into = [k for k in cl.conc.links if k.dst == s and k.src < s]
    if into:
        freed = covered(cl, base, range(s), prog) + [
            _free_edge(cl, k, prog, any_types) for k in into
        ]
        variables = [*cl.vars_of(range(s)), FREE]
        if connected(freed, variables):
            out.append(Relaxed(None, asker.add(freed, variables), variables, True))
    return out


def _const_note(lit: Literal, prog: Program) -> str:
    """The value of a composite constant a literal names (``cin``), else ''."""
    for a in lit[1]:
        key = a.strip("'") if isinstance(a, str) else None
        if key in prog.const_keys:
            return repr(prog.const_keys[key])
    return ""


def _rewired(
    cl: Clause, s: int, base: list[Literal], new: list[Literal], asker: Asker
) -> list[Relaxed]:
    """Each link into slot s from an earlier op taken from every other earlier slot instead
    (the op reads another op of the pattern than the rule says)."""
    prog = asker.prog
    out = []
    variables = cl.vars_of(range(s + 1))
    for lit in new:
        if not lit[0].startswith("e_") or lit[0] not in prog.edge_preds:
            continue
        src_var, dst_var, port = lit[1]
        j = cl.slot_of.get(src_var) if isinstance(src_var, str) else None
        if j is None or j >= s or cl.conc.slots[j].op == cl.conc.slots[s].op:
            continue
        dst_types = prog.edge_preds[lit[0]][1]
        for i in range(s):
            other = cl.conc.slots[i]
            if i == j or other.op == cl.conc.slots[j].op:
                continue
            moved = (prog.edge_pred(other.out_types, dst_types), (other.out_var, dst_var, port))
            rest = [moved if x == lit else x for x in base + new]
            if connected(rest, variables):
                out.append(Relaxed(lit, asker.add(rest, variables), variables, True, rewired=True))
    return out


def _free_edge(cl: Clause, link: Link, prog: Program, any_types: frozenset[str]) -> Literal:
    src = cl.conc.slots[link.src]
    pred = prog.edge_pred(src.out_types, any_types)
    port = link.port if link.port is not None else f"Q{link.src}_{link.dst}"
    return (pred, (src.out_var, FREE, port))
