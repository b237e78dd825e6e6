"""``check`` against the kernel catalog: each rule's rewrite must fit its kernel's contract.

Unknown attribute (AF403), a value the kernel does not take (AF404), rewrite.inputs
naming a port the kernel does not have, twice, or more entries than ports (AF405) are
errors, with did-you-mean; a target_op without a catalog entry is a warning (AF402,
"no contract"), which ``--strict`` fails.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Diagnostic
from ruleengine.kernels.model import Catalog, KernelAttr
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
        rw = rule.rewrite
        where = rw.location or rule.location
        entry = catalog.get(rw.target_op)
        if entry is None:
            out.append(
                codes.make(
                    "no-contract",
                    f"rule {rule.name}: target_op {rw.target_op} has no kernel catalog entry: "
                    "no contract, the plan cannot be verified",
                    where,
                    hint=f"{_mean(rw.target_op, catalog.names)}add kernels/{rw.target_op}.yaml "
                    "(docs/kernels.md) or pass --kernels DIR",
                )
            )
            continue
        names = [a.name for a in entry.attributes]
        for key, value in rw.attributes.items() if not entry.open_attributes else ():
            a = entry.attribute(key)
            if a is None:
                out.append(
                    codes.make(
                        "unknown-kernel-attribute",
                        f"rule {rule.name}: kernel {entry.name} has no attribute {key!r}",
                        where,
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
                        where,
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
                        where,
                        hint=f"{_mean(str(plain), [str(v) for v in a.values])}"
                        f"a rule computing something else names another kernel",
                    )
                )
        if entry.inputs is None or not rw.inputs:
            continue
        ports = [p.name for p in entry.inputs]
        for item in rw.inputs:
            name = ports[item.input_port] if item.input_port < len(ports) else None
            what = (
                f"port {item.input_port} ({name})"
                if name
                else f"port {item.input_port}, but kernel {entry.name} has {len(ports)} input ports"
            )
            out.append(
                codes.make(
                    "kernel-port-binding",
                    f"rule {rule.name}: rewrite.inputs binds {what} to output "
                    f"{item.output_idx} of op {item.from_op}, a tensor produced inside the "
                    "group; a kernel input port takes a tensor from outside it",
                    item.location or where,
                    hint=f"drop rewrite.inputs: kernel {entry.name} binds its ports "
                    f"({', '.join(ports)}) itself (kernels/{entry.name}.yaml)",
                )
            )
    return out
