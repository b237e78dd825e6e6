"""Acceptance bars of the bundled library on the real models in ../shared/models,
../shared/models/families and the repo's own models/families (issues 11 and 40):

- every transformer model: >= 80% of the fusable intermediate traffic captured and a
  traffic reduction >= min(30%, 0.8 x the fuse-everything ceiling), every chosen group
  within the UB of ascend910b;
- every CNN model (and every light CNN shipped inside the onnx package): a traffic
  reduction >= 0.8 x the epilogue-only ceiling, and every Conv + BN (+ activation) chain
  whose intermediates have a single consumer inside one chosen group.

The measurement is ``bench/coverage.py`` (its docstring defines "fusable"); these tests
only assert on it. Models are analysed once per module.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path

import pytest

from .fixturelib import REPO

ACTIVATIONS = frozenset({"Relu", "Clip", "HardSwish", "LeakyRelu", "Gelu", "Elu", "Tanh"})
SIGMOID_GATED = frozenset({"Sigmoid", "HardSigmoid"})  # x * Sigmoid(x) / x * HardSigmoid(x)


# Bars a model cannot meet yet, and why (kept visible: the test reports XPASS once fixed).
# Key: (model file name, bar), bar one of coverage, traffic, epilogue, conv-chains.
# Measured by bench/coverage.py; the cause is what stays outside every chosen group.
KNOWN_SHORT: dict[tuple[str, str], str] = {}


def _load_bench():
    spec = importlib.util.spec_from_file_location("coverage_bench", REPO / "bench" / "coverage.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = _load_bench()
# ../shared/models, ../shared/models/families and the repo's models/families (issue 40)
SHARED = bench.shared_models() + bench.repo_family_models()
TRANSFORMERS = [p for p in SHARED if bench.family(p) == "transformer"]
CNNS = [p for p in SHARED if bench.family(p) == "cnn"]
LIGHT = bench.light_models()  # CNNs shipped inside the onnx wheel (opset 9 exports)


@cache
def measured(path: Path):
    return bench.measure(path)


def _param(path: Path):
    return pytest.param(path, id=path.name)


def test_models_present():
    assert TRANSFORMERS and CNNS


def _bar(path: Path, bar: str):
    """A model's bar, marked as a non-strict xfail with its cause when knowingly unmet."""
    cause = KNOWN_SHORT.get((path.name, bar))
    marks = [pytest.mark.xfail(reason=cause, strict=False)] if cause else []
    return pytest.param(path, id=path.name, marks=marks)


@pytest.mark.parametrize("path", [_bar(p, "coverage") for p in TRANSFORMERS])
def test_transformer_captures_fusable_traffic(path):
    cov, _ = measured(path)
    assert cov.unknown_edges == 0, f"{path.name}: {cov.unknown_edges} edges of unknown size"
    assert cov.captured >= 0.80, (
        f"{path.name}: {cov.captured:.1%} of fusable intermediate traffic captured "
        f"(< 80%); groups {cov.groups}"
    )


@pytest.mark.parametrize("path", [_bar(p, "traffic") for p in TRANSFORMERS])
def test_transformer_hbm_traffic_reduced(path):
    cov, analysis = measured(path)
    bar = min(0.30, 0.8 * cov.ceiling_fuse_everything)
    assert cov.hbm_reduction >= bar - 1e-9, (
        f"{path.name}: HBM traffic {cov.hbm_before} -> {cov.hbm_after} "
        f"({cov.hbm_reduction:.1%} less, < {bar:.1%} = min(30%, 0.8 x ceiling "
        f"{cov.ceiling_fuse_everything:.1%}))"
    )
    assert analysis.target.name == "ascend910b"
    for sc in analysis.resolution.chosen:
        assert sc.cost is not None and sc.cost.ub_bytes <= sc.cost.ub_limit, sc.candidate


def conv_chains(graph) -> list[tuple[str, ...]]:
    """Conv -> [BatchNormalization] -> [activation] chains with single-consumer links.

    A chain is the Conv plus every following op of the pattern reached through a tensor
    consumed exactly once (and not a graph output); chains of the Conv alone are skipped.
    """

    def sole_consumer(tensor_name: str):
        t = graph.tensor(tensor_name)
        if t.is_graph_output or len(t.consumers) != 1:
            return None
        return graph.node(t.consumers[0][0])

    chains = []
    for node in graph.nodes:
        if node.op_type != "Conv":
            continue
        chain = [node.name]
        nxt = sole_consumer(node.outputs[0])
        if nxt is not None and nxt.op_type == "BatchNormalization":
            chain.append(nxt.name)
            nxt = sole_consumer(nxt.outputs[0])
        if nxt is not None and nxt.op_type in ACTIVATIONS:
            chain.append(nxt.name)
        elif nxt is not None and nxt.op_type in SIGMOID_GATED:
            mul = sole_consumer(nxt.outputs[0])
            # x * Sigmoid(x) (SiLU, hard-swish) only: a squeeze-excite gate multiplies
            # the block's input, not the Conv's output, and is no activation of the Conv
            if mul is not None and mul.op_type == "Mul" and nxt.inputs[0] in mul.inputs:
                chain += [nxt.name, mul.name]
        if len(chain) > 1:
            chains.append(tuple(chain))
    return chains


@pytest.mark.parametrize("path", [_bar(p, "epilogue") for p in CNNS + LIGHT])
def test_cnn_traffic_reaches_epilogue_ceiling(path):
    cov, _ = measured(path)
    bar = 0.8 * cov.ceiling_epilogue_only
    assert cov.hbm_reduction >= bar - 1e-9, (
        f"{path.name}: {cov.hbm_reduction:.1%} less HBM traffic, < {bar:.1%} "
        f"(0.8 x the epilogue-only ceiling {cov.ceiling_epilogue_only:.1%}); groups {cov.groups}"
    )


@pytest.mark.parametrize("path", [_bar(p, "conv-chains") for p in CNNS + LIGHT])
def test_cnn_conv_bn_activation_chains_fused(path):
    cov, analysis = measured(path)
    group_of = {n: i for i, sc in enumerate(analysis.resolution.chosen) for n in sc.candidate.nodes}
    chains = conv_chains(analysis.graph)
    if not chains:  # e.g. PoolFormer: Conv + GroupNorm only; the traffic bar still applies
        pytest.skip(f"{path.name} has no Conv + BN/activation chain")
    unfused = [c for c in chains if len({group_of.get(n, ("none", n)) for n in c}) != 1]
    assert not unfused, f"{path.name}: chains not inside one group: {unfused}"


def test_llama7b_shaped_fits_ub_and_cuts_hbm_traffic(tmp_path):
    """Beyond the bars: at LLaMA-7B shapes (hidden 4096, 32 heads, MLP 11008, fp16, seq 512)
    the library still cuts HBM traffic by >= 30% with every group inside ascend910b's UB
    (the one-kernel layer halves overflow there and smaller rules take over)."""
    (path,) = bench.synthetic_models(tmp_path, seqs=(512,))
    cov, analysis = bench.measure(path)
    assert cov.hbm_reduction >= 0.30, cov
    assert analysis.resolution.chosen
    for sc in analysis.resolution.chosen:
        assert sc.cost is not None and sc.cost.ub_bytes <= sc.cost.ub_limit, sc.candidate
