"""The repeated-structure memo gives exactly the plain matcher's result."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ruleengine.graph import graph_from_model, load_graph
from ruleengine.match import find_candidates, memo
from ruleengine.rules import load_rule_set

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from synthetic import decoder_stack  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / ".." / "shared" / "models"

# small radius (7 hops), composites, fan-out siblings, chains with near misses
RULES = ("elementwise_chain", "norm_projections", "rmsnorm", "swiglu", "matmul_bias")


@pytest.fixture(scope="module")
def rule_set():
    rs = load_rule_set([], preset="all")
    return replace(rs, rules=tuple(r for r in rs.rules if r.name in RULES))


@pytest.fixture(autouse=True)
def _memo_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memo, "MAX_COVER", 1.0)  # small graphs: use it all the same


def _same(graph, rule_set, **stats_out) -> dict:
    stats: dict = {}
    with_memo = find_candidates(graph, rule_set, memo=True, stats=stats)
    plain = find_candidates(graph, rule_set, memo=False)
    assert with_memo.candidates == plain.candidates
    assert [(n.candidate, n.code) for n in with_memo.near_misses] == [
        (n.candidate, n.code) for n in plain.near_misses
    ]
    # reasons are computed on first read, and are the plain matcher's
    assert [n.reason for n in with_memo.near_misses] == [n.reason for n in plain.near_misses]
    assert with_memo.near_misses == plain.near_misses
    assert plain.candidates and plain.near_misses
    return stats


def test_memo_equals_plain_on_a_stack(rule_set) -> None:
    # 30 layers: node names cross 999 -> 1000 in layer 23, so there fan-out siblings
    # bound in name order come out in the other order than in the representative's
    stats = _same(graph_from_model(decoder_stack(30)), rule_set)
    assert stats["classes"] < 0.6 * 30 * 43  # the memo did share work


def _layer_nodes(m: onnx.ModelProto, layer: int) -> list[onnx.NodeProto]:
    return [n for n in m.graph.node if n.name.startswith(f"l{layer}_")]


def _with_attribute_changed() -> onnx.ModelProto:
    m = decoder_stack(20)
    node = next(n for n in _layer_nodes(m, 11) if n.op_type == "Softmax")
    del node.attribute[:]
    node.attribute.append(helper.make_attribute("axis", 3))  # same meaning, other value
    return m


def _with_extra_consumer() -> onnx.ModelProto:
    m = decoder_stack(20)
    inner = next(n for n in _layer_nodes(m, 9) if n.name.startswith("l9_ln2_add"))
    m.graph.node.append(helper.make_node("Relu", [inner.output[0]], ["spy"], name="spy"))
    m.graph.output.append(helper.make_tensor_value_info("spy", TensorProto.FLOAT, None))
    return m


def _with_inner_graph_output() -> onnx.ModelProto:
    m = decoder_stack(20)
    inner = next(n for n in _layer_nodes(m, 12) if n.op_type == "Sigmoid")
    m.graph.output.append(helper.make_tensor_value_info(inner.output[0], TensorProto.FLOAT, None))
    return m


def _with_shape_changed() -> onnx.ModelProto:
    """Layer 10's norm weight is a scalar instead of a vector (broadcasts the same)."""
    m = decoder_stack(20)
    m.graph.initializer.append(numpy_helper.from_array(np.array(1.0, np.float32), "norm_w10"))
    for n in _layer_nodes(m, 10):
        for k, t in enumerate(n.input):
            if t == "norm_w":
                n.input[k] = "norm_w10"
    return m


def _with_hub_mask() -> onnx.ModelProto:
    """The mask computed once (a node) and read by every layer: a hub tensor."""
    m = decoder_stack(20)
    m.graph.node.insert(0, helper.make_node("Neg", ["mask"], ["mask_neg"], name="mask_neg"))
    m.graph.node.insert(1, helper.make_node("Neg", ["mask_neg"], ["mask_c"], name="mask_c"))
    for n in m.graph.node[2:]:
        for k, t in enumerate(n.input):
            if t == "mask":
                n.input[k] = "mask_c"
    return m


@pytest.mark.parametrize(
    "build",
    [
        _with_attribute_changed,
        _with_extra_consumer,
        _with_inner_graph_output,
        _with_shape_changed,
        _with_hub_mask,
    ],
)
def test_memo_equals_plain_when_one_layer_differs(rule_set, build) -> None:
    _same(graph_from_model(build()), rule_set)


