"""What a rule's op type binds, and how many matcher clauses a rule expands to.

An op type is an ONNX name, an alias, an ``@class`` or a composite name; it binds
single nodes of some types and/or composite forms (``resolve_type``). A rule expands to
one matcher clause per alternative, repeat length and single/composite choice
(``clause_count``); ``check`` refuses a rule over ``MAX_CLAUSES_PER_RULE`` (AF330) and
the matcher refuses it too (AF546), both before any model is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ruleengine.ops.classes import op_classes
from ruleengine.ops.composites import CompositeForm, expand_composite
from ruleengine.ops.model import OpAlias
from ruleengine.rules.model import Rule

# Clauses one rule may expand to (alternatives x repeat lengths x composite forms). Each
# clause is a separate query; with repeated ops of overlapping types every clause answers
# at every anchor, so cost grows with this product (measured: 3 @elementwise ops each
# repeat 1..16, 4,096 clauses, took 54 s and 3 GB on a 200-node chain). The bundled
# library needs at most 768 (attention_heads); `check` refuses more (AF330) before any model.
MAX_CLAUSES_PER_RULE = 1024


@dataclass(frozen=True)
class SlotSpec:
    """What one pattern op can bind: single nodes of ``types`` and/or composite forms."""

    types: frozenset[str]
    forms: tuple[CompositeForm, ...] = ()
    alias: OpAlias | None = None


def resolve_type(type_name: str, aliases: Mapping[str, OpAlias]) -> SlotSpec:
    """A rule op type (ONNX name, alias, ``@class`` or composite name) -> what it binds."""
    if type_name.startswith("@"):
        return SlotSpec(op_classes().get(type_name, frozenset()))
    alias = aliases.get(type_name)
    if alias is not None:
        names = tuple(alias.composites) or ((alias.composite,) if alias.composite else ())
        forms: list[CompositeForm] = []
        for name in names:
            for comp in expand_composite(name):
                forms.extend(f for f in comp.forms if f not in forms)
        return SlotSpec(frozenset(alias.onnx_types), tuple(forms), alias)
    comps = expand_composite(type_name)
    if comps:
        return SlotSpec(frozenset(), tuple(f for c in comps for f in c.forms))
    return SlotSpec(frozenset({type_name}))


def clause_count(rule: Rule, aliases: Mapping[str, OpAlias]) -> int:
    """How many clauses the matcher's ``concretize`` makes of ``rule``, without making them."""
    total = 0
    for alt in rule.alternatives:
        n = 1
        for op in alt.ops:
            spec = resolve_type(op.type, aliases)
            lo, hi = max(op.repeat_min, 0), max(op.repeat_max, op.repeat_min, 1)
            kinds = (1 if spec.types else 0) + len(spec.forms)
            n *= kinds * (hi - max(lo, 1) + 1) + (1 if lo == 0 else 0)  # + absent
        total += n
    return total
