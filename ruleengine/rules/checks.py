"""Lint checks on loaded rules (``check``): per rule, then across the rule set.

One function per check, registered in ``RULE_CHECKS`` / ``SET_CHECKS``; each returns
diagnostics and never raises. Per rule: patterns that only fuse metadata ops (AF304),
contradictory params (AF305); params the op does not have (AF217 errors, AF303
warnings) are found while loading (``lint.lint_file`` calls ``check_unknown_params``).
Across the set:
duplicate names (AF301), same-priority rules matching the same op sequence (AF302).
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Diagnostic, Location
from ruleengine.ops.aliases import OpTypeInfo, alias_table, op_type_info, view_ops
from ruleengine.ops.model import ParamKind
from ruleengine.rules.model import MatchAlternative, OpPattern, Rule
from ruleengine.rules.slots import MAX_CLAUSES_PER_RULE, clause_count


def values_equal(a: Any, b: Any) -> bool:
    """Compare param values by meaning: 1e-5 == "1e-5" == 0.00001, true == 1, lists == tuples."""
    a, b = _num(a), _num(b)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=0.0) or a == b
    return a == b


def options(value: Any) -> list[Any]:
    """The values a param accepts: ``{one_of: [a, b]}`` -> [a, b], a plain value -> [it]."""
    if isinstance(value, Mapping) and set(value) == {"one_of"}:
        opts = value["one_of"]
        return list(opts) if isinstance(opts, list | tuple) else [opts]
    return [value]


def _num(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return v
    return v


def _not_one_of(rule: Rule, op: OpPattern, param: str, value: Any, known: Iterable) -> Diagnostic:
    """A never-matches finding: the value is none of the param's known values."""
    allowed = ", ".join(map(_fmt, known))
    return codes.make(
        "never-matches",
        f"{op.type}.{param}: {_fmt(value)} is not one of {allowed}",
        _loc(rule, op, param),
        hint=f"use one of {allowed}",
    )


def _loc(rule: Rule, op: OpPattern, param: str | None = None) -> Location | None:
    if param is not None and param in op.param_locations:
        return op.param_locations[param]
    return op.location or rule.location


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, tuple):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return repr(v) if isinstance(v, str) else str(v)


# ---------------------------------------------------------------------------- per rule


def check_unknown_params(rule: Rule) -> list[Diagnostic]:
    return [
        d
        for alt in rule.alternatives
        for op in alt.ops
        for d in unknown_params(op, op.location or rule.location)
    ]


