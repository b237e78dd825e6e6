"""Control-flow bodies as scopes of their own (issue 36): each ``If``/``Loop``/``Scan``
body, nested ones too, becomes a model whose graph is the body, so that the stages that
decide and rewrite a top-level graph (load, match, cost, resolve, bind, rewrite) run on
it unchanged, and no group can cross a scope's boundary.

A scope's model holds the body's nodes and its own inputs (a ``Loop``/``Scan`` body's),
then every outer tensor it, or a body nested in it, reads: an outer initializer as an
initializer, copied by its header (its value only when small, as the loader reads no
more: deciding reads no weight byte), any other outer tensor as a graph input typed from
ONNX's inference of the whole model with the user's shapes bound. Bodies are visited
innermost first, so a body is read after the bodies in it were rewritten. Only the nodes
of a rewritten scope (and the initializers its rewrite added) go back into the body: its
inputs, outputs and outer references stay as they were, and the functions the fused
nodes call are the model's (``rewrite_bodies`` hands each scope the ones made before, so
that two different bodies never share a name and an overload).

``rewrite.bodies`` decides and rewrites each scope for ``fuse``. A scope's model copies
its body with the bodies nested in it: the copies cost the model's size times its depth
of nesting (silero-vad.onnx: 4 levels, 700 nodes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ruleengine.graph import onnxlite
from ruleengine.graph.onnxlite import AttributeProto, ModelProto
from ruleengine.graph.values import SMALL_CONST_NUMEL

FUSED_DOMAIN = "autofusion"
BodyPath = tuple[str, ...]  # (node name, attribute name, ...) from the top graph


@dataclass(frozen=True)
class Scope:
    """One body as a model of its own (``model``) and where it is (``path``)."""

    path: BodyPath
    model: Any  # onnx.ModelProto
    outer: tuple[str, ...]  # the outer tensors it reads, as inputs or initializers

    @property
    def where(self) -> str:
        """The body's path for messages: ``If_0/then_branch/...``."""
        return "/".join(self.path)


# a scope's rewrite: the rewritten scope model, or None when nothing in it was fused
Rewrite = Callable[[Scope], Any]


def subgraphs(node: Any) -> Iterator[tuple[str, Any]]:
    """The bodies a node holds, each with its attribute's name (``graphs[k]`` for a list)."""
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            yield a.name, a.g
        elif a.type == AttributeProto.GRAPHS:
            for k, sub in enumerate(a.graphs):
                yield f"{a.name}[{k}]", sub


def has_bodies(model: Any) -> bool:
    """Whether any top-level node holds a body (then every body is a scope)."""
    return any(True for n in model.graph.node for _ in subgraphs(n))


def _defined(g: Any) -> set[str]:
    names = {i.name for i in g.input} | {t.name for t in g.initializer}
    names.update(o for n in g.node for o in n.output)
    return names


def outer_reads(g: Any, path: BodyPath, memo: dict[BodyPath, tuple[str, ...]]) -> tuple[str, ...]:
    """What body ``g`` and the bodies in it read from outer scopes, in first-read order.
    Each body's reads are computed once (``memo``, by path: a protobuf wrapper's id() is
    reused once the wrapper is collected), so the walk is linear in the model's size."""
    if path in memo:
        return memo[path]
    local = _defined(g)
    reads: dict[str, None] = {}
    for n in g.node:
        for t in n.input:
            if t and t not in local:
                reads[t] = None
        for attr, sub in subgraphs(n):
            for t in outer_reads(sub, (*path, n.name, attr), memo):
                if t not in local:
                    reads[t] = None
    memo[path] = tuple(reads)
    return memo[path]


@dataclass(frozen=True)
class OuterTypes:
    """Every value's declared or inferred type and every initializer, over all scopes
    (names are unique across a model's scopes: ONNX's SSA)."""

    types: Mapping[str, Any]  # name -> ValueInfoProto
    inits: Mapping[str, Any]  # name -> TensorProto

    @classmethod
    def of(cls, bound: Any) -> OuterTypes:
        """From ONNX's shape inference of ``bound`` (the input model with the user's dims
        and shapes bound; its own declarations when inference fails)."""
        try:
            inferred = onnxlite.infer_shapes(bound)
        except Exception:  # keep what the model declares
            inferred = bound
        types: dict[str, Any] = {}
        inits: dict[str, Any] = {}
        stack = [inferred.graph]
        while stack:
            g = stack.pop()
            for vi in (*g.input, *g.output, *g.value_info):
                types[vi.name] = vi
            for t in g.initializer:
                inits[t.name] = t
            stack.extend(sub for n in g.node for _, sub in subgraphs(n))
        return cls(types, inits)


