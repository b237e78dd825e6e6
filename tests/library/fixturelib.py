"""Shared helpers for the rule-library tests: paths, and the probe of the matcher contract
the multi-root rules rely on.

The rule tests themselves live beside the rules (``rules/<preset>/<rule>.tests/``) and are
run by ``autofusion test`` (see ``test_fixtures.py`` and docs/rule-tests.md).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import onnx
import onnx.parser

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules"
SHARED = REPO / ".." / "shared"
MODELS = SHARED / "models"


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