def unknown_params(op: OpPattern, where: Location | None) -> list[Diagnostic]:
    """AF217 (spelt like a param the op has: an error) or AF303 (a warning) for each
    param ``op`` names that its type does not have (also used on the ops of a rule that
    has errors elsewhere, so these findings are not hidden)."""
    info = op_type_info(op.type)
    names = info.param_names()
    if names is None:
        return []
    out = []
    for param in op.params:
        if param in names:
            continue
        close = difflib.get_close_matches(param, sorted(names), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        have = ", ".join(sorted(names)) if names else "no params"
        hint += f"{op.type} has {have}"
        out.append(
            codes.make(
                "misspelt-param" if close else "unknown-param",
                f"{op.type} has no parameter {param!r}; no node has it, so this op never matches",
                op.param_locations.get(param, where),
                hint=hint,
            )
        )
    return out


def _is_view(info: OpTypeInfo) -> bool:
    views = view_ops()
    if info.kind == "class":
        return info.name == "@view"
    return bool(info.onnx_types) and not info.composites and set(info.onnx_types) <= views


def check_no_hbm_saving(rule: Rule) -> list[Diagnostic]:
    out = []
    for alt in rule.alternatives:
        infos = [op_type_info(op.type) for op in alt.ops]
        if not all(i.known for i in infos):
            continue
        views = [op for op, i in zip(alt.ops, infos, strict=True) if _is_view(i)]
        real = [op for op, i in zip(alt.ops, infos, strict=True) if not _is_view(i)]
        if views and len(real) <= 1 and all(op.repeat_max <= 1 for op in real):
            names = ", ".join(op.type for op in views)
            out.append(
                codes.make(
                    "no-hbm-saving",
                    f"rule {rule.name!r} fuses only metadata ops ({names}) into "
                    f"{real[0].type if real else 'nothing'}: no HBM traffic is saved",
                    alt.location or rule.location,
                    hint="@view ops move no data; fuse them with at least two compute ops, "
                    "or drop the rule (at fuse time its candidates come out as 'no benefit')",
                )
            )
    return out


def _input_count_findings(rule: Rule, op: OpPattern, info: OpTypeInfo) -> list[Diagnostic]:
    out = []
    most, fewest = info.max_inputs(), info.min_inputs()
    if op.min_inputs is not None and most is not None and op.min_inputs > most:
        out.append(
            codes.make(
                "never-matches",
                f"{op.type} has at most {most} input{'s' if most != 1 else ''}, so "
                f"min_inputs {op.min_inputs} never matches",
                _loc(rule, op),
                hint=f"use min_inputs <= {most}",
            )
        )
    if op.max_inputs is not None and fewest is not None and op.max_inputs < fewest:
        out.append(
            codes.make(
                "never-matches",
                f"{op.type} needs at least {fewest} input{'s' if fewest != 1 else ''}, so "
                f"max_inputs {op.max_inputs} never matches",
                _loc(rule, op),
                hint=f"use max_inputs >= {fewest}",
            )
        )
    return out


def _fits_attr_type(value: Any, attr_type: str) -> bool:
    """Could an ONNX attribute of this type ever equal the rule's value?"""

    def is_int(v: Any) -> bool:
        v = _num(v)
        return isinstance(v, bool | int) or (isinstance(v, float) and v.is_integer())

    def is_float(v: Any) -> bool:
        return isinstance(_num(v), bool | int | float)

    if attr_type == "INT":
        return is_int(value)
    if attr_type == "FLOAT":
        return is_float(value)
    if attr_type == "STRING":
        return isinstance(value, str)
    if attr_type in ("INTS", "FLOATS", "STRINGS"):
        if not isinstance(value, tuple | list):
            return False
        item = {"INTS": is_int, "FLOATS": is_float, "STRINGS": lambda v: isinstance(v, str)}
        return all(item[attr_type](v) for v in value)
    return True  # tensors, graphs, ...: not checked here


_TYPE_WORDS = {
    "INT": "an integer",
    "FLOAT": "a number",
    "STRING": "a string",
    "INTS": "a list of integers",
    "FLOATS": "a list of numbers",
    "STRINGS": "a list of strings",
}


def _type_findings(rule: Rule, op: OpPattern, info: OpTypeInfo) -> list[Diagnostic]:
    """A param whose value can never equal the ONNX attribute it checks (wrong kind)."""
    from ruleengine.ops.aliases import onnx_ops

    out = []
    ops = onnx_ops()
    alias = info.alias
    for param, value in op.params.items():
        mapping = alias.params.get(param) if alias else None
        if mapping is not None:
            if mapping.kind != ParamKind.ATTR or mapping.value_map or not mapping.onnx_attr:
                continue
            attr = mapping.onnx_attr
        else:
            attr = param
        kinds = [ops[t].attr_types[attr] for t in info.onnx_types if attr in ops[t].attr_types]
        if not kinds or any(_fits_attr_type(v, k) for v in options(value) for k in kinds):
            continue
        out.append(
            codes.make(
                "never-matches",
                f"{op.type}.{param}: ONNX {attr!r} is {_TYPE_WORDS.get(kinds[0], kinds[0])}, "
                f"so {_fmt(value)} never matches",
                _loc(rule, op, param),
                hint=f"write {_TYPE_WORDS.get(kinds[0], 'a value of type ' + kinds[0])}",
            )
        )
    return out


def check_never_matches(rule: Rule) -> list[Diagnostic]:
    out = []
    for alt in rule.alternatives:
        for op in alt.ops:
            info = op_type_info(op.type)
            out.extend(_input_count_findings(rule, op, info))
            if info.kind in ("alias", "onnx"):
                out.extend(_type_findings(rule, op, info))
            alias = info.alias
            if alias is None:
                continue
            targets: dict[str, tuple[str, Any]] = {}
            for param, given in op.params.items():
                opts = options(given)
                if len(opts) > 1:
                    # one_of: the op never matches only when no value can; one finding
                    dead = [v for v in opts if _never_matches_value(rule, op, alias, param, v, {})]
                    if len(dead) == len(opts):
                        out.append(
                            codes.make(
                                "never-matches",
                                f"{op.type}.{param}: none of {_fmt(opts)} can match",
                                _loc(rule, op, param),
                                hint="fix the one_of values (see `autofusion explain-rule`)",
                            )
                        )
                    continue
                out.extend(_never_matches_value(rule, op, alias, param, opts[0], targets))
            for param, implied in alias.implied_params.items():
                if param in op.params and not any(
                    values_equal(v, implied) for v in options(op.params[param])
                ):
                    out.append(
                        codes.make(
                            "never-matches",
                            f"{op.type} always has {param} = {_fmt(implied)}, so "
                            f"{_fmt(op.params[param])} never matches",
                            _loc(rule, op, param),
                            hint=f"remove `{param}` or use the ONNX op type "
                            f"{', '.join(alias.onnx_types)}",
                        )
                    )
    return out


def _never_matches_value(
    rule: Rule, op: OpPattern, alias: Any, param: str, value: Any, targets: dict
) -> list[Diagnostic]:
    """Findings for one value of one param of an aliased op (``targets``: ONNX keys
    already set by another param of the op, to catch two params setting one attribute)."""
    out: list[Diagnostic] = []
    mapping = alias.params.get(param)
    if mapping is None:
        onnx_key, onnx_value = param, value
    elif mapping.kind == ParamKind.ALWAYS:
        if not values_equal(value, mapping.always):
            out.append(
                codes.make(
                    "never-matches",
                    f"{op.type}.{param} is always {_fmt(mapping.always)} on ONNX "
                    f"nodes, so {_fmt(value)} never matches",
                    _loc(rule, op, param),
                    hint=f"remove `{param}` or set it to {_fmt(mapping.always)}"
                    + (
                        " (ONNX writes a transpose as a separate Transpose node)"
                        if param.startswith("transpose")
                        else ""
                    ),
                )
            )
        return out
    elif mapping.kind == ParamKind.VARIANT:
        if not any(values_equal(value, k) for k in mapping.variants):
            out.append(_not_one_of(rule, op, param, value, mapping.variants))
        return out
    elif mapping.kind == ParamKind.ATTR:
        onnx_key = mapping.onnx_attr or param
        onnx_value = value
        if mapping.value_map:
            hits = [v for k, v in mapping.value_map.items() if values_equal(value, k)]
            if not hits:
                out.append(_not_one_of(rule, op, param, value, mapping.value_map))
                return out
            onnx_value = hits[0]
    elif mapping.kind == ParamKind.INPUT_CONST:
        onnx_key, onnx_value = f"input{mapping.input_index}", value
    else:
        return out
    if onnx_key in targets:
        first, first_value = targets[onnx_key]
        if not values_equal(first_value, onnx_value):
            out.append(
                codes.make(
                    "never-matches",
                    f"{op.type}: `{first}` and `{param}` both set ONNX "
                    f"{onnx_key!r} but to different values",
                    _loc(rule, op, param),
                    hint=f"keep only one of `{first}` and `{param}`",
                )
            )
    else:
        targets[onnx_key] = (param, onnx_value)
    return out


def _components(alt: MatchAlternative) -> list[list[int]]:
    """Connected components of a pattern: chain links and from_op links, undirected."""
    ops = alt.ops
    parent = list(range(len(ops)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for op in ops:
        sources = [op.index - 1] if alt.chains_to_previous(op.index) else []
        sources += [s.from_op for s in op.input_sources or () if s.from_op is not None]
        for j in sources:
            if 0 <= j < len(ops):
                parent[find(j)] = find(op.index)
    groups: dict[int, list[int]] = {}
    for i in range(len(ops)):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values())


def check_disconnected(rule: Rule) -> list[Diagnostic]:
    out = []
    for alt in rule.alternatives:
        parts = _components(alt)
        if len(parts) < 2:
            continue
        loose = [i for part in parts[1:] for i in part]
        first = alt.ops[loose[0]]
        names = ", ".join(f"{i} ({alt.ops[i].type})" for i in loose)
        out.append(
            codes.make(
                "disconnected-pattern",
                f"rule {rule.name!r}: op{'s' if len(loose) > 1 else ''} {names} "
                f"{'are' if len(loose) > 1 else 'is'} not connected to op 0; the match would "
                f"pair unrelated nodes",
                _loc(rule, first),
                hint="connect each op with `input_sources: {inputK: {from_op: j}}` (or drop "
                "input_sources to chain it to the previous op), or split the rule",
            )
        )
    return out


def _type_set(op: OpPattern) -> frozenset[str]:
    """The node types an op pattern can bind (classes expanded), for overlap tests."""
    from ruleengine.ops.classes import op_classes

    info = op_type_info(op.type)
    if info.kind == "class":
        return frozenset(op_classes().get(op.type, frozenset()))
    return frozenset((*info.onnx_types, *info.composites)) or frozenset({op.type})


def check_combinatorial(rule: Rule) -> list[Diagnostic]:
    """A pattern whose expansion grows combinatorially: over the matcher's clause budget
    (AF330, an error: fuse would refuse it), or two chained repeats of overlapping types
    (AF331: every run of n nodes is matched once per way to split it)."""
    out: list[Diagnostic] = []
    n = clause_count(rule, alias_table())
    if n > MAX_CLAUSES_PER_RULE:
        culprit = max(
            (op for alt in rule.alternatives for op in alt.ops),
            key=lambda op: op.repeat_max - op.repeat_min,
            default=None,
        )
        where = _loc(rule, culprit, "repeat") if culprit is not None else rule.location
        out.append(
            codes.make(
                "combinatorial-pattern",
                f"rule {rule.name} expands to {n:,} matcher clauses (budget "
                f"{MAX_CLAUSES_PER_RULE}): repeat ranges, branches and op classes multiply",
                where,
                hint="lower repeat.max, use fewer op classes or composites in a row, or split "
                "the rule",
            )
        )
    for alt in rule.alternatives:
        for i in range(1, len(alt.ops)):
            a, b = alt.ops[i - 1], alt.ops[i]
            if (
                a.repeat_max > a.repeat_min
                and b.repeat_max > b.repeat_min
                and alt.chains_to_previous(i)
                and _type_set(a) & _type_set(b)
            ):
                out.append(
                    codes.make(
                        "ambiguous-repeat",
                        f"{a.type} (repeat {a.repeat_min}..{a.repeat_max}) followed by "
                        f"{b.type} (repeat {b.repeat_min}..{b.repeat_max}): a run of nodes "
                        "both can bind is matched once per way to split it",
                        _loc(rule, b, "repeat"),
                        hint="give one of the two a fixed count, or types that do not overlap",
                    )
                )
    return out


def _input_is_internal(alt: MatchAlternative, j: int, k: int, seen: int = 0) -> bool:
    """Whether input ``k`` of op ``j`` is fed inside the pattern: a ``from_op`` link, the
    chain from op ``j - 1`` (a port the rule does not describe as a source kind), or
    ``same_as`` an input that is."""
    if not 0 <= j < len(alt.ops) or seen > len(alt.ops):
        return False
    op = alt.ops[j]
    src = next((s for s in op.input_sources or () if s.port == k), None)
    if src is not None:
        if src.from_op is not None:
            return True
        if src.same_as is not None:
            return _input_is_internal(alt, src.same_as[0], src.same_as[1], seen + 1)
        return False  # a source kind: from outside the match
    if not alt.chains_to_previous(j):
        return False
    # chained: the previous op's output arrives on some port the rule leaves undescribed
    described = {s.port for s in op.input_sources or ()}
    return k not in described


def check_internal_ports(rule: Rule) -> list[Diagnostic]:
    """A rewrite input naming an op input (``input_idx``) that is internal to the group."""
    out = []
    for entry in rule.rewrite.inputs:
        if entry.input_idx is None:
            continue
        for b, alt in enumerate(rule.alternatives):
            if not _input_is_internal(alt, entry.from_op, entry.input_idx):
                continue
            where = "match.ops" if b == 0 else f"match.branches[{b - 1}]"
            out.append(
                codes.make(
                    "internal-port",
                    f"rewrite.inputs port {entry.input_port}: input {entry.input_idx} of op "
                    f"{entry.from_op} ({alt.ops[entry.from_op].type}) is fed inside the "
                    f"pattern in {where}, so the port would be a tensor internal to the group",
                    entry.location or rule.location,
                    hint="name the input of the op that reads it from outside the match "
                    "(e.g. from_op: 0, input_idx: 0 for the data input of the first op)",
                )
            )
            break
    return out


def check_removed_params(rule: Rule) -> list[Diagnostic]:
    """AF308 for a param that ONNX dropped from the op at some opset (and the alias does
    not map): on a model of that opset or later the op never matches."""
    out = []
    for alt in rule.alternatives:
        for op in alt.ops:
            info = op_type_info(op.type)
            if info.kind not in ("alias", "onnx") or info.composites:
                continue
            mapped = set(info.alias.params) if info.alias is not None else set()
            for param in op.params:
                gone = [_removed_at(t, param) for t in info.onnx_types]
                if param in mapped or not gone or any(g is None for g in gone):
                    continue
                at, port = min(g for g in gone if g is not None)
                hint = (
                    f"from opset {at} it is input {port}: write input_sources: {{input{port}: "
                    "{source_type: const, value: ...}} to match newer models"
                    if port is not None
                    else "keep it for models of older opsets only, or drop it"
                )
                out.append(
                    codes.make(
                        "removed-param",
                        f"{op.type} has {param!r} only before opset {at}; on a model of opset "
                        f"{at} or later no node has it, so this op never matches there",
                        _loc(rule, op, param),
                        hint=hint,
                    )
                )
    return out


@functools.cache
def _removed_at(onnx_type: str, param: str) -> tuple[int, int | None] | None:
    """(the opset version of ``onnx_type`` that dropped attribute ``param``, the input
    that took its place or None) when the newest version lacks it; None when the newest
    version has it, or no version does."""
    from ruleengine.graph.onnxlite import all_schemas_with_history

    versions = sorted(
        (s.since_version, param in s.attributes, s)
        for s in all_schemas_with_history()
        if s.name == onnx_type and s.domain in ("", "ai.onnx")
    )
    having = [k for k, (_v, has, _s) in enumerate(versions) if has]
    if not having or versions[-1][1] or having[-1] + 1 >= len(versions):
        return None
    _v, _has, schema = versions[having[-1] + 1]
    port = next((i for i, f in enumerate(schema.inputs) if f.name == param), None)
    return schema.since_version, port


# unknown params (AF217, AF303) are found while loading (``lint.lint_file``)
RULE_CHECKS: dict[str, Callable[[Rule], list[Diagnostic]]] = {
    "removed-param": check_removed_params,
    "no-hbm-saving": check_no_hbm_saving,
    "never-matches": check_never_matches,
    "disconnected-pattern": check_disconnected,
    "combinatorial-pattern": check_combinatorial,
    "internal-port": check_internal_ports,
}


# ---------------------------------------------------------------------------- rule set


def check_duplicate_names(rules: Sequence[Rule]) -> list[Diagnostic]:
    out = []
    first: dict[str, Rule] = {}
    for rule in rules:
        if rule.name in first:
            other = first[rule.name]
            out.append(
                codes.make(
                    "duplicate-rule-name",
                    f"rule name {rule.name!r} is already used at {other.location}",
                    rule.location,
                    hint="rename one of the rules; names must be unique across the rule set",
                    related=(other.location,) if other.location else (),
                )
            )
        else:
            first[rule.name] = rule
    return out


def _signature(alt_ops: Sequence[OpPattern]) -> tuple[str, ...]:
    return tuple(
        f"{op_type_info(op.type).canonical()}{{{op.repeat_min},{op.repeat_max}}}" for op in alt_ops
    )


def _onnx_params(op: OpPattern) -> dict[str, Any]:
    """An op's params keyed by what they check on the node (alias renames applied)."""
    alias = op_type_info(op.type).alias
    out: dict[str, Any] = dict(alias.implied_params) if alias else {}
    for name, value in op.params.items():
        mapping = alias.params.get(name) if alias else None
        if mapping is not None and mapping.kind == ParamKind.ATTR and mapping.onnx_attr:
            hits = [v for k, v in mapping.value_map.items() if values_equal(value, k)]
            out[mapping.onnx_attr] = hits[0] if hits else value
        elif mapping is not None and mapping.kind == ParamKind.INPUT_CONST:
            out[f"input{mapping.input_index}"] = value
        else:
            out[name] = value
    return out


def check_priority_conflicts(rules: Sequence[Rule]) -> list[Diagnostic]:
    """Same priority and same op sequence (after alias resolution), params not disjoint.

    Alternatives are bucketed by (priority, signature), so a large rule set costs time
    linear in its size plus the pairs inside one bucket. Rules that conflict are reported
    as one finding per group (connected by pairwise conflicts), not one per pair: 800
    same-priority copies of one pattern are one finding, not 319,600.
    """
    buckets: dict[tuple, list[tuple[int, Rule, MatchAlternative]]] = {}
    active = [r for r in rules if r.enabled]
    for order, rule in enumerate(active):
        for alt in rule.alternatives:
            key = (rule.priority, _signature(alt.ops))
            buckets.setdefault(key, []).append((order, rule, alt))
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    first_alt: dict[int, MatchAlternative] = {}
    for entries in buckets.values():
        params = [[_onnx_params(op) for op in alt.ops] for _, _, alt in entries]
        for i, (oa, a, alt_a) in enumerate(entries):
            for j in range(i + 1, len(entries)):
                ob, b, _ = entries[j]
                if oa == ob or a.name == b.name or find(oa) == find(ob):
                    continue
                if _params_agree(params[i], params[j]):
                    parent[find(ob)] = find(oa)
                    first_alt.setdefault(oa, alt_a)
    groups: dict[int, list[int]] = {}
    for order in sorted(parent):
        groups.setdefault(find(order), []).append(order)
    out = []
    for members in sorted(groups.values()):
        if len(members) < 2:
            continue
        group = [active[o] for o in members]
        a, b = group[0], group[1]
        alt = first_alt.get(members[0]) or a.alternatives[0]
        seq = " -> ".join(op.type for op in alt.ops)
        if len(group) == 2:
            message = (
                f"rules {a.name!r} ({a.location}) and {b.name!r} ({b.location}) both "
                f"match {seq} with priority {a.priority}"
            )
        else:
            shown = ", ".join(f"{r.name!r}" for r in group[:MAX_NAMED])
            more = f" and {len(group) - MAX_NAMED} more" if len(group) > MAX_NAMED else ""
            message = (
                f"{len(group)} rules match {seq} with priority {a.priority}: {shown}{more} "
                f"(first at {a.location})"
            )
        out.append(
            codes.make(
                "priority-conflict",
                message,
                b.location,
                hint=f"raise the priority of the rule that should win (e.g. "
                f"priority: {a.priority + 1}), or make the patterns differ",
                related=tuple(r.location for r in group if r is not b and r.location),
            )
        )
    return out


MAX_NAMED = 5  # rule names spelt out in a grouped priority-conflict message


def _params_agree(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """False when some op is given two different values for one param (disjoint matches);
    the params are computed once per alternative, not once per pair."""
    for px, py in zip(a, b, strict=True):
        for key in set(px) & set(py):
            if not any(values_equal(a, b) for a in options(px[key]) for b in options(py[key])):
                return False
    return True


SET_CHECKS: dict[str, Callable[[Sequence[Rule]], list[Diagnostic]]] = {
    "duplicate-rule-name": check_duplicate_names,
    "priority-conflict": check_priority_conflicts,
}


def lint_rule(rule: Rule) -> list[Diagnostic]:
    """Every per-rule lint check."""
    out: list[Diagnostic] = []
    for check in RULE_CHECKS.values():
        out.extend(check(rule))
    return out


def lint_set(rules: Sequence[Rule]) -> list[Diagnostic]:
    """Every rule-set check."""
    out: list[Diagnostic] = []
    for check in SET_CHECKS.values():
        out.extend(check(rules))
    return out
