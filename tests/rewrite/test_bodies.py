"""``fuse`` inside control-flow bodies (issue 36): groups in If/Loop/Scan bodies are in
the plan and the fused model, verified by the whole-model run, kept by safe mode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from ruleengine.pipeline import fuse
from tests.graph.test_scopes import small_model


def _with_top_chain(path: Path) -> Path:
    """The small model with a chain at the top level too: Relu, Sigmoid on x before the
    ReduceSum that picks the If's branch (and a graph output: a corruption shows)."""
    model = small_model()
    g = model.graph
    nodes = list(g.node)
    nodes[0].input[0] = "xs"  # the ReduceSum
    chain = [
        helper.make_node("Relu", ["x"], ["xr"], name="top_relu"),
        helper.make_node("Sigmoid", ["xr"], ["xs"], name="top_sig"),
    ]
    del g.node[:]
    g.node.extend([*chain, *nodes])
    g.output.append(helper.make_tensor_value_info("xs", onnx.TensorProto.FLOAT, [1, 4, 16, 16]))
    onnx.checker.check_model(model)
    out = path / "cf.onnx"
    onnx.save(model, out)
    np.savez(path / "in.npz", x=np.abs(np.random.RandomState(1).randn(1, 4, 16, 16)).astype("f"))
    return out


def test_fuse_groups_inside_bodies_verified(tmp_path: Path) -> None:
    model = _with_top_chain(tmp_path)
    result = fuse(model, jobs=1, verify=True, inputs=tmp_path / "in.npz")
    plan = result.plan
    assert plan.verification is not None and plan.verification.ok
    rules = [g.rule for g in result.groups]
    assert len(rules) == 5 and rules[0] == "elementwise_chain"  # the top level's first
    assert [g.id for g in result.groups] == [1, 2, 3, 4, 5]
    assert all(g.node_name for g in result.groups)  # each named by its fused node
    # the totals count the bodies' nodes: 7 top-level + 15 in bodies
    assert plan.nodes_before == 22
    assert plan.nodes_after == 22 - sum(len(g.nodes) for g in result.groups) + 5
    assert plan.hbm_bytes_after < plan.hbm_bytes_before
    fused = result.fused_model
    onnx.checker.check_model(fused)
    meta = {e.key: e.value for e in fused.metadata_props}
    assert meta["autofusion.groups"] == "5"


def test_safe_mode_keeps_the_body_groups(tmp_path: Path) -> None:
    model = _with_top_chain(tmp_path)
    result = fuse(
        model,
        jobs=1,
        safe=True,
        inputs=tmp_path / "in.npz",
        corrupt_rules=("elementwise_chain",),  # corrupts the top-level group only
    )
    v = result.plan.verification
    assert v is not None and v.ok and v.dropped_groups == (1,)
    assert [g.id for g in result.groups] == [2, 3, 4, 5]
    calls = sum(
        n.domain == "autofusion"
        for body in (a.g for n in result.fused_model.graph.node for a in n.attribute if a.g.node)
        for n in body.node
    )
    assert calls == 4


def test_per_group_mode_says_body_groups_were_not_run_alone(tmp_path: Path) -> None:
    """Per-group verification isolates top-level groups only: the body groups are listed
    as not run alone, so the counts never pass them silently."""
    model = _with_top_chain(tmp_path)
    result = fuse(model, jobs=1, verify=True, inputs=tmp_path / "in.npz", verify_mode="per-group")
    v = result.plan.verification
    assert v is not None and v.mode == "per-group"
    status = {c.group: c.status for c in v.groups}
    assert status[1] == "passed"  # the top-level group, run alone
    assert [status[g] for g in (2, 3, 4, 5)] == ["not_run"] * 4
    assert all("control-flow body" in (c.error or "") for c in v.groups if c.group > 1)
    assert "4 not run alone" in result.files["report.txt"].decode()
