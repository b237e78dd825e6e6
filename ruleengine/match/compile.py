"""Rules -> Datalog text. Pure: no pyDatalog here, only the program as data and text.

Facts (built by ``facts.py``, only those the program needs):
  ``e_<A>__<B>(P, C, Port)``  node P, of a type in set A, produces a tensor that node C,
                              of a type in set B, reads on input ``Port`` (typed edges:
                              one predicate per pair of type sets the rules connect, so
                              op types are part of the edge and need no facts of their own)
  ``n_<A>(N)``                node N has a type in set A (only for ops no edge touches)
  ``tin(N, Port, T)``         N reads tensor T on Port (only tensors read by two or more
                              nodes of types a composite shares an input between)
  ``cin(N, Port, K)``         N reads, on Port, a scalar constant equal to constant K
A type set is named by its type when it has one (``MatMul``), else ``s<k>`` (listed in
the program header). Each composite form is one derived predicate ``c_<form>(nodes...)``
defined once; each rule is one head ``m_<k>(Combo, V1..Vn)`` with one clause per
concrete alternative (``match.ops``, each branch, each repeat length, each composite
form, single ONNX op or decomposed), padded with ``'-'``. Body literals are ordered most
selective first (fact counts when known, else a static rarity rank), because pyDatalog
evaluates them left to right.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ruleengine.errors import UsageError
from ruleengine.ops.classes import OPAQUE_MARKER, commutative_ops
from ruleengine.ops.composites import CompositeForm, const_rtol
from ruleengine.ops.model import OpAlias
from ruleengine.rules.model import MatchAlternative, Rule, RuleSet

# slot resolution and the clause budget are the rules' (``check`` reads them too)
from ruleengine.rules.slots import MAX_CLAUSES_PER_RULE, SlotSpec, clause_count, resolve_type

# Static rarity rank (lower = usually rarer in real graphs), used to order body literals
# when no fact counts are known (explain-rule) and to break ties.
_RARITY = (
    "Erf Tanh Sigmoid Reciprocal Sqrt Exp ReduceMax ReduceSum Softmax LayerNormalization "
    "BatchNormalization Conv Gemm Relu Pow ReduceMean Sub MatMul Div Cast Transpose Add Mul "
    "Reshape"
).split()

PAD = "-"  # head padding for clauses with fewer node variables than the head


def rarity(types: frozenset[str]) -> int:
    return max((_RARITY.index(t) if t in _RARITY else len(_RARITY) // 2) for t in types)


# ---------------------------------------------------------------- concrete patterns


@dataclass(frozen=True)
class Slot:
    """One bound position of a concrete pattern: pattern op ``op``, repeat copy ``copy``."""

    op: int
    copy: int
    types: frozenset[str] = frozenset()  # single node of one of these types
    form: CompositeForm | None = None  # or a composite form

    # Names computed once per slot: a slot is shared by every clause of a rule that
    # places it (``concretize``), 11,000 clauses for the bundled library.
    @cached_property
    def var(self) -> str:
        return f"N{self.op}_{self.copy}"

    @cached_property
    def _node_vars(self) -> tuple[str, ...]:
        if self.form is None:
            return (self.var,)
        return tuple(f"{self.var}_{n.id}" for n in self.form.nodes)

    def node_vars(self) -> tuple[str, ...]:
        return self._node_vars

    @cached_property
    def out_var(self) -> str:
        return self.var if self.form is None else f"{self.var}_{self.form.output.id}"

    @cached_property
    def entry_var(self) -> str:
        return self.var if self.form is None else f"{self.var}_{self.form.entry.id}"

    @cached_property
    def out_types(self) -> frozenset[str]:
        return self.types if self.form is None else frozenset({self.form.output.op})

    @cached_property
    def entry_types(self) -> frozenset[str]:
        return self.types if self.form is None else frozenset({self.form.entry.op})


@dataclass(frozen=True)
class Link:
    """Slot ``src``'s output is read by slot ``dst`` (on ``port``; None = any port)."""

    src: int  # index into Concrete.slots
    dst: int
    port: int | None


