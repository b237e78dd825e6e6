"""explain for people: the answer first, losers under their winner, short by default."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import onnx.parser
import pytest

from tests.cli.bert_stack import stacked_bert
from tests.rules.helpers import run_cli

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"

CHAIN = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[64,64] x) => (float[64,64] y, float[64,64] z, float[64,64] w)
{
  [soft_3] s = Softmax <axis: int = 1> (x)
  [abs_3] w = Abs (s)
  [relu_5] a = Relu (x)
  [sig_7] b = Sigmoid (a)
  [tanh_9] c = Tanh (b)
  [relu_10] y = Relu (c)
  [add_5] d = Add (x, x)
  [add_10] z = Abs (d)
}
"""

RULES = """name: chain
match:
  ops:
    - type: "@elementwise"
      repeat: {min: 2, max: 4}
rewrite:
  target_op: Chain
---
name: pair
priority: 5
match:
  ops:
    - type: Sigmoid
    - type: Tanh
rewrite:
  target_op: Pair
---
name: branchy
match:
  ops:
    - type: Add
      params: {axis: 1}
    - type: Abs
      input_sources: {input0: {from_op: 0}}
  branches:
    - ops:
        - type: Softmax
          params: {axis: 0}
        - type: Abs
          input_sources: {input0: {from_op: 0}}
rewrite:
  target_op: B
"""


@pytest.fixture
def case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    onnx.save(onnx.parser.parse_model(CHAIN), tmp_path / "m.onnx")
    (tmp_path / "rules.yaml").write_text(RULES)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_chosen_groups_come_first_with_losers_and_collapsed_sub_chains(case):
    res = run_cli("explain", "m.onnx", "--rules", "rules.yaml", "--all")
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert (
        out.index("Fused groups per rule") < out.index("Chosen groups") < out.index("Near misses")
    )
    block = out[out.index("#1 chain [relu_5 .. relu_10, 4 nodes]") :]
    assert "beat 1:\n        pair [sig_7 .. tanh_9, 2 nodes]" in block
    assert "less net; 2 nodes shared)" in block
    # the 2- and 3-op sub-chains of the chosen 4-op chain (sig_7..tanh_9 is pair's
    # duplicate): one line, not four
    assert "+ 4 shorter matches of chain inside this group (collapsed)" in block


def test_lost_to_is_structured_in_json_and_candidates_sort_naturally(case):
    doc = json.loads(run_cli("explain", "m.onnx", "--rules", "rules.yaml", "-f", "json").stdout)
    groups = {c["group"]: c for c in doc["candidates"] if c["group"]}
    pair = next(c for c in doc["candidates"] if c["rule"] == "pair")
    lost = pair["lost_to"]
    winner = groups[lost["group"]]
    assert lost["rule"] == winner["rule"] == "chain"
    assert lost["winner_net_bytes"] == winner["cost"]["net_bytes"]
    assert lost["net_bytes"] == pair["cost"]["net_bytes"]
    assert lost["margin_bytes"] == lost["winner_net_bytes"] - lost["net_bytes"] > 0
    assert lost["shared_nodes"] == 2 and lost["inside_group"] is False
    assert all(c["lost_to"] is None for c in doc["candidates"] if c["verdict"] != "lost_conflict")
    chains = [c["nodes"] for c in doc["candidates"] if c["rule"] == "chain"]
    assert chains.index(["add_5", "add_10"]) < chains.index(["relu_5", "sig_7"])  # 5 < 10
    s = doc["summary"]
    assert s["net_bytes_saved"] == s["gross_bytes_saved"] - s["overhead_bytes"]


def test_near_misses_are_shown_per_branch_with_param_mismatch(case):
    out = run_cli("explain", "m.onnx", "--rules", "rules.yaml").stdout
    near = out[out.index("Near misses") :]
    assert "branchy match.ops: 1 param-mismatch" in near and "axis" in near
    assert "branchy branches[0]: 1 param-mismatch" in near


def test_units_are_binary_and_named_so(case):
    out = run_cli("explain", "m.onnx", "--rules", "rules.yaml", "--all").stdout
    assert "KiB" in out
    assert not any(u in out for u in (" KB", " MB", " GB"))


@pytest.fixture(scope="module")
def bert_900(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BERT export with 14 encoder layers in the opset-14 TorchScript form (944 nodes)."""
    path = tmp_path_factory.mktemp("bert") / "bert14.onnx"
    onnx.save(stacked_bert(SHARED / "models" / "bert-tiny.ts14.onnx", layers=14), path)
    return path


def test_explain_on_a_900_node_bert_prints_at_most_300_lines(bert_900):
    model = onnx.load(str(bert_900))
    assert 900 <= len(model.graph.node) <= 1000
    short = run_cli("explain", bert_900)
    assert short.exit_code == 0, short.stderr
    lines = short.stdout.splitlines()
    assert len(lines) <= 300
    assert lines[1].startswith("solver exact: OPTIMAL") and "gross" in lines[1]
    every = run_cli("explain", bert_900, "--all").stdout.splitlines()
    assert len(every) > 1000  # --all: every candidate
    doc = json.loads(run_cli("explain", bert_900, "-f", "json").stdout)
    assert short.stdout.count("\n  #") == doc["summary"]["groups"]  # every group is listed
