"""Twins: node sets no rule can tell apart, and drafting partitions their rules keep.

A chain of 11 Relu ops: every interval inside the chain (not touching its ends) reads a
Relu's output and is read by a Relu, so a rule drafted from one matches every interval
of its length there. Pool: intervals of 3 (captured 16, net 13) and interior intervals
of 2 (captured 10, net 14). The most captured partition, 3 + 2 + 3 + 3 (58), is what the
selection keeps when only its own groups are offered, so it is the ceiling; but a rule
for its pair offers every interior pair, and the net-bytes selection then tiles the
chain with pairs (55 net against 53) capturing 46. The partition stable under its twins,
three intervals of 3 (48), is what drafting should take.
"""

from __future__ import annotations

from ruleengine.graph import load_graph
from ruleengine.suggest.analyses import Given
from ruleengine.suggest.partition import Kernel, best_partition
from ruleengine.suggest.regions import selectable_partition
from ruleengine.suggest.twins import structural_partition, twin_classes, twin_key

from .graphs import save

N = 11


def _chain(tmp_path, ops=None):
    ops = ops or ["Relu"] * N
    lines, x = [], "x"
    for i, op in enumerate(ops):
        lines.append(f"  [r{i}] t{i} = {op} ({x})")
        x = f"t{i}"
    text = (
        '<ir_version: 8, opset_import: ["" : 17]>\n'
        f"g (float[64,256] x) => (float[64,256] {x})\n{{\n" + "\n".join(lines) + "\n}\n"
    )
    return load_graph(save(text, tmp_path / "chain.onnx"))


def _pool() -> list[Kernel]:
    out = []
    for i in range(N - 2):
        out.append(Kernel(frozenset(f"r{j}" for j in range(i, i + 3)), 16, 0, 13, 3))
    for i in range(1, N - 2):
        out.append(Kernel(frozenset({f"r{i}", f"r{i + 1}"}), 10, 0, 14, 2))
    return out


def test_twins_are_the_occurrences_no_rule_tells_apart(tmp_path):
    graph = _chain(tmp_path)
    inner = {twin_key(graph, frozenset({f"r{i}", f"r{i + 1}"})) for i in range(1, N - 2)}
    assert len(inner) == 1  # every interior pair: one twin class
    # the ends differ: one reads the graph input, the other writes the graph output
    assert twin_key(graph, frozenset({"r0", "r1"})) not in inner
    assert twin_key(graph, frozenset({f"r{N - 2}", f"r{N - 1}"})) not in inner
    # an op, or an attribute, that differs makes another class
    other = _chain(tmp_path, ["Relu"] * 5 + ["Sigmoid"] + ["Relu"] * 5)
    assert twin_key(other, frozenset({"r4", "r5"})) != twin_key(other, frozenset({"r2", "r3"}))
    assert twin_key(other, frozenset({"r2", "r3"})) == twin_key(graph, frozenset({"r2", "r3"}))


def test_the_drafting_partition_stable_under_its_twins(tmp_path):
    graph = _chain(tmp_path)
    pool = _pool()
    empty = best_partition(graph, [], value=lambda k: k.net_bytes)
    # the ceiling offering exactly one partition's groups: 3 + 2 + 3 + 3 ops, 58 captured
    ceiling = selectable_partition(graph, pool, [], empty, 0, True)
    assert ceiling.captured == 58
    # its rules offer every twin of its groups: the selection tiles the chain with pairs
    keys = twin_classes(graph, pool)
    offered = {t.nodes: t for k in ceiling.kernels for t in pool if keys[t.nodes] == keys[k.nodes]}
    shifted = best_partition(graph, list(offered.values()), value=lambda k: k.net_bytes)
    assert shifted.captured < 50
    assert sum(k.net_bytes for k in shifted.kernels) > sum(k.net_bytes for k in ceiling.kernels)
    # the partition its twins do not displace: three intervals of 3
    stable, kept = structural_partition(graph, pool, [], 0, True)
    assert kept
    assert stable.captured == 48
    assert all(len(k.nodes) == 3 for k in stable.kernels)
    offered = {t.nodes: t for k in stable.kernels for t in pool if keys[t.nodes] == keys[k.nodes]}
    again = best_partition(graph, list(offered.values()), value=lambda k: k.net_bytes)
    assert again.captured == 48


