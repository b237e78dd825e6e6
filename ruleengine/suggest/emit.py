"""Draft one YAML rule per cluster: readable name, where it was found, what it saves.

The pattern is the cluster's canonical unit order: every root first (its input 0 from
outside the match), then each op with its producers named by ``from_op`` (so no op
chains to the one before it by accident), composites by the alias that stands for
every exporter's form. Where the instances have different ops at a position, the
position gets the smallest op class holding them all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import yaml

from ruleengine.cost.scoring import human_bytes
from ruleengine.suggest.canon import smallest_class
from ruleengine.suggest.model import Cluster

HEADER = (
    "# Drafted by `autofusion suggest` from the models named in the description.\n"
    "# Review it (name, priority, constraints) before adding it to a rule library.\n"
)
VIEW_LABELS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})
MAX_NAME_TOKENS = 5


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


def pattern_ops(cluster: Cluster) -> list[dict]:
    """The ``match.ops`` list of the cluster's rule."""
    units = cluster.instances[0].units
    ops = []
    for (typ, _), unit in zip(position_types(cluster), units, strict=True):
        op: dict = {"type": typ}
        if unit.inputs:
            sources: dict[str, dict] = {}
            for ref in unit.inputs:
                port = 0 if unit.composite else ref.port
                while f"input{port}" in sources:  # a composite reads one main input
                    port += 1
                src: dict = {"from_op": ref.source}
                if ref.output_idx:
                    src["output_idx"] = ref.output_idx
                sources[f"input{port}"] = src
            op["input_sources"] = dict(sorted(sources.items()))
        else:  # a root: its input comes from outside (never the op before it)
            op["input_sources"] = {"input0": {"source_type": "const_or_param"}}
        ops.append(op)
    return ops


def describe(cluster: Cluster, target: str) -> str:
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
    differ = [
        f"op {k} {typ} ({', '.join(labels)})"
        for k, (typ, labels) in enumerate(position_types(cluster))
        if len(labels) > 1 or typ != labels[0]
    ]
    if differ:
        lines.append(
            "Op classes where the instances differ (or any view op): " + "; ".join(differ) + "."
        )
    absorbed = sorted(set().union(*(i.absorbed_rules for i in cluster.instances)))
    if absorbed:
        lines.append("Extends the groups of: " + ", ".join(absorbed) + ".")
    return "\n".join(lines)


def draft(
    cluster: Cluster, name: str, priority: int, target: str
) -> tuple[Mapping[str, object], str]:
    """The rule (as data) and its YAML text."""
    dtypes = sorted(set().union(*(i.dtypes for i in cluster.instances)))
    constraints: list[dict] = [{"type": "ub_fit"}]
    if dtypes:
        constraints.append({"type": "dtype_match", "allowed_dtypes": dtypes})
    match: dict = {"ops": pattern_ops(cluster)}
    if any(i.escapes for i in cluster.instances):
        match["subgraph"] = {"allow_intermediate_outputs": True}
    rule = {
        "name": name,
        "priority": priority,
        "description": describe(cluster, target),
        "match": match,
        "rewrite": {"target_op": _camel(name)},
        "constraints": constraints,
        "output": {"kernel_name": name},
    }
    text = HEADER + yaml.dump(rule, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
    return rule, text


def fitting_priority(absorbed: Iterable[str], priorities: Mapping[str, int]) -> int:
    """Above every rule whose groups the suggestion extends (it is the more specific
    pattern), else below every existing rule (hand-written rules win ties)."""
    above = [priorities[r] for r in absorbed if r in priorities]
    if above:
        return max(above) + 1
    return max(0, min(priorities.values(), default=1) - 1)
