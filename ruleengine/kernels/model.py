"""Records of the kernel catalog: what a fused kernel takes, returns and computes.

A catalog entry is the contract between a rule's ``rewrite`` and the kernel generator:
input ports and outputs (each with where to find its tensor in a matched group),
typed attributes with their allowed values, and reference semantics as ONNX functions
("forms", one per structure the kernel accepts). Loaded from data (kernels/*.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ruleengine.diagnostics.model import Location

# The ONNX domain of every fused node and of its kernel's reference function.
FUSED_DOMAIN = "autofusion"


@dataclass(frozen=True)
class Binding:
    """Where a port's tensor is in a group: input ``input`` (an index, or "external":
    the first input from outside the group) or output ``output`` of the ``nth`` node of
    type ``op`` in the group's topological order."""

    op: str
    nth: int = 0
    input: int | str | None = None
    output: int | None = None
    reciprocal: bool = False  # an attribute bound to a constant takes 1 / its value
    # with input "external": only a side operand (broadcast into the node's output: a
    # weight, a bias, a mask) or only the main one (of the output's shape)
    operand: str | None = None
    # an attribute bound to a static dimension of the tensor found (inside the group too):
    # the head count is dim 1 of the scores MatMul's Q
    dim: int | None = None
    # an attribute bound to the product of the scalar constants every node of type ``op``
    # reads on ``input`` (nth ignored; nodes without one are skipped): the scale of an
    # attention that multiplies Q and K by sqrt(scale) each
    all: bool = False


@dataclass(frozen=True)
class Port:
    name: str
    optional: bool = False
    bind: tuple[Binding, ...] = ()
    description: str | None = None


@dataclass(frozen=True)
class KernelAttr:
    name: str
    type: str  # string, int, float, bool, ints, floats
    values: tuple[Any, ...] | None = None  # allowed values (None: any of the type)
    default: Any = None
    from_op: str | None = None  # bound from this op of the group ...
    from_attribute: str | None = None  # ... its attribute of this name (default: name)
    description: str | None = None


@dataclass(frozen=True)
class Form:
    """One structure the kernel accepts and what it computes on it (an ONNX function)."""

    name: str
    ops: tuple[tuple[str, ...], ...] | None  # the op type sequences it takes (None: any)
    inputs: tuple[str, ...]  # port names the function takes, in order
    outputs: tuple[str, ...]
    function: bytes  # serialized FunctionProto (domain autofusion, overload = name)
    # the attribute values this form computes (the variant it is): a call whose attribute
    # says otherwise does not fit it; an attribute the rule leaves unset takes this value
    attributes: tuple[tuple[str, Any], ...] = ()
    # bindings of this form's structure, replacing the entry's: ports, and attributes
    # bound to the value of a small constant of the group (an epsilon, a scale)
    bind: tuple[tuple[str, tuple[Binding, ...]], ...] = ()
    min_opset: int = 1  # the first default-domain opset that has every op the body uses


@dataclass(frozen=True)
class Role:
    """One role of a structural contract: which ops may play it, how many, how its
    operands are read (docs/kernels.md, "Structural contracts")."""

    name: str
    ops: tuple[str, ...]  # ONNX op types and @classes (ops/classes.yaml)
    min: int = 0
    max: int | None = None  # None: any number
    operands: str = "any"  # any | broadcast
    first: bool = False  # the group's first node plays this role
    description: str | None = None


@dataclass(frozen=True)
class Structure:
    """A structural contract: what a code-generated kernel can be generated from. Each
    node of a group plays the first role whose ops include its op type."""

    roles: tuple[Role, ...]
    max_outputs: int | None = None
    description: str | None = None


@dataclass(frozen=True)
class KernelEntry:
    name: str
    version: int
    description: str
    inputs: tuple[Port, ...] | None  # None: any inputs (the group's, in first-use order)
    outputs: tuple[Port, ...] | None
    attributes: tuple[KernelAttr, ...]
    forms: tuple[Form, ...]  # empty: no reference semantics
    location: Location | None = None
    open_attributes: bool = False  # no ``attributes`` section: any attribute is accepted
    structure: Structure | None = None  # the structural contract (generated kernels)

    def attribute(self, name: str) -> KernelAttr | None:
        return next((a for a in self.attributes if a.name == name), None)


@dataclass(frozen=True)
class Catalog:
    entries: tuple[KernelEntry, ...]
    sources: tuple[str, ...] = ()

    def get(self, name: str) -> KernelEntry | None:
        return next((e for e in self.entries if e.name == name), None)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries)


@dataclass(frozen=True)
class Contract:
    """A group's contract as bound: the entry, the form, the port tensors, the outcome."""

    entry: str | None  # None: no catalog entry
    version: int | None = None
    form: str | None = None
    ports: tuple[tuple[str, str], ...] = ()  # (port, tensor) for bound inputs and outputs
    attributes: tuple[tuple[str, Any], ...] = ()
    status: str = "no-contract"  # bound, structural, no-reference, unbound, no-contract
    reason: str | None = None
    source: str | None = None
    verified: str = "not at all"  # whole model, per group, not at all
