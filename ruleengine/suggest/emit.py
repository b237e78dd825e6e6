"""Draft one YAML rule per cluster: readable name, where it was found, what it saves.

The pattern is the cluster's canonical unit order: every root first (its input 0 from
outside the match), then each op with its producers named by ``from_op`` (so no op
chains to the one before it by accident), composites by the alias that stands for
every exporter's form. Where the instances have different ops at a position, the
position gets the smallest op class holding them all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence

import yaml

from ruleengine.cost.scoring import human_bytes
from ruleengine.graph.model import Node
from ruleengine.suggest.canon import smallest_class
from ruleengine.suggest.model import Cluster, Instance

HEADER = (
    "# Drafted by `autofusion suggest` from the models named in the description.\n"
    "# Review it (name, priority, constraints) before adding it to a rule library.\n"
)
VIEW_LABELS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})
MAX_NAME_TOKENS = 5
MAX_REPEAT = 8


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the description) as literal blocks, readable in review."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def position_types(cluster: Cluster) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Per pattern op: the type written in the rule, and the labels instances have there."""
    out = []
    for k in range(len(cluster.instances[0].units)):
        labels = tuple(sorted({inst.units[k].label for inst in cluster.instances}))
        if set(labels) <= VIEW_LABELS:  # exporters pick different views for one reshape
            out.append(("@view", labels))
        else:
            out.append((labels[0] if len(labels) == 1 else smallest_class(labels), labels))
    return tuple(out)


def rule_name(cluster: Cluster, taken: set[str]) -> str:
    """``suggested_<ops>``: the pattern's ops in order (views left out, runs collapsed,
    long patterns cut to their first and last ops and a count), unique in ``taken``."""
    tokens: list[str] = []
    for typ, _ in position_types(cluster):
        if typ in VIEW_LABELS or typ == "@view":
            continue
        token = re.sub(r"[^a-z0-9]+", "", typ.lower())
        if not tokens or tokens[-1] != token:
            tokens.append(token)
    if len(tokens) > MAX_NAME_TOKENS:
        tokens = [
            *tokens[: MAX_NAME_TOKENS - 2],
            tokens[-1],
            f"{len(cluster.instances[0].units)}ops",
        ]
    base = "suggested_" + "_".join(tokens or ["views"])
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_") if p)


def chains(cluster: Cluster) -> list[list[int]]:
    """Runs of pattern ops to write as one ``@epilogue`` op with ``repeat``: plain ops of
    the epilogue class (elementwise, BatchNorm, views), each reading at most one op of
    the pattern and read by at most one (a chain, no fork or join), linked one to the
    next. Exporters differ exactly there (a BatchNorm kept or folded, a Cast, a Div or a
    Mul by the reciprocal, one view or two), so the runs carry a rule across them."""
    from ruleengine.suggest.canon import op_class

    units = cluster.instances[0].units
    epilogue = op_class("@epilogue")
    readers: dict[int, list[int]] = {}
    for j, u in enumerate(units):
        for ref in u.inputs:
            readers.setdefault(ref.source, []).append(j)
    eligible = [
        not u.composite
        and all(label in epilogue for label in labels)
        and len({r.source for r in u.inputs}) == len(u.inputs) <= 1
        and len(readers.get(k, ())) <= 1
        for k, (u, (_, labels)) in enumerate(zip(units, position_types(cluster), strict=True))
    ]
    nxt: dict[int, int] = {}
    for k in range(len(units)):
        rd = readers.get(k, [])
        if eligible[k] and len(rd) == 1 and eligible[rd[0]]:
            nxt[k] = rd[0]
    runs = []
    for k in range(len(units)):
        if eligible[k] and k not in nxt.values():
            run = [k]
            while run[-1] in nxt:
                run.append(nxt[run[-1]])
            if units[k].commutative and units[k].inputs:
                # an Add or Mul matches either input order only under its own type (a
                # repeated @epilogue's first copy reads a fixed port): it stays as found
                run = run[1:]
            if run:
                runs.append(run)
    return runs