@dataclass(frozen=True)
class Concrete:
    """One clause: a fully concrete choice for every pattern op of one alternative."""

    combo: str  # constant naming this clause in the head, e.g. "a0c3"
    alternative: int
    slots: tuple[Slot, ...]
    links: tuple[Link, ...]

    def head_vars(self) -> tuple[str, ...]:
        return tuple(v for s in self.slots for v in s.node_vars())

    # Shapes the matcher reads for every answer row, computed once per clause
    # (cached_property writes the instance __dict__, fine on a frozen dataclass).
    @cached_property
    def slot_sizes(self) -> tuple[int, ...]:
        """How many head variables (nodes) each slot binds."""
        return tuple(len(s.node_vars()) for s in self.slots)

    @cached_property
    def n_head(self) -> int:
        return sum(self.slot_sizes)

    @cached_property
    def single_nodes(self) -> bool:
        """Every slot binds one node (no composite form)."""
        return all(s.form is None for s in self.slots)

    @cached_property
    def first_slot(self) -> Mapping[int, int]:
        """Pattern op -> its first slot."""
        return {op: idx[0] for op, idx in self.slots_by_op.items()}

    @cached_property
    def last_slot(self) -> Mapping[int, int]:
        """Pattern op -> its last slot (whose output the next op reads); an absent optional
        op (repeat.min 0) -> the last slot of the op before it, which it stands for."""
        out = {op: idx[-1] for op, idx in self.slots_by_op.items()}
        for op in range(max(out, default=-1) + 1):
            if op not in out and op - 1 in out:
                out[op] = out[op - 1]
        return out

    @cached_property
    def slots_by_op(self) -> Mapping[int, tuple[int, ...]]:
        """Pattern op -> indices of its slots (a repeated op has several), in order."""
        out: dict[int, list[int]] = {}
        for i, slot in enumerate(self.slots):
            out.setdefault(slot.op, []).append(i)
        return {op: tuple(v) for op, v in out.items()}


def _is_commutative(types: frozenset[str]) -> bool:
    comm = commutative_ops()
    return bool(types) and all(t in comm for t in types)


def check_budget(rule: Rule, aliases: Mapping[str, OpAlias]) -> None:
    """Refuse a rule whose clauses exceed the budget (AF546, located), before any work."""
    from ruleengine.diagnostics.codes import make

    n = clause_count(rule, aliases)
    if n > MAX_CLAUSES_PER_RULE:
        message = (
            f"rule {rule.name} expands to {n:,} Datalog clauses (budget "
            f"{MAX_CLAUSES_PER_RULE}): repeats, branches and op classes multiply"
        )
        raise UsageError(
            message,
            (
                make(
                    "match-budget-exceeded",
                    message,
                    rule.location,
                    hint="lower repeat.max, use fewer op classes or composites in a row, or "
                    "split the rule (autofusion check reports it as AF330)",
                ),
            ),
        )


def concretize(rule: Rule, aliases: Mapping[str, OpAlias]) -> tuple[Concrete, ...]:
    """Every concrete clause of a rule: alternatives x repeat lengths x single/composite."""
    check_budget(rule, aliases)
    out: list[Concrete] = []
    counter = 0
    made: dict[Slot, Slot] = {}  # one object per distinct slot, shared by the clauses
    for alt_idx, alt in enumerate(rule.alternatives):
        specs = [resolve_type(op.type, aliases) for op in alt.ops]
        plan = _op_links(alt)
        for choice in itertools.product(*_choices(alt, specs)):
            slots, first, last, links, copies = _place_slots(alt, choice, made)
            _link_ops(plan, slots, first, last, copies, links)
            out.append(Concrete(f"a{alt_idx}c{counter}", alt_idx, tuple(slots), tuple(links)))
            counter += 1
    return tuple(out)


def _choices(alt: MatchAlternative, specs: Sequence[SlotSpec]) -> list[list[tuple[int, tuple]]]:
    """Per op, its choices: (repeat length, the kind of each copy)."""
    choices_per_op: list[list[tuple[int, tuple]]] = []
    for op, spec in zip(alt.ops, specs, strict=True):
        kinds: list = [("single", spec.types)] if spec.types else []
        kinds += [("form", f) for f in spec.forms]
        lo, hi = max(op.repeat_min, 0), max(op.repeat_max, op.repeat_min, 1)
        # an optional op (repeat.min 0) may be absent: one choice with no slot
        per_len = [(0, ())] if lo == 0 else []
        for length in range(max(lo, 1), hi + 1):
            # a repeated op binds the same kind in every copy (all single nodes, or all
            # the same composite form): mixing would multiply clauses exponentially
            for kind in kinds:
                per_len.append((length, (kind,) * length))
        choices_per_op.append(per_len)
    return choices_per_op


def _place_slots(
    alt: MatchAlternative, choice: Sequence[tuple[int, tuple]], made: dict[Slot, Slot]
) -> tuple[list[Slot], dict[int, int], dict[int, int], list[Link], dict[int, list[int]]]:
    """The slots of one choice, with each op's first and last slot, the links between
    the copies of a repeated op, and each op's copies; a slot placed before is taken
    from ``made``."""
    slots: list[Slot] = []
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    links: list[Link] = []
    copies: dict[int, list[int]] = {}
    for op_idx, (_length, kinds) in enumerate(choice):
        if not kinds:
            # an absent optional op stands for the op before it: the next op and
            # any from_op naming it read that op's output (the linter, AF212,
            # allows min 0 only on an op chained to the op before it)
            if op_idx - 1 in last:
                last[op_idx] = last[op_idx - 1]
            continue
        fan_out = alt.ops[op_idx].fan_out
        for copy, (kind, val) in enumerate(kinds):
            slot = (
                Slot(op_idx, copy, types=val) if kind == "single" else Slot(op_idx, copy, form=val)
            )
            slot = made.setdefault(slot, slot)
            if copy == 0:
                first[op_idx] = len(slots)
            elif not fan_out:
                links.append(Link(len(slots) - 1, len(slots), None))
            copies.setdefault(op_idx, []).append(len(slots))
            # a fan-out op's copies are siblings: later ops read the first copy
            if copy == 0 or not fan_out:
                last[op_idx] = len(slots)
            slots.append(slot)
    return slots, first, last, links, copies


