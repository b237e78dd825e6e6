"""A BERT-base-sized export (12 encoder layers, about 550-900 nodes) built from the shared
2-layer bert-tiny TorchScript export by repeating its last encoder layer: the structure a
real 12-layer export has, without needing torch. Weights are shared between the copies
(the analysis never reads them)."""

from __future__ import annotations

from pathlib import Path

import onnx


def stacked_bert(source: Path, layers: int = 12) -> onnx.ModelProto:
    model = onnx.load(str(source))
    g = model.graph
    numbers = [int(n.name.split("/layer.")[1].split("/")[0]) for n in g.node if "/layer." in n.name]
    last = f"layer.{max(numbers)}"
    body = [n for n in g.node if f"/{last}/" in n.name]
    produced = {o for n in body for o in n.output}
    outside = [n for n in g.node if f"/{last}/" not in n.name]
    feeds = {i for n in body for i in n.input if i and i not in produced}
    used_after = {i for n in outside for i in n.input} | {o.name for o in g.output}
    (out_name,) = [t for t in produced if t in used_after]
    (in_name,) = [t for t in feeds if "/layer." in t]  # the previous layer's output
    first = int(last.split(".")[1])
    new_nodes: list[onnx.NodeProto] = []
    prev_out = in_name
    for k in range(first, layers):
        rename: dict[str, str] = {}
        for t in produced:
            if t == out_name:
                rename[t] = out_name if k == layers - 1 else f"{out_name}__layer{k}"
            else:
                rename[t] = t.replace(last, f"layer.{k}") if last in t else f"{t}__layer{k}"
        rename[in_name] = prev_out
        for n in body:
            copy = onnx.NodeProto()
            copy.CopyFrom(n)
            copy.name = n.name.replace(last, f"layer.{k}")
            copy.input[:] = [rename.get(i, i) for i in n.input]
            copy.output[:] = [rename.get(o, o) for o in n.output]
            new_nodes.append(copy)
        prev_out = rename[out_name]
    # value_info of the repeated layer's tensors no longer names them all: let inference redo it
    del g.value_info[:]
    at = min(i for i, n in enumerate(g.node) if n in body)
    before = [n for n in g.node[:at] if n not in body]
    after = [n for n in g.node[at:] if n not in body]
    del g.node[:]
    g.node.extend(before + new_nodes + after)
    return model