def test_the_twin_round_reuses_the_first_drafting(tmp_path, monkeypatch):
    """The further drafting for twins starts from the same rules as the first one: with
    the first one's memo it analyses no model again and finds the same drafts as
    without it (only what depends on twins is searched again)."""
    import ruleengine.pipeline as pipeline
    from ruleengine.suggest.drafting import draft_rules

    from .graphs import NOTHING_RULE, layers

    model = save(layers(["Relu", "Sigmoid", "Relu"]), tmp_path / "m.onnx")
    given = tmp_path / "given"
    given.mkdir()
    (given / "nothing.yaml").write_text(NOTHING_RULE)
    args = ([model], Given([given], None, "ascend910b"), 0, None, lambda _m: None)
    memo: dict = {}
    first = draft_rules(*args, memo=memo)
    assert first[1]
    fresh = draft_rules(*args, twins=True)
    analysed: list = []
    real = pipeline.analyze

    def counted(*a, **k):
        analysed.append(a)
        return real(*a, **k)

    monkeypatch.setattr(pipeline, "analyze", counted)
    again = draft_rules(*args, twins=True, memo=memo)
    assert analysed == []
    assert again[0] == fresh[0]
    assert [d.text for d in again[1]] == [d.text for d in fresh[1]]
    assert [dict(d.tests) for d in again[1]] == [dict(d.tests) for d in fresh[1]]


def _stable_by_brute_force(graph, pool: list[Kernel]) -> int:
    """The most captured by a partition of ``pool`` (intervals of the chain) that the
    selection keeps when every twin of its groups is offered: every packing tried, the
    selection's best net bytes over what is offered found by dynamic programming."""
    keys = twin_classes(graph, pool)
    span = {k.nodes: sorted(int(n[1:]) for n in k.nodes) for k in pool}

    def most_net(offered: list[Kernel]) -> int:
        best = [0] * (N + 1)  # best[i]: the most net bytes over r0 .. r(i-1)
        for i in range(1, N + 1):
            best[i] = best[i - 1]
            for k in offered:
                lo, hi = span[k.nodes][0], span[k.nodes][-1]
                if hi == i - 1:
                    best[i] = max(best[i], best[lo] + k.net_bytes)
        return best[N]

    top = 0

    def packings(start: int, chosen: list[Kernel]) -> None:
        nonlocal top
        classes = {keys[k.nodes] for k in chosen}
        offered = [t for t in pool if keys[t.nodes] in classes]
        if most_net(offered) <= sum(k.net_bytes for k in chosen):
            top = max(top, sum(k.captured for k in chosen))
        for k in pool:
            if span[k.nodes][0] >= start:
                packings(span[k.nodes][-1] + 1, [*chosen, k])

    packings(0, [])
    return top


