"""Export the dev families of models/families: small architectures with the structures of
issue 40 (fused projections split after the MatMul, encoder-decoder attention with a
relative position bias, windowed attention on images, a GQA decoder).

Why this exists: the rule library is measured on exports of architectures it was not
written from; these files are the dev side of that, built from code the same way as
../shared/models/families (see its README): **random weights** (seeded; nothing is
downloaded), batch 1, static shapes, ``graph.value_info`` inferred, so onnxruntime runs
them and fused vs unfused numerics can be compared.

Exporters (as in ../shared/models): ``ts`` = ``torch.onnx.export(dynamo=False,
opset_version=17)`` (TorchScript tracing, constant folding on); ``dynamo`` =
``torch.onnx.export(dynamo=True, opset_version=18)`` (its default graph optimisation on).
Every file is checked (onnx.checker, full), run in onnxruntime on CPU against torch (max
abs diff), and counted after onnxruntime's ORT_ENABLE_EXTENDED optimizer.

It needs torch, transformers, timm, onnx, onnxruntime and onnxscript, which the project's
own venv does not carry: use a separate one, e.g.

    python -m venv /work/exportenv
    /work/exportenv/bin/pip install torch transformers timm onnx onnxruntime onnxscript
    /work/exportenv/bin/python models/export.py                # every family, both exporters
    /work/exportenv/bin/python models/export.py phi3-tiny swin-tiny --exporter ts

It writes models/families/<family>.<exporter>.onnx, models/families/results.json (one
record per file, merged with the records already there) and the table of
models/README.md (between its ``<!-- table -->`` markers). An exporter that fails on a
family is recorded with its error instead of a file. Deterministic: the same toolchain
writes the same bytes (weights from ``torch.manual_seed``, inputs from a seeded generator,
each file exported in a fresh interpreter, see ``run_isolated``).

PyPI's torchvision (which timm and transformers import) is built for CUDA torch; beside a
CPU-only torch wheel its C++ ops do not load: ``torchvision_without_ops`` lets the import
succeed (no model here uses those ops).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "families"
SEQ, DEC_SEQ, VOCAB = 16, 8, 1024
EXPORTERS = ("ts", "dynamo")


@dataclass(frozen=True)
class Family:
    """One architecture: how to build it (module + example inputs) and what it shows."""

    name: str
    structure: str  # the issue-40 structure it carries: fused-proj, relpos-encdec, window, gqa
    description: str
    build: Callable[[], tuple[object, dict[str, object]]]


# ----------------------------------------------------------------------------- builders

_TV_SHIM: list[object] = []


def torchvision_without_ops() -> None:
    """Let ``import torchvision`` (timm needs it) work when its C++ ops cannot load.

    PyPI's torchvision is built against CUDA torch; beside a CPU-only torch its ``_C``
    extension does not load, and torchvision then fails on import registering fakes for
    ``torchvision::nms``/``qnms``, the two registrations it does not guard. Defining their
    schemas first is enough: no model here uses torchvision's ops.
    """
    import importlib.util

    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or _TV_SHIM or hasattr(torch.ops.torchvision, "nms"):
        return
    # a matching torch (CUDA build beside CUDA torchvision) imports it as it is: asked in a
    # child, since a failed import would leave half-registered ops in this process
    imports = subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True)
    if imports.returncode == 0:
        return
    try:
        torch.ops.load_library(str(Path(spec.origin).parent / "_C.so"))
        return
    except (OSError, RuntimeError):
        pass
    lib = torch.library.Library("torchvision", "FRAGMENT")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _TV_SHIM.append(lib)  # kept alive: the definitions go with the Library object


def _wrap(model, names: tuple[str, ...], key: str = "last_hidden_state"):
    """A module whose forward takes the inputs positionally (as the exporters pass them),
    hands them on by name, and returns one tensor (no caches, no dicts)."""
    import torch

    class One(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(
                **dict(zip(names, args, strict=True)), use_cache=False, return_dict=True
            )
            return out[key]

    return One().eval()


def _wrap_vision(model, key: str = "last_hidden_state"):
    import torch

    class One(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x):
            out = self.model(x)
            return out[key] if isinstance(out, dict) or hasattr(out, "keys") else out

    return One().eval()


def _ids(n: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (1, n), generator=g, dtype=torch.int64)


def _decoder(config_cls, model_cls, **config) -> tuple[object, dict[str, object]]:
    """A causal LM (logits out) with input_ids and an all-ones attention_mask."""
    import torch

    torch.manual_seed(0)
    cfg = config_cls(vocab_size=VOCAB, attn_implementation="eager", **config)
    inputs = {"input_ids": _ids(SEQ, 1), "attention_mask": torch.ones(1, SEQ, dtype=torch.int64)}
    model = _wrap(model_cls(cfg).eval(), tuple(inputs), "logits")
    return model, inputs


def phi3() -> tuple[object, dict[str, object]]:
    """Fused qkv_proj (3 Slices) and gate_up_proj (halves into SiLU(gate) * up)."""
    from transformers import Phi3Config, Phi3ForCausalLM

    return _decoder(
        Phi3Config,
        Phi3ForCausalLM,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )


def gpt_bigcode() -> tuple[object, dict[str, object]]:
    """Fused c_attn with bias, split into Q and one shared K|V (multi-query)."""
    from transformers import GPTBigCodeConfig, GPTBigCodeForCausalLM

    return _decoder(
        GPTBigCodeConfig,
        GPTBigCodeForCausalLM,
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=64,
        n_inner=256,
        multi_query=True,
    )


def glm() -> tuple[object, dict[str, object]]:
    """A second fused gate_up_proj (chunk into SiLU(gate) * up) beside biased q/k/v."""
    from transformers import GlmConfig, GlmForCausalLM

    return _decoder(
        GlmConfig,
        GlmForCausalLM,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=64,
        pad_token_id=0,
    )


def qwen2() -> tuple[object, dict[str, object]]:
    """A GQA decoder (4 heads / 2 kv heads) with biased q/k/v: the issue's fourth export."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return _decoder(
        Qwen2Config,
        Qwen2ForCausalLM,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )


def _encdec(config_cls, model_cls, **config) -> tuple[object, dict[str, object]]:
    """An encoder-decoder (encoder + decoder in one graph, decoder hidden states out)."""
    import torch

    torch.manual_seed(0)
    cfg = config_cls(vocab_size=VOCAB, attn_implementation="eager", **config)
    inputs = {
        "input_ids": _ids(SEQ, 1),
        "attention_mask": torch.ones(1, SEQ, dtype=torch.int64),
        "decoder_input_ids": _ids(DEC_SEQ, 2),
    }
    model = _wrap(model_cls(cfg).eval(), tuple(inputs))
    return model, inputs


_T5 = dict(
    d_model=64,
    d_kv=16,
    d_ff=128,
    num_layers=2,
    num_decoder_layers=2,
    num_heads=4,
    relative_attention_num_buckets=32,
    relative_attention_max_distance=128,
    decoder_start_token_id=0,
    pad_token_id=0,
)


def t5() -> tuple[object, dict[str, object]]:
    """Relative position bias shared from layer 0, ReLU FFN without biases."""
    from transformers import T5Config, T5Model

    return _encdec(T5Config, T5Model, feed_forward_proj="relu", **_T5)


def umt5() -> tuple[object, dict[str, object]]:
    """A relative position bias per layer, gated-GELU FFN: T5's other spelling."""
    from transformers import UMT5Config, UMT5Model

    return _encdec(UMT5Config, UMT5Model, feed_forward_proj="gated-gelu", **_T5)


def _swin_hf(config_cls, model_cls, image: int, **config) -> tuple[object, dict[str, object]]:
    import torch

    torch.manual_seed(0)
    cfg = config_cls(image_size=image, attn_implementation="eager", **config)
    model = _wrap_vision(model_cls(cfg).eval())
    g = torch.Generator().manual_seed(3)
    return model, {"input": torch.randn(1, 3, image, image, generator=g)}


_SWIN = dict(patch_size=2, embed_dim=32, depths=[2, 2], num_heads=[2, 4], mlp_ratio=2.0)


