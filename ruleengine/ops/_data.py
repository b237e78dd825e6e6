"""Reading the bundled op-vocabulary YAML files (validated against their JSON Schemas)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from ruleengine.resources import data_dir, schema_path


def load_ops_yaml(filename: str, schema: str, path: Path | None = None) -> dict[str, Any]:
    """Load ``ops/<filename>`` (or ``path``) and validate it; a bad file is a packaging bug."""
    path = path or data_dir("ops") / filename
    with open(path, encoding="utf-8") as fh:
        data = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    with open(schema_path(schema), encoding="utf-8") as fh:
        jsonschema.validate(data, json.load(fh))
    return data
