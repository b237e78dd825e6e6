"""Shared helpers for the rule-library tests: fixture discovery and fixture models.

A fixture is ``fixtures/<rule name>/positive_*.onnxtxt`` or ``negative_*.onnxtxt``: a model
in the ONNX text format, preceded by ``# expect: n1,n2,...`` lines (one per candidate the
rule must produce, as node names). Graph inputs named ``W_*`` become initializers filled
with seeded random data, so fixtures stay short while weights are real constants.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
from onnx import numpy_helper

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules"
SHARED = REPO / ".." / "shared"
MODELS = SHARED / "models"


@dataclass(frozen=True)
class Fixture:
    rule: str
    path: Path
    positive: bool
    expected: frozenset[frozenset[str]]

    @property
    def id(self) -> str:
        return f"{self.rule}/{self.path.stem}"


def rule_file(rule: str) -> Path:
    """The bundled YAML file of a rule (files are named after their rule)."""
    hits = sorted(RULES.glob(f"*/{rule}.yaml"))
    assert hits, f"no bundled rule file for fixture folder {rule!r}"
    return hits[0]


def discover() -> list[Fixture]:
    out = []
    for path in sorted(FIXTURES.glob("*/*.onnxtxt")):
        positive = path.name.startswith("positive_")
        assert positive or path.name.startswith("negative_"), path
        expected = []
        for line in path.read_text().splitlines():
            if line.startswith("# expect:"):
                names = line.split(":", 1)[1]
                expected.append(frozenset(n.strip() for n in names.split(",") if n.strip()))
        out.append(Fixture(path.parent.name, path, positive, frozenset(expected)))
    return out


def build_model(text: str, seed: int = 0) -> onnx.ModelProto:
    """Parse ONNX text; turn ``W_*`` graph inputs into random initializers."""
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    model = onnx.parser.parse_model(body)
    rng = np.random.default_rng(seed)
    graph = model.graph
    keep = []
    for inp in graph.input:
        if not inp.name.startswith("W_"):
            keep.append(inp)
            continue
        dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type)
        data = rng.standard_normal(dims).astype(dtype)
        if inp.name.endswith(("_v", "_var")):
            data = np.abs(data) + 0.5  # a variance must be positive
        graph.initializer.append(numpy_helper.from_array(data, inp.name))
    del graph.input[:]
    graph.input.extend(keep)
    return model


def save_fixture_model(fixture: Fixture, directory: Path) -> Path:
    model = build_model(fixture.path.read_text())
    onnx.checker.check_model(model)
    out = directory / f"{fixture.rule}__{fixture.path.stem}.onnx"
    onnx.save(model, out)
    return out