# Per op of an alternative, what its links depend on whatever the choice: whether it
# fans out, chains to the op before, and its ``from_op`` reads as (op, port, whether
# another input reads the same output of the same op).
_OpLinks = tuple[bool, bool, tuple[tuple[int, int, bool], ...] | None]


def _op_links(alt: MatchAlternative) -> tuple[_OpLinks, ...]:
    out = []
    for op_idx, op in enumerate(alt.ops):
        sources = None
        if op.input_sources is not None:
            reads = Counter(
                (s.from_op, s.output_idx) for s in op.input_sources if s.from_op is not None
            )
            sources = tuple(
                (src.from_op, src.port, reads[(src.from_op, src.output_idx)] > 1)
                for src in op.input_sources
                if src.from_op is not None
            )
        out.append((op.fan_out, alt.chains_to_previous(op_idx), sources))
    return tuple(out)


def _link_ops(
    plan: Sequence[_OpLinks],
    slots: Sequence[Slot],
    first: Mapping[int, int],
    last: Mapping[int, int],
    copies: Mapping[int, list[int]],
    links: list[Link],
) -> None:
    """Add the links between ops (``plan``: ``_op_links`` of the alternative): a chain to
    the op before, or each ``from_op``."""
    for op_idx, (fan_out, chained, sources) in enumerate(plan):
        if op_idx not in first:  # an absent optional op: no slot, no links
            continue
        # a fan-out op: every copy gets the links of the first (siblings)
        dsts = copies[op_idx] if fan_out else [first[op_idx]]
        for dst in dsts:
            if chained:
                links.append(Link(last[op_idx - 1], dst, None))
                continue
            if sources is None:  # op 0: a root
                continue
            # two inputs reading one output of one op (Add(a, a)) keep their ports: with a
            # free port each, both literals would be the same edge, met by one read
            slot = slots[dst]
            for from_op, port, read_twice in sources:
                if from_op not in last:
                    continue
                free = slot.form is not None or _is_commutative(slot.types)
                if read_twice and slot.form is None:
                    free = False
                links.append(Link(last[from_op], dst, None if free else port))


# ---------------------------------------------------------------- the program


@dataclass
class Program:
    """A compiled rule set: fact requirements, clauses, and how to read answers back."""

    type_sets: dict[frozenset[str], str] = field(default_factory=dict)
    edge_preds: dict[str, tuple[frozenset[str], frozenset[str]]] = field(default_factory=dict)
    node_preds: dict[str, frozenset[str]] = field(default_factory=dict)
    tin_types: set[str] = field(default_factory=set)
    cin_types: set[str] = field(default_factory=set)
    const_keys: dict[str, float] = field(default_factory=dict)  # key -> value
    composite_clauses: dict[str, tuple[str, list[tuple[str, tuple]]]] = field(default_factory=dict)
    # rule name -> (head predicate, arity, {combo: Concrete})
    rules: dict[str, tuple[str, int, dict[str, Concrete]]] = field(default_factory=dict)
    rule_clauses: dict[str, list[tuple[str, list[tuple[str, tuple]]]]] = field(default_factory=dict)
    # composite -> (core head vars, core literals) over the local V_/T_ naming, or None
    cores: dict[str, tuple[tuple[str, ...], list[tuple[str, tuple]]] | None] = field(
        default_factory=dict
    )
    # Tabled forms (``compile_rule_set(..., tabled_forms=True)``, the matcher's program):
    # form name -> (head vars, body literals) of ``f_<form>``, the whole form (its
    # composite's core call plus the rest), called first with every argument free.
    tabled_forms: bool = False
    form_calls: dict[str, tuple[tuple[str, ...], list[tuple[str, tuple]]]] = field(
        default_factory=dict
    )
    # a composite slot's literals by (slot, slot index, core called before): the same in
    # every clause placing it there once its form is registered (``_slot_literals``)
    slot_literals: dict[tuple[Slot, int, bool], list[tuple[str, tuple]]] = field(
        default_factory=dict
    )
    # ``program_text``'s clause orders, by clause and rank of its literals' costs
    # (``_order_clause``), and pairs of slots that may bind one node (``overlapping_slots``),
    # by rule and head: found once for the program, whatever graph it is matched on
    clause_orders: dict[tuple, list[tuple[str, tuple]]] = field(default_factory=dict)
    slot_pairs: dict[tuple[str, str], list[tuple[str, str, str]]] = field(default_factory=dict)

    # ------------------------------------------------------------ naming
    def set_name(self, types: frozenset[str]) -> str:
        if types not in self.type_sets:
            if len(types) == 1 and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", next(iter(types))):
                name = next(iter(types))
            else:
                named = [n for n in self.type_sets.values() if n.startswith("s")]
                name = f"s{sum(1 for n in named if n[1:].isdigit()) + 1}"
            self.type_sets[types] = name
        return self.type_sets[types]

    def edge_pred(self, src: frozenset[str], dst: frozenset[str]) -> str:
        name = f"e_{self.set_name(src)}__{self.set_name(dst)}"
        self.edge_preds[name] = (src, dst)
        return name

    def node_pred(self, types: frozenset[str]) -> str:
        name = f"n_{self.set_name(types)}"
        self.node_preds[name] = types
        return name

    def const_key(self, value: float) -> str:
        rtol = const_rtol()
        for key, v in self.const_keys.items():
            if abs(v - value) <= rtol * max(abs(v), abs(value)):
                return key
        key = f"k{len(self.const_keys) + 1}"
        self.const_keys[key] = value
        return key


