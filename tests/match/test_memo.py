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
from ruleengine.match import (
    anchors,
    classes,
    find_candidates,
    keyrows,
    lazy,
    memo,
    outcomes,
    signatures,
    window,
)
from ruleengine.rules import load_rule_set

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from synthetic import decoder_stack

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
    st = signatures.structure(graph)

    def at(k: int) -> int:
        return st.pos[next(n.name for n in graph.nodes if n.name.startswith(f"l{k}_") and pick(n))]

    changed, twin, other = at(layer), at(layer - 3), at(layer - 4)
    assert st.sig[twin] == st.sig[other]  # untouched layers look alike
    assert st.sig[changed] != st.sig[twin]
    grouped = classes.classify(st, 2)
    assert grouped.rep[twin] == grouped.rep[other]
    assert grouped.rep[changed] != grouped.rep[twin]


def test_clause_radius_counts_hops_from_the_anchor() -> None:
    rs = load_rule_set([], preset="all")
    from ruleengine.match.compile import compile_rule_set
    from ruleengine.match.matcher import default_aliases

    rules = tuple(r for r in rs.rules if r.name in ("matmul_bias", "elementwise_chain"))
    prog = compile_rule_set(rules, default_aliases(), tabled_forms=True)
    radii = {
        name: max(anchors.clause_radius(c) for c in combos.values())
        for name, (_h, _a, combos) in prog.rules.items()
    }
    assert radii == {"matmul_bias": 1, "elementwise_chain": 7}  # a chain of up to 8 ops
    # bindings are anchored at a centre of their clause: half the chain's length
    anchored = {
        name: max(anchors.clause_anchor(c)[1] for c in combos.values())  # type: ignore[index]
        for name, (_h, _a, combos) in prog.rules.items()
    }
    assert anchored == {"matmul_bias": 1, "elementwise_chain": 4}
    longest = max(prog.rules["elementwise_chain"][2].values(), key=lambda c: c.n_head)
    assert anchors.clause_anchor(longest) == (3, 4)  # the 4th of 8 ops: 3 hops up, 4 down
    assert anchors.clause_anchor(longest, avoid={0}) == (0, 7)  # a fan-out first op: as before
    assert anchors.clause_anchor(longest, avoid={3}) == (4, 4)


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
    rows = keyrows.KeyRows(keys_l, [(None,)] * len(keys_l), rank, pos, {"a_rule": 0, "b_rule": 1})
    assert [keys_l[i] for i in rows.order] == sorted(keys_l)
    first: dict[tuple, tuple] = {}
    for key in sorted(keys_l):
        first.setdefault((key[0], frozenset(key[1])), key)
    assert [keys_l[i] for i in rows.first_per_set()] == list(first.values())
    others = keys_l[:150]
    other_rows = keyrows.KeyRows(
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
    """``window.twin_map`` as first written (a Python loop per translated candidate)."""
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
    fast = window.twin_map

    def both(st, index, outs, which, vs, own):
        got = fast(st, index, outs, which, vs, own)
        origins = sorted(
            zip(index.tolist(), [outs[k] for k in which.tolist()], vs.tolist(), strict=True),
            key=lambda t: t[0],
        )
        want = _twins_reference(st, origins, own)
        assert list(got.items()) == sorted(want.items())
        calls.append(len(got))
        return got

    monkeypatch.setattr(window, "twin_map", both)
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
    a = keyrows.KeyRows(mine, [(None,)] * len(mine), rank, pos, {"r": 0}, keep_keys=True)
    b = keyrows.KeyRows(theirs, [(None,)] * len(theirs), rank, pos, {"r": 0}, keep_keys=True)
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


def _rows_reference(rule: str, outs, blocks, names) -> tuple[list, list]:
    """What ``_RuleRows`` picks, as first written: per key (rule, node names,
    alternative) the least row (combo, row names), candidates before near misses, then
    per node set (and code) the first key in key order, no near miss on a candidate's
    node set. Returns [(key, winning combo)] and [(key, code, winning combo)]."""
    best_c: dict[tuple, tuple] = {}
    best_n: dict[tuple, tuple] = {}
    for o, vs in zip(outs, blocks, strict=True):
        for v in vs.tolist():
            key = (rule, tuple(names[v + k] for k in o.flat), o.alternative)
            row = (o.combo, *(names[v + k] for k in o.offs))
            best = best_c if o.code is None else best_n
            if key not in best or row < best[key][0]:
                best[key] = (row, o)
    near = {k: e for k, e in best_n.items() if k not in best_c}
    c_sets = {frozenset(k[1]) for k in best_c}
    cands, seen = [], set()
    for k in sorted(best_c):
        if frozenset(k[1]) not in seen:
            seen.add(frozenset(k[1]))
            cands.append((k, best_c[k][1].combo))
    nears, seen_n = [], set()
    for k in sorted(near):
        o = near[k][1]
        s = frozenset(k[1])
        if s not in c_sets and (s, o.code) not in seen_n:
            seen_n.add((s, o.code))
            nears.append((k, o.code, o.combo))
    return cands, nears


@pytest.mark.parametrize("seed", range(6))
def test_rule_rows_pick_like_key_tuples(seed: int) -> None:
    """The matcher's de-duplication on int rows (outcome, member) picks the candidates
    and near misses a dict of key tuples picks: keys shared by several rows (the least
    row wins), near misses on a candidate's key or node set, node orders, alternatives,
    and names whose order differs from their position (l10 < l9)."""
    import random

    from ruleengine.match.model import Candidate

    rng = random.Random(seed)
    names = [f"l{i}_{op}" for i in range(14) for op in ("mm", "add", "mul")]
    pos = {n: i for i, n in enumerate(names)}
    label_arr = np.array(names, dtype=object)
    rank_p = np.zeros(len(names) + 1, dtype=np.int32)
    rank_p[sorted(range(len(names)), key=names.__getitem__)] = np.arange(1, len(names) + 1)
    outs, blocks = [], []
    for _ in range(40):
        flat = tuple(rng.sample(range(-2, 3), rng.randint(1, 3)))
        offs = tuple(rng.sample(flat, len(flat)))
        anchor = rng.randrange(2, len(names) - 2)
        alt, code = rng.randint(0, 1), rng.choice([None, None, "x", "y"])
        cand = Candidate("r", alt, (tuple(names[anchor + k] for k in flat),), (), ())
        o = outcomes.Outcome(
            anchor, rng.choice(["c0", "c1", "c2"]), offs, cand, code, None, (flat,), (), ()
        )
        members = [v for v in range(2, len(names) - 2) if v != anchor and rng.random() < 0.3]
        outs.append(o)
        blocks.append(np.asarray([anchor, *members], dtype=np.int64))
    from types import SimpleNamespace

    combos = {c: SimpleNamespace(alternative=0) for c in ("c0", "c1", "c2")}
    redo = (None, None, combos, None, {0: None})  # what a near miss's reason is read with
    rows = keyrows.RuleRows("r", outs, blocks, [], names, label_arr, rank_p, pos, 0, redo)
    own: dict[int, int] = {}
    site = (None, names, pos)
    block, _origin = rows.candidates(site, 0, own)
    cands = lazy.CandRows([("r", block)])
    by_cand = {id(o.candidate): o for o in outs}

    def combo(c) -> str:
        return c._o.combo if isinstance(c, lazy.Translated) else by_cand[id(c)].combo

    want_c, want_n = _rows_reference("r", outs, blocks, names)
    assert [(c.key, combo(c)) for c in cands] == want_c
    nears = lazy.NearRows([("r", rows.near_block(site))]) if rows.n_sel is not None else []
    assert [(n.candidate.key, n.code, combo(n.candidate)) for n in nears] == want_n
    assert rows.matched + rows.near_matched == len({k[1] for k, _ in want_c}) + len(
        {k[1] for k, _, _ in want_n}
    )