@pytest.mark.parametrize(
    ("name", "preset"), [("llama-tiny.dynamo.onnx", True), ("gpt2-tiny.ts.onnx", False)]
)
def test_memo_equals_plain_on_shared_models(rule_set, name: str, preset: bool) -> None:
    path = MODELS / name
    assert path.is_file(), f"{path} is missing: the shared models are required (tests/conftest.py)"
    _same(load_graph(path, {}), load_rule_set([], preset="all") if preset else rule_set)


def _softmax(n) -> bool:
    return n.op_type == "Softmax"


def _norm2_add(n) -> bool:
    return "_ln2_add" in n.name


def _sigmoid(n) -> bool:
    return n.op_type == "Sigmoid"


def _reads_norm_weight(n) -> bool:
    return any(t.startswith("norm_w") for t in n.inputs)


@pytest.mark.parametrize(
    ("build", "pick", "layer"),
    [
        (_with_attribute_changed, _softmax, 11),
        (_with_extra_consumer, _norm2_add, 9),
        (_with_inner_graph_output, _sigmoid, 12),
        (_with_shape_changed, _reads_norm_weight, 10),
    ],
)
def test_a_changed_node_gets_its_own_signature(build, pick, layer: int) -> None:
    graph = graph_from_model(build())
    st = memo.structure(graph)

    def at(k: int) -> int:
        return st.pos[next(n.name for n in graph.nodes if n.name.startswith(f"l{k}_") and pick(n))]

    changed, twin, other = at(layer), at(layer - 3), at(layer - 4)
    assert st.sig[twin] == st.sig[other]  # untouched layers look alike
    assert st.sig[changed] != st.sig[twin]
    classes = memo.classify(st, 2)
    assert classes.rep[twin] == classes.rep[other]
    assert classes.rep[changed] != classes.rep[twin]


def test_clause_radius_counts_hops_from_the_anchor() -> None:
    rs = load_rule_set([], preset="all")
    from ruleengine.match.compile import compile_rule_set
    from ruleengine.match.matcher import default_aliases

    rules = tuple(r for r in rs.rules if r.name in ("matmul_bias", "elementwise_chain"))
    prog = compile_rule_set(rules, default_aliases(), tabled_forms=True)
    radii = {
        name: max(memo.clause_radius(c) for c in combos.values())
        for name, (_h, _a, combos) in prog.rules.items()
    }
    assert radii == {"matmul_bias": 1, "elementwise_chain": 7}  # a chain of up to 8 ops
    # bindings are anchored at a centre of their clause: half the chain's length
    anchored = {
        name: max(memo.clause_anchor(c)[1] for c in combos.values())  # type: ignore[index]
        for name, (_h, _a, combos) in prog.rules.items()
    }
    assert anchored == {"matmul_bias": 1, "elementwise_chain": 4}
    longest = max(prog.rules["elementwise_chain"][2].values(), key=lambda c: c.n_head)
    assert memo.clause_anchor(longest) == (3, 4)  # the 4th of 8 ops: 3 hops up, 4 down
    assert memo.clause_anchor(longest, avoid={0}) == (0, 7)  # a fan-out first op: as before
    assert memo.clause_anchor(longest, avoid={3}) == (4, 4)


def test_key_rows_order_and_deduplicate_like_tuples() -> None:
    """The memo orders candidate keys and picks the first per (rule, node set) as rows
    of name ranks: the same as sorting the key tuples and keeping the first, with
    shorter node tuples (prefixes), equal node sets in other orders, alternatives, and
    names whose order differs from their position (l10 < l9)."""
    import random

    rng = random.Random(7)
    names = [f"l{i}_{op}" for i in range(12) for op in ("mm", "add", "mul")]
    pos = {n: i for i, n in enumerate(names)}
    rank = np.empty(len(names), dtype=np.int64)
    rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
    pool = [n for n in names if n.startswith(("l1_", "l9_", "l10_"))]  # l10 sorts first
    keys: set[tuple] = set()
    while len(keys) < 400:
        nodes = rng.sample(pool, rng.randint(1, 4))
        keys.add((rng.choice(("b_rule", "a_rule")), tuple(nodes), rng.randint(0, 1)))
    keys_l = list(keys)
    codes = [rng.choice(("input-count", "param-mismatch")) for _ in keys_l]
    rows = memo._KeyRows(keys_l, [(None,)] * len(keys_l), rank, pos, {"a_rule": 0, "b_rule": 1})
    assert [keys_l[i] for i in rows.order] == sorted(keys_l)
    first: dict[tuple, tuple] = {}
    for key in sorted(keys_l):
        first.setdefault((key[0], frozenset(key[1])), key)
    assert [keys_l[i] for i in rows.first_per_set()] == list(first.values())
    others = keys_l[:150]
    other_rows = memo._KeyRows(
        others, [(None,)] * len(others), rank, pos, {"a_rule": 0, "b_rule": 1}
    )
    taken = {(k[0], frozenset(k[1])) for k in others}
    code_of = dict(zip(keys_l, codes, strict=True))
    want: dict[tuple, tuple] = {}
    for key in sorted(keys_l):
        if (key[0], frozenset(key[1])) not in taken:
            want.setdefault((key[0], frozenset(key[1]), code_of[key]), key)
    got = rows.first_per_set(codes, outside=other_rows)
    assert [keys_l[i] for i in got] == list(want.values())