def pattern_ops(
    cluster: Cluster, spread: int | None = None, pins: Mapping[int, dict] | None = None
) -> list[dict]:
    """The ``match.ops`` list of the cluster's rule. ``spread``: write each run of
    ``chains`` as one ``@epilogue`` op repeated from its length to its length plus
    ``spread`` (an exporter that keeps a BatchNorm or adds a Cast has one more there;
    None: every op as found). ``pins``: per pattern op (canonical index), the params
    written on it (``shared_params``)."""
    units = cluster.instances[0].units
    runs = chains(cluster) if spread is not None else []
    run_of = {k: run for run in runs for k in run}
    new_index: dict[int, int] = {}
    order = []
    for k in range(len(units)):
        run = run_of.get(k)
        if run is not None and run[0] != k:
            continue
        for m in run or [k]:
            new_index[m] = len(order)
        order.append(run or [k])
    ops = []
    for members in order:
        first = members[0]
        unit = units[first]
        if first in run_of:
            assert spread is not None
            n = len(members)
            op: dict = {"type": "@epilogue"}
            if n + spread > 1:
                op["repeat"] = {"min": n, "max": min(MAX_REPEAT, n + spread)}
        else:
            op = {"type": position_types(cluster)[first][0]}
            if pins and pins.get(first):
                op["params"] = dict(pins[first])
        if unit.inputs:
            sources: dict[str, dict] = {}
            for ref in unit.inputs:
                port = 0 if unit.composite else ref.port
                while f"input{port}" in sources:  # a composite reads one main input
                    port += 1
                src: dict = {"from_op": new_index[ref.source]}
                if ref.output_idx:
                    src["output_idx"] = ref.output_idx
                sources[f"input{port}"] = src
            op["input_sources"] = dict(sorted(sources.items()))
        else:  # a root: its input comes from outside (never the op before it)
            op["input_sources"] = {"input0": {"source_type": "const_or_param"}}
        ops.append(op)
    return ops


def noop_casts(cluster: Cluster, is_noop: Callable[[str, str], bool]) -> tuple[int, ...]:
    """Pattern ops that are, in every instance, one Cast node to the dtype its input
    already has (``is_noop(model, node)``): a no-op. TorchScript writes one before every
    RMSNorm of a float32 model; dynamo writes none. A draft keeps the Cast (its instances
    have it) and offers the same pattern without it as a branch (``draft(drop=)``), so it
    matches the exports that have none. At most as many as leave two ops."""
    units = cluster.instances[0].units
    readers = [sum(1 for v in units for r in v.inputs if r.source == k) for k in range(len(units))]
    found = tuple(
        k
        for k, u in enumerate(units)
        if not u.composite
        and len(u.inputs) <= 1
        # a root Cast read by several ops: without it they would be unlinked roots
        and (len(u.inputs) == 1 or readers[k] <= 1)
        and all(
            len(inst.units[k].nodes) == 1 and is_noop(inst.model, inst.units[k].nodes[0])
            for inst in cluster.instances
        )
    )
    return found if len(units) - len(found) >= 2 else ()


def without_units(cluster: Cluster, drop: Sequence[int]) -> Cluster:
    """The cluster with pattern ops ``drop`` (each reading at most one pattern op)
    contracted: a reader of a dropped op reads what the dropped op read (nothing inside
    the pattern for a root: then the reader reads from outside there)."""
    from dataclasses import replace

    from ruleengine.suggest.canon import InputRef

    gone = set(drop)
    units = cluster.instances[0].units
    keep = [k for k in range(len(units)) if k not in gone]
    new = {k: i for i, k in enumerate(keep)}

    def through(inst_units: tuple, ref: InputRef) -> InputRef | None:
        while ref.source in gone:
            above = inst_units[ref.source].inputs
            if not above:
                return None
            ref = InputRef(ref.port, above[0].source, above[0].output_idx)
        return InputRef(ref.port, new[ref.source], ref.output_idx)

    def bare(inst: Instance) -> Instance:
        out = []
        for k in keep:
            u = inst.units[k]
            refs = {r for ref in u.inputs if (r := through(inst.units, ref)) is not None}
            out.append(
                replace(
                    u, inputs=tuple(sorted(refs, key=lambda r: (r.source, r.port, r.output_idx)))
                )
            )
        return replace(inst, units=tuple(out))

    return Cluster(("without", cluster.key, tuple(drop)), tuple(bare(i) for i in cluster.instances))


