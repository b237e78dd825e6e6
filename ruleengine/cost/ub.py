"""UB (Unified Buffer) working set of a fused kernel, and whether it fits the target.

The model (also in docs/cost-model.md):

* The fused kernel streams its largest escaping output (the *anchor*, ``A`` elements) in
  tiles of ``E`` elements, row-major; every other tensor of the group moves in step, so
  its tile is its share of the anchor tile, ``ceil(E * numel(T) / A)``, and at least one
  run of its last dimension (a broadcast operand such as a bias row is read whole).
* Every live tensor tile needs a UB buffer of ``align32(tile * dtype size)``, times the
  target's ``buffer_factor`` (double buffering): the outputs of every compute node and
  the external inputs the vector unit reads. A table read only by gather-like ops
  (``@gather``: an embedding Gather) moves the gathered rows only, the size of the
  gather's output tile, never the whole table. Views alias their input (no buffer).
  Scalars are instruction operands (no buffer). Inputs on a cube op's matrix ports go
  HBM -> L1 -> L0A/L0B and never through UB.
* A cube op (MatMul, Gemm, Conv) hands its output tile from L0C to the vector unit in
  accumulator precision (``accumulate_bytes``, fp32/int32), ``cube_buffer_factor``
  copies. Its tile must be at least ``cube_min_tile`` (rows x cols, one fractal by
  default) and at most what L0C holds.
* A reduction (Softmax, LayerNorm, RMSNorm, ReduceMean, ...) must see whole rows of its
  reduced axes, so its input tile is at least one full row.
* Tilings are searched from small to large; the smallest legal tiling decides the
  working set, and the group overflows when even that exceeds ``ub_bytes - reserve``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ruleengine.cost.model import Target
from ruleengine.cost.opinfo import (
    CUBE,
    CUBE_MATRIX_PORTS,
    REDUCE,
    VIEW,
    node_kinds,
    reduced_axes,
    size_table,
)
from ruleengine.cost.traffic import GroupIO
from ruleengine.graph.model import Graph, Node
from ruleengine.ops.classes import op_classes


@dataclass(frozen=True)
class UBNeed:
    bytes: int  # working set of the chosen (smallest legal) tiling
    limit: int  # ub_bytes - reserve
    tile_elems: int  # E: elements of the anchor per tile
    tile: tuple[int, ...]  # E laid out over the anchor's shape (row-major block)
    anchor: str
    buffers: tuple[tuple[str, int], ...]  # (tensor, bytes) of every UB buffer
    legal: bool  # False when no tiling satisfies the lower and upper bounds together
    why_illegal: str = ""

    @property
    def fits(self) -> bool:
        return self.legal and self.bytes <= self.limit


def gather_ops() -> frozenset[str]:
    """Ops that read rows of their data input (``@gather`` in ops/classes.yaml)."""
    return op_classes().get("@gather", frozenset())


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


def _block(shape: tuple[int, ...], elems: int) -> tuple[int, ...]:
    """Lay ``elems`` out as a row-major block of ``shape`` (trailing dims first).

    A zero-sized dim (an empty tensor) counts as 1: the tile is never smaller than one
    element per dim, and there is nothing to divide by.
    """
    out: list[int] = []
    left = elems
    for d in reversed(shape):
        take = max(1, min(d, left))
        out.append(take)
        left = max(1, -(-left // max(d, 1)))
    return tuple(reversed(out))


_ROWS: dict[int, tuple[Graph, dict[str, int]]] = {}


def reduced_row(graph: Graph, node: Node, shape: tuple[int, ...]) -> int:
    """Elements of one whole row of a reduction's reduced axes (cached per graph)."""
    hit = _ROWS.get(id(graph))
    if hit is None or hit[0] is not graph:
        if len(_ROWS) > 8:
            _ROWS.clear()
        hit = _ROWS[id(graph)] = (graph, {})
    rows = hit[1]
    row = rows.get(node.name)
    if row is None:
        row = rows[node.name] = math.prod(shape[a] for a in reduced_axes(graph, node))
    return row


