"""Frozen records of the op vocabulary: framework aliases, op classes and composites.

The vocabulary itself is data (``ops/*.yaml`` at the top of the checkout, validated by
``schemas/ops.schema.json``); these records are what the loader turns it into.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from ruleengine.records import FrozenMap, ParamValue


class ParamKind(StrEnum):
    """How a rule param written against an op type is checked on a real ONNX node."""

    ATTR = "attr"  # an ONNX attribute (renamed, values mapped), ONNX default when absent
    ALWAYS = "always"  # a framework-only param whose value is fixed for every ONNX node
    INPUT_CONST = "input_const"  # the value of a constant input (e.g. Dropout ratio, opset>=12)
    SHAPE = "shape"  # a property computed from tensor shapes (named check, e.g. broadcast)
    VARIANT = "variant"  # selects which form of a composite matched (Gelu approximate)


@dataclass(frozen=True)
class ParamMapping:
    """One param a rule author may write for an alias, and how it maps onto ONNX."""

    name: str
    kind: ParamKind
    onnx_attr: str | None = None  # ATTR: the ONNX attribute name
    value_map: FrozenMap = field(default_factory=FrozenMap)  # ATTR: rule value -> ONNX value
    always: ParamValue = None  # ALWAYS: the only value any ONNX node has
    input_index: int | None = None  # INPUT_CONST: which input holds the value
    default: ParamValue = None  # INPUT_CONST: value when the input is absent
    check: str | None = None  # SHAPE: name of the shape check (e.g. "broadcast")
    variants: FrozenMap = field(default_factory=FrozenMap)  # VARIANT: value -> variant name
    description: str | None = None
    # INPUT_CONST: below this opset the value is the attribute ``onnx_attr`` instead.
    attr_before_opset: int | None = None


@dataclass(frozen=True)
class OpAlias:
    """A framework-style op name (Conv2d, BatchNorm, Swish, ...).

    It stands for one or more ONNX op types, and/or for a composite (a decomposed form,
    defined once in the composites data). ``params`` lists params beyond the ONNX
    attributes of ``onnx_types``; ONNX attribute names are always accepted too.
    """

    name: str
    onnx_types: tuple[str, ...] = ()
    composite: str | None = None
    params: FrozenMap = field(default_factory=FrozenMap)  # name -> ParamMapping
    description: str | None = None
    composites: tuple[str, ...] = ()  # every composite the alias may match (composite = [0])
    const_operand: bool = False  # one input must be a constant (BiasAdd = Add with a const)
    implied_params: FrozenMap = field(default_factory=FrozenMap)  # hold for every match