def bare_convs(cluster: Cluster, is_bare: Callable[[str, str], bool]) -> tuple[int, ...]:
    """Pattern ops that are, in every instance, one Conv node whose output no
    BatchNormalization reads (``is_bare(model, node)``): where the exporter folded the
    inference BatchNorm into the Conv. An export that keeps it (TorchScript's keepbn)
    has Conv -> BatchNormalization there, which a compiler folds the same way; a draft
    offers its pattern with a BatchNormalization after each such Conv as a branch
    (``draft(bn_after=)``)."""
    units = cluster.instances[0].units
    return tuple(
        k
        for k, u in enumerate(units)
        if not u.composite
        and all(
            len(inst.units[k].nodes) == 1 and is_bare(inst.model, inst.units[k].nodes[0])
            for inst in cluster.instances
        )
    )


def with_bn_after(cluster: Cluster, convs: Sequence[int]) -> tuple[Cluster, dict[int, int]]:
    """The cluster with a BatchNormalization unit after each pattern op of ``convs``
    (reading it; its readers read the BatchNormalization), and old index -> new."""
    from dataclasses import replace

    from ruleengine.suggest.canon import InputRef, Unit, coarse_label

    after = set(convs)
    n = len(cluster.instances[0].units)
    new: dict[int, int] = {}
    bn: dict[int, int] = {}
    k2 = 0
    for k in range(n):
        new[k] = k2
        k2 += 1
        if k in after:
            bn[k] = k2
            k2 += 1

    def moved(ref: InputRef) -> InputRef:
        if ref.source in after:
            return InputRef(ref.port, bn[ref.source], 0)
        return InputRef(ref.port, new[ref.source], ref.output_idx)

    def grown(inst: Instance) -> Instance:
        out = []
        for k, u in enumerate(inst.units):
            out.append(replace(u, inputs=tuple(moved(r) for r in u.inputs)))
            if k in after:
                label = "BatchNormalization"
                out.append(
                    Unit((), label, coarse_label(label), False, False, (InputRef(0, new[k], 0),))
                )
        return replace(inst, units=tuple(out))

    grown_cluster = Cluster(
        ("bn_after", cluster.key, tuple(convs)), tuple(grown(i) for i in cluster.instances)
    )
    return grown_cluster, new


# The description line of a draft pinned to what its regions have (``draft``).
PINNED_NOTE = "Pinned to what its regions have"


def _param_value(value: object) -> object | None:
    """An attribute value as a rule param (numbers, strings and lists of them), else None."""
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple) and all(
        isinstance(v, bool | int | float | str) for v in value
    ):
        return list(value)
    return None