def swin() -> tuple[object, dict[str, object]]:
    """64x64, patch 2 -> 32x32 tokens, window 4: sizes divide (Pad with zero pads), shifted."""
    from transformers import SwinConfig, SwinModel

    return _swin_hf(SwinConfig, SwinModel, 64, window_size=4, **_SWIN)


def swin_pad() -> tuple[object, dict[str, object]]:
    """56x56, patch 2 -> 28x28 tokens, window 8: 28 % 8 != 0, padded to 32 in every block."""
    from transformers import SwinConfig, SwinModel

    return _swin_hf(SwinConfig, SwinModel, 56, window_size=8, **_SWIN)


def swinv2() -> tuple[object, dict[str, object]]:
    """Swin v2: cosine attention with a logit scale, continuous (MLP) position bias."""
    from transformers import Swinv2Config, Swinv2Model

    return _swin_hf(Swinv2Config, Swinv2Model, 64, window_size=4, **_SWIN)


def _timm_swin(name: str) -> tuple[object, dict[str, object]]:
    """A timm Swin model by name, 64x64, patch 2, window 4, dims 32/64, 10 classes."""
    import timm
    import torch

    torch.manual_seed(0)
    model = timm.create_model(
        name,
        pretrained=False,
        img_size=64,
        patch_size=2,
        window_size=4,
        embed_dim=32,
        depths=(2, 2),
        num_heads=(2, 4),
        mlp_ratio=2.0,
        num_classes=10,
    ).eval()
    g = torch.Generator().manual_seed(3)
    return model, {"input": torch.randn(1, 3, 64, 64, generator=g)}


def timm_swin() -> tuple[object, dict[str, object]]:
    """timm SwinTransformer (NHWC blocks), 64x64, patch 2, window 4."""
    return _timm_swin("swin_tiny_patch4_window7_224")


def timm_swinv2() -> tuple[object, dict[str, object]]:
    """timm SwinTransformerV2 (NHWC blocks): cosine attention, fused qkv with q/v biases,
    a continuous position bias MLP, res-post-norm, patch merging by reshape/permute."""
    return _timm_swin("swinv2_tiny_window8_256")


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "phi3-tiny",
            "fused-proj",
            "Phi-3 decoder: one qkv_proj MatMul sliced into "
            "Q/K/V, one gate_up_proj MatMul chunked into SiLU(gate) * up, RMSNorm, RoPE.",
            phi3,
        ),
        Family(
            "gptbigcode-tiny",
            "fused-proj",
            "GPT-BigCode (SantaCoder/StarCoder) decoder: "
            "one c_attn Linear split into Q | K,V (multi-query), learned positions, "
            "GELU(tanh) MLP, LayerNorm.",
            gpt_bigcode,
        ),
        Family(
            "glm-tiny",
            "fused-proj",
            "GLM-4 style decoder (transformers GlmModel): "
            "gate_up_proj chunked into SiLU(gate) * up, q/k/v with bias, GQA, "
            "partial interleaved rotary.",
            glm,
        ),
        Family(
            "t5-tiny",
            "relpos-encdec",
            "T5 encoder-decoder (T5Model): bucketed relative "
            "attention bias (layer 0, shared down the stack), no 1/sqrt(d) scale, RMSNorm "
            "(Pow/ReduceMean/Sqrt with casts), ReLU FFN without biases, cross-attention.",
            t5,
        ),
        Family(
            "umt5-tiny",
            "relpos-encdec",
            "UMT5 encoder-decoder (UMT5Model): a relative "
            "attention bias in every layer, gated-GELU FFN, RMSNorm, cross-attention.",
            umt5,
        ),
        Family(
            "swin-tiny",
            "window",
            "Swin (transformers SwinModel) 64x64, patch 2, window 4, "
            "dims 32/64: window partition/merge, cyclic shift, shifted-window mask, "
            "gathered relative position bias, patch merging.",
            swin,
        ),
        Family(
            "swin-pad",
            "window",
            "Swin (transformers SwinModel) 56x56, patch 2, window 8: "
            "28x28 tokens padded to 32x32 before partitioning (Pad).",
            swin_pad,
        ),
        Family(
            "swinv2-tiny",
            "window",
            "Swin v2 (transformers Swinv2Model) 64x64, window 4: "
            "cosine attention with clamped logit scale, MLP (continuous) position bias, "
            "post-norm.",
            swinv2,
        ),
        Family(
            "timm-swin-tiny",
            "window",
            "timm SwinTransformer 64x64, patch 2, window 4, "
            "dims 32/64, NHWC blocks, 10-class head.",
            timm_swin,
        ),
        Family(
            "timm-swinv2-tiny",
            "window",
            "timm SwinTransformerV2 64x64, patch 2, window 4, "
            "dims 32/64: cosine attention, fused qkv (q/v biases), continuous position "
            "bias, res-post-norm, patch merging by reshape/permute, 10-class head.",
            timm_swinv2,
        ),
        Family(
            "qwen2-tiny",
            "gqa",
            "Qwen2 decoder: GQA (4 heads / 2 kv heads), q/k/v with bias, RMSNorm, RoPE, SwiGLU.",
            qwen2,
        ),
    )
}


