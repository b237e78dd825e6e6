"""``check`` against the kernel catalog: each rule's rewrite must fit its kernel's contract.

Unknown attribute (AF403), a value the kernel does not take (AF404), rewrite.inputs
naming a port the kernel does not have, twice, or more entries than ports (AF405) are
errors, with did-you-mean; a target_op without a catalog entry is a note (AF402,
"no contract"), an error under ``--require-contracts``.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Diagnostic, Location
from ruleengine.kernels.model import Catalog, KernelAttr, KernelEntry
from ruleengine.rules.model import Rule

_TYPES = {
    "string": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "ints": (list, tuple),
    "floats": (list, tuple),
}


def _mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


def _type_ok(a: KernelAttr, value: Any) -> bool:
    if a.type != "bool" and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[a.type])


def lint_rules(rules: Sequence[Rule], catalog: Catalog) -> list[Diagnostic]:
    """Every finding of the rules' rewrites against the catalog."""
    out: list[Diagnostic] = []
    for rule in rules:
        targets = [rule.rewrite.target_op]
        targets += [a.target_op for a in rule.alternatives if a.target_op]
        for target in dict.fromkeys(targets):
            out += _lint_one(rule, target, catalog)
    return out


def _lint_one(rule: Rule, target: str, catalog: Catalog) -> list[Diagnostic]:
    """The findings of one rule against one kernel it names (its own or a branch's)."""
    out: list[Diagnostic] = []
    rw = rule.rewrite
    where = rw.location or rule.location
    entry = catalog.get(target)
    if entry is None:
        return [
            codes.make(
                "no-contract",
                f"rule {rule.name}: target_op {target} has no kernel catalog entry: "
                "no contract, the plan cannot be verified",
                where,
                hint=f"{_mean(target, catalog.names)}add kernels/{target}.yaml "
                "(docs/kernels.md) or pass --kernels DIR",
            )
        ]
    names = [a.name for a in entry.attributes]
    for key, value in rw.attributes.items() if not entry.open_attributes else ():
        at = rw.attribute_locations.get(key) or where  # the attribute's own line
        a = entry.attribute(key)
        if a is None:
            out.append(
                codes.make(
                    "unknown-kernel-attribute",
                    f"rule {rule.name}: kernel {entry.name} has no attribute {key!r}",
                    at,
                    hint=f"{_mean(key, names)}its attributes: {', '.join(names) or 'none'}",
                )
            )
            continue
        plain = list(value) if isinstance(value, tuple) else value
        if not _type_ok(a, plain):
            out.append(
                codes.make(
                    "kernel-attribute-value",
                    f"rule {rule.name}: attribute {key} of kernel {entry.name} is a {a.type}, "
                    f"not {plain!r}",
                    at,
                    hint=f"give a {a.type}",
                )
            )
        elif a.values is not None and plain not in a.values:
            shown = ", ".join(map(str, a.values))
            out.append(
                codes.make(
                    "kernel-attribute-value",
                    f"rule {rule.name}: kernel {entry.name} takes {key} in [{shown}], "
                    f"not {plain!r}",
                    at,
                    hint=f"{_mean(str(plain), [str(v) for v in a.values])}"
                    f"a rule computing something else names another kernel",
                )
            )
    if entry.inputs is None or not rw.inputs:
        return out
    return out + _lint_ports(rule, entry, where)


def _lint_ports(rule: Rule, entry: KernelEntry, where: Location | None) -> list[Diagnostic]:
    """The findings of a rule's ``rewrite.inputs`` against the kernel's input ports."""
    out: list[Diagnostic] = []
    ports = [p.name for p in entry.inputs or ()]
    seen: set[int] = set()
    for item in rule.rewrite.inputs:
        place = item.location or where
        name = ports[item.input_port] if item.input_port < len(ports) else None
        problem = None
        if name is None:
            problem = (
                f"binds port {item.input_port}, but kernel {entry.name} has "
                f"{len(ports)} input ports ({', '.join(ports)})"
            )
        elif item.input_port in seen:
            problem = f"binds port {item.input_port} ({name}) twice"
        elif item.input_idx is None:
            problem = (
                f"binds port {item.input_port} ({name}) to output {item.output_idx} of op "
                f"{item.from_op}, a tensor produced inside the group; a kernel input "
                "port takes a tensor from outside it (input_idx names one)"
            )
        seen.add(item.input_port)
        if problem:
            out.append(
                codes.make(
                    "kernel-port-binding",
                    f"rule {rule.name}: rewrite.inputs {problem}",
                    place,
                    hint=f"kernel {entry.name}'s ports: {', '.join(ports)} "
                    f"(kernels/{entry.name}.yaml binds them when rewrite.inputs is left out)",
                )
            )
    return out