def shared_params(cluster: Cluster, node_of: Callable[[str, str], Node]) -> dict:
    """Per pattern op written as the ONNX op its instances have (no alias, class, view or
    composite), the attribute values they have there: one value where they agree,
    ``{one_of: [...]}`` where they differ. ``node_of(model, name)``: a node (defaults
    filled in). What a draft is narrowed to when its structure also matches elsewhere and
    those matches lower coverage: the same structure with other attributes (a depthwise
    conv of another width, another kernel size) no longer matches."""
    out: dict[int, dict] = {}
    for k, (typ, labels) in enumerate(position_types(cluster)):
        units = [inst.units[k] for inst in cluster.instances]
        if typ.startswith("@") or len(labels) != 1 or any(u.composite for u in units):
            continue
        nodes = [
            node_of(inst.model, u.nodes[0])
            for inst, u in zip(cluster.instances, units, strict=True)
        ]
        if any(n.op_type != typ for n in nodes):
            continue  # an alias stands there: its params are not the ONNX attributes
        params: dict = {}
        for name in sorted(set.intersection(*(set(n.attributes) for n in nodes))):
            values = [_param_value(n.attributes[name]) for n in nodes]
            if any(v is None for v in values):
                continue
            distinct = list({repr(v): v for v in values}.values())
            params[name] = distinct[0] if len(distinct) == 1 else {"one_of": distinct}
        if params:
            out[k] = params
    return out


def describe(cluster: Cluster, target: str, spread: int | None = None) -> str:
    """Where the cluster was found and what fusing it saves."""
    first = cluster.instances[0]
    per_model = ", ".join(
        f"{m} x{sum(1 for i in cluster.instances if i.model == m)}" for m in cluster.models
    )
    lines = [
        f"Suggested for fusable traffic no rule captured: {len(cluster.instances)} "
        f"region(s) of {len(first.units)} ops ({per_model}); the first is "
        f"{first.region.nodes[0]} .. {first.region.nodes[-1]} in {first.model}.",
        f"Fusing them saves {human_bytes(cluster.bytes_saved)} of HBM traffic on {target} "
        f"({human_bytes(first.region.bytes_saved)} for the first).",
    ]
    runs = chains(cluster) if spread is not None else []
    in_run = {k for run in runs for k in run}
    types = position_types(cluster)
    differ = [
        f"{typ} ({', '.join(labels)})"
        for k, (typ, labels) in enumerate(types)
        if k not in in_run and (len(labels) > 1 or typ != labels[0])
    ]
    if differ:
        lines.append(
            "Op classes where the instances differ (or any view op): " + "; ".join(differ) + "."
        )
    if runs:
        assert spread is not None
        found = [
            f"{' -> '.join('/'.join(types[k][1]) for k in run)} as @epilogue x"
            f"{len(run)}..{min(MAX_REPEAT, len(run) + spread)}"
            for run in runs
        ]
        lines.append(
            "Epilogue chains generalized (exporters fold, split or cast them differently): "
            + "; ".join(found)
            + "."
        )
    absorbed = sorted(set().union(*(i.absorbed_rules for i in cluster.instances)))
    if absorbed:
        lines.append("Extends the groups of: " + ", ".join(absorbed) + ".")
    return "\n".join(lines)


def size_limit(sizes: tuple[int | None, int | None]) -> dict[str, int]:
    """The ``memory_limit`` fields pinning the largest intermediate and output tensor
    (bytes; None: not pinned) of a draft's regions, as ``draft(..., sizes=)`` writes them."""
    fields = ("max_intermediate_size", "max_output_size")
    return {f: n for f, n in zip(fields, sizes, strict=True) if n is not None}