Literal = tuple[str, tuple]  # (predicate, args); args are variable names or constants


def _form_literals(
    prog: Program, form: CompositeForm, var: dict[str, str], prefix: str = ""
) -> list[Literal]:
    """Body literals of a composite form, over node variables ``var[node id]``."""
    lits: list[Literal] = []
    comm = commutative_ops()
    counts: dict[str, int] = {}
    for n in form.nodes:
        for r in n.inputs:
            if r.kind == "external":
                counts[r.name] = counts.get(r.name, 0) + 1
    pcount = itertools.count()
    for n in form.nodes:
        free = n.op in comm
        for port, r in enumerate(n.inputs):
            p: object = f"P{prefix}{next(pcount)}" if free else port
            if r.kind == "node":
                src = form.node(r.name)
                pred = prog.edge_pred(frozenset({src.op}), frozenset({n.op}))
                lits.append((pred, (var[src.id], var[n.id], p)))
            elif r.kind == "external" and counts[r.name] > 1:
                prog.tin_types.add(n.op)
                lits.append(("tin", (var[n.id], p, f"T{prefix}_{r.name}")))
            elif r.kind == "const":
                prog.cin_types.add(n.op)
                lits.append(("cin", (var[n.id], p, f"'{prog.const_key(r.value)}'")))
    return lits


def _is_var(a: object) -> bool:
    return isinstance(a, str) and a[:1].isupper()


def order_literals(lits: list[Literal], counts: Mapping[str, int] | None) -> list[Literal]:
    """Most selective first, then always a literal sharing a bound variable (no cross
    products); filters (tin/cin) as soon as their node is bound."""
    return order_literals_after(lits, counts, set())


def order_literals_after(
    lits: list[Literal], counts: Mapping[str, int] | None, bound: set[str]
) -> list[Literal]:
    """``order_literals`` when the variables in ``bound`` are already bound."""

    def cost(lit: Literal) -> tuple:
        return _literal_cost(lit[0], counts)

    remaining = list(lits)
    ordered: list[Literal] = []
    bound = set(bound)
    while remaining:
        filters = [
            lit
            for lit in remaining
            if lit[0] in _FILTERS and _is_var(lit[1][0]) and lit[1][0] in bound
        ]
        if filters:
            # a filter whose tensor var is already bound joins most tightly
            filters.sort(key=lambda lit: (not any(a in bound for a in lit[1][1:]), lit[0]))
            pick = filters[0]
        else:
            connected = [
                lit
                for lit in remaining
                if lit[0] not in _FILTERS and any(a in bound for a in lit[1] if _is_var(a))
            ]
            pool = connected or [lit for lit in remaining if lit[0] not in _FILTERS]
            pool = pool or remaining
            pick = min(pool, key=cost)
        remaining.remove(pick)
        ordered.append(pick)
        bound.update(a for a in pick[1] if _is_var(a))
    return ordered


def _literal_cost(pred: str, counts: Mapping[str, int] | None) -> tuple[int, str]:
    """A literal's place in ``order_literals``: its fact count, else a static rank (edges
    by the rarer of their two type sets' names)."""
    if counts is not None and pred in counts:
        return (counts[pred], pred)
    return (10**6 + _static_rank(pred), pred)


_STATIC_CACHE: dict[str, int] = {}
# literals that only test nodes already bound: shared inputs, constants, and the memo's
# representatives (``REP``)
REP = "rep"
_FILTERS = ("tin", "cin", REP)


def _static_rank(pred: str) -> int:
    if pred not in _STATIC_CACHE:
        parts = re.split(r"__|_", pred)
        ranks = [_RARITY.index(p) for p in parts if p in _RARITY]
        _STATIC_CACHE[pred] = min(ranks) if ranks else len(_RARITY)
    return _STATIC_CACHE[pred]


