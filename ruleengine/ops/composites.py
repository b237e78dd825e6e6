"""Composites: ops exporters emit decomposed (SiLU, GELU, LayerNorm, RMSNorm, Softmax).

Defined once as data in ops/composites.yaml; the matcher compiles each form into one
Datalog derived predicate. See the YAML file for the input-reference syntax.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType

from ruleengine.ops._data import load_ops_yaml


@dataclass(frozen=True)
class InputRef:
    """One input port of a form node: an external tensor, another node, or a constant."""

    kind: str  # "external" | "any" | "node" | "const"
    name: str = ""  # external variable name (without "$") or node id
    value: float = 0.0  # const


@dataclass(frozen=True)
class FormNode:
    id: str
    op: str
    inputs: tuple[InputRef, ...]


@dataclass(frozen=True)
class CompositeForm:
    """One decomposed form. ``nodes[-1]`` produces the output; ``$x`` is the main input."""

    name: str
    composite: str
    nodes: tuple[FormNode, ...]
    affine: bool | None = None
    variant: str | None = None
    # op types that may not produce the main input $x (e.g. Sub: a LayerNorm's inside)
    main_input_not_from: tuple[str, ...] = ()

    @property
    def output(self) -> FormNode:
        return self.nodes[-1]

    @property
    def entry(self) -> FormNode:
        """The first node reading the main input ``$x`` (where the previous op connects)."""
        for n in self.nodes:
            if any(r.kind == "external" and r.name == "x" for r in n.inputs):
                return n
        return self.nodes[0]

    def node(self, node_id: str) -> FormNode:
        return next(n for n in self.nodes if n.id == node_id)

    @property
    def op_types(self) -> frozenset[str]:
        return frozenset(n.op for n in self.nodes)


@dataclass(frozen=True)
class Composite:
    name: str
    forms: tuple[CompositeForm, ...]
    description: str = ""
    variant: str | None = None
    params: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # -> $var


def _ref(raw: object) -> InputRef:
    if isinstance(raw, bool):
        raise ValueError(f"bad composite input reference {raw!r}")
    if isinstance(raw, (int, float)):
        return InputRef("const", value=float(raw))
    text = str(raw)
    if text == "$_":
        return InputRef("any")
    if text.startswith("$"):
        return InputRef("external", name=text[1:])
    return InputRef("node", name=text)


@cache
def _table() -> tuple[Mapping[str, Composite], Mapping[str, tuple[str, ...]], float]:
    data = load_ops_yaml("composites.yaml", "composites")
    out: dict[str, Composite] = {}
    for cname, spec in data["composites"].items():
        forms = []
        for f in spec["forms"]:
            nodes = tuple(
                FormNode(n["id"], n["op"], tuple(_ref(r) for r in n["inputs"])) for n in f["nodes"]
            )
            ids = [n.id for n in nodes]
            for n in nodes:
                for r in n.inputs:
                    if r.kind == "node" and r.name not in ids[: ids.index(n.id)]:
                        raise ValueError(f"composite form {f['name']}: unknown node {r.name!r}")
            forms.append(
                CompositeForm(
                    f["name"],
                    cname,
                    nodes,
                    f.get("affine"),
                    spec.get("variant"),
                    tuple(spec.get("main_input_not_from", ())),
                )
            )
        params = {k: v.lstrip("$") for k, v in (spec.get("params") or {}).items()}
        out[cname] = Composite(
            cname,
            tuple(forms),
            spec.get("description", ""),
            spec.get("variant"),
            MappingProxyType(params),
        )
    groups = {k: tuple(v) for k, v in (data.get("groups") or {}).items()}
    for g, members in groups.items():
        unknown = [m for m in members if m not in out]
        if unknown:
            raise ValueError(f"composite group {g}: unknown composites {unknown}")
    return MappingProxyType(out), MappingProxyType(groups), float(data.get("const_rtol", 1e-3))


def composites() -> Mapping[str, Composite]:
    """Composite name -> its forms."""
    return _table()[0]


def composite_groups() -> Mapping[str, tuple[str, ...]]:
    """Group name (e.g. ``gelu``) -> the composites it stands for."""
    return _table()[1]


def const_rtol() -> float:
    """Relative tolerance for the constants of composite forms (float32 rounding)."""
    return _table()[2]


def composite_names() -> frozenset[str]:
    """Every name an alias may use as its ``composite``: composites and groups."""
    return frozenset(composites()) | frozenset(composite_groups())


def expand_composite(name: str) -> tuple[Composite, ...]:
    """A composite or group name -> the composites it stands for (unknown: empty)."""
    table = composites()
    if name in table:
        return (table[name],)
    return tuple(table[m] for m in composite_groups().get(name, ()))
