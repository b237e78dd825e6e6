"""Structural contracts: what a code-generated kernel (ElementwiseChain, CubeWithEpilogue,
...) can be generated from, checked on a group's own nodes.

A generated kernel has no fixed reference semantics (its computation is the group's), so
its contract says what the generator supports: which ops may play each role (op types
and the op classes of ops/classes.yaml), how many of each, which role comes first, and
how a role reads its operands (``broadcast``: every operand from outside the group has a
known shape that broadcasts into the node's output, so one loop over the output reads it
with broadcast strides). A group the contract cannot describe does not fit the kernel
(AF406).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from ruleengine.graph.model import Graph
from ruleengine.kernels.model import Role, Structure


@functools.cache  # the op classes are loaded once per process; a role's ops are a tuple
def _members(ops: Sequence[str]) -> frozenset[str]:
    from ruleengine.ops.classes import op_classes

    classes = op_classes()
    out: set[str] = set()
    for op in ops:
        out |= classes.get(op, frozenset()) if op.startswith("@") else {op}
    return frozenset(out)


def role_of(structure: Structure, op_type: str) -> Role | None:
    """The first role whose ops include ``op_type`` (None: no role takes it)."""
    return next((r for r in structure.roles if op_type in _members(r.ops)), None)


def _broadcasts(side: tuple | None, out: tuple | None) -> bool:
    """``side`` broadcasts (numpy, one way) into ``out``; unknown dims compare equal
    only to themselves or to 1, an unknown rank never broadcasts."""
    if side is None or out is None or len(side) > len(out):
        return False
    for s, o in zip(reversed(side), reversed(out), strict=False):
        if s == 1 or (s is not None and s == o):
            continue
        return False
    return True


def check(graph: Graph, nodes: Sequence[str], outputs: Sequence[str], s: Structure) -> list[str]:
    """Why the group ``nodes`` (topological order) does not fit ``s`` (empty: it fits)."""
    problems: list[str] = []
    produced = {t for n in nodes for t in graph.node(n).outputs if t}
    counts: dict[str, int] = {r.name: 0 for r in s.roles}
    first_roles = [r for r in s.roles if r.first]
    for i, name in enumerate(nodes):
        node = graph.node(name)
        role = role_of(s, node.op_type)
        if role is None:
            problems.append(
                f"{node.op_type} ({name}) plays no role the kernel generates "
                f"({', '.join(r.name for r in s.roles)})"
            )
            continue
        counts[role.name] += 1
        if i == 0 and first_roles and role not in first_roles:
            problems.append(
                f"the group starts with {node.op_type}, the kernel with "
                f"{' or '.join(r.name for r in first_roles)}"
            )
        if role.operands == "broadcast":
            problems += _operand_problems(graph, name, produced)
    for r in s.roles:
        n = counts[r.name]
        if n < r.min or (r.max is not None and n > r.max):
            want = (
                f"{r.min}" if r.max == r.min else f"{r.min}..{r.max if r.max is not None else ''}"
            )
            problems.append(f"{n} op(s) play role {r.name}, the kernel takes {want}")
    if s.max_outputs is not None and len(outputs) > s.max_outputs:
        problems.append(
            f"{len(outputs)} tensors leave the group, the kernel writes {s.max_outputs}"
        )
    return problems


def _operand_problems(graph: Graph, name: str, produced: set[str]) -> list[str]:
    node = graph.node(name)
    out = graph.tensors.get(node.outputs[0]) if node.outputs else None
    out_shape = out.shape if out is not None else None
    ins = [t for t in node.inputs if t]
    shapes = {t: graph.tensors[t].shape if t in graph.tensors else None for t in ins}
    problems = []
    for t in ins:
        if t not in produced and not _broadcasts(shapes[t], out_shape):
            problems.append(
                f"operand {t} of {node.op_type} ({name}) does not broadcast into its output "
                f"({_fmt(shapes[t])} into {_fmt(out_shape)})"
            )
    return problems


def _fmt(shape: tuple | None) -> str:
    return "unknown shape" if shape is None else f"[{', '.join(str(d) for d in shape)}]"