def _form_pred(form: CompositeForm) -> str:
    return f"c_{form.name}"


def compile_rule_set(
    rule_set: RuleSet | Sequence[Rule],
    aliases: Mapping[str, OpAlias],
    *,
    tabled_forms: bool = False,
) -> Program:
    """Lower every enabled rule into clauses (order of body literals decided later).

    ``tabled_forms``: the first composite of a clause calls a predicate ``f_<form>``
    holding the whole form, instead of the core call plus the form's other literals
    inlined. Called first with every argument free, pyDatalog computes each form once
    per query and tables it, so the clauses of several alternatives (and, in one query,
    several rules) that bind the same form share that work; the answers are the same.
    The matcher uses it; ``explain-rule --datalog`` shows the plain program.
    """
    prog = Program(tabled_forms=tabled_forms)
    rules = rule_set.rules if isinstance(rule_set, RuleSet) else tuple(rule_set)
    for k, rule in enumerate(rules):
        concretes = concretize(rule, aliases)
        arity = max((len(c.head_vars()) for c in concretes), default=0)
        head = f"m_{k}"
        clauses = []
        for conc in concretes:
            lits: list[Literal] = []
            linked: set[int] = set()
            core_used = False
            for link in conc.links:
                src, dst = conc.slots[link.src], conc.slots[link.dst]
                pred = prog.edge_pred(src.out_types, dst.entry_types)
                port = link.port if link.port is not None else f"Q{link.src}_{link.dst}"
                lits.append((pred, (src.out_var, dst.entry_var, port)))
                linked.update((link.src, link.dst))
            for i, slot in enumerate(conc.slots):
                if slot.form is not None:
                    lits.extend(_kept_slot_literals(prog, slot, i, core_used))
                    core_used = core_used or prog.cores.get(slot.form.composite) is not None
                elif i not in linked:
                    lits.append((prog.node_pred(slot.types), (slot.var,)))
            head_args = (f"'{conc.combo}'", *conc.head_vars())
            head_args += (f"'{PAD}'",) * (arity + 1 - len(head_args))
            clauses.append((f"{head}({', '.join(head_args)})", lits))
        prog.rules[rule.name] = (head, arity, {c.combo: c for c in concretes})
        prog.rule_clauses[rule.name] = clauses
    return prog


def _core(prog: Program, composite: str) -> tuple[tuple[str, ...], list[Literal]] | None:
    """Literals every form of a composite shares (e.g. RMSNorm's Pow -> ReduceMean -> Add
    -> Sqrt), as one derived predicate ``k_<composite>``; None when there is no such core."""
    if composite in prog.cores:
        return prog.cores[composite]
    from ruleengine.ops.composites import composites

    forms = composites()[composite].forms
    core = None
    if len(forms) > 1:
        per_form = [_form_literals(prog, f, {n.id: f"V_{n.id}" for n in f.nodes}) for f in forms]
        common = set(per_form[0]).intersection(*map(set, per_form[1:]))
        lits = [lit for lit in per_form[0] if lit in common]
        if sum(1 for lit in lits if lit[0] not in ("tin", "cin")) >= 2:
            head = tuple(
                dict.fromkeys(
                    a for lit in lits for a in lit[1] if _is_var(a) and a[:2] in ("V_", "T_")
                )
            )
            core = (head, lits)
    prog.cores[composite] = core
    return core


def _kept_slot_literals(prog: Program, slot: Slot, i: int, core_used: bool) -> list[Literal]:
    """``_slot_literals``, once per program: its first call registers the form (names,
    clauses), after which its answer for the same arguments never changes."""
    key = (slot, i, core_used)
    got = prog.slot_literals.get(key)
    if got is None:
        got = prog.slot_literals[key] = _slot_literals(prog, slot, i, core_used)
    return got


def _slot_literals(prog: Program, slot: Slot, i: int, core_used: bool) -> list[Literal]:
    """A composite slot's literals, renamed into the rule clause.

    Composite literals are inlined: pyDatalog evaluates a derived predicate called with a
    bound argument top-down from its first literal, so a chain bound into a composite
    predicate rescans it per call (quadratic). Only the composite's core, called first
    with every argument free (so it is computed once and tabled, shared by every form
    and every rule), stays a predicate call; one per clause.
    """
    form = slot.form
    assert form is not None
    node_var = dict(zip((n.id for n in form.nodes), slot.node_vars(), strict=True))
    local = {n.id: f"V_{n.id}" for n in form.nodes}
    if form.name not in prog.composite_clauses:
        prog.composite_clauses[form.name] = (_form_pred(form), _form_literals(prog, form, local))
    lits = _form_literals(prog, form, local)

    def rename(a: object) -> object:
        if not isinstance(a, str) or not _is_var(a):
            return a
        if a.startswith("V_"):
            return node_var[a[2:]]
        if a.startswith("T_"):
            return f"T{i}_{a[2:]}"
        return f"P{i}_{a[1:]}"

    out: list[Literal] = []
    core = _core(prog, form.composite)
    if core is not None and not core_used and prog.tabled_forms:
        head, core_lits = core
        if form.name not in prog.form_calls:
            rest = [lit for lit in lits if lit not in core_lits]
            f_head = tuple(
                dict.fromkeys(
                    [f"V_{n.id}" for n in form.nodes]
                    + [a for _, args in rest for a in args if _is_var(a) and a[:2] == "T_"]
                    + [a for a in head if a[:2] == "T_"]
                )
            )
            prog.form_calls[form.name] = (f_head, [(f"k_{form.composite}", head), *rest])
        f_head = prog.form_calls[form.name][0]
        return [(f"f_{form.name}", tuple(rename(a) for a in f_head))]
    if core is not None and not core_used:
        head, core_lits = core
        out.append((f"k_{form.composite}", tuple(rename(a) for a in head)))
        lits = [lit for lit in lits if lit not in core_lits]
    out.extend((pred, tuple(rename(a) for a in args)) for pred, args in lits)
    return out