def ub_need(graph: Graph, io: GroupIO, target: Target) -> UBNeed:
    """The working set of the smallest legal tiling of the group (see the module doc)."""
    limit = target.ub_usable_bytes
    kinds = node_kinds(graph)
    compute = [n for n in io.nodes if not kinds[n.name] & VIEW]
    if not compute:
        return UBNeed(0, limit, 0, (), "", (), True)
    sizes = _Sizes(size_table(graph))
    anchor = _anchor(io, compute, sizes)
    if anchor is None:
        return UBNeed(0, limit, 0, (), "", (), False, "no static output shape")
    a_shape = sizes.shape(anchor) or ()
    sizes.a_numel = max(1, math.prod(a_shape))
    lower, upper = _tile_bounds(graph, compute, kinds, sizes, anchor, target)
    chosen, legal = _smallest_legal(lower, upper, sizes.a_numel)
    why = "" if legal else _why_illegal(lower, upper, kinds)
    buffers, seen = _output_buffers(compute, kinds, sizes, chosen, target)
    buffers += _input_buffers(io, compute, sizes, chosen, target, seen)
    total = sum(b for _, b in buffers)
    return UBNeed(total, limit, chosen, _block(a_shape, chosen), anchor, tuple(buffers), legal, why)


_NONE = (None, None, None)

# A lower bound on the tile's elements (the node it comes from, None for the alignment
# floor, and the size it needs), an upper bound (the cube node whose L0C tile caps it)
Lower = tuple[int, Node | None, int]
Upper = tuple[int, Node]


