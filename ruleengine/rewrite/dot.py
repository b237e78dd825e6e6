"""DOT pictures of the graph with each fused group as a dashed cluster (rule + kernel).

``graph.svg`` is rendered by Graphviz's ``dot`` when it is on PATH; without it only the
DOT text is written (nothing fails).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence

from ruleengine.graph.model import Graph, Node
from ruleengine.rewrite.model import FusedGroup

SVG_TIMEOUT_S = 120
# Lines encoded together: the text is made of encoded chunks, never a list of every
# line (2048 layers: ~4 x 10^5 lines, 14 MB of text) beside the whole text and its bytes.
CHUNK_LINES = 8192


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render_dot(graph: Graph, groups: Sequence[FusedGroup], *, only_groups: bool = False) -> str:
    """The graph as DOT; ``only_groups`` keeps just the grouped nodes and their neighbours."""
    return dot_bytes(graph, groups, only_groups=only_groups).decode()


def dot_bytes(graph: Graph, groups: Sequence[FusedGroup], *, only_groups: bool = False) -> bytes:
    """``render_dot``'s text, UTF-8: made chunk by chunk (peak memory: the chunks and
    the joined bytes, not every line's string beside the text and its encoding)."""
    member: dict[str, FusedGroup] = {n: g for g in groups for n in g.nodes}
    nodes = _shown_nodes(graph, member) if only_groups else list(graph.nodes)
    # Constant nodes are no boxes (half the nodes of a Paddle export): each is folded
    # into its consumers' labels ("const 3" / "const [64]"); a grouped one stays a box
    nodes = [n for n in nodes if n.op_type != "Constant" or n.name in member]
    names = {n.name for n in nodes}
    ids = {n.name: f"n{i}" for i, n in enumerate(nodes)}
    parts: list[bytes] = []
    lines = [
        f"digraph {_q(graph.name or 'model')} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fillcolor="#f5f5f5", fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=9, color="#555555"];',
    ]
    for g in groups:
        label = f"group {g.id}: {g.rule}\\nkernel {g.kernel.kernel_name}"
        lines.append(f"  subgraph cluster_g{g.id} {{")
        lines.append(f'    style=dashed; color="#1f6feb"; label="{_esc(label)}";')
        for n in g.nodes:
            if n in names:
                lines.append(f"    {ids[n]};")
        lines.append("  }")
        if len(lines) >= CHUNK_LINES:
            parts.append(_encoded(lines))
    for n in nodes:
        fill = ', fillcolor="#dbe9ff"' if n.name in member else ""
        label = n.op_type + "\n" + n.name + _constants(graph, n, names)
        lines.append(f"  {ids[n.name]} [label={_q(label)}{fill}];")
        if len(lines) >= CHUNK_LINES:
            parts.append(_encoded(lines))
    io_ids = {} if only_groups else _io_nodes(graph, lines)
    _edges(graph, nodes, (names, ids, io_ids), lines, parts)
    for t in graph.outputs:
        tensor = graph.tensors.get(t)
        if tensor is not None and tensor.producer in names and f"out:{t}" in io_ids:
            lines.append(f"  {ids[tensor.producer]} -> {io_ids['out:' + t]};")
    lines.append("}")
    parts.append(_encoded(lines))
    return b"".join(parts)


FOLDED_CONSTANTS = 3  # constant inputs named in a consumer's label, at most


def _constants(graph: Graph, node: Node, shown: set[str]) -> str:
    """The inputs ``node`` reads from Constant nodes not drawn, as label lines: a value
    of a few elements, else the shape (at most ``FOLDED_CONSTANTS``, then a count)."""
    out: list[str] = []
    for t in node.inputs:
        tensor = graph.tensors.get(t) if t else None
        if tensor is None or not tensor.producer or tensor.producer in shown:
            continue
        producer = graph.node(tensor.producer)
        if producer is None or producer.op_type != "Constant":
            continue
        value = tensor.const_value
        if value is not None and len(value) <= 4:
            shown_value = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
            out.append(f"const {shown_value}")
        else:
            out.append(f"const {_shape(tensor.shape)}")
    if len(out) > FOLDED_CONSTANTS:
        out = [*out[:FOLDED_CONSTANTS], f"+{len(out) - FOLDED_CONSTANTS} more const"]
    return "".join("\n" + line for line in out)