def _header(t: Any) -> Any:
    """An initializer's name, type and dims, with its value only when small."""
    out = onnxlite.TensorProto()
    if math.prod(t.dims) <= SMALL_CONST_NUMEL:
        out.CopyFrom(t)
        return out
    out.name, out.data_type = t.name, t.data_type
    out.dims.extend(t.dims)
    return out


def scope_model(
    model: Any, body: Any, scope: tuple[BodyPath, tuple[str, ...]], outer: OuterTypes,
    functions: Mapping[tuple[str, str, str], Any],
) -> Any:  # fmt: skip
    """``body`` as a model of its own (``scope``: its path and outer reads), with
    ``model``'s opsets and the ``functions`` made so far."""
    g = onnxlite.GraphProto()
    g.CopyFrom(body)
    g.name = g.name or "/".join(scope[0])
    for name in scope[1]:
        if name in outer.inits:
            g.initializer.append(_header(outer.inits[name]))
            continue
        vi = g.input.add()
        known = outer.types.get(name)
        if known is None:
            vi.name = name  # no type known: the loader takes it as unknown
        else:
            vi.CopyFrom(known)
    for vi in (*g.input, *g.output):
        known = outer.types.get(vi.name)
        if known is not None and not vi.type.tensor_type.HasField("shape"):
            vi.type.CopyFrom(known.type)
    out = ModelProto()
    out.ir_version = model.ir_version
    out.opset_import.extend(model.opset_import)
    out.graph.CopyFrom(g)
    out.functions.extend(functions.values())
    if functions and FUSED_DOMAIN not in {o.domain for o in out.opset_import}:
        out.opset_import.append(onnxlite.make_opsetid(FUSED_DOMAIN, 1))
    return out


def rewrite_bodies(model: Any, bound: Any, rewrite: Rewrite) -> list[Scope]:
    """Run ``rewrite`` on every body of ``model`` (in place), innermost first, and put
    each rewritten scope's nodes back into its body; returns the scopes visited.
    ``bound``: the input model with the user's shapes bound (read for types only: a
    fused model keeps the shapes the user's model declares)."""
    outer = OuterTypes.of(bound)
    functions = {(f.domain, f.name, f.overload): f for f in model.functions}
    memo: dict[BodyPath, tuple[str, ...]] = {}
    visited: list[Scope] = []

    def visit(g: Any, path: BodyPath) -> None:
        for n in g.node:
            for attr, sub in subgraphs(n):
                visit(sub, (*path, n.name, attr))
        if not path:
            return
        reads = outer_reads(g, path, memo)
        scope = Scope(path, scope_model(model, g, (path, reads), outer, functions), reads)
        visited.append(scope)
        done = rewrite(scope)
        if done is not None:
            _splice(g, scope.model, done)
            for f in done.functions:
                functions[(f.domain, f.name, f.overload)] = f

    visit(model.graph, ())
    if len(functions) != len(model.functions):
        del model.functions[:]
        model.functions.extend(functions.values())
        if FUSED_DOMAIN not in {o.domain for o in model.opset_import}:
            model.opset_import.append(onnxlite.make_opsetid(FUSED_DOMAIN, 1))
    return visited


def _splice(body: Any, scoped: Any, done: Any) -> None:
    """The rewritten nodes of a scope back into its ``body``, with the initializers the
    rewrite added (not those the scope took from outer scopes)."""
    had = {t.name for t in scoped.graph.initializer}
    del body.node[:]
    body.node.extend(done.graph.node)
    body.initializer.extend(t for t in done.graph.initializer if t.name not in had)


def bodies_of(model: Any) -> Iterator[tuple[BodyPath, Any]]:
    """Every body with its path, outermost first (for reports and tests)."""
    stack: list[tuple[BodyPath, Any]] = [((), model.graph)]
    while stack:
        path, g = stack.pop()
        if path:
            yield path, g
        for n in reversed(g.node):
            for attr, sub in reversed(list(subgraphs(n))):
                stack.append(((*path, n.name, attr), sub))