class _Sizes:
    """Static shapes and element sizes of the tensors (``size_table``), and each
    tensor's share of an anchor tile once the anchor's element count is known."""

    __slots__ = ("table", "a_numel")

    def __init__(self, table: dict) -> None:
        self.table = table
        self.a_numel = 1

    def shape(self, t: str) -> tuple[int, ...] | None:
        """The tensor's static shape, None when unknown."""
        return self.table.get(t, _NONE)[0] if t else None

    def item(self, t: str) -> int:
        """The tensor's element size in bytes (4 when unknown)."""
        return (self.table.get(t, _NONE)[1] if t else None) or 4

    def share(self, t: str, e: int) -> int:
        """Elements of ``t`` that move with an anchor tile of ``e`` elements: its share,
        and at least one run of its last dimension."""
        shape = self.shape(t) or ()
        n = math.prod(shape) if shape else 1
        last = shape[-1] if shape else 1
        return max(1, min(n, max(-(-e * n // self.a_numel), min(e, last))))


def _anchor(io: GroupIO, compute: list[Node], sizes: _Sizes) -> str | None:
    """The largest escaping output of a compute node (else of the last compute node),
    ties broken by the shorter name; None without a static output shape."""
    candidates = [t for t in io.outputs if sizes.shape(t) is not None]
    if not candidates:
        candidates = [t for t in compute[-1].outputs if sizes.shape(t) is not None]
    if not candidates:
        return None
    return max(candidates, key=lambda t: (math.prod(sizes.shape(t) or ()), -len(t)))


def _tile_bounds(
    graph: Graph,
    compute: list[Node],
    kinds: dict[str, int],
    sizes: _Sizes,
    anchor: str,
    target: Target,
) -> tuple[list[Lower], list[Upper]]:
    """Lower bounds on the tile's elements (reductions need whole rows; a cube its
    minimum tile), upper bounds (the cube output tile must fit L0C). Each bound keeps
    the node it comes from."""
    a_numel = sizes.a_numel
    lower: list[Lower] = [
        (min(a_numel, max(1, target.ub_align_bytes // sizes.item(anchor))), None, 0)
    ]
    upper: list[Upper] = []
    for node in compute:
        kind = kinds[node.name]
        if not kind & (REDUCE | CUBE):
            continue
        if kind & REDUCE and node.inputs and sizes.shape(node.inputs[0]):
            shape = sizes.shape(node.inputs[0]) or ()
            row = reduced_row(graph, node, shape)
            n_in = max(1, math.prod(shape))
            lower.append((min(a_numel, -(-row * a_numel // n_in)), node, row))
        if kind & CUBE and node.outputs and sizes.shape(node.outputs[0]):
            shape = sizes.shape(node.outputs[0]) or ()
            n_out = max(1, math.prod(shape))
            if node.op_type.startswith("Conv") and len(shape) >= 3:
                cols, rows = shape[1], n_out // max(1, shape[1])
            else:
                cols = shape[-1] if shape else 1
                rows = n_out // max(1, cols)
            m0, n0 = target.cube_min_tile
            min_tile = min(m0, rows) * min(n0, cols)
            lower.append((min(a_numel, -(-min_tile * a_numel // n_out)), node, min_tile))
            max_tile = target.l0c_bytes // target.accumulate_bytes
            upper.append((max(1, max_tile * a_numel // n_out), node))
    return lower, upper


def _smallest_legal(lower: list[Lower], upper: list[Upper], a_numel: int) -> tuple[int, bool]:
    """Tilings from small to large: the largest lower bound, then powers of two, then
    the whole anchor; the first one no upper bound rules out, and whether one was."""
    need_min = max(e for e, _, _ in lower)
    cap = min((c for c, _ in upper), default=None)
    if cap is None or need_min <= cap:
        return need_min, True
    p = 1
    while p < a_numel:
        if p > need_min and p <= cap:
            return p, True
        p *= 2
    if a_numel <= cap:
        return a_numel, True
    return need_min, False


def _why_illegal(lower: list[Lower], upper: list[Upper], kinds: dict[str, int]) -> str:
    """Which nodes' bounds no tiling satisfies together."""
    need_min = max(e for e, _, _ in lower)
    needs = [
        f"{n.name} needs {'whole rows of' if kinds[n.name] & REDUCE else 'tiles of at least'} "
        f"{size} elements"
        for _, n, size in lower
        if n is not None
    ]
    caps = [f"{n.name} tile bounded by L0C" for c, n in upper if need_min > c]
    return f"no tiling satisfies both bounds ({'; '.join(needs + caps)})"


def _output_buffers(
    compute: list[Node], kinds: dict[str, int], sizes: _Sizes, chosen: int, target: Target
) -> tuple[list[tuple[str, int]], set[str]]:
    """A buffer per output of a compute node (a cube's in accumulator precision), and
    the tensors given one."""
    buffers: list[tuple[str, int]] = []
    align = target.ub_align_bytes
    seen: set[str] = set()
    for node in compute:
        cube = kinds[node.name] & CUBE
        for t in node.outputs:
            if not t or t in seen:
                continue
            seen.add(t)
            if cube:
                elem = max(sizes.item(t), target.accumulate_bytes)
                nbuf = _align(sizes.share(t, chosen) * elem, align) * target.cube_buffer_factor
            else:
                nbuf = _align(sizes.share(t, chosen) * sizes.item(t), align) * target.buffer_factor
            buffers.append((t, nbuf))
    return buffers, seen


def _input_buffers(
    io: GroupIO,
    compute: list[Node],
    sizes: _Sizes,
    chosen: int,
    target: Target,
    seen: set[str],
) -> list[tuple[str, int]]:
    """A buffer per external input the vector unit reads: not a scalar, not only a cube
    op's matrix operand; a table read by a gather moves the gathered rows only."""
    # External inputs, each with the compute nodes reading it (directly or through views).
    readers: dict[str, list[tuple[Node, int]]] = {}
    root = io.root
    for node in compute:
        port = 0
        for x in node.inputs:
            if x:
                readers.setdefault(root.get(x, x), []).append((node, port))
            port += 1
    gather = gather_ops()
    align = target.ub_align_bytes
    buffers: list[tuple[str, int]] = []
    for t in io.inputs:
        shape = sizes.shape(t)
        if shape is None or t in seen or math.prod(shape) <= 1 or t not in readers:
            continue
        if all(port in CUBE_MATRIX_PORTS.get(n.op_type, ()) for n, port in readers[t]):
            continue  # matrix operands of a cube op go through L1/L0A/L0B, not UB
        seen.add(t)
        if all(port == 0 and n.op_type in gather for n, port in readers[t]):
            # a table read by a gather (an embedding): only the gathered rows move, as
            # many elements per tile as the gather's output tile
            elems = max(sizes.share(n.outputs[0], chosen) for n, _ in readers[t])
        else:
            elems = sizes.share(t, chosen)
        buffers.append((t, _align(elems * sizes.item(t), align) * target.buffer_factor))
    return buffers