def _fmt(lit: Literal) -> str:
    pred, args = lit
    if pred in ("!=", "<"):
        return f"({args[0]} {pred} {args[1]})"
    return f"{pred}({', '.join(str(a) for a in args)})"


def composite_head(prog: Program, form_name: str) -> str:
    pred, _ = prog.composite_clauses[form_name]
    from ruleengine.ops.composites import composites

    for comp in composites().values():
        for f in comp.forms:
            if f.name == form_name:
                return f"{pred}({', '.join(f'V_{n.id}' for n in f.nodes)})"
    raise KeyError(form_name)


def program_text(
    prog: Program,
    counts: Mapping[str, int] | None = None,
    *,
    alive: set[str] | None = None,
    comments: bool = False,
    defined_out: set[str] | None = None,
    chains: bool = False,
    distinct: bool = False,
    anchored: Mapping[str, Mapping[str, int]] | None = None,
) -> str:
    """The Datalog program as text. ``alive``: predicates that have facts (clauses using
    any other fact predicate are left out, since they cannot match). ``chains``: a clause
    that is nothing but a chain of one edge predicate (a repeated op, e.g. ``repeat: {min:
    2, max: 8}``) calls a shared chain predicate instead (see ``_chain_clauses``).
    ``distinct``: two single-node slots whose types overlap get ``(A != B)`` as soon as
    both are bound (the matcher drops every row binding a node twice anyway).
    ``anchored``: per rule, per clause combo, the head position of its anchor; the clause
    then also asks ``rep(anchor)`` (the memo's window: only rows anchored at a
    representative are read, the others were computed for nothing)."""
    fact_preds = set(prog.edge_preds) | set(prog.node_preds) | {"tin", "cin"}
    live = None if alive is None else (fact_preds, alive)
    lines: list[str] = _header_comments(prog) if comments else []
    defined: set[str] = set()
    lines += _derived_lines(prog, counts, live, defined, comments)
    chain_len: dict[str, int] = {}  # edge predicate -> longest chain a clause calls
    for rule_name, clauses in prog.rule_clauses.items():
        if comments:
            lines.append(f"# rule {rule_name}")
        for head, lits in clauses:
            if not _usable(lits, defined, live):
                continue
            chain = _pure_chain(lits) if chains else None
            if chain is not None:
                pred, nodes = chain
                chain_len[pred] = max(chain_len.get(pred, 0), len(nodes))
                body = f"{_chain_pred(pred, len(nodes))}({', '.join(nodes)})"
            else:
                rep = _rep_literal(head, (anchored or {}).get(rule_name))
                ordered = _order_clause(lits + rep, counts, prog.clause_orders)
                if distinct:
                    ordered = _with_distinct(ordered, _slot_pairs(prog, rule_name, head))
                body = " & ".join(_fmt(lit) for lit in ordered)
            lines.append(f"{head} <= {body}")
            if defined_out is not None:
                defined_out.add(head.split("(", 1)[0])
    for pred in sorted(chain_len):
        lines.extend(_chain_clauses(pred, chain_len[pred]))
    return "\n".join(lines) + "\n"


def _rep_literal(head: str, anchors: Mapping[str, int] | None) -> list[Literal]:
    """``[rep(anchor variable)]`` for a clause head ``m_k('combo', V0, ...)`` whose combo
    has an anchor in ``anchors``; else nothing."""
    if not anchors:
        return []
    args = head[head.index("(") + 1 : -1].split(", ")
    at = anchors.get(args[0].strip("'"))
    if at is None or not _is_var(args[1 + at]):
        return []
    return [(REP, (args[1 + at],))]


def _usable(lits: list[Literal], defined: set[str], live: tuple[set[str], set[str]] | None) -> bool:
    """Whether a clause can match: every fact predicate it reads has facts (``live``:
    the fact predicates and those alive; None: all usable) and every derived predicate
    it calls is defined."""
    if live is None:
        return True
    fact_preds, alive = live
    for pred, _ in lits:
        if pred in fact_preds and pred not in alive:
            return False
        if pred.startswith(("c_", "k_", "f_")) and pred not in defined:
            return False
    return True


