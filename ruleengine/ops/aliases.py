"""The op alias table and the op-type vocabulary rule authors may use.

``ops/aliases.yaml`` (data, schema-checked by ``schemas/ops.schema.json``) maps
framework-style names (Conv2d, BatchNorm, Swish, ...) onto ONNX op types and composites.
This module loads it into frozen ``OpAlias`` records and answers the questions the rule
checker asks: is this op type known, which params does it have, what does it stand for.
ONNX facts come from ``onnx.defs`` (every opset version, default domain).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache

from ruleengine.ops.model import OpAlias, ParamKind, ParamMapping
from ruleengine.records import FrozenMap
from ruleengine.resources import data_dir, schema_path

# Fallbacks used until (or if) helper B's ops/classes.yaml and ops/composites.yaml exist.
_FALLBACK_CLASSES: Mapping[str, frozenset[str]] = {
    "@view": frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"}),
    "@elementwise": frozenset(
        {"Relu", "Sigmoid", "Tanh", "Add", "Sub", "Mul", "Div", "Neg", "Exp", "Sqrt", "Erf"}
    ),
    "@broadcast": frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Where"}),
    "@reduce": frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "Softmax"}),
    "@cube": frozenset({"MatMul", "Gemm", "Conv"}),
    "@opaque": frozenset({"If", "Loop", "Scan"}),
}
_FALLBACK_COMPOSITES = frozenset(
    {"silu", "gelu_erf", "gelu_tanh", "layernorm", "rmsnorm", "softmax"}
)
VIEW_OPS_DEFAULT = _FALLBACK_CLASSES["@view"]


class AliasTableError(Exception):
    """ops/aliases.yaml is broken: a bug in the shipped data, caught by the tests."""


@cache
def alias_table() -> Mapping[str, OpAlias]:
    """Alias name -> OpAlias, loaded once from the bundled ops/aliases.yaml."""
    import jsonschema

    from ruleengine.yamlio import read_documents

    path = data_dir("ops") / "aliases.yaml"
    docs, diags = read_documents(path)
    if diags or len(docs) != 1:
        msgs = "; ".join(f"{d.location}: {d.message}" for d in diags)
        raise AliasTableError(f"{path}: cannot read alias table: {msgs or 'expected one document'}")
    data = docs[0].data
    schema = json.loads(schema_path("ops").read_text(encoding="utf-8"))
    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(data), key=lambda e: list(e.path)
    )
    if errors:
        raise AliasTableError(f"{path}: {errors[0].message} at {list(errors[0].path)}")
    table: dict[str, OpAlias] = {}
    for name, spec in data["aliases"].items():
        params = {pname: _param(pname, p) for pname, p in (spec.get("params") or {}).items()}
        composites = tuple(spec.get("composites") or ())
        table[name] = OpAlias(
            name=name,
            onnx_types=tuple(spec.get("onnx_types") or ()),
            composite=composites[0] if composites else None,
            params=FrozenMap(params),
            description=spec.get("description"),
            composites=composites,
            const_operand=bool(spec.get("const_operand", False)),
            implied_params=FrozenMap(_freeze(spec.get("implied_params") or {})),
        )
    return FrozenMap(table)


def _freeze(value: object) -> object:
    if isinstance(value, dict):
        return FrozenMap({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _param(name: str, p: Mapping) -> ParamMapping:
    value_map = FrozenMap(tuple((a, b) for a, b in p.get("value_map") or ()))
    return ParamMapping(
        name=name,
        kind=ParamKind(p["kind"]),
        onnx_attr=p.get("onnx_attr"),
        value_map=value_map,
        always=_freeze(p.get("always")),
        input_index=p.get("input_index"),
        default=p.get("default"),
        check=p.get("check"),
        variants=FrozenMap(p.get("variants") or {}),
        description=p.get("description"),
        attr_before_opset=p.get("attr_before_opset"),
    )


# ---------------------------------------------------------------------------- ONNX facts


@dataclass(frozen=True)
class OnnxOpInfo:
    """What any opset version of an ONNX op (default domain) may have."""

    name: str
    attributes: frozenset[str]
    max_inputs: int  # the largest input count across versions (2**31-1 for variadic)
    max_outputs: int
    min_inputs: int = 0  # the smallest required input count across versions
    attr_types: Mapping[str, str] = field(default_factory=dict)  # attr -> INT, FLOATS, ...


@cache
def onnx_ops() -> Mapping[str, OnnxOpInfo]:
    """Every ONNX op of the default domain, attributes unioned over all opset versions."""
    from ruleengine.graph.onnxlite import all_schemas_with_history  # no `import onnx`

    attrs: dict[str, set[str]] = {}
    max_in: dict[str, int] = {}
    max_out: dict[str, int] = {}
    min_in: dict[str, int] = {}
    types: dict[str, dict[str, str]] = {}
    schemas = [s for s in all_schemas_with_history() if s.domain in ("", "ai.onnx")]
    # Attributes dropped before opset 6 (consumed_inputs, ...) are not worth suggesting.
    modern = {s.name for s in schemas if s.since_version >= 6}
    for schema in sorted(schemas, key=lambda x: (x.name, x.since_version)):
        if schema.since_version < 6 and schema.name in modern:
            continue
        attrs.setdefault(schema.name, set()).update(schema.attributes)
        for attr_name, attr in schema.attributes.items():  # later versions win
            types.setdefault(schema.name, {})[attr_name] = attr.type.name
        max_in[schema.name] = max(max_in.get(schema.name, 0), schema.max_input)
        max_out[schema.name] = max(max_out.get(schema.name, 0), schema.max_output)
        min_in[schema.name] = min(min_in.get(schema.name, schema.min_input), schema.min_input)
    return {
        n: OnnxOpInfo(n, frozenset(a), max_in[n], max_out[n], min_in[n], types.get(n, {}))
        for n, a in sorted(attrs.items())
    }


@cache
def op_classes() -> Mapping[str, frozenset[str]]:
    """Op classes (@view, ...) from helper B's data, or a built-in fallback."""
    try:
        from ruleengine.ops.classes import op_classes as _classes

        classes = dict(_classes())
        if classes:
            return classes
    except Exception:  # the vocabulary module may not exist yet
        pass
    return dict(_FALLBACK_CLASSES)


