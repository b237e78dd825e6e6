"""find_candidates: compile rules, build facts, run Datalog, check bindings in Python.

Datalog finds the structure (op types, which op reads which, composite shapes); Python
then checks what Datalog expresses badly: output indices, input source kinds, input
counts, params (by meaning, with ONNX defaults and alias mappings), shapes, and the
subgraph conditions. A binding failing a check becomes a ``NearMiss`` with a code.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Mapping

from ruleengine.graph.model import Graph, Node
from ruleengine.match import backend
from ruleengine.match.compile import PAD, Concrete, Program, compile_rule_set, program_text
from ruleengine.match.facts import build_facts
from ruleengine.match.model import Candidate, MatchResult, NearMiss
from ruleengine.match.params import Binding, ParamFailure, check_params
from ruleengine.ops.classes import commutative_ops
from ruleengine.ops.model import OpAlias
from ruleengine.rules.model import OpPattern, Rule, RuleSet
from ruleengine.runtime import paused_gc


def default_aliases() -> Mapping[str, OpAlias]:
    try:
        from ruleengine.ops.aliases import alias_table
    except ImportError:  # pragma: no cover - the alias table is part of the package
        return {}
    return alias_table()


class _Reject(Exception):
    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def find_candidates(
    graph: Graph,
    rule_set: RuleSet,
    *,
    aliases: Mapping[str, OpAlias] | None = None,
    stats: dict[str, float] | None = None,
    memo: bool | None = None,
    jobs: int = 1,
) -> MatchResult:
    """Every binding of every enabled rule to ``graph`` (overlaps included), plus near misses.

    ``stats``, when given, receives per-step seconds (compile, facts, datalog, check) and
    the fact count, for the benchmark. ``memo``: match repeated structures once
    (``match.memo``; the same result); None: when the graph is large enough to pay.
    ``jobs`` > 1: the Datalog queries are shared among that many processes (the same
    result; ``backend``).
    """
    from ruleengine.match import memo as memo_mod

    with paused_gc():
        if memo or (memo is None and memo_mod.memo_applies(graph)):
            found = memo_mod.find_memo(
                graph, rule_set, default_aliases() if aliases is None else aliases, stats, jobs
            )
            if found is not None:
                return found
        return _find(graph, rule_set, aliases, stats, jobs)


def _find(
    graph: Graph,
    rule_set: RuleSet,
    aliases: Mapping[str, OpAlias] | None,
    stats: dict[str, float] | None,
    jobs: int = 1,
) -> MatchResult:
    t0 = time.perf_counter()
    aliases = default_aliases() if aliases is None else aliases
    rules = tuple(r for r in rule_set.rules if r.enabled)
    prog = compile_rule_set(rules, aliases, tabled_forms=True)
    t1 = time.perf_counter()
    answers, timings, t2, n_facts = datalog_answers(graph, prog, jobs=jobs)
    t3 = time.perf_counter()
    candidates: dict[tuple, Candidate] = {}
    near: dict[tuple, NearMiss] = {}
    plans: dict[tuple[str, int], tuple] = {}
    for rule in rules:
        head, _arity, combos = prog.rules[rule.name]
        for row in answers.get(head, ()):
            conc = combos[row[0]]
            names = list(row[1 : 1 + conc.n_head])
            if PAD in names:
                continue
            plan_key = (rule.name, conc.alternative)
            plan = plans.get(plan_key)
            if plan is None:
                plan = plans[plan_key] = _op_plan(rule, conc.alternative, aliases)
            # no per-op check to run and no composite: the bindings are not needed
            lean = conc.single_nodes and _nothing_per_op(plan)
            try:
                cand, slot_bindings = _build(graph, rule, conc, names, lean=lean)
            except _Reject:
                continue  # structurally not a match (e.g. a node bound twice)
            if cand.key in candidates:
                continue  # the same subgraph again (e.g. a commutative op's other order)
            try:
                _check(graph, rule, conc, cand, slot_bindings, aliases, plan)
            except _Reject as rej:
                near.setdefault(cand.key, NearMiss(cand, rej.code, rej.reason))
                continue
            candidates.setdefault(cand.key, cand)
    t4 = time.perf_counter()
    if stats is not None:
        stats.update(
            compile_s=t1 - t0,
            facts_s=t2 - t1,
            datalog_s=t3 - t2,
            check_s=t4 - t3,
            facts=float(n_facts),
        )
        head_rule = {h: name for name, (h, _a, _c) in prog.rules.items()}
        stats["by_rule"] = {  # type: ignore[assignment]
            head_rule.get(h, h): t for h, t in timings.items()
        }
    # One candidate per rule and node set: the same nodes bound in another order (three
    # interchangeable Q/K/V MatMuls) or by another alternative is the same fusion group.
    # (Node sets made here, not cached on the records: a record's ``node_set`` costs
    # ~1 KB, and most records never need it.)
    unique: dict[tuple, Candidate] = {}
    for cand in sorted(candidates.values(), key=lambda c: c.key):
        unique.setdefault((cand.rule, frozenset(cand.nodes)), cand)
    # a subgraph the rule matched is no near miss of it; each reason is told once per subgraph
    unique_near: dict[tuple, NearMiss] = {}
    for miss in sorted(near.values(), key=lambda n: n.candidate.key):
        c = miss.candidate
        nodes = frozenset(c.nodes)
        if (c.rule, nodes) not in unique:
            unique_near.setdefault((c.rule, nodes, miss.code), miss)
    return MatchResult(
        candidates=tuple(unique.values()),
        near_misses=tuple(unique_near.values()),
        seconds=t4 - t0,
        facts=n_facts,
    )


_DERIVED_CALL = re.compile(r"\b([kf])_(\w+)\(")


def datalog_answers(
    graph: Graph, prog: Program, only: set[str] | None = None, jobs: int = 1
) -> tuple[dict[str, list[tuple]], dict[str, float], float, int]:
    """The rule heads' answers over ``graph``'s facts (``only``: the memo's window), the
    Datalog seconds per head, the perf_counter time at which the program text was ready
    (facts and text before it, Datalog after: the stage timings split there), and the
    number of facts. ``jobs`` > 1: the rule clauses are asked in that many processes
    (``backend``: the same answers)."""
    facts = build_facts(graph, prog, only)
    counts = Counter(pred for pred, _ in facts)
    heads: set[str] = set()
    text = program_text(
        prog, counts, alive=set(counts), defined_out=heads, chains=True, distinct=True
    )
    ready = time.perf_counter()
    queries = [(h, a) for (h, a, _) in prog.rules.values() if h in heads]
    timings: dict[str, float] = {}
    answers = _ask(facts, text, queries, timings, jobs) if queries else {}
    return answers, timings, ready, len(facts)


def _ask(
    facts: list,
    text: str,
    queries: list[tuple[str, int]],
    timings: dict[str, float],
    jobs: int = 1,
) -> dict[str, list[tuple]]:
    """Run the program; composite cores (``k_``) and tabled forms (``f_``) are computed
    once for all rules instead of once per rule's query.

    Stage 1 loads the cores and asks each once; its answers become facts ``u_<core>``.
    Stage 2 loads the forms (reading those facts) and asks each form some rule clause
    calls; its answers become facts ``t_<form>``. The rule clauses then read the facts.
    Same answers: each core and form is a conjunctive query whose whole answer set the
    facts hold (a form without answers simply has no facts, like a dead edge type).
    """
    cores: list[str] = []
    forms: list[str] = []
    rules: list[str] = []
    arity: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith(("k_", "f_")):
            (cores if line.startswith("k_") else forms).append(line)
            name = line[: line.index("(")]
            arity[name] = line[: line.index(")")].count(",") + 1
        else:
            rules.append(line)
    called = sorted(
        {f"f_{m.group(2)}" for ln in rules for m in _DERIVED_CALL.finditer(ln) if m.group(1) == "f"}
    )
    form_tables = [(f, arity[f], f"t_{f[2:]}") for f in called if f in arity]
    if not form_tables:
        return backend.run(facts, text, queries, timings, jobs)
    used = sorted(
        {
            f"k_{m.group(2)}"
            for ln in (*forms, *rules)
            for m in _DERIVED_CALL.finditer(ln)
            if m.group(1) == "k"
        }
    )
    core_tables = [(k, arity[k], f"u_{k[2:]}") for k in used if k in arity]

    def to_facts(line: str) -> str:
        return _DERIVED_CALL.sub(
            lambda m: f"{'u' if m.group(1) == 'k' else 't'}_{m.group(2)}(", line
        )

    form_text = "\n".join(ln[: ln.index("<=")] + to_facts(ln[ln.index("<=") :]) for ln in forms)
    stages = [("\n".join(cores) + "\n", core_tables), (form_text + "\n", form_tables)]
    program = "\n".join(to_facts(ln) for ln in rules) + "\n"
    return backend.run_staged(facts, stages, program, queries, timings, jobs)


# ---------------------------------------------------------------- building a candidate


def _slot_bindings(graph: Graph, conc: Concrete, names: list[str]) -> list[Binding]:
    out: list[Binding] = []
    pos = 0
    node = graph.node
    for slot, k in zip(conc.slots, conc.slot_sizes, strict=True):
        if k == 1:
            out.append(Binding((node(names[pos]),), slot.form))
        else:
            out.append(Binding(tuple(node(n) for n in names[pos : pos + k]), slot.form))
        pos += k
    return out


def _ordered(nodes: list[Node]) -> tuple[str, ...]:
    return tuple(n.name for n in sorted(nodes, key=lambda n: n.index))


_READERS: dict[int, tuple[Graph, dict[str, frozenset[str] | None]]] = {}
_NOT_A_TENSOR = object()


class _ReaderTable(dict):
    """Tensor -> the names of the nodes reading it (None: a graph output), made on first
    read of each tensor: with the memo only the window's and the representatives'
    tensors are read, not the 10^5 of a deep stack."""

    def __init__(self, graph: Graph) -> None:
        super().__init__()
        self.tensors = graph.tensors
        self.folded = frozenset(graph.compile_time_nodes)

    def __missing__(self, name: str) -> frozenset[str] | None:
        t = self.tensors[name]  # KeyError: not a tensor of the graph
        folded = self.folded
        got = None if t.is_graph_output else frozenset(c for c, _ in t.consumers if c not in folded)
        self[name] = got
        return got

    def get(self, name: str, default: object = None) -> object:  # type: ignore[override]
        try:
            return self[name]
        except KeyError:
            return default


def _readers(graph: Graph) -> _ReaderTable:
    """Tensor -> the names of the nodes reading it; None for a graph output (it always
    leaves the subgraph). Compile-time readers (a Shape of a static tensor) are folded,
    not kernels, so they do not make a tensor leave. Cached per graph, each tensor's
    entry made on first read."""
    hit = _READERS.get(id(graph))
    if hit is not None and hit[0] is graph:
        return hit[1]
    table = _ReaderTable(graph)
    if len(_READERS) > 8:
        _READERS.clear()
    _READERS[id(graph)] = (graph, table)
    return table


def _io(graph: Graph, nodes: list[Node]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    inside = {n.name for n in nodes}
    produced: set[str] = {t for n in nodes for t in n.outputs if t}
    inputs: dict[str, None] = {}
    outputs: list[str] = []
    readers = _readers(graph)
    missing = _NOT_A_TENSOR
    for n in sorted(nodes, key=lambda n: n.index):
        for t in n.inputs:
            if t and t not in produced:
                inputs[t] = None
        for t in n.outputs:
            if not t:
                continue
            who = readers.get(t, missing)
            if who is missing:
                continue  # not a tensor of the graph
            if who is None or not who <= inside:
                outputs.append(t)
    return tuple(inputs), tuple(outputs)


def _build(
    graph: Graph, rule: Rule, conc: Concrete, names: list[str], *, lean: bool = False
) -> tuple[Candidate, list[Binding]]:
    """The candidate of one answer row, and its per-slot bindings (empty when ``lean``:
    every slot one node and no per-op check, see ``_nothing_per_op``)."""
    if len(set(names)) != len(names):
        raise _Reject("structure", "a node is bound twice")
    if lean:
        n_ops = len(rule.alternatives[conc.alternative].ops)
        by_op = conc.slots_by_op
        groups = tuple(tuple(names[i] for i in by_op.get(op, ())) for op in range(n_ops))
        node = graph.node
        inputs, outputs = _io(graph, [node(n) for n in names])
        return Candidate(rule.name, conc.alternative, groups, inputs, outputs), []
    bindings = _slot_bindings(graph, conc, names)
    for b in bindings:
        if b.form is not None and b.form.main_input_not_from:
            x = b.main_input(graph)
            producer = graph.tensors[x].producer if x else None
            if producer and graph.node(producer).op_type in b.form.main_input_not_from:
                raise _Reject("structure", "composite input from an excluded op")
    n_ops = len(rule.alternatives[conc.alternative].ops)
    if conc.single_nodes:  # one node per slot: names line up with slots
        by_op = conc.slots_by_op
        groups = tuple(tuple(names[i] for i in by_op.get(op, ())) for op in range(n_ops))
        all_nodes = [b.nodes[0] for b in bindings]
    else:
        per_op: dict[int, list[Node]] = {}
        for slot, b in zip(conc.slots, bindings, strict=True):
            group = list(b.nodes)
            if slot.form is not None:
                group.sort(key=lambda n: n.index)
            per_op.setdefault(slot.op, []).extend(group)
        groups = tuple(tuple(n.name for n in per_op.get(i, [])) for i in range(n_ops))
        all_nodes = [n for b in bindings for n in b.nodes]
    inputs, outputs = _io(graph, all_nodes)
    return Candidate(rule.name, conc.alternative, groups, inputs, outputs), bindings


# ---------------------------------------------------------------- python-side checks


_RESOLVED: dict[tuple[str, int], object] = {}


def _resolve(type_name: str, aliases: Mapping[str, OpAlias]):
    """resolve_type, memoised per alias table (checks call it once per candidate op)."""
    from ruleengine.match.compile import resolve_type

    key = (type_name, id(aliases))
    hit = _RESOLVED.get(key)
    if hit is None or hit[0] is not aliases:
        hit = (aliases, resolve_type(type_name, aliases))
        _RESOLVED[key] = hit
    return hit[1]


def _reads(node: Node, tensor: str) -> list[int]:
    return [p for p, t in enumerate(node.inputs) if t == tensor]


def _op_plan(rule: Rule, alternative: int, aliases: Mapping[str, OpAlias]) -> tuple:
    """Per pattern op of one alternative: (index, op, where, resolved type, chained).

    The same for every binding of the alternative, so ``_find`` computes it once.
    """
    alt = rule.alternatives[alternative]
    return tuple(
        (i, op, f"op {i} ({op.type})", _resolve(op.type, aliases), alt.chains_to_previous(i))
        for i, op in enumerate(alt.ops)
    )


def _nothing_per_op(plan: tuple) -> bool:
    """True when no op of the plan has a source, input-count, param or constant-operand
    check (``_check`` would pass every op without looking), e.g. ``elementwise_chain``."""
    for _i, op, _where, spec, _chained in plan:
        alias = spec.alias
        if op.input_sources is not None or op.min_inputs is not None:
            return False
        if op.max_inputs is not None or op.params:
            return False
        if alias is not None and (alias.implied_params or alias.const_operand):
            return False
    return True


def _check(
    graph: Graph,
    rule: Rule,
    conc: Concrete,
    cand: Candidate,
    bindings: list[Binding],
    aliases: Mapping[str, OpAlias],
    plan: tuple | None = None,
) -> None:
    if plan is None:
        plan = _op_plan(rule, conc.alternative, aliases)
    if not bindings:  # a lean build: no op has anything to check
        plan = ()
    names = cand.nodes
    inside = set(names)
    by_op = conc.slots_by_op
    first, last = conc.first_slot, conc.last_slot
    comm = commutative_ops()

    for op_idx, op, where, spec, chained in plan:
        if op_idx not in first:  # an optional op (repeat.min 0) absent from this clause
            continue
        b = bindings[first[op_idx]]
        # a fan-out op: every copy reads what the first reads, so each is checked
        for i in by_op.get(op_idx, ()) if op.fan_out else (first[op_idx],):
            _check_sources(
                graph, op, op_idx, chained, bindings[i], bindings, first, last, inside, comm, where
            )
        _check_input_count(graph, op, b, where)
        for i in by_op.get(op_idx, ()):
            try:
                check_params(graph, op.type, op.params, spec.alias, bindings[i], where)
            except ParamFailure as exc:
                raise _Reject(exc.code, exc.reason) from None
            if spec.alias is not None and spec.alias.const_operand and bindings[i].form is None:
                node = bindings[i].node
                if not any(is_const_like(graph, t) for t in node.inputs if t in graph.tensors):
                    raise _Reject(
                        "param-mismatch",
                        f"{where}: {op.type} needs a constant operand; node {node.name!r} "
                        "reads none",
                    )

    spec = rule.subgraph
    if not spec.allow_intermediate_outputs:
        tensors = graph.tensors
        folded = frozenset(graph.compile_time_nodes)
        for n in names:
            for t in graph.node(n).outputs:
                tensor = tensors.get(t) if t else None
                if tensor is None:
                    continue
                has_inner = has_outer = False
                for c, _ in tensor.consumers:
                    if c in inside:
                        has_inner = True
                    elif c not in folded:  # a Shape of a static tensor is folded
                        has_outer = True
                if not has_inner or not (has_outer or tensor.is_graph_output):
                    continue
                outer = sorted({c for c, _ in tensor.consumers if c not in inside | folded})
                if outer or tensor.is_graph_output:
                    whom = (
                        f"also read by {', '.join(repr(c) for c in outer[:3])}"
                        if outer
                        else "a graph output"
                    )
                    raise _Reject(
                        "intermediate-escapes",
                        f"intermediate tensor {t!r} (from node {n!r}) is {whom}, so fusing "
                        "would not remove its HBM write (allow_intermediate_outputs is false)",
                    )
    data_inputs = [t for t in cand.inputs if not graph.tensors[t].is_constant]
    if spec.input_count_range is not None:
        lo, hi = spec.input_count_range
        if not lo <= len(data_inputs) <= hi:
            raise _Reject(
                "input-count",
                f"the subgraph reads {len(data_inputs)} non-constant input(s), outside "
                f"input_count_range [{lo}, {hi}]",
            )
    if spec.output_count is not None and len(cand.outputs) != spec.output_count:
        raise _Reject(
            "output-count",
            f"the subgraph has {len(cand.outputs)} output(s) used outside it, "
            f"output_count is {spec.output_count}",
        )


# Ops that hand a constant on as a constant (TorchScript wraps biases in Identity,
# mixed-precision exports Cast them, a tied LM head multiplies by Transpose of the
# embedding table): their output is as constant as their input.
_CONST_PASSTHROUGH = frozenset({"Identity", "Cast", "CastLike", "Transpose"})


def is_const_like(graph: Graph, name: str) -> bool:
    """A constant (initializer or Constant output), or Identity/Cast/Transpose of one."""
    for _ in range(16):
        tensor = graph.tensors.get(name)
        if tensor is None:
            return False
        if tensor.is_constant:
            return True
        producer = graph.node(tensor.producer) if tensor.producer else None
        if producer is None or producer.op_type not in _CONST_PASSTHROUGH:
            return False
        if not producer.inputs or not producer.inputs[0]:
            return False
        name = producer.inputs[0]  # (CastLike's second input only gives the dtype)
    return False


def _port_tensor(node: Node, port: int) -> str | None:
    return node.inputs[port] if 0 <= port < len(node.inputs) and node.inputs[port] else None


def _check_same_as(
    graph: Graph,
    op: OpPattern,
    b: Binding,
    bindings: list[Binding],
    first: Mapping[int, int],
    where: str,
    comm: frozenset[str],
) -> None:
    """``inputK: {same_as: {op: j, input: m}}``: this input is the tensor op j reads on m."""
    for src in op.input_sources or ():
        if src.same_as is None:
            continue
        j, m = src.same_as
        if j not in first:
            continue
        other = bindings[first[j]]
        o_node = other.node if other.form is None else _entry_node(graph, other)
        want = _port_tensor(o_node, m) if o_node is not None else None
        node = b.node if b.form is None else _entry_node(graph, b)
        if node is None or want is None:
            raise _Reject(
                "input-source", f"{where}: input{src.port} or op {j}'s input{m} is missing"
            )
        ports = [src.port]
        if node.op_type in comm and len(node.inputs) == 2 and src.port in (0, 1):
            ports.append(1 - src.port)
        if not any(_port_tensor(node, p) == want for p in ports):
            raise _Reject(
                "input-source",
                f"{where}: input{src.port} of node {node.name!r} is not the tensor op {j} "
                f"reads on input{m} ({want!r})",
            )


def _entry_node(graph: Graph, b: Binding) -> Node | None:
    """The node of a composite binding that reads its main input first."""
    x = b.main_input(graph)
    for n in sorted(b.nodes, key=lambda n: n.index):
        if x in n.inputs:
            return n
    return b.nodes[0] if b.nodes else None


def _check_sources(
    graph: Graph,
    op: OpPattern,
    op_idx: int,
    chained: bool,
    b: Binding,
    bindings: list[Binding],
    first: Mapping[int, int],
    last: dict[int, int],
    inside: set[str],
    comm: frozenset[str],
    where: str,
) -> None:
    if op.input_sources is None:
        return
    _check_same_as(graph, op, b, bindings, first, where, comm)
    node = b.node
    swapped = False
    if b.form is None and chained and node.op_type in comm:
        # a chain link on a commutative binary op: if the previous op's output arrived on
        # a port the rule describes by source kind, the rule meant the other order
        prev_out = _out_node(bindings[last[op_idx - 1]]).outputs
        ports = [p for p, t in enumerate(node.inputs) if t in prev_out]
        described = {src.port for src in op.input_sources if src.source_type is not None}
        if len(node.inputs) == 2 and ports and all(p in described for p in ports):
            swapped = True
    if b.form is None:
        for src in op.input_sources:
            if src.from_op is None or src.from_op not in last:
                continue
            sb = bindings[last[src.from_op]]
            out_node = _out_node(sb)
            if src.output_idx >= len(out_node.outputs):
                raise _Reject(
                    "input-source", f"{where}: op {src.from_op} has no output {src.output_idx}"
                )
            tensor = out_node.outputs[src.output_idx]
            ports = _reads(node, tensor)
            if not ports:
                raise _Reject(
                    "input-source",
                    f"{where}: node {node.name!r} does not read output {src.output_idx} of "
                    f"op {src.from_op}",
                )
            if src.port not in ports:
                if node.op_type in comm and len(node.inputs) == 2:
                    swapped = True
                else:
                    raise _Reject(
                        "input-source",
                        f"{where}: node {node.name!r} reads op {src.from_op} on input "
                        f"{ports[0]}, not input{src.port}",
                    )
    externals = b.external_inputs(graph) if b.form is not None else []
    for src in op.input_sources:
        if src.source_type is None:
            continue
        if b.form is not None:
            if src.port == 0:
                t = b.main_input(graph)
            else:
                rest = [x for x in externals if x != b.main_input(graph)]
                t = rest[src.port - 1] if src.port - 1 < len(rest) else None
        else:
            port = (1 - src.port) if swapped and src.port in (0, 1) else src.port
            t = node.inputs[port] if port < len(node.inputs) and node.inputs[port] else None
        if t is None:
            raise _Reject("input-source", f"{where}: input{src.port} is missing")
        tensor = graph.tensors[t]
        kind = src.source_type
        ok = {
            "any": True,
            "const": is_const_like(graph, t),
            "graph_input": tensor.is_graph_input,
            "const_or_param": tensor.producer is None or tensor.producer not in inside,
        }.get(kind, True)
        if not ok:
            what = (
                f"produced by node {tensor.producer!r}"
                if tensor.producer
                else ("a graph input" if tensor.is_graph_input else "a constant")
            )
            raise _Reject(
                "input-source",
                f"{where}: input{src.port} must be {kind}, but tensor {t!r} is {what}",
            )


def _out_node(b: Binding) -> Node:
    if b.form is None:
        return b.nodes[-1]
    ids = [n.id for n in b.form.nodes]
    return b.nodes[ids.index(b.form.output.id)] if len(b.nodes) == len(ids) else b.nodes[-1]


def _check_input_count(graph: Graph, op: OpPattern, b: Binding, where: str) -> None:
    if op.min_inputs is None and op.max_inputs is None:
        return
    if b.form is None:
        counts = [sum(1 for t in n.inputs if t) for n in b.nodes]
    else:
        counts = [len(b.data_inputs(graph))]
    for n_in in counts:
        if op.min_inputs is not None and n_in < op.min_inputs:
            raise _Reject("input-count", f"{where}: {n_in} input(s), min_inputs is {op.min_inputs}")
        if op.max_inputs is not None and n_in > op.max_inputs:
            raise _Reject("input-count", f"{where}: {n_in} input(s), max_inputs is {op.max_inputs}")


def compiled_program(rule_set: RuleSet, aliases: Mapping[str, OpAlias] | None = None) -> Program:
    """The compiled (graph-independent) program, for explain-rule --datalog."""
    return compile_rule_set(
        tuple(r for r in rule_set.rules if r.enabled),
        default_aliases() if aliases is None else aliases,
    )
