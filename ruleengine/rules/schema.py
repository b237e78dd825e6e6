"""JSON Schema validation of one rule document, with findings located at line:column.

jsonschema reports paths into the data (``match.ops[0].params``); the YAML marks turn
them back into file positions. Before validating, values YAML 1.1 readers would have
typed differently are coerced where the schema expects them (``yes`` -> true where a
boolean is expected, ``"10"`` -> 10 where an integer is), each with a warning.
"""

from __future__ import annotations

import difflib
import json
import math
from functools import cache
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Diagnostic
from ruleengine.resources import schema_path
from ruleengine.yamlio import YAML11_BOOLS, Document, resolve_plain

_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "object": "a mapping",
    "array": "a list",
    "null": "null",
}


@cache
def rule_schema() -> dict:
    return json.loads(schema_path("rule").read_text(encoding="utf-8"))


@cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(rule_schema())


def dotted(path: tuple[str | int, ...] | list) -> str:
    """``("match", "ops", 0, "type")`` -> ``match.ops[0].type``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "the rule"


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, int):
        return f"integer {value}"
    return f"number {value!r}"


def _set(data: Any, path: tuple, value: Any) -> None:
    target = data
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value


def _coerce(doc: Document, diags: list[Diagnostic]) -> list[ValidationError]:
    """Retype values whose YAML 1.1 reading is what the author meant (with a warning).

    Returns the schema errors left afterwards (usually found in a single pass).
    """
    while True:
        changed = False
        done: set[tuple] = set()
        errors = list(_validator().iter_errors(doc.data))
        for err in errors:
            if err.validator != "type" or tuple(err.absolute_path) in done:
                continue
            expected = err.validator_value
            expected = [expected] if isinstance(expected, str) else list(expected)
            path = tuple(err.absolute_path)
            inst = err.instance
            if not path or not isinstance(inst, str):
                continue
            if "boolean" in expected and path in doc.marks.yaml11_bools:
                _set(doc.data, path, YAML11_BOOLS[inst.lower()])
                word = str(YAML11_BOOLS[inst.lower()]).lower()
                diags.append(
                    codes.make(
                        "yaml11-boolean",
                        f"{dotted(path)}: {inst!r} read as {word}",
                        doc.marks.value(path),
                        hint=f"write {word} (YAML 1.2 reads {inst!r} as a string)",
                    )
                )
                changed = True
                done.add(path)
                continue
            if {"integer", "number"} & set(expected):
                number = resolve_plain(inst.strip())
                if isinstance(number, bool) or not isinstance(number, int | float):
                    continue
                if "integer" in expected and "number" not in expected:
                    if isinstance(number, float):
                        if not number.is_integer():
                            continue
                        number = int(number)
                _set(doc.data, path, number)
                diags.append(
                    codes.make(
                        "quoted-number",
                        f"{dotted(path)}: the string {inst!r} is read as the number {number}",
                        doc.marks.value(path),
                        hint=f"write {inst} without quotes",
                    )
                )
                changed = True
                done.add(path)
        if not changed:
            return errors


def _coerce_params(doc: Document, diags: list[Diagnostic]) -> None:
    """Plain yes/no/on/off in op params are booleans (ONNX attributes never spell them)."""
    for path in sorted(doc.marks.yaml11_bools, key=str):
        if len(path) >= 2 and "params" in path[:-1]:
            try:
                target = doc.data
                for part in path[:-1]:
                    target = target[part]
                value = target[path[-1]]
            except (KeyError, IndexError, TypeError):
                continue
            if isinstance(value, str) and value.lower() in YAML11_BOOLS:
                target[path[-1]] = YAML11_BOOLS[value.lower()]
                word = str(YAML11_BOOLS[value.lower()]).lower()
                diags.append(
                    codes.make(
                        "yaml11-boolean",
                        f"{dotted(path)}: {value!r} read as {word}",
                        doc.marks.value(path),
                        hint=f"write {word} (YAML 1.2 reads {value!r} as a string)",
                    )
                )


def _known_props(schema: dict) -> list[str]:
    names = list(schema.get("properties", {}))
    for sub in schema.get("allOf", []):
        names += list(sub.get("then", {}).get("properties", {}))
    return sorted(set(names))


def _error_to_diags(err: ValidationError, doc: Document) -> list[Diagnostic]:
    """One schema error -> findings with a location and a hint: the first mapping that
    applies, else the deepest cause's, else the schema's own message."""
    path = tuple(err.absolute_path)
    where = dotted(path)
    for mapping in _MAPPINGS:
        got = mapping(err, doc, path, where)
        if got is not None:
            return got
    # if/then, allOf, oneOf without a better mapping: use the deepest cause when there is one.
    if err.context:
        deepest = max(err.context, key=lambda e: len(e.absolute_path))
        return _error_to_diags(deepest, doc)
    return [
        codes.make(
            "invalid-value",
            f"{where}: {err.message}",
            doc.marks.value(path),
            hint="see schemas/rule.schema.json (autofusion rule-schema) for this field",
        )
    ]


def _missing_fields(
    err: ValidationError, doc: Document, path: tuple, where: str
) -> list[Diagnostic] | None:
    if err.validator != "required":
        return None
    missing = [p for p in err.validator_value if p not in (err.instance or {})]
    context = "the rule" if not path else where
    return [
        codes.make(
            "missing-field",
            f"missing required field {name!r} in {context}",
            doc.marks.value(path) if path else doc.marks.value(()),
            hint=_required_hint(path, name),
        )
        for name in missing
    ]


def _unknown_fields(
    err: ValidationError, doc: Document, path: tuple, where: str
) -> list[Diagnostic] | None:
    if err.validator != "additionalProperties" or not isinstance(err.instance, dict):
        return None
    known = list(err.schema.get("properties", {}))
    extra = [k for k in err.instance if k not in known]
    out = []
    for key in extra:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        hint += f"known fields here: {', '.join(sorted(known))}"
        out.append(
            codes.make(
                "unknown-field",
                f"unknown field {key!r} in {where}",
                doc.marks.key((*path, key)),
                hint=hint,
            )
        )
    return out


def _special_pattern(
    err: ValidationError, doc: Document, path: tuple, where: str
) -> list[Diagnostic] | None:
    if err.validator != "pattern":
        return None
    special = _pattern_diag(err, doc, path, where)
    return None if special is None else [special]


def _port_name(
    err: ValidationError, doc: Document, path: tuple, where: str
) -> list[Diagnostic] | None:
    if err.validator != "propertyNames":
        return None
    bad = err.instance
    return [
        codes.make(
            "invalid-value",
            f"{where}: {bad!r} is not an input port name",
            doc.marks.key((*path, bad)) if isinstance(bad, str) else doc.marks.value(path),
            hint="name ports input0, input1, ...",
        )
    ]


def _wrong_type(
    err: ValidationError, doc: Document, path: tuple, where: str
) -> list[Diagnostic] | None:
    if err.validator != "type":
        return None
    expected = err.validator_value
    expected = [expected] if isinstance(expected, str) else expected
    want = " or ".join(_TYPE_NAMES.get(t, t) for t in expected)
    return [
        codes.make(
            "wrong-type",
            f"{where} must be {want}, got {_describe(err.instance)}",
            doc.marks.value(path),
            hint=_type_hint(path, expected, err.instance),
        )
    ]


def _not_allowed(
    err: ValidationError, doc: Document, path: tuple, where: str
) -> list[Diagnostic] | None:
    v = err.validator
    if v == "enum" and len(path) >= 3 and path[0] == "constraints" and path[-1] == "type":
        allowed = err.validator_value
        close = difflib.get_close_matches(str(err.instance), allowed, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return [
            codes.make(
                "unknown-constraint-type",
                f"{where}: unknown constraint type {err.instance!r}",
                doc.marks.value(path),
                hint=hint + f"known types: {', '.join(allowed)}",
            )
        ]
    if v in ("enum", "const"):
        allowed = err.validator_value if v == "enum" else [err.validator_value]
        return [
            codes.make(
                "invalid-value",
                f"{where}: {_describe(err.instance)} is not allowed",
                doc.marks.value(path),
                hint=f"use one of: {', '.join(map(str, allowed))}",
            )
        ]
    return None


def _bad_scope(
    err: ValidationError, doc: Document, path: tuple, where: str
) -> list[Diagnostic] | None:
    if err.validator != "oneOf" or not path or path[-1] != "scope":
        return None
    return [
        codes.make(
            "invalid-value",
            f"{where}: must be a unit name like ai_core or a list of them, "
            f"got {_describe(err.instance)}",
            doc.marks.value(path),
            hint="e.g. scope: [ai_core]",
        )
    ]


# validators whose message is clear as it stands (a bound, a length, a pattern)
_PLAIN_VALIDATORS = frozenset(
    (
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "uniqueItems",
        "minProperties",
        "maxProperties",
    )
)


def _out_of_bounds(
    err: ValidationError, doc: Document, path: tuple, where: str
) -> list[Diagnostic] | None:
    if err.validator not in _PLAIN_VALIDATORS:
        return None
    return [
        codes.make(
            "invalid-value",
            f"{where}: {err.message}",
            doc.marks.value(path),
            hint=_value_hint(err.validator, err),
        )
    ]


# tried in this order; the first that maps the error wins
_MAPPINGS = (
    _missing_fields,
    _unknown_fields,
    _special_pattern,
    _port_name,
    _wrong_type,
    _not_allowed,
    _bad_scope,
    _out_of_bounds,
)


def _pattern_diag(err: ValidationError, doc: Document, path: tuple, where: str):
    """Friendlier messages for the schema's name, version and port patterns."""
    pat = str(err.validator_value)
    inst = err.instance
    if "propertyNames" in err.schema_path:
        return codes.make(
            "invalid-value",
            f"{where}: {inst!r} is not an input port name",
            doc.marks.key((*path, inst)) if isinstance(inst, str) else doc.marks.value(path),
            hint="name ports input0, input1, ... (input K is the node's K-th input)",
        )
    if pat.startswith("^[A-Za-z_]"):
        allowed = "letters, digits, _" + (", . or -" if "." in pat else "")
        return codes.make(
            "invalid-value",
            f"{where}: {inst!r} is not a valid name",
            doc.marks.value(path),
            hint=f"use {allowed}, starting with a letter or _",
        )
    if pat.startswith("^1"):
        return codes.make(
            "invalid-value",
            f"{where}: unsupported rule format version {inst!r}",
            doc.marks.value(path),
            hint='the rule format version is "1.0"',
        )
    return None