@cache
def composite_names() -> frozenset[str]:
    """Composite names from helper B's data, or a built-in fallback."""
    try:
        from ruleengine.ops.composites import composite_names as _names

        names = frozenset(_names())
        if names:
            return names
    except Exception:  # the vocabulary module may not exist yet
        pass
    return _FALLBACK_COMPOSITES


def view_ops() -> frozenset[str]:
    """ONNX op types that only change metadata (move no data)."""
    return op_classes().get("@view", VIEW_OPS_DEFAULT)


# ---------------------------------------------------------------------------- vocabulary


@dataclass(frozen=True)
class OpTypeInfo:
    """How the rule checker understands one op ``type`` written in a rule."""

    name: str
    kind: str  # "alias" | "onnx" | "composite" | "class" | "unknown"
    onnx_types: tuple[str, ...] = ()
    composites: tuple[str, ...] = ()
    alias: OpAlias | None = None

    @property
    def known(self) -> bool:
        return self.kind != "unknown"

    def canonical(self) -> str:
        """A name that is equal for op types matching the same nodes (for conflicts)."""
        if self.kind in ("alias", "onnx"):
            parts = sorted(set(self.onnx_types)) + sorted(set(self.composites))
            return "|".join(parts) or self.name
        return self.name

    def param_names(self) -> frozenset[str] | None:
        """Valid params of the type, or None when unknown (composites, classes)."""
        if self.kind not in ("alias", "onnx"):
            return None
        ops = onnx_ops()
        names: set[str] = set()
        for t in self.onnx_types:
            if t in ops:
                names |= ops[t].attributes
        if self.alias is not None:
            names |= set(self.alias.params)
        return frozenset(names)

    def min_inputs(self) -> int | None:
        """Fewest inputs any node of this type must have, or None when not known."""
        if self.kind not in ("alias", "onnx") or self.composites:
            return None
        ops = onnx_ops()
        counts = [ops[t].min_inputs for t in self.onnx_types if t in ops]
        return min(counts) if counts else None

    def max_outputs(self) -> int | None:
        """Most outputs any node of this type can have, or None when not known."""
        if self.kind not in ("alias", "onnx") or self.composites:
            return None
        ops = onnx_ops()
        counts = [ops[t].max_outputs for t in self.onnx_types if t in ops]
        return max(counts) if counts else None

    def max_inputs(self) -> int | None:
        """Most inputs any node of this type can have, or None when not known."""
        if self.kind not in ("alias", "onnx") or self.composites:
            return None
        ops = onnx_ops()
        counts = [ops[t].max_inputs for t in self.onnx_types if t in ops]
        return max(counts) if counts else None


def op_type_info(name: str) -> OpTypeInfo:
    """Classify an op ``type`` from a rule: alias, ONNX op, composite, class or unknown."""
    aliases = alias_table()
    if name in aliases:
        a = aliases[name]
        return OpTypeInfo(name, "alias", a.onnx_types, a.composites, a)
    if name in onnx_ops():
        return OpTypeInfo(name, "onnx", (name,))
    if name in composite_names():
        return OpTypeInfo(name, "composite", (), (name,))
    if name.startswith("@"):
        classes = op_classes()
        if name in classes:
            return OpTypeInfo(name, "class", tuple(sorted(classes[name])))
    return OpTypeInfo(name, "unknown")


def known_type_names() -> list[str]:
    """Every op type a rule may use (for did-you-mean hints)."""
    return sorted(set(alias_table()) | set(onnx_ops()) | set(composite_names()) | set(op_classes()))
