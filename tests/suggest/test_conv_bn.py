"""An inference BatchNormalization after a Conv, with constant statistics, folds into the
Conv at compile time. Exports differ there: TorchScript folds it by default, its keepbn
export keeps it. The cost model counts the folded constants as the Conv's weight and bias
(``cost.scoring.folded_bn_inputs``), and a draft whose Convs have no BatchNorm after them
offers its pattern with one after each as a branch (``emit.bare_convs``), so rules drafted
from one export match the other; the fused model still checks."""

from __future__ import annotations

import numpy as np
import onnx
import yaml
from onnx import numpy_helper

from ruleengine.cost.model import Verdict
from ruleengine.cost.scoring import folded_bn_inputs, score_one
from ruleengine.cost.targets import load_target
from ruleengine.graph.loader import load_graph
from ruleengine.pipeline import fuse
from ruleengine.suggest.analyses import Given
from ruleengine.suggest.regions import group_candidate

from .graphs import NOTHING_RULE, save

_HEAD = '<ir_version: 8, opset_import: ["" : 17]>\n'
_SHAPE = "float[1,16,32,32]"


def _block(keep_bn: bool) -> str:
    """A residual block: x -> Conv -> [BN] -> Relu -> Conv -> [BN] -> Add(x) -> Relu.
    Folded (``keep_bn`` False) the Convs have a bias; kept, a BatchNormalization with
    constant statistics follows each bias-free Conv."""
    ins = [f"{_SHAPE} inp", "float[16,16,3,3] W_w1", "float[16,16,3,3] W_w2"]
    # the block reads and writes through a Sigmoid on each side: run-time tensors
    lines = ["[pre] x = Sigmoid (inp)"]
    for i in (1, 2):
        src = "x" if i == 1 else "r1"
        if keep_bn:
            ins += [f"float[16] W_{k}{i}" for k in ("s", "b", "m", "v")]
            lines += [
                f"[conv{i}] c{i} = Conv <pads = [1, 1, 1, 1]> ({src}, W_w{i})",
                f"[bn{i}] n{i} = BatchNormalization (c{i}, W_s{i}, W_b{i}, W_m{i}, W_v{i})",
            ]
        else:
            ins.append(f"float[16] W_c{i}")
            lines.append(f"[conv{i}] n{i} = Conv <pads = [1, 1, 1, 1]> ({src}, W_w{i}, W_c{i})")
        if i == 1:
            lines.append("[relu1] r1 = Relu (n1)")
    lines += ["[add] a = Add (n2, x)", "[relu2] y = Relu (a)", "[post] z = Sigmoid (y)"]
    body = "\n".join(f"  {line}" for line in lines)
    return _HEAD + f"g ({', '.join(ins)}) => ({_SHAPE} z)\n{{\n{body}\n}}\n"


def _save(keep_bn: bool, path):
    """The block with seeded weights; variances made positive."""
    save(_block(keep_bn), path)
    model = onnx.load(path)
    for init in model.graph.initializer:
        if init.name.startswith("W_v"):
            data = np.abs(numpy_helper.to_array(init)) + 0.5
            init.CopyFrom(numpy_helper.from_array(data.astype(np.float32), init.name))
    onnx.save(model, path)
    return path


def test_folded_bn_constants_take_the_convs_slots(tmp_path):
    graph = load_graph(_save(True, tmp_path / "keep.onnx"))
    target = load_target("ascend910b")
    block = ["conv1", "bn1", "relu1", "conv2", "bn2", "add", "relu2"]
    nodes = [graph.node(n) for n in block]
    # the Convs have no bias: scale, mean and variance fold, the BN bias is the Conv's
    assert folded_bn_inputs(graph, nodes) == {"W_s1", "W_m1", "W_v1", "W_s2", "W_m2", "W_v2"}
    scored = score_one(graph, group_candidate(graph, frozenset(block)), None, target)
    assert scored.verdict is Verdict.FUSE  # x, 2 weights, 2 biases: within 8 inputs
    # a BatchNorm without its Conv in the group folds into nothing
    assert folded_bn_inputs(graph, [graph.node("bn2"), graph.node("add")]) == frozenset()


def _quiet(_m: str) -> None:
    return None


def test_drafts_from_the_folded_export_match_the_kept_one(tmp_path):
    from ruleengine.suggest.drafting import draft_rules
    from ruleengine.suggest.measuring import measure_after

    given = tmp_path / "given"
    given.mkdir()
    (given / "nothing.yaml").write_text(NOTHING_RULE)
    rules, target = [given], "ascend910b"
    folded = _save(False, tmp_path / "folded.onnx")
    kept = _save(True, tmp_path / "kept.onnx")
    _, drafts, _, graphs = draft_rules([folded], Given(rules, None, target), 0, None, _quiet)
    assert drafts
    with_bn = [d for d in drafts if "branches" in yaml.safe_load(d.text)["match"]]
    assert with_bn and all(d.tests for d in drafts)
    rule = yaml.safe_load(with_bn[0].text)["match"]
    # Conv -> Relu is Conv -> @epilogue x1..2, which takes Conv -> BN -> Relu as it is;
    # Conv -> Add is not: the branch has one more op there, a BN (as @epilogue x1..2)
    ops, branch = rule["ops"], rule["branches"][-1]["ops"]
    assert len(branch) == len(ops) + 1
    assert [op["type"] for op in branch].count("Conv") == 2

    baseline, _, _, more = draft_rules([kept], Given(rules, None, target), 0, None, _quiet)
    _, _, report = measure_after(
        baseline, drafts, Given(rules, None, target), _quiet, {**graphs, **more}
    )
    assert report[0].after > report[0].before

    # fused with the drafted rules, the kept export still computes the same
    folder = tmp_path / "drafted"
    kernels = tmp_path / "kernels"
    folder.mkdir()
    kernels.mkdir()
    for d in drafts:
        (folder / f"{d.name}.yaml").write_text(d.text)
        (kernels / f"{d.target_op}.yaml").write_text(d.kernel)
    result = fuse(kept, [*rules, folder], kernels=[kernels], verify=True)
    assert any(g.rule in {d.name for d in drafts} for g in result.plan.groups)
    assert any("bn2" in g.nodes for g in result.plan.groups)
    assert result.plan.verification.ok
