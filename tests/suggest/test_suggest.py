"""autofusion suggest: regions left unfused, clusters, drafted rules, coverage before/after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ruleengine import coverage
from ruleengine.cli.app import app
from ruleengine.errors import UsageError
from ruleengine.graph import load_graph
from ruleengine.suggest import suggest
from ruleengine.suggest.analyses import Given
from ruleengine.suggest.canon import canonicalize, composite_instances
from ruleengine.suggest.regions import find_regions

from .graphs import NOTHING_RULE, layers, save

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "models"


@pytest.fixture
def case(tmp_path):
    rule = tmp_path / "nothing.yaml"
    rule.write_text(NOTHING_RULE)
    model = save(layers(["Tanh", "Relu", "Tanh"], gelu=True), tmp_path / "m.onnx")
    return model, rule


def _ops(text: str) -> list[dict]:
    return yaml.safe_load(text)["match"]["ops"]


def test_one_rule_per_recurring_layer_with_classes_and_composites(case):
    model, rule = case
    s = suggest([model], [rule])
    top = s.rules[0]
    assert len(top.cluster.instances) == 3  # the three layers are one structure
    types = [op["type"] for op in _ops(top.text)]
    # Tanh/Relu (in a chain: one op in, one op out) is an epilogue chain of 1..2 ops, as
    # exporters keep a BatchNorm or add a Cast there; the erf GELU is one composite op
    assert types == ["MatMul", "Add", "@epilogue", "Mul", "Gelu", "MatMul"]
    assert _ops(top.text)[2]["repeat"] == {"min": 1, "max": 2}
    data = yaml.safe_load(top.text)
    assert "Relu/Tanh as @epilogue x1..2" in data["description"]
    assert "3 region(s)" in data["description"] and "m.onnx" in data["description"]
    assert {c["type"] for c in data["constraints"]} == {"ub_fit", "dtype_match"}
    assert data["constraints"][1]["allowed_dtypes"] == ["float32"]
    assert data["priority"] == 0  # below the only rule in use (priority 0)


def test_coverage_before_and_after(case):
    model, rule = case
    s = suggest([model], [rule])
    (m,) = s.coverage
    assert m.before == 0.0  # the rule in use matches nothing
    assert m.after == pytest.approx(1.0) and m.reach == pytest.approx(1.0)
    assert m.suggested_groups == 3


def test_every_suggested_rule_passes_check_strict(case, tmp_path):
    """`check --strict` with the rule in use and the drafts' kernel entries: no finding
    (each draft's target_op has its structural contract in DIR/kernels)."""
    model, rule = case
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["suggest", str(model), "-r", str(rule), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert len(list((out / "rules").glob("*.yaml"))) == len(list((out / "kernels").iterdir()))
    res = CliRunner().invoke(
        app, ["check", str(out / "rules"), str(rule), "--kernels", str(out / "kernels"), "--strict"]
    )
    assert res.exit_code == 0, res.output
    # without the entries, each draft's target_op has no contract (an AF402 note, an
    # error under --require-contracts)
    res = CliRunner().invoke(app, ["check", str(out / "rules"), str(rule), "--strict"])
    assert res.exit_code == 0 and "AF402" in res.output
    res = CliRunner().invoke(
        app, ["check", str(out / "rules"), str(rule), "--strict", "--require-contracts"]
    )
    assert res.exit_code == 1 and "AF402" in res.output


def test_deterministic(case):
    model, rule = case
    a, b = suggest([model], [rule]), suggest([model], [rule])
    assert [(d.name, d.text) for d in a.rules] == [(d.name, d.text) for d in b.rules]


def test_min_bytes_and_max_rules(case):
    model, rule = case
    every = suggest([model], [rule])
    assert len(suggest([model], [rule], max_rules=1).rules) == 1
    biggest = every.rules[0].cluster.bytes_saved
    kept = suggest([model], [rule], min_bytes=biggest).rules
    assert [d.name for d in kept] == [every.rules[0].name]
    assert len(suggest([model], [rule], min_bytes=biggest + 1).rules) == 0


def test_every_region_is_a_kernel_the_target_accepts(tmp_path):
    """Regions stop where the cost model says no (UB, convexity, input limit, benefit);
    the MatMul -> MatMul edges between layers are never fusable, so one region a layer."""
    from ruleengine.cost import load_target
    from ruleengine.cost.scoring import score_one
    from ruleengine.match.model import Candidate

    graph = load_graph(save(layers(["Tanh", "Tanh"]), tmp_path / "m.onnx"))
    target = load_target("ascend910b")
    regions = find_regions(graph, [], target)
    assert [set(r.nodes) for r in regions] == [
        {"mm0", "bias0", "act0", "gate0", "out0"},
        {"mm1", "bias1", "act1", "gate1", "out1"},
    ]
    for r in regions:
        c = Candidate("", 0, tuple((n,) for n in r.nodes), (), ())
        assert score_one(graph, c, None, target).viable


def test_canonical_form_ignores_node_order_and_names(tmp_path):
    a = save(layers(["Tanh"], gelu=True), tmp_path / "a.onnx")
    text = layers(["Tanh"], gelu=True).replace("mm0", "zz0").replace("bias0", "aa0")
    b = save(text, tmp_path / "b.onnx")
    keys = []
    for path in (a, b):
        g = load_graph(path)
        nodes = [n.name for n in g.nodes if n.op_type != "Constant"]
        keys.append(canonicalize(g, nodes, composite_instances(g)).key)
    assert keys[0] == keys[1]


def test_cli_writes_rules_and_summary(case, tmp_path):
    model, rule = case
    out = tmp_path / "drafts"
    res = CliRunner().invoke(
        app, ["suggest", str(model), "--rules", str(rule), "-o", str(out), "-f", "json"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["schema_version"] == 3
    cov = data["coverage"][0]
    assert cov["before"] == 0.0 and cov["after"] == 1.0
    assert cov["ceiling"] == 1.0 and cov["ceiling_exact"] and cov["meets_bar"]
    assert cov["partition_max"] == 1.0 and cov["partition_max_exact"]
    names = {r["file"] for r in data["rules"]}
    assert names == {f"rules/{p.name}" for p in (out / "rules").glob("*.yaml")}
    kernels = {r["kernel"] for r in data["rules"]}
    assert kernels == {f"kernels/{p.name}" for p in (out / "kernels").glob("*.yaml")}
    assert json.loads((out / "suggest-summary.json").read_text()) == data
    text = CliRunner().invoke(app, ["suggest", str(model), "-r", str(rule), "-o", str(out)])
    assert text.exit_code == 0 and "coverage of fusable intermediate traffic" in text.stdout


def test_jobs_change_where_work_runs_not_the_drafts(case, tmp_path, monkeypatch, forks):
    """``--jobs 1`` forks no child and writes what the default (the cores) writes; a
    number of processes below 1 is a usage error."""
    from ruleengine import procs

    model, rule = case
    monkeypatch.setattr(procs, "cores", lambda: 2)
    written = []
    for jobs in ([], ["--jobs", "1"]):
        out = tmp_path / f"out{len(written)}"
        res = CliRunner().invoke(
            app, ["suggest", str(model), "-r", str(rule), "-o", str(out), *jobs]
        )
        assert res.exit_code == 0, res.output
        written.append({p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()})
        forked = len(forks)
        forks.clear()
        assert (forked > 0) == (not jobs)
    assert written[0] == written[1]
    res = CliRunner().invoke(app, ["suggest", str(model), "-o", str(tmp_path), "--jobs", "0"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    with pytest.raises(UsageError, match="positive integer"):
        suggest([model], [rule], jobs=0)


def test_cli_missing_model_is_a_clear_error(tmp_path):
    res = CliRunner().invoke(app, ["suggest", str(tmp_path / "nope.onnx"), "-o", str(tmp_path)])
    assert res.exit_code == 2
    assert "model not found" in res.stderr and "Traceback" not in res.output


# Real exports with a large gap under the bundled rules (measured 2026-12-01: 58-63%
# before). The test drafts for the one with the largest gap *now*, so a bundled rule that
# closes one model's gap (e.g. a new GELU form) moves it to another model, not to a skip.
GAP_MODELS = (
    "families/bloom-tiny.ts.onnx",
    "families/pythia-tiny.ts.onnx",
    "resnet18-narrow.ts.onnx",
)
MIN_GAP = 0.1  # the chosen model's distance to the bar, so the rise below means something


def _largest_gap() -> tuple[Path, float]:
    from ruleengine.pipeline import analyze

    measured = []
    for rel in GAP_MODELS:
        a = analyze(SHARED / rel, [], preset="all")
        cov = coverage.measure(a.graph, [sc.candidate.nodes for sc in a.resolution.chosen])
        measured.append((cov.coverage, rel))
    before, rel = min(measured)
    return SHARED / rel, before


def test_real_export_coverage_rises_and_rules_lint_clean(tmp_path):
    """On a real export the drafted rules raise coverage to the bar and lint clean with the
    library; the export is the one of GAP_MODELS the bundled rules leave most uncovered."""
    model, measured_before = _largest_gap()
    assert 0.9 - measured_before >= MIN_GAP, (
        f"every model of GAP_MODELS is within {MIN_GAP:.0%} of the bar under the bundled "
        "rules: add one with a larger gap"
    )
    s = suggest([model])
    again = suggest([model])  # deterministic: same drafts, same tests, same figures
    assert [(d.name, d.text, d.tests) for d in s.rules] == [
        (d.name, d.text, d.tests) for d in again.rules
    ]
    assert s.coverage == again.coverage
    (m,) = s.coverage
    assert m.before == pytest.approx(measured_before)
    # at least half the way from before to the bar (the bar itself is asserted below)
    assert m.after - m.before >= 0.5 * (min(0.9, m.ceiling) - m.before)
    assert m.after == pytest.approx(m.reach, abs=0.02)
    assert m.reach <= m.ceiling + 1e-9
    assert m.after >= min(0.9, m.ceiling) - 0.0005  # issue 16's bar
    (tmp_path / "rules").mkdir()
    (tmp_path / "kernels").mkdir()
    for d in s.rules:
        (tmp_path / "rules" / f"{d.name}.yaml").write_text(d.text)
        (tmp_path / "kernels" / f"{d.target_op}.yaml").write_text(d.kernel)
    repo_rules = Path(__file__).resolve().parents[2] / "rules"
    args = [str(tmp_path / "rules"), str(repo_rules), "--kernels", str(tmp_path / "kernels")]
    res = CliRunner().invoke(app, ["check", *args, "--strict"])
    assert res.exit_code == 0, res.output


def test_suggested_from_one_exporter_helps_the_other(tmp_path):
    from ruleengine.pipeline import analyze

    # PoolFormer: the bundled rules leave ~30% of its fusable traffic (OPT, used before,
    # is now mostly covered by the bundled library: too little left to learn)
    s = suggest([SHARED / "families" / "poolformer-narrow.ts.onnx"])
    for d in s.rules:
        (tmp_path / f"{d.name}.yaml").write_text(d.text)
    other = SHARED / "families" / "poolformer-narrow.dynamo.onnx"

    def cov(rules):
        a = analyze(other, rules, preset="all")
        return coverage.measure(a.graph, [sc.candidate.nodes for sc in a.resolution.chosen])

    assert cov([tmp_path]).coverage > cov([]).coverage + 0.05


def test_generated_rule_tests_pass_and_fail_on_a_broken_rule(case, tmp_path):
    """Each drafted rule comes with a positive (its region) and a negative (a near
    structure) in the layout `autofusion test` runs; they pass, and break with the rule."""
    from ruleengine.ruletest.model import Status
    from ruleengine.ruletest.run import run_tests

    model, rule = case
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["suggest", str(model), "-r", str(rule), "-o", str(out)])
    assert res.exit_code == 0, res.output
    out = out / "rules"
    drafts = sorted(out.glob("*.yaml"))
    assert drafts
    for d in drafts:
        tests = sorted(p.name for p in (out / f"{d.stem}.tests").iterdir())
        assert tests == ["negative_link_cut.onnxtxt", "positive_region.onnxtxt"]
    run = run_tests([out])
    assert run.outcomes and all(o.status is Status.PASS for o in run.outcomes)
    # the positive pins the rule: drop the rule's last op and the test fails
    first = drafts[0]
    data = yaml.safe_load(first.read_text())
    data["match"]["ops"] = data["match"]["ops"][:-1]
    first.write_text(yaml.safe_dump(data, sort_keys=False))
    broken = run_tests([first])
    assert any(o.status is Status.FAIL for o in broken.outcomes)
    res = CliRunner().invoke(app, ["test", str(out)])
    assert res.exit_code == 1


MOVE = """<ir_version: 8, opset_import: ["" : 17]>
g (float[64,256] x) => (float[64,256] y)
{
  [b] t = Exp (x)
  [a] u = Tanh (t)
  [c1] v = Sigmoid (u)
  [c2] w = Neg (u)
  [d] y = Add (v, w)
}
"""


def test_local_search_moves_a_node_to_the_side_that_reads_it_more(tmp_path):
    """Greedy kept `a` with its producer `b`; `a`'s output is read twice by the other
    group, so moving `a` there captures two edges for the one it gives up."""
    from ruleengine.cost import load_target
    from ruleengine.cost.scoring import GroupMemo
    from ruleengine.suggest.regions import _move_nodes

    graph = load_graph(save(MOVE, tmp_path / "m.onnx"))
    target = load_target("ascend910b")
    edges = coverage.fusable_edges(graph)
    parts = {0: frozenset({"b", "a"}), 1: frozenset({"c1", "c2", "d"})}
    part_of = {n: i for i, p in parts.items() for n in p}
    _move_nodes(graph, target, GroupMemo(graph, target), edges, parts, part_of)
    assert part_of["a"] == part_of["c1"] == part_of["c2"] == part_of["d"]
    # (then `b` follows: one kernel holds the whole chain, as UB allows here)
    before = coverage.measure(graph, [{"b", "a"}, {"c1", "c2", "d"}], edges).captured_bytes
    after = coverage.measure(graph, list(parts.values()), edges).captured_bytes
    assert after > before


def test_symbolic_dims_are_reported_and_bound_with_dim(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Exp", ["x"], ["e"], name="e"),
        helper.make_node("Relu", ["e"], ["y"], name="r"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    path = tmp_path / "sym.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    base = ["suggest", str(path), "--preset", "cnn", "-o", str(tmp_path / "o"), "-f", "json"]
    unbound = json.loads(CliRunner().invoke(app, base).stdout)["coverage"][0]
    assert unbound["unknown_edges"] == 1 and unbound["fusable_bytes"] == 0
    bound = json.loads(CliRunner().invoke(app, [*base, "--dim", "N=8"]).stdout)["coverage"][0]
    assert bound["unknown_edges"] == 0 and bound["fusable_bytes"] == 8 * 4 * 4
    assert bound["before"] == 0.0 and bound["after"] == 1.0


def test_regions_cluster_across_models(case, tmp_path):
    """One structure in two models (another activation, other node names) is one rule
    whose description names both models."""
    model, rule = case
    text = layers(["Relu", "Tanh"], gelu=True).replace("mm", "proj").replace("act", "nl")
    other = save(text, tmp_path / "other.onnx", seed=3)
    s = suggest([model, other], [rule])
    top = s.rules[0]
    assert top.cluster.models == ("m.onnx", "other.onnx")
    assert len(top.cluster.instances) == 5
    assert "m.onnx x3, other.onnx x2" in yaml.safe_load(top.text)["description"]
    assert [m.after for m in s.coverage] == [pytest.approx(1.0)] * 2


def test_rules_do_not_depend_on_model_order(case, tmp_path):
    model, rule = case
    text = layers(["Relu", "Tanh"], gelu=True).replace("mm", "proj")
    other = save(text, tmp_path / "other.onnx", seed=3)
    ab = suggest([model, other], [rule])
    ba = suggest([other, model], [rule])
    assert [(d.name, d.text, d.tests) for d in ab.rules] == [
        (d.name, d.text, d.tests) for d in ba.rules
    ]


def _gelu_chain(n: int) -> str:
    lines, x = [], "x"
    for i in range(n):
        lines += [
            f"[div{i}] d{i} = Div ({x}, sqrt2)",
            f"[erf{i}] e{i} = Erf (d{i})",
            f"[one{i}] o{i} = Add (e{i}, one)",
            f"[half{i}] h{i} = Mul (o{i}, half)",
            f"[gelu{i}] g{i} = Mul ({x}, h{i})",
        ]
        x = f"g{i}"
    return (
        '<ir_version: 8, opset_import: ["" : 17]>\n'
        f"g (float[64,256] x) => (float[64,256] {x})\n{{\n"
        "  sqrt2 = Constant <value = float {1.4142135}> ()\n"
        "  one = Constant <value = float {1.0}> ()\n"
        "  half = Constant <value = float {0.5}> ()\n"
        + "\n".join(f"  {line}" for line in lines)
        + "\n}\n"
    )


def test_composites_that_would_exceed_the_clause_budget_are_spelled_out(tmp_path):
    """Four GELUs in a row as the Gelu alias would be 10^4 clauses (each op: ONNX Gelu or
    one of nine forms), over the matcher's budget: the draft spells them out instead."""
    rule = tmp_path / "nothing.yaml"
    rule.write_text(NOTHING_RULE)
    s = suggest([save(_gelu_chain(4), tmp_path / "g.onnx")], [rule])
    assert s.rules and not s.dropped
    types = {op["type"] for op in _ops(s.rules[0].text)}
    assert "Gelu" not in types and types <= {"Erf", "Div", "Mul", "Add", "@epilogue"}
    assert s.coverage[0].after == pytest.approx(1.0)


# Two elementwise chains joined by an Add, each op reading its own weight: all of it is
# one group only if the target takes enough kernel inputs.
WIDE = """<ir_version: 8, opset_import: ["" : 17]>
g (float[64,256] x, float[64,256] W_0, float[64,256] W_1, float[64,256] W_2,
   float[64,256] W_3, float[64,256] W_4, float[64,256] W_5) => (float[64,256] y)
{
  [m0] a0 = Mul (x, W_0)
  [m1] a1 = Add (a0, W_1)
  [m2] a2 = Mul (a1, W_2)
  [n0] b0 = Sub (x, W_3)
  [n1] b1 = Mul (b0, W_4)
  [n2] b2 = Add (b1, W_5)
  [j] y = Add (a2, b2)
}
"""


def _target_with_inputs(tmp_path, n: int) -> Path:
    base = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "targets" / "ascend910b.yaml").read_text()
    )
    base.update(name=f"inputs{n}", max_fused_inputs=n)
    path = tmp_path / f"inputs{n}.yaml"
    path.write_text(yaml.safe_dump(base))
    return path


def test_ceiling_follows_the_targets_input_limit(tmp_path):
    """Weights are kernel inputs: with 8 slots (x + 6 weights = 7 fit) the whole graph is
    one kernel; with 4 slots it must be cut, and the best partition says where. The
    ceiling is proven (every convex group enumerated, CP-SAT optimal)."""
    from ruleengine.cost import load_target
    from ruleengine.suggest.regions import search_regions

    graph = load_graph(save(WIDE, tmp_path / "w.onnx"))
    edges = coverage.fusable_edges(graph)
    wide = search_regions(graph, [], load_target(str(_target_with_inputs(tmp_path, 8))), edges)
    assert wide.ceiling.captured == edges.fusable_bytes and wide.ceiling.exact
    narrow = search_regions(graph, [], load_target(str(_target_with_inputs(tmp_path, 4))), edges)
    assert narrow.ceiling.exact
    for k in narrow.ceiling.kernels:  # each group within 4 inputs (x and weights count)
        inputs = {t for n in k.nodes for t in graph.node(n).inputs} - {
            t for n in k.nodes for t in graph.node(n).outputs
        }
        assert len(inputs) <= 4
    assert 0 < narrow.ceiling.captured < edges.fusable_bytes


def test_best_partition_beats_the_greedy_order(tmp_path):
    """On MOVE the greedy merge binds `a` to `b`; the partition search finds the grouping
    that captures the most fusable bytes (here: everything, UB allows it)."""
    from ruleengine.cost import load_target
    from ruleengine.suggest.regions import search_regions

    graph = load_graph(save(MOVE, tmp_path / "m.onnx"))
    edges = coverage.fusable_edges(graph)
    found = search_regions(graph, [], load_target("ascend910b"), edges)
    assert found.ceiling.captured == edges.fusable_bytes
    assert [set(r.nodes) for r in found.regions] == [{"b", "a", "c1", "c2", "d"}]


CHAIN = """<ir_version: 8, opset_import: ["" : 17]>
g (float[64,256] x) => (float[64,256] y)
{
  [a] t1 = Relu (x)
  [b] t2 = Tanh (t1)
  [c] t3 = Relu (t2)
  [d] t4 = Tanh (t3)
  [e] y = Relu (t4)
}
"""


def test_selectable_ceiling_keeps_to_what_the_selection_can_pick(tmp_path):
    """The selection maximises net bytes, and a rule in use offers {a,b} (net 10, little
    captured). Partitions the selection could pick once rules are added save >= 10 net
    bytes and beat every mix of {a,b} with their own groups: {b,c}+{d,e} captures most
    (7) and saves 12, but {a,b}+{d,e} saves 13, so it is never picked; {a,b}+{c,d}
    (captures 3) is. The lazy floors find that, and it is below the plain ceiling."""
    from ruleengine.suggest.partition import Kernel, best_partition
    from ruleengine.suggest.regions import selectable_partition

    graph = load_graph(save(CHAIN, tmp_path / "c.onnx"))

    def k(nodes: str, net: int, cap: int) -> Kernel:
        return Kernel(frozenset(nodes), cap, net, net, len(nodes))

    rival = k("ab", 10, 1)
    pool = [rival, k("bc", 9, 6), k("cd", 2, 2), k("de", 3, 1)]
    assert best_partition(graph, pool).captured == 7  # {b,c} + {d,e}, selection ignored
    now = best_partition(graph, [rival], value=lambda x: x.net_bytes)
    found = selectable_partition(graph, pool, [rival], now, 10, True)
    assert {x.nodes for x in found.kernels} == {frozenset("ab"), frozenset("cd")}
    assert found.captured == 3 and found.exact


def test_pool_grows_past_the_op_cap_while_the_budget_lasts(tmp_path):
    """Sets at the op cap grow further once every set within it is scored, if the set
    budget allows: the pool is then complete (the ceiling proven) with groups past the
    cap; with too small a budget it is not complete."""
    from ruleengine.cost import load_target
    from ruleengine.suggest.partition import kernel_pool

    graph = load_graph(save(CHAIN, tmp_path / "c.onnx"))
    target = load_target("ascend910b")
    edges = coverage.fusable_edges(graph)
    pool = kernel_pool(graph, target, edges, max_ops=2)
    assert pool.complete and not pool.capped
    assert frozenset("abcde") in {k.nodes for k in pool.kernels}
    short = kernel_pool(graph, target, edges, max_ops=2, max_sets=5)
    assert not short.complete and short.capped == "5 sets"


_CUBE_PAIR = """name: {name}
match:
  ops:
    - type: MatMul
    - type: {second}
      input_sources:
        input0:
          from_op: 0
rewrite:
  target_op: {target}
"""


def test_a_drafted_rule_that_lowers_coverage_is_left_out(tmp_path):
    """A drafted rule whose groups win the selection on net bytes but capture no fusable
    bytes (MatMul -> MatMul: cube -> cube) is dropped; the one it beat is kept, and the
    selection then captures the MatMul -> Relu edge."""
    from ruleengine.pipeline import analyze
    from ruleengine.suggest import Cluster, DraftRule
    from ruleengine.suggest.pruning import prune

    text = (
        '<ir_version: 8, opset_import: ["" : 17]>\n'
        "g (float[64,256] x, float[256,1024] W_a, float[1024,64] W_b) => (float[64,64] y)\n"
        "{\n  [mm1] h = MatMul (x, W_a)\n  [mm2] k = MatMul (h, W_b)\n  [act] y = Relu (k)\n}\n"
    )
    model = save(text, tmp_path / "m.onnx")
    drafts = []
    for name, second, target in (
        ("draft_cube_pair", "MatMul", "DraftCubePair"),
        ("draft_cube_relu", "Relu", "DraftCubeRelu"),
    ):
        rule = _CUBE_PAIR.format(name=name, second=second, target=target)
        (tmp_path / f"{name}.yaml").write_text(rule)
        drafts.append(DraftRule(name, rule, Cluster((), ()), 0))
    a = analyze(model, [tmp_path])
    assert [sc.candidate.rule for sc in a.resolution.chosen] == ["draft_cube_pair"]
    kept, dropped = prune(drafts, [a], ["m.onnx"])
    assert [d.name for d in kept] == ["draft_cube_relu"]
    assert [n for n, _ in dropped] == ["draft_cube_pair"]
    assert "m.onnx: 0.0% with it, 100.0% without" in dropped[0][1]


def _narrowing_case(tmp_path):
    """A model, its analysis with a general drafted rule whose groups win on net bytes
    and capture nothing, that draft (a less general one on offer) and the narrow text."""
    from ruleengine.pipeline import analyze
    from ruleengine.suggest import DraftRule, Instance, Region
    from ruleengine.suggest.canon import canonicalize
    from ruleengine.suggest.model import Cluster

    text = (
        '<ir_version: 8, opset_import: ["" : 17]>\n'
        "g (float[64,256] x, float[256,1024] W_a, float[1024,64] W_b) => (float[64,64] y)\n"
        "{\n  [mm1] h = MatMul (x, W_a)\n  [mm2] k = MatMul (h, W_b)\n  [act] y = Relu (k)\n}\n"
    )
    model = save(text, tmp_path / "m.onnx")
    general = _CUBE_PAIR.format(name="draft_x", second="MatMul", target="DraftX")
    narrow = _CUBE_PAIR.format(name="draft_x", second="Relu", target="DraftX")
    (tmp_path / "draft_x.yaml").write_text(general)
    a = analyze(model, [tmp_path])
    region = ("mm2", "act")
    canon = canonicalize(a.graph, region, ())
    inst = Instance("m.onnx", Region(region, 0, 0), canon.units, False, frozenset(), frozenset())
    cluster = Cluster(canon.key, (inst,))
    d = DraftRule("draft_x", general, cluster, 0, narrower=((cluster, narrow),))
    return model, a, d, narrow


def test_trials_tried_beside_in_a_child_give_the_same_pruning(tmp_path, monkeypatch, forks):
    """Half the trials of a pruning round tried in a forked child (here: leaving the
    rule out, beside its narrowing in the parent) narrow the rule as one process does."""
    from ruleengine import procs
    from ruleengine.suggest.pruning import prune

    _, a, d, narrow = _narrowing_case(tmp_path)
    monkeypatch.setattr(procs, "forkable", lambda _jobs: False)
    alone = prune([d], [a], ["m.onnx"], {"m.onnx": a.graph})
    monkeypatch.setattr(procs, "forkable", lambda _jobs: True)
    beside = prune([d], [a], ["m.onnx"], {"m.onnx": a.graph})
    assert forks and beside == alone
    assert [k.text for k in alone[0]] == [narrow]


def test_a_drafted_rule_is_narrowed_where_its_general_form_lowers_coverage(tmp_path):
    """The same drafted rule with a less general draft of its cluster on offer: where the
    general form's groups win on net bytes and capture nothing, the rule is narrowed (it
    stays, with the less general pattern, its tests and kernel entry) rather than dropped."""
    from ruleengine.suggest.pruning import prune

    model, a, d, narrow = _narrowing_case(tmp_path)
    kept, dropped = prune([d], [a], ["m.onnx"], {"m.onnx": a.graph})
    assert dropped == []
    (k,) = kept
    assert k.text == narrow and k.narrower == ()
    assert "positive_region.onnxtxt" in k.tests
    assert "DraftX" in k.kernel
    # the coverage reported is that of the rule written (narrowed), measured again
    from ruleengine.suggest.measuring import measure_after

    given = tmp_path / "given"
    given.mkdir()
    (given / "nothing.yaml").write_text(NOTHING_RULE)
    before = coverage.measure(a.graph, [])
    baseline = [(model, "m.onnx", before, 1.0, (1.0, True, 1.0, True), 1.0)]
    graphs = {"m.onnx": a.graph}
    out, pruned, (m,) = measure_after(
        baseline, [d], Given([given], None, "ascend910b"), lambda _m: None, graphs
    )
    assert [o.text for o in out] == [narrow] and pruned == []
    assert before.coverage == 0.0 and m.after == pytest.approx(1.0)


ENDS = """<ir_version: 8, opset_import: ["" : 17]>
g (float[64,256] x, float[64,256] r, float[256,256] W_m) => (float[64,256] o)
{
  [s] t = Sigmoid (x)
  [m] y = MatMul (t, W_m)
  [a] z = Add (y, r)
  [c] o = Relu (z)
}
"""


def test_a_regions_core_leaves_out_its_end_epilogue_chains(case, tmp_path):
    """Sigmoid -> MatMul -> Add -> Relu: the Sigmoid (a root) and the Relu (a leaf) are
    epilogue chains at the ends, which another export's bundled rules may fuse with their
    neighbours; the core MatMul -> Add is a kernel too, and gets a rule of its own."""
    from ruleengine.cost import load_target
    from ruleengine.suggest.model import Region
    from ruleengine.suggest.regions import core_region

    path = save(ENDS, tmp_path / "ends.onnx")
    graph = load_graph(path)
    edges = coverage.fusable_edges(graph)
    region = Region(("s", "m", "a", "c"), 0, 0)
    units = canonicalize(graph, region.nodes).units
    core = core_region(graph, region, units, load_target("ascend910b"), edges)
    assert core is not None and core.nodes == ("m", "a") and core.net_bytes > 0
    # no end chain: no core
    inner = Region(("m", "a"), 0, 0)
    units = canonicalize(graph, inner.nodes).units
    assert core_region(graph, inner, units, load_target("ascend910b"), edges) is None
    _, rule = case
    s = suggest([path], [rule])
    patterns = [[op["type"] for op in _ops(d.text)] for d in s.rules]
    assert ["MatMul", "Add"] in patterns
    assert s.coverage[0].after == pytest.approx(1.0)