def _twins_reference(st, origins, own) -> dict:
    """``memo._twins`` as first written (a Python loop per translated candidate)."""
    spans: dict[int, tuple[int, int]] = {}
    by_rep: dict[int, set[int]] = {}
    for _i, o, v in origins:
        lo, hi = spans.get(o.anchor, (0, 0))
        spans[o.anchor] = (min(lo, *o.offs), max(hi, *o.offs))
        by_rep.setdefault(o.anchor, set()).add(v)
    sig, n = st.sig, len(st.sig)
    alike: dict[int, set[int]] = {}
    for r, vs in by_rep.items():
        lo, hi = spans[r]
        if r + lo < 0 or r + hi >= n:
            continue
        want = sig[r + lo : r + hi + 1]
        alike[r] = {
            v for v in vs if 0 <= v + lo and v + hi < n and (sig[v + lo : v + hi + 1] == want).all()
        }
    out = {}
    for i, o, v in origins:
        j = own.get(id(o.candidate))
        if j is not None and v in alike.get(o.anchor, ()):
            out[i] = (j, v - o.anchor)
    return out


def test_twins_equal_the_per_candidate_reference(rule_set, monkeypatch) -> None:
    """The twins (candidate -> the one it translates) found with numpy per outcome equal
    the per-candidate loop's, on a stack with one layer changed (some members differ
    from their representative over a candidate's span)."""
    calls = []
    fast = memo._twins

    def both(st, origins, own):
        got = fast(st, origins, own)
        want = _twins_reference(st, origins, own)
        assert list(got.items()) == list(want.items())
        calls.append(len(got))
        return got

    monkeypatch.setattr(memo, "_twins", both)
    for m in (decoder_stack(30), _with_attribute_changed()):
        find_candidates(graph_from_model(m), rule_set, memo=True)
    assert len(calls) == 2 and all(calls)


def test_merge_points_place_keys_like_tuples() -> None:
    """Where one rule's near-miss keys fall among its candidate keys (``near_at``), as
    rows of name ranks: the same as counting the smaller key tuples, with prefixes,
    alternatives and names whose order differs from their position (l10 < l9)."""
    import bisect
    import random

    rng = random.Random(11)
    names = [f"l{i}_{op}" for i in range(12) for op in ("mm", "add")]
    pos = {n: i for i, n in enumerate(names)}
    rank = np.empty(len(names), dtype=np.int64)
    rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
    pool = [n for n in names if n.startswith(("l1_", "l9_", "l10_"))]
    keys: set[tuple] = set()
    while len(keys) < 300:
        keys.add(("r", tuple(rng.sample(pool, rng.randint(1, 4))), rng.randint(0, 1)))
    keys_l = list(keys)
    mine, theirs = keys_l[:200], keys_l[200:]  # distinct keys, as the memo's are
    a = memo._KeyRows(mine, [(None,)] * len(mine), rank, pos, {"r": 0}, keep_keys=True)
    b = memo._KeyRows(theirs, [(None,)] * len(theirs), rank, pos, {"r": 0}, keep_keys=True)
    a_sel, b_sel = a.order.tolist(), b.order.tolist()
    got = a.merge_points(a_sel, b, b_sel).tolist()
    ordered = [mine[i] for i in a_sel]
    assert got == [bisect.bisect_left(ordered, theirs[i]) for i in b_sel]
    assert a.merge_points([], b, b_sel).tolist() == [0] * len(b_sel)


def test_memo_result_says_where_near_misses_fall(rule_set) -> None:
    """``MatchResult.near_at``: near miss k sorts right before candidate near_at[k]."""
    import bisect

    found = find_candidates(graph_from_model(decoder_stack(8)), rule_set, memo=True)
    keys = [c.key for c in found.candidates]
    assert found.near_misses and len(found.near_at) == len(found.near_misses)
    assert found.near_at.tolist() == [
        bisect.bisect_left(keys, n.candidate.key) for n in found.near_misses
    ]