def test_the_ceiling_under_twins_is_proven(tmp_path):
    """The bar's ceiling: the most captured by a partition the selection keeps with every
    twin of its groups offered, proven by lazy rows that hold for every such partition
    (a 0-1 variable per twin class). The selectable ceiling (58) assumes a rule offering
    its pair alone; the ceiling under twins is 48, what every packing tried confirms."""
    from ruleengine.suggest.twins import twin_ceiling

    graph = _chain(tmp_path)
    pool = _pool()
    empty = best_partition(graph, [], value=lambda k: k.net_bytes)
    rows: list = []
    selectable = selectable_partition(graph, pool, [], empty, 0, True, rows=rows)
    assert selectable.captured == 58
    assert _stable_by_brute_force(graph, pool) == 48
    got = twin_ceiling(graph, pool, [], rows[0], True, conditions=rows[1], start=selectable)
    assert got.captured == 48 and got.exact
    # from no rows at all: the same
    fresh = twin_ceiling(graph, pool, [], 0, True)
    assert fresh.captured == 48 and fresh.exact
    # where the twins displace nothing, the selectable ceiling is the answer: triples only
    triples = [k for k in pool if len(k.nodes) == 3]
    rows = []
    top = selectable_partition(graph, triples, [], empty, 0, True, rows=rows)
    same = twin_ceiling(graph, triples, [], rows[0], True, conditions=rows[1], start=top)
    assert same is top and same.captured == _stable_by_brute_force(graph, triples)


def test_the_ceiling_under_twins_stops_at_its_budget_with_a_bound(tmp_path, monkeypatch):
    """Its solves share one budget of deterministic time (``CEILING_SECONDS``): once it
    is spent the rounds stop and what is reported is a bound (status BOUND, never the
    proven 48 of the test above), whatever the solve cache holds."""
    from ruleengine.suggest import twins

    graph = _chain(tmp_path)
    pool = _pool()
    empty = best_partition(graph, [], value=lambda k: k.net_bytes)
    rows: list = []
    selectable = selectable_partition(graph, pool, [], empty, 0, True, rows=rows)
    monkeypatch.setattr(twins, "CEILING_SECONDS", 0.0)
    got = twins.twin_ceiling(graph, pool, [], rows[0], True, conditions=rows[1], start=selectable)
    assert got.status == "BOUND" and not got.exact
    assert not got.kernels or got.captured >= 48


def _two_chains(tmp_path, rows_a: int, rows_b: int):
    text = (
        '<ir_version: 8, opset_import: ["" : 17]>\n'
        f"g (float[{rows_a},256] x, float[{rows_b},256] z)"
        f" => (float[{rows_a},256] a2, float[{rows_b},256] b2)\n{{\n"
        "  [a0] a0 = Relu (x)\n  [a1] a1 = Relu (a0)\n  [a2] a2 = Relu (a1)\n"
        "  [b0] b0 = Relu (z)\n  [b1] b1 = Relu (b0)\n  [b2] b2 = Relu (b1)\n}\n"
    )
    return load_graph(save(text, tmp_path / f"two-{rows_a}-{rows_b}.onnx"))


def test_a_rule_offers_the_same_structure_on_smaller_tensors(tmp_path):
    """A drafted ``memory_limit`` keeps a rule off larger tensors, not smaller ones: the
    rule for the first pair of the larger chain matches the smaller chain's first pair
    too, and there that pair (more net bytes) displaces the second pair of the partition.
    The other way round (the smaller chain's pair drafted), nothing displaces it."""
    from ruleengine.suggest.twins import twin_ceiling

    def pool() -> list[Kernel]:
        return [
            Kernel(frozenset({"a0", "a1"}), 10, 0, 10, 2),
            Kernel(frozenset({"a1", "a2"}), 6, 0, 6, 2),
            Kernel(frozenset({"b0", "b1"}), 5, 0, 9, 2),
            Kernel(frozenset({"b1", "b2"}), 8, 0, 5, 2),
        ]

    for rows_a, rows_b, expected in ((64, 32, 15), (32, 64, 18)):
        graph = _two_chains(tmp_path, rows_a, rows_b)
        empty = best_partition(graph, [], value=lambda k: k.net_bytes)
        rows: list = []
        top = selectable_partition(graph, pool(), [], empty, 0, True, rows=rows)
        assert top.captured == 18  # a0-a1 and b1-b2, each rule offering its own group
        got = twin_ceiling(graph, pool(), [], rows[0], True, conditions=rows[1], start=top)
        assert got.captured == expected and got.exact
