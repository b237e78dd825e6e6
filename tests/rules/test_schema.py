"""The bundled JSON Schemas are valid 2020-12 and document every field."""

from __future__ import annotations

import json

import jsonschema
import pytest

from ruleengine.resources import schema_path


def _undocumented(node, path="") -> list[str]:
    out = []
    if isinstance(node, dict):
        for key, value in node.get("properties", {}).items():
            if isinstance(value, dict) and "description" not in value and "$ref" not in value:
                if "/if" not in path:  # `if` clauses only select a constraint type
                    out.append(f"{path}.{key}")
        for key, value in node.items():
            out += _undocumented(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _undocumented(value, f"{path}[{i}]")
    return out


@pytest.mark.parametrize("name", ["rule", "ops"])
def test_schema_valid_and_documented(name: str):
    schema = json.loads(schema_path(name).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"].endswith("2020-12/schema")
    if name == "rule":
        assert _undocumented(schema) == []


def test_constraint_types_listed_once():
    schema = json.loads(schema_path("rule").read_text(encoding="utf-8"))
    c = schema["$defs"]["constraint"]
    types = c["properties"]["type"]["enum"]
    covered = [b["if"]["properties"]["type"]["const"] for b in c["allOf"]]
    assert (
        sorted(types)
        == sorted(covered)
        == sorted(
            [
                "dtype_match",
                "shape_constraint",
                "memory_limit",
                "workspace_size",
                "channel_divisibility",
                "single_consumer",
                "ub_fit",
            ]
        )
    )