# ----------------------------------------------------------------------------- export


def export(family: Family, exporter: str, path: Path) -> tuple[object, dict[str, object]]:
    """Export one family with one exporter to ``path``; return (module, inputs)."""
    import onnx
    import torch

    torchvision_without_ops()  # transformers and timm import torchvision
    model, inputs = family.build()
    args = tuple(inputs.values())
    names = list(inputs)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "ts":
            torch.onnx.export(
                model,
                args,
                str(path),
                dynamo=False,
                opset_version=17,
                input_names=names,
                output_names=["output"],
                do_constant_folding=True,
            )
        elif exporter == "dynamo":
            program = torch.onnx.export(
                model,
                args,
                dynamo=True,
                opset_version=18,
                input_names=names,
                output_names=["output"],
                external_data=False,
                verbose=False,
            )
            program.save(str(path), external_data=False)
        else:
            raise ValueError(f"unknown exporter {exporter!r}")
    proto = onnx.load(str(path))
    proto = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    onnx.save(proto, str(path))
    onnx.checker.check_model(str(path), full_check=True)
    return model, inputs


def ort_extended_nodes(path: Path) -> int:
    """Node count after onnxruntime's ORT_ENABLE_EXTENDED optimizer (CPU)."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "optimized.onnx"
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        opts.optimized_model_filepath = str(out)
        opts.log_severity_level = 3
        ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        return len(onnx.load(str(out)).graph.node)


def check(path: Path, model, inputs: dict[str, object]) -> float:
    """Run the file in onnxruntime and torch on the same inputs; max abs diff."""
    import onnxruntime as ort
    import torch

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: inputs[i.name].numpy() for i in sess.get_inputs()}
    got = sess.run(None, feeds)[0]
    with torch.no_grad():
        want = model(*inputs.values()).numpy()
    return float(np.max(np.abs(got - want)))


def describe(path: Path) -> dict[str, object]:
    """Inputs, node count, op types and size of an exported file."""
    import onnx

    graph = onnx.load(str(path)).graph
    inits = {i.name for i in graph.initializer}
    ins = []
    for i in graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name
        ins.append(f"{i.name} {dtype}{[d.dim_value for d in t.shape.dim]}")
    ops = collections.Counter(n.op_type for n in graph.node)
    return {
        "inputs": "; ".join(ins),
        "nodes": len(graph.node),
        "ops": sorted(ops),
        "bytes": path.stat().st_size,
    }


def error_line(exc: BaseException) -> str:
    """The exception and its root cause, one line each way, without terminal colours."""
    causes = [exc]
    while causes[-1].__cause__ is not None and len(causes) < 8:
        causes.append(causes[-1].__cause__)
    parts = []
    for e in (exc, causes[-1]) if len(causes) > 1 else (exc,):
        text = re.sub(r"\x1b\[[0-9;]*m", "", traceback.format_exception_only(e)[-1])
        parts.append(text.strip().splitlines()[0][:240])
    return " <- ".join(parts)


def run(family: Family, exporter: str) -> dict[str, object]:
    """Export, check and describe one (family, exporter); a failure becomes a record."""
    path = OUT / f"{family.name}.{exporter}.onnx"
    record: dict[str, object] = {
        "file": path.name,
        "family": family.name,
        "exporter": exporter,
        "structure": family.structure,
    }
    try:
        model, inputs = export(family, exporter, path)
        record.update(describe(path))
        record["max_abs_diff"] = check(path, model, inputs)
        record["ort_extended_nodes"] = ort_extended_nodes(path)
    except Exception as exc:  # recorded: the README says which exporter fails
        path.unlink(missing_ok=True)
        record["error"] = error_line(exc)
    return record


def versions() -> str:
    """The toolchain, for the README."""
    import onnx
    import onnxruntime
    import onnxscript
    import timm
    import torch
    import transformers

    return (
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"timm {timm.__version__}, onnx {onnx.__version__}, "
        f"onnxruntime {onnxruntime.__version__}, onnxscript {onnxscript.__version__}"
    )


def table(records: dict[str, dict[str, object]]) -> str:
    """The README table: one row per exported file, then the exports that failed."""
    rows = [
        "| file | family | structure | inputs | nodes | ORT-extended nodes "
        "| ORT vs torch max abs diff | size |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    failed = []
    for name in sorted(records):
        r = records[name]
        if "error" in r:
            failed.append(f"- `{r['family']}` with `{r['exporter']}`: {r['error']}")
            continue
        rows.append(
            f"| `{name}` | {r['family']} | {r['structure']} | {r['inputs']} | {r['nodes']} "
            f"| {r['ort_extended_nodes']} | {r['max_abs_diff']:.1e} "
            f"| {int(r['bytes']) // 1024} KB |"
        )
    text = "\n".join(rows)
    if failed:
        text += "\n\nExports that failed (no file written):\n\n" + "\n".join(failed)
    return text


def write_readme(records: dict[str, dict[str, object]], toolchain: str) -> None:
    """Replace the table between the README's markers (the prose around it stays)."""
    readme = HERE / "README.md"
    text = readme.read_text() if readme.exists() else "<!-- table -->\n<!-- /table -->\n"
    head, rest = text.split("<!-- table -->", 1)
    _, tail = rest.split("<!-- /table -->", 1)
    body = f"Toolchain: {toolchain}.\n\n{table(records)}\n"
    readme.write_text(f"{head}<!-- table -->\n{body}<!-- /table -->{tail}")