def draft(
    cluster: Cluster,
    name: str,
    priority: int,
    target: str,
    spread: int | None = None,
    pins: Mapping[int, dict] | None = None,
    counts: tuple[int, int, int | None] | None = None,
    sizes: tuple[int | None, int | None] | None = None,
    drop: Sequence[int] = (),
    bn_after: Sequence[int] = (),
) -> tuple[Mapping[str, object], str]:
    """The rule (as data) and its YAML text (``spread``, ``pins``: see ``pattern_ops``).
    ``counts``: (fewest, most) non-constant inputs and the output count (None where the
    regions differ) its regions have, pinned as ``input_count_range`` and
    ``output_count``: the same structure reading or writing more or fewer tensors (a
    weight that is constant there, another tensor kept for later) no longer matches.
    ``sizes``: the largest intermediate and output tensor (bytes) its regions have,
    pinned as a ``memory_limit``: the same structure on larger tensors (a longer
    sequence, a wider layer) no longer matches; smaller ones still do. ``drop``: pattern
    ops that are no-op Casts (``noop_casts``); the pattern without them is written as a
    branch (another export writes no Cast there, and a drafted op cannot be optional
    where it has a producer). ``bn_after``: Conv pattern ops with no BatchNormalization
    after them (``bare_convs``); the pattern with one after each is written as a branch
    (an export that keeps the inference BatchNorm, which a compiler folds into the Conv:
    the cost model counts its constants as folded, ``cost.scoring``)."""
    match: dict = {"ops": pattern_ops(cluster, spread, pins)}
    subgraph = _subgraph(cluster, spread, counts)
    if subgraph:
        match["subgraph"] = subgraph
    branch = _branches(cluster, spread, pins, drop, bn_after)
    if branch:
        match["branches"] = branch
    description = describe(cluster, target, spread)
    pinned = _pinned(pins, counts, sizes)
    if pinned:
        description += (
            f"\n{PINNED_NOTE} ({'; '.join(pinned)}): the structure alone also matched where "
            "fusing it lowers coverage."
        )
    rule = {
        "name": name,
        "priority": priority,
        "description": description,
        "match": match,
        "rewrite": {"target_op": _camel(name)},
        "constraints": _constraints(cluster, sizes),
        "output": {"kernel_name": name},
    }
    text = HEADER + yaml.dump(rule, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
    return rule, text


def _constraints(cluster: Cluster, sizes: tuple[int | None, int | None] | None) -> list[dict]:
    """ub_fit; the regions' dtypes; their largest tensors where ``sizes`` pins them."""
    dtypes = sorted(set().union(*(i.dtypes for i in cluster.instances)))
    constraints: list[dict] = [{"type": "ub_fit"}]
    if dtypes:
        constraints.append({"type": "dtype_match", "allowed_dtypes": dtypes})
    if sizes is not None and any(n is not None for n in sizes):
        constraints.append({"type": "memory_limit", **size_limit(sizes)})
    return constraints


def _branches(
    cluster: Cluster,
    spread: int | None,
    pins: Mapping[int, dict] | None,
    drop: Sequence[int],
    bn_after: Sequence[int],
) -> list[dict]:
    """The branches: without the no-op Casts ``drop``, with a BatchNormalization after
    each Conv of ``bn_after`` (``draft``)."""
    branch: list[dict] = []
    if drop:
        kept = [k for k in range(len(cluster.instances[0].units)) if k not in set(drop)]
        moved = {k: i for i, k in enumerate(kept)}
        bare_pins = {moved[k]: v for k, v in (pins or {}).items() if k in moved}
        branch.append(
            {
                "ops": pattern_ops(without_units(cluster, drop), spread, bare_pins),
                "description": (
                    f"the same without the {len(drop)} Cast op(s) to the dtype their input "
                    "already has (no-ops; another export writes none there)"
                ),
            }
        )
    if bn_after:
        grown, index = with_bn_after(cluster, bn_after)
        grown_pins = {index[k]: v for k, v in (pins or {}).items()}
        branch.append(
            {
                "ops": pattern_ops(grown, spread, grown_pins),
                "description": (
                    f"the same with an inference BatchNormalization after each of its "
                    f"{len(bn_after)} Conv op(s) (an export that keeps it; a compiler folds "
                    "it into the Conv)"
                ),
            }
        )
    return branch


def _subgraph(
    cluster: Cluster, spread: int | None, counts: tuple[int, int, int | None] | None
) -> dict:
    """The ``subgraph`` fields: pinned input and output counts; intermediates read
    outside allowed where the rule is generalized or a region has one."""
    subgraph: dict = {}
    if counts is not None:
        subgraph["input_count_range"] = [counts[0], counts[1]]
        if counts[2] is not None:
            subgraph["output_count"] = counts[2]
    if spread is not None or any(i.escapes for i in cluster.instances):
        # a generalized rule meets other exports, where a residual may read inside it
        subgraph["allow_intermediate_outputs"] = True
    return subgraph


def _pinned(
    pins: Mapping[int, dict] | None,
    counts: tuple[int, int, int | None] | None,
    sizes: tuple[int | None, int | None] | None,
) -> list[str]:
    """What a pinned draft pins, as its description names it (none: not pinned)."""
    what = ["attribute values"] if pins else []
    if counts is not None:
        ins = f"{counts[0]}" if counts[0] == counts[1] else f"{counts[0]}-{counts[1]}"
        outs = "" if counts[2] is None else f", {counts[2]} output(s)"
        what.append(f"{ins} non-constant input(s){outs}")
    if sizes is not None and any(n is not None for n in sizes):
        what.append(
            "tensor sizes up to "
            + " and ".join(
                f"{human_bytes(n)} {kind}"
                for n, kind in zip(sizes, ("inside", "out"), strict=True)
                if n is not None
            )
        )
    return what


def fitting_priority(absorbed: Iterable[str], priorities: Mapping[str, int]) -> int:
    """Above every rule whose groups the suggestion extends (it is the more specific
    pattern), else below every existing rule (hand-written rules win ties)."""
    above = [priorities[r] for r in absorbed if r in priorities]
    if above:
        return max(above) + 1
    return max(0, min(priorities.values(), default=1) - 1)


KERNEL_HEADER = (
    "# yaml-language-server: $schema=../../schemas/kernel.schema.json\n"
    "# Drafted by `autofusion suggest`: the contract of the kernel its rule names.\n"
)


def kernel_entry(rule_text: str, cluster: Cluster, op_types: Iterable[str]) -> str:
    """The kernel catalog entry (docs/kernels.md) for a drafted rule's target_op: a
    structural contract, as for the bundled generated kernels (the kernel is generated
    from the group). Roles: the cube ops the pattern has (exactly as many), and the other
    ``op_types`` its regions hold, with the op classes the pattern uses where it was
    generalized (an @epilogue chain, a class; a composite, which another exporter may
    write as its ONNX op or in other elementwise/reduce ops)."""
    from ruleengine.ops.aliases import alias_table
    from ruleengine.suggest.canon import op_class

    rule = yaml.safe_load(rule_text)
    cube = op_class("@cube")
    types = [op["type"] for op in rule["match"]["ops"]]
    n_cube = sum(1 for t in types if t in cube or t == "@cube")
    vector = {t for t in op_types if t not in cube}
    aliases = alias_table()
    # a branch (no-op Casts away, a BatchNorm kept) holds no cube op the pattern lacks
    more = [op["type"] for b in rule["match"].get("branches", ()) for op in b["ops"]]
    vector.update(t for t in more if not t.startswith("@") and t not in aliases and t not in cube)
    for t in [*types, *more]:
        if t.startswith("@") and t != "@cube":
            vector.add(t)
        elif t in aliases and aliases[t].composites:
            vector.update(("@elementwise", "@reduce", "@norm"))
            vector.update(x for x in aliases[t].onnx_types if x not in cube)
    roles: list[dict] = []
    if n_cube:
        roles.append({"name": "cube", "ops": ["@cube"], "min": n_cube, "max": n_cube})
    if vector:
        roles.append({"name": "vector", "ops": sorted(vector)})
    entry = {
        "kernel": rule["rewrite"]["target_op"],
        "version": 1,
        "description": (
            f"Generated from the group (a structural contract) for the drafted rule "
            f"{rule['name']}: {n_cube} cube op(s) and the vector ops its regions hold."
        ),
        "structure": {
            "description": "the ops the rule matches, as found in " + ", ".join(cluster.models),
            "roles": roles,
        },
    }
    return KERNEL_HEADER + yaml.dump(entry, Dumper=_Dumper, sort_keys=False, width=100)