def _header_comments(prog: Program) -> list[str]:
    """The program's type sets and constants, as comments."""
    lines = ["# type sets"]
    for types, name in sorted(prog.type_sets.items(), key=lambda kv: kv[1]):
        if name.startswith("s") and name[1:].isdigit():
            lines.append(f"#   {name} = {{{', '.join(sorted(types))}}}")
    if prog.const_keys:
        lines.append("# constants")
        for key, v in prog.const_keys.items():
            lines.append(f"#   {key} = {v!r}")
    return lines


def _derived_lines(
    prog: Program,
    counts: Mapping[str, int] | None,
    live: tuple[set[str], set[str]] | None,
    defined: set[str],
    comments: bool,
) -> list[str]:
    """The composite cores (``k_``) and tabled forms (``f_``) that can match, each added
    to ``defined``; with ``comments``, the composite forms as comments."""
    lines: list[str] = []
    if comments and any(c is not None for c in prog.cores.values()):
        lines.append("# composite cores (shared by every form; computed once, tabled)")
    for comp in sorted(prog.cores):
        core = prog.cores[comp]
        if core is None or not _usable(core[1], defined, live):
            continue
        defined.add(f"k_{comp}")
        body = " & ".join(_fmt(lit) for lit in order_literals(core[1], counts))
        lines.append(f"k_{comp}({', '.join(core[0])}) <= {body}")
    for name in sorted(prog.form_calls):
        f_head, f_lits = prog.form_calls[name]
        if not _usable(f_lits, defined, live):
            continue
        defined.add(f"f_{name}")
        body = " & ".join(_fmt(lit) for lit in _order_clause(f_lits, counts))
        lines.append(f"f_{name}({', '.join(f_head)}) <= {body}")
    if comments:
        lines.append("# composite forms (each defined once, from ops/composites.yaml; their")
        lines.append("# literals are inlined into the rule clauses that use them)")
        for name in sorted(prog.composite_clauses):
            _pred, lits = prog.composite_clauses[name]
            if not _usable(lits, defined, live):
                continue
            body = " & ".join(_fmt(lit) for lit in order_literals(lits, counts))
            lines.append(f"# {composite_head(prog, name)} <= {body}")
    return lines


def overlapping_slots(prog: Program, rule_name: str, head: str) -> list[tuple[str, str, str]]:
    """Pairs of single-node slot variables of the clause ``head`` that could bind the
    same node: their type sets overlap and no path of links joins them, with the test
    that keeps them apart: ``!=``, or ``<`` for two copies of one fan-out op (siblings
    are interchangeable, so only one order of them is an answer)."""
    combo = head.split("'", 2)[1]
    conc = prog.rules[rule_name][2].get(combo)
    if conc is None:
        return []
    # slots joined by a path of links can never be one node (the graph is acyclic)
    succ: dict[int, set[int]] = {}
    for link in conc.links:
        succ.setdefault(link.src, set()).add(link.dst)
    reach: dict[int, set[int]] = {}
    for i in range(len(conc.slots)):
        seen: set[int] = set()
        stack = list(succ.get(i, ()))
        while stack:
            j = stack.pop()
            if j not in seen:
                seen.add(j)
                stack.extend(succ.get(j, ()))
        reach[i] = seen
    single = [i for i, s in enumerate(conc.slots) if s.form is None]
    slots = conc.slots
    return [
        (slots[i].var, slots[j].var, "<" if slots[i].op == slots[j].op else "!=")
        for k, i in enumerate(single)
        for j in single[k + 1 :]
        if slots[i].types & slots[j].types and j not in reach[i] and i not in reach[j]
    ]


def _slot_pairs(prog: Program, rule_name: str, head: str) -> list[tuple[str, str, str]]:
    """``overlapping_slots``, found once per clause of the program."""
    got = prog.slot_pairs.get((rule_name, head))
    if got is None:
        got = prog.slot_pairs[rule_name, head] = overlapping_slots(prog, rule_name, head)
    return got


def _with_distinct(lits: list[Literal], pairs: list[tuple[str, str, str]]) -> list[Literal]:
    """``lits`` with ``(A != B)`` (or ``(A < B)``) right after the literal that binds the
    later of A, B."""
    if not pairs:
        return lits
    out: list[Literal] = []
    bound: set[object] = set()
    pending = list(pairs)
    for lit in lits:
        out.append(lit)
        bound.update(lit[1])
        for pair in [p for p in pending if p[0] in bound and p[1] in bound]:
            out.append((pair[2], pair[:2]))
            pending.remove(pair)
    out.extend((p[2], p[:2]) for p in pending)
    return out


def _chain_pred(pred: str, n_nodes: int) -> str:
    return f"r{n_nodes}_{pred}"