def _shown_nodes(graph: Graph, member: Mapping[str, FusedGroup]) -> list[Node]:
    """The grouped nodes and their neighbours (producers of their inputs, consumers of
    their outputs), in the graph's order."""
    keep = set(member)
    for n in graph.nodes:
        if n.name in member:
            for t in n.inputs:
                p = graph.tensors.get(t)
                if p is not None and p.producer:
                    keep.add(p.producer)
            for t in n.outputs:
                tensor = graph.tensors.get(t)
                if tensor is not None:
                    keep.update(c for c, _ in tensor.consumers)
    return [n for n in graph.nodes if n.name in keep]


def _io_nodes(graph: Graph, lines: list[str]) -> dict[str, str]:
    """The graph inputs (not initializers) and outputs as ellipses (lines added to
    ``lines``); their ids (an output's under ``out:NAME``)."""
    io_ids: dict[str, str] = {}
    for t in graph.inputs:
        if t in graph.tensors and not graph.tensors[t].is_initializer:
            io_ids[t] = f"in{len(io_ids)}"
            lines.append(f"  {io_ids[t]} [shape=ellipse, label={_q(t)}, fillcolor=white];")
    for t in graph.outputs:
        oid = f"out{len(io_ids)}"
        io_ids[f"out:{t}"] = oid
        lines.append(f"  {oid} [shape=ellipse, label={_q(t)}, fillcolor=white];")
    return io_ids


def _edges(
    graph: Graph,
    nodes: Sequence[Node],
    where: tuple[set[str], dict[str, str], dict[str, str]],
    lines: list[str],
    parts: list[bytes],
) -> None:
    """One edge per input a shown node reads from a shown node or a graph input,
    labelled with its shape. ``where``: the shown nodes' names, their ids, the inputs'
    and outputs' ids."""
    names, ids, io_ids = where
    labels: dict[tuple | None, str] = {}  # quoted shape label per shape (few distinct)
    for n in nodes:
        for t in n.inputs:
            tensor = graph.tensors.get(t) if t else None
            if tensor is None:
                continue
            label = labels.get(tensor.shape)
            if label is None:
                label = labels[tensor.shape] = _q(_shape(tensor.shape))
            if tensor.producer in names:
                lines.append(f"  {ids[tensor.producer]} -> {ids[n.name]} [label={label}];")
            elif t in io_ids:
                lines.append(f"  {io_ids[t]} -> {ids[n.name]} [label={label}];")
        if len(lines) >= CHUNK_LINES:
            parts.append(_encoded(lines))


class PendingDot:
    """``dot_bytes(graph, groups)`` begun: with ``jobs`` > 1 and a large graph, a forked
    child (``procs.Forked``) renders it from its copy-on-write view of the graph
    while the parent binds kernels and rewrites the model (0.4-0.6 s of text at 2048
    layers); ``result`` waits for it. Otherwise, or if the child fails, ``result``
    renders it in process: the same bytes either way."""

    def __init__(self, graph: Graph, groups: Sequence[FusedGroup], jobs: int = 1) -> None:
        from ruleengine.procs import FORK_FROM_NODES, Forked, forkable

        self._args: tuple[Graph, tuple[FusedGroup, ...]] = (graph, tuple(groups))
        self._child: Forked | None = None
        if len(graph.nodes) >= FORK_FROM_NODES and forkable(jobs):
            self._child = Forked(dot_bytes, *self._args)

    def result(self) -> bytes:
        child, self._child = self._child, None
        if child is not None:
            try:
                return child.result()
            except Exception:  # any fault of the child: rendered here
                pass
        return dot_bytes(*self._args)


def _encoded(lines: list[str]) -> bytes:
    """The lines as UTF-8 text, each ending in a newline; the list is emptied."""
    chunk = ("\n".join(lines) + "\n").encode()
    lines.clear()
    return chunk


def _esc(text: str) -> str:
    return text.replace('"', '\\"')


def _shape(shape: tuple | None) -> str:
    if shape is None:
        return ""
    return "x".join("?" if d is None else str(d) for d in shape)


def render_svg(dot_text: str | bytes) -> bytes | None:
    """SVG from DOT via Graphviz, or None when ``dot`` is missing or fails."""
    exe = shutil.which("dot")
    if exe is None:
        return None
    try:
        done = subprocess.run(
            [exe, "-Tsvg"],
            input=dot_text.encode() if isinstance(dot_text, str) else dot_text,
            capture_output=True,
            timeout=SVG_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 and done.stdout else None
