"""Shared helpers for the rule-library tests: fixture discovery and fixture models.

A fixture is ``fixtures/<rule name>/positive_*.onnxtxt`` or ``negative_*.onnxtxt``: a model
in the ONNX text format, preceded by ``# expect: n1,n2,...`` lines (one per candidate the
rule must produce, as node names); a negative may add ``# near-miss: code,...``: the
reasons the matcher must record for rejecting the structural match (what ``explain``
shows). Graph inputs named ``W_*`` become initializers filled with seeded random data, so
fixtures stay short while weights are real constants.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
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
    near_misses: frozenset[str] = frozenset()  # codes a negative must report (explain's "why")

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
        near: set[str] = set()
        for line in path.read_text().splitlines():
            if line.startswith("# expect:"):
                names = line.split(":", 1)[1]
                expected.append(frozenset(n.strip() for n in names.split(",") if n.strip()))
            elif line.startswith("# near-miss:"):
                near.update(c.strip() for c in line.split(":", 1)[1].split(",") if c.strip())
        out.append(Fixture(path.parent.name, path, positive, frozenset(expected), frozenset(near)))
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


# --------------------------------------------------------------------------- semantics probe

PROBE_RULE = """
name: two_roots
match:
  ops:
    - type: Relu
    - type: Sigmoid
      input_sources:
        input0: {source_type: const_or_param}
    - type: Add
      input_sources:
        input0: {from_op: 0}
        input1: {from_op: 1}
rewrite:
  target_op: T
"""

PROBE_MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[4] a, float[4] b) => (float[4] y)
{
  [r] ra = Relu (a)
  [s] sb = Sigmoid (b)
  [add] y = Add (ra, sb)
}
"""


@cache
def matcher_supports_multiple_roots() -> bool:
    """Whether an op with kind-only input_sources starts a new root (the contract)."""
    import tempfile

    from ruleengine.graph import load_graph
    from ruleengine.match import find_candidates
    from ruleengine.rules import load_rule_set

    with tempfile.TemporaryDirectory() as tmp:
        rule = Path(tmp) / "two_roots.yaml"
        rule.write_text(PROBE_RULE)
        model = Path(tmp) / "m.onnx"
        onnx.save(onnx.parser.parse_model(PROBE_MODEL), model)
        result = find_candidates(load_graph(model), load_rule_set([rule]))
    return any(c.node_set == {"r", "s", "add"} for c in result.candidates)