def _chain_clauses(pred: str, longest: int) -> list[str]:
    """``r<k>_<pred>(A0..A<k-1>)``: paths of k nodes along ``pred``, each length built
    from the one before. A repeat rule compiles to one clause per length; written out,
    each clause re-walked every shorter path from scratch (the 2..8 elementwise chain
    cost 7 walks). Called with every argument free, each length is computed once and
    tabled, and the next length extends its answers by one edge: the same answers."""
    out = [f"{_chain_pred(pred, 2)}(A0, A1) <= {pred}(A0, A1, P1)"]
    for k in range(3, longest + 1):
        prev = ", ".join(f"A{i}" for i in range(k - 1))
        out.append(
            f"{_chain_pred(pred, k)}({prev}, A{k - 1}) <= {_chain_pred(pred, k - 1)}({prev}) & "
            f"{pred}(A{k - 2}, A{k - 1}, P{k - 1})"
        )
    return out


def _pure_chain(lits: list[Literal]) -> tuple[str, tuple[str, ...]] | None:
    """(edge predicate, node variables in path order) when ``lits`` are two or more
    literals of one edge predicate linking distinct node variables into one path, each
    on a port variable of its own; else None."""
    if len(lits) < 2:
        return None
    pred = lits[0][0]
    if not pred.startswith("e_") or any(lit[0] != pred or len(lit[1]) != 3 for lit in lits):
        return None
    nxt: dict[object, object] = {}
    ports: set[object] = set()
    for _, (src, dst, port) in lits:
        if not (_is_var(src) and _is_var(dst) and _is_var(port)) or src in nxt or port in ports:
            return None
        nxt[src] = dst
        ports.add(port)
    starts = set(nxt) - set(nxt.values())
    if len(starts) != 1:
        return None
    path = [next(iter(starts))]
    while path[-1] in nxt:
        path.append(nxt[path[-1]])
        if len(path) > len(lits) + 1:
            return None
    nodes = tuple(str(v) for v in path)
    if len(nodes) != len(lits) + 1 or len(set(nodes)) != len(nodes) or ports & set(nodes):
        return None
    return pred, nodes


def fact_schema(prog: Program) -> str:
    """The fact predicates a program reads, one per line (for explain-rule --datalog)."""
    lines = ["# facts"]
    for name, (src, dst) in sorted(prog.edge_preds.items()):
        lines.append(
            f"#   {name}(Producer, Consumer, Port)   {_setdoc(prog, src)} -> {_setdoc(prog, dst)}"
        )
    for name, types in sorted(prog.node_preds.items()):
        lines.append(f"#   {name}(Node)   {_setdoc(prog, types)}")
    if prog.tin_types:
        lines.append(
            f"#   tin(Node, Port, Tensor)   shared inputs of {', '.join(sorted(prog.tin_types))}"
        )
    if prog.cin_types:
        lines.append(
            f"#   cin(Node, Port, Const)   scalar constant inputs of "
            f"{', '.join(sorted(prog.cin_types))}"
        )
    return "\n".join(lines) + "\n"


# At most this many clause orders kept per program (``_order_clause``): a clause has
# as many as the rankings of its counts met, and a long-lived process meets many graphs.
MAX_CLAUSE_ORDERS = 50_000


def _order_clause(
    lits: list[Literal], counts: Mapping[str, int] | None, orders: dict | None = None
) -> list[Literal]:
    """A rule clause: a composite core call first (all arguments free), then the rest.
    ``orders``: the orders found before, by clause and by the rank of its literals'
    costs (the order compares costs and nothing else of them): the same clause on a
    graph whose counts rank its predicates alike (another model, the same model matched
    again with other rules) is ordered once."""
    if orders is None:
        return _ordered_clause(lits, counts)
    costs = [_literal_cost(pred, counts) for pred, _ in lits]
    rank = {c: i for i, c in enumerate(sorted(set(costs)))}
    key = (tuple(lits), tuple(rank[c] for c in costs))
    got = orders.get(key)
    if got is None:
        if len(orders) >= MAX_CLAUSE_ORDERS:  # a process matching graph after graph
            orders.clear()
        got = orders[key] = _ordered_clause(lits, counts)
    return got


def _ordered_clause(lits: list[Literal], counts: Mapping[str, int] | None) -> list[Literal]:
    core = next((lit for lit in lits if lit[0].startswith(("k_", "f_"))), None)
    if core is None:
        return order_literals(lits, counts)
    rest = [lit for lit in lits if lit is not core]
    return [core, *order_literals_after(rest, counts, {a for a in core[1] if _is_var(a)})]


def _setdoc(prog: Program, types: frozenset[str]) -> str:
    name = prog.set_name(types)
    shown = sorted(t for t in types if t != OPAQUE_MARKER)
    if name in shown and len(shown) == 1:
        return name
    if len(shown) > 6:
        return f"{name} ({len(shown)} types)"
    return f"{name} = {{{', '.join(shown)}}}"