def run_isolated(name: str, exporter: str) -> dict[str, object]:
    """``run`` in a fresh interpreter: the dynamo exporter numbers its nodes with
    process-wide counters, so a file's bytes would otherwise depend on what the same
    process exported before it."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--one", name, exporter],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {
            "file": f"{name}.{exporter}.onnx",
            "family": name,
            "exporter": exporter,
            "structure": FAMILIES[name].structure,
            "error": f"exit {proc.returncode}: {tail}",
        }
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("families", nargs="*", help=f"families (default: all of {list(FAMILIES)})")
    ap.add_argument("--exporter", choices=EXPORTERS, action="append", help="default: both")
    ap.add_argument("--one", nargs=2, metavar=("FAMILY", "EXPORTER"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    if args.one:  # the child of run_isolated: one export, its record as the last line
        print(json.dumps(run(FAMILIES[args.one[0]], args.one[1])), flush=True)
        return 0
    unknown = [f for f in args.families if f not in FAMILIES]
    if unknown:
        ap.error(f"unknown families {unknown}; known: {list(FAMILIES)}")
    results = OUT / "results.json"
    records = json.loads(results.read_text()) if results.exists() else {}
    for name in args.families or list(FAMILIES):
        for exporter in args.exporter or EXPORTERS:
            record = run_isolated(name, exporter)
            records[record["file"]] = record
            status = record.get("error") or (
                f"{record['nodes']} nodes, diff {record['max_abs_diff']:.1e}, "
                f"{int(record['bytes']) // 1024} KB"
            )
            print(f"{record['file']}: {status}", flush=True)
    results.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    torchvision_without_ops()
    write_readme(records, versions())
    return 0


if __name__ == "__main__":
    sys.exit(main())