def _required_hint(path: tuple, name: str) -> str:
    if not path and name == "match":
        return "add `match:` with an `ops:` list of op patterns"
    if not path and name == "name":
        return "add `name: MyRule` (unique across the rule set)"
    if not path and name == "rewrite":
        return "add `rewrite:` with `target_op: FusedOpName`"
    if path and path[-1] == "rewrite" and name == "target_op":
        return "add `target_op: FusedOpName` under rewrite"
    return f"add `{name}:`"


def _type_hint(path: tuple, expected: list, value: Any) -> str:
    if "boolean" in expected:
        return "write true or false"
    if "integer" in expected and isinstance(value, str):
        return "write a whole number without quotes"
    if "array" in expected:
        return "write a list, e.g. [a, b] or one `- item` per line"
    if "object" in expected:
        return "write `key: value` pairs indented under this field"
    return f"write {' or '.join(_TYPE_NAMES.get(t, t) for t in expected)}"


def _value_hint(validator: str, err: ValidationError) -> str:
    if err.absolute_path and err.absolute_path[-1] == "input_count_range":
        return "write [low, high], e.g. [1, 2]"
    if validator == "pattern":
        pat = err.validator_value
        if pat.startswith("^[A-Za-z_]"):
            return "use letters, digits and underscores, starting with a letter"
        if pat.startswith("^1"):
            return 'the only rule format version is "1.0"'
        return f"the value must match {pat}"
    if validator == "uniqueItems":
        return "remove the repeated entries"
    return "see schemas/rule.schema.json (autofusion rule-schema) for the allowed range"


def validate_document(doc: Document) -> list[Diagnostic]:
    """Coerce YAML 1.1 surprises (warnings), then report every schema violation."""
    diags: list[Diagnostic] = []
    errors = _coerce(doc, diags)
    _coerce_params(doc, diags)
    seen: set[tuple] = set()
    for err in errors:
        for d in _error_to_diags(err, doc):
            key = (d.code, d.message, d.location)
            if key not in seen:
                seen.add(key)
                diags.append(d)
    diags += _nan_diags(doc)
    return diags


def _nan_diags(doc: Document) -> list[Diagnostic]:
    """``.nan`` anywhere: it passes the schema's bounds (every comparison with NaN is
    false), so a NaN benefit_threshold would fuse everything and a NaN param match nothing."""
    found: list[tuple] = []

    def walk(value: Any, path: tuple) -> None:
        if isinstance(value, float) and math.isnan(value):
            found.append(path)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, (*path, k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, (*path, i))

    walk(doc.data, ())
    return [
        codes.make(
            "invalid-value",
            f"{dotted(path)}: .nan is not a usable number",
            doc.marks.value(path),
            hint="write an ordinary number in its place (NaN equals nothing, not even itself)",
        )
        for path in found
    ]
