"""Every rejection keeps a verdict, a stable code and a reason that says what broke."""

from __future__ import annotations

from af_graphs import candidate, graph_from_text

from ruleengine.cost import Verdict, load_target, score_candidates
from ruleengine.match.model import MatchResult, NearMiss
from ruleengine.rules.model import (
    Constraint,
    FrozenMap,
    MatchAlternative,
    Rewrite,
    Rule,
    RuleSet,
)

T910B = load_target("ascend910b")

CONV_BIAS_RELU = """
agraph (float[1,64,16,16] x, float[64,64,1,1] w, float[1,64,1,1] bias) => (float[1,64,16,16] y) {
  c = Conv (x, w)
  s = Add (c, bias)
  y = Relu (s)
}"""
NODES = ["Conv_0", "Add_1", "Relu_2"]


def rule(name: str = "r", priority: int = 0, threshold: float = 0.0, *constraints) -> Rule:
    return Rule(
        name=name,
        alternatives=(MatchAlternative(ops=()),),
        rewrite=Rewrite(target_op="Fused"),
        priority=priority,
        benefit_threshold=threshold,
        constraints=tuple(constraints),
    )


def c(kind: str, description: str | None = None, **fields) -> Constraint:
    return Constraint(kind, FrozenMap(fields), description)


def verdict_of(text: str, nodes: list[str], r: Rule):
    g = graph_from_text(text)
    (sc,) = score_candidates(g, [candidate(g, r.name, nodes)], RuleSet((r,)), T910B)
    return sc


def test_passing_constraints_keep_the_fuse_verdict() -> None:
    r = rule(
        "ok",
        0,
        0.0,
        c("dtype_match", allowed_dtypes=("float16", "float32")),
        c("shape_constraint"),
        c("memory_limit", max_intermediate_size=1 << 20, max_output_size=1 << 20),
        c("workspace_size", max_workspace=1 << 20),
        c("channel_divisibility", channel_dim=1, divisor=16),
        c("single_consumer"),
        c("ub_fit"),
    )
    assert verdict_of(CONV_BIAS_RELU, NODES, r).verdict is Verdict.FUSE


def test_each_constraint_type_fails_with_its_code_and_reason() -> None:
    cases = [
        (c("dtype_match", allowed_dtypes=("float16",)), "constraint-dtype-match", "is float32"),
        (c("channel_divisibility", channel_dim=1, divisor=48), "constraint-channel-divisibility",
         "64 channels on dim 1, not a multiple of 48"),
        (c("memory_limit", max_intermediate_size=1000), "constraint-memory-limit",
         "intermediate c is 64.0 KiB > max_intermediate_size"),
        (c("memory_limit", max_output_size=1000), "constraint-memory-limit", "output y"),
        (c("workspace_size", max_workspace=1000), "constraint-workspace-size",
         "spill_to_l2 is false"),
        (c("shape_constraint", broadcast=False), "constraint-shape", "not equal"),
        (c("shape_constraint", rank=3), "constraint-shape", "rank 4, required 3"),
    ]  # fmt: skip
    for constraint, code, text in cases:
        sc = verdict_of(CONV_BIAS_RELU, NODES, rule("r", 0, 0.0, constraint))
        assert sc.verdict is Verdict.CONSTRAINT_FAILED, constraint
        assert sc.code == code, (constraint, sc.code)
        assert text in sc.reason, (text, sc.reason)
        assert sc.cost is not None  # explain still shows the numbers


def test_constraint_description_is_appended_to_the_reason() -> None:
    sc = verdict_of(
        CONV_BIAS_RELU,
        NODES,
        rule("r", 0, 0.0, c("dtype_match", "fp16 kernels only", allowed_dtypes=("float16",))),
    )
    assert sc.reason.endswith("(fp16 kernels only)")


def test_workspace_may_spill_to_l2_when_the_rule_allows_it() -> None:
    sc = verdict_of(
        CONV_BIAS_RELU,
        NODES,
        rule("r", 0, 0.0, c("workspace_size", max_workspace=1000, spill_to_l2=True)),
    )
    assert sc.verdict is Verdict.FUSE
    assert "spills to L2" in sc.details["notes"][0]


def test_single_consumer_counts_pattern_ops_not_nodes() -> None:
    # SiLU as x * Sigmoid(x): s feeds Sigmoid and Mul, which are one pattern op (Swish).
    text = """
    agraph (float[1,64] x, float[64] b) => (float[1,64] y) {
      s = Add (x, b)
      g = Sigmoid (s)
      y = Mul (s, g)
    }"""
    g = graph_from_text(text)
    r = rule("silu", 0, 0.0, c("single_consumer"))
    as_composite = candidate(g, "silu", ["Add_0", "Sigmoid_1", "Mul_2"])
    as_composite = type(as_composite)(
        "silu", 0, (("Add_0",), ("Sigmoid_1", "Mul_2")), as_composite.inputs, as_composite.outputs
    )
    (ok,) = score_candidates(g, [as_composite], RuleSet((r,)), T910B)
    assert ok.verdict is Verdict.FUSE
    split = candidate(g, "silu", ["Add_0", "Sigmoid_1", "Mul_2"])
    (bad,) = score_candidates(g, [split], RuleSet((r,)), T910B)
    assert bad.code == "constraint-single-consumer" and "s is read by several" in bad.reason


def test_too_many_external_inputs_for_the_target() -> None:
    ins = ", ".join(f"float[64] x{i}" for i in range(9))
    args = ", ".join(f"x{i}" for i in range(9))
    text = f"agraph ({ins}) => (float[64] y) {{\n s = Sum ({args})\n y = Relu (s)\n}}"
    sc = verdict_of(text, ["Sum_0", "Relu_1"], rule())
    assert sc.verdict is Verdict.TOO_MANY_INPUTS and sc.code == "too-many-inputs"
    assert "9 external inputs > max_fused_inputs 8" in sc.reason


def test_unknown_sizes_give_a_dynamic_shape_verdict() -> None:
    text = """
    agraph (float[N,64] x) => (float[N,64] y) {
      s = Relu (x)
      y = Sigmoid (s)
    }"""
    sc = verdict_of(text, ["Relu_0", "Sigmoid_1"], rule())
    assert sc.verdict is Verdict.DYNAMIC_SHAPE and sc.code == "dynamic-shape"
    assert sc.cost is None and "--dim" in sc.reason


def test_non_convex_group_is_rejected() -> None:
    text = """
    agraph (float[64] x) => (float[64] y) {
      a = Relu (x)
      b = Exp (a)
      y = Add (a, b)
    }"""
    sc = verdict_of(text, ["Relu_0", "Add_2"], rule())
    assert sc.verdict is Verdict.NOT_CONVEX and sc.code == "not-convex"


def test_benefit_threshold_and_overhead() -> None:
    sc = verdict_of(CONV_BIAS_RELU, NODES, rule("r", 0, 0.9))
    assert sc.verdict is Verdict.LOW_BENEFIT and sc.code == "below-threshold"
    assert "benefit_threshold 90%" in sc.reason
    # A MatMul with a huge reduction dim: 5% of its compute outweighs the tiny saving.
    text = """
    agraph (float[16,16384] a, float[16384,16] b) => (float[16,16] y) {
      m = MatMul (a, b)
      y = Relu (m)
    }"""
    sc = verdict_of(text, ["MatMul_0", "Relu_1"], rule())
    assert sc.cost.bytes_saved == 2 * 16 * 16 * 4
    assert sc.cost.overhead_bytes > sc.cost.bytes_saved
    assert sc.verdict is Verdict.LOW_BENEFIT and sc.code == "overhead-exceeds-saving"


def test_identical_node_sets_keep_the_higher_priority_and_break_ties_by_name() -> None:
    g = graph_from_text(CONV_BIAS_RELU)
    rules = RuleSet((rule("b_high", 5), rule("a_low", 1), rule("c_tie", 5)))
    cands = [candidate(g, r.name, NODES) for r in rules.rules]
    scored = {s.candidate.rule: s for s in score_candidates(g, cands, rules, T910B)}
    assert scored["b_high"].verdict is Verdict.FUSE
    assert scored["a_low"].verdict is Verdict.DUPLICATE
    assert "priority 5 > 1" in scored["a_low"].reason
    assert scored["c_tie"].verdict is Verdict.DUPLICATE
    assert "tie broken by rule name (b_high < c_tie)" in scored["c_tie"].reason


def test_near_misses_from_matching_come_through_with_their_verdict() -> None:
    g = graph_from_text(CONV_BIAS_RELU)
    nm = NearMiss(candidate(g, "r", ["Conv_0", "Add_1"]), "intermediate-escapes", "c is read by X")
    result = MatchResult(candidates=(candidate(g, "r", NODES),), near_misses=(nm,))
    scored = score_candidates(g, result, RuleSet((rule(),)), T910B)
    verdicts = sorted(s.verdict.value for s in scored)
    assert verdicts == ["fuse", "intermediate_escapes"]
    (miss,) = [s for s in scored if s.verdict is Verdict.INTERMEDIATE_ESCAPES]
    assert miss.code == "intermediate-escapes" and miss.reason == "c is read by X"


def test_single_consumer_counts_readers_outside_the_group() -> None:
    # With allow_intermediate_outputs: true the matcher lets c escape to Exp; the
    # single_consumer constraint still refuses it: c has a reader besides Relu.
    text = """
    agraph (float[1,64] x) => (float[1,64] y, float[1,64] z) {
      c = Sigmoid (x)
      y = Relu (c)
      z = Exp (c)
    }"""
    g = graph_from_text(text)
    r = rule("r", 0, 0.0, c("single_consumer"))
    (sc,) = score_candidates(g, [candidate(g, "r", ["Sigmoid_0", "Relu_1"])], RuleSet((r,)), T910B)
    assert sc.code == "constraint-single-consumer"
    assert "c is read by several nodes (Exp_2, Relu_1)" in sc.reason


def test_constant_scalars_and_index_tensors_take_no_kernel_input_slot() -> None:
    # Seven activations plus eight scalar constants and an int64 axes tensor: the
    # scalars become immediates and the axes an attribute, so 7 <= 8 inputs.
    ins = ", ".join(f"float[64] x{i}" for i in range(7))
    inits = ", ".join(f"float c{i} = {{{i}.5}}" for i in range(8))
    adds = "\n".join(f" a{i} = Add (a{i - 1}, c{i})" for i in range(1, 8))
    text = f"""agraph ({ins}) => (float[1] y)
    <{inits}, int64[1] axes = {{0}}> {{
     s = Sum ({", ".join(f"x{i}" for i in range(7))})
     a0 = Add (s, c0)
    {adds}
     y = ReduceSum (a7, axes)
    }}"""
    g = graph_from_text(text, opset=18)
    nodes = [n.name for n in g.nodes]
    sc = verdict_of_graph(g, nodes)
    assert len(sc.details["inputs"]) == 7 + 8 + 1
    assert len(sc.details["kernel_inputs"]) == 7
    assert sc.verdict is not Verdict.TOO_MANY_INPUTS


def verdict_of_graph(g, nodes):
    (sc,) = score_candidates(g, [candidate(g, "r", nodes)], RuleSet((rule(),)), T910B)
    return sc


def test_shape_tensors_folded_from_constants_take_no_input_slot() -> None:
    """Expand's target shape, computed from a static Shape and constants (as TorchScript
    exports repeat_kv), is folded by the compiler: an attribute, not a kernel input."""
    ins = ", ".join(f"float[64] x{i}" for i in range(8))
    args = ", ".join(f"x{i}" for i in range(8))
    text = f"""
    agraph ({ins}, float[2,64] z) => (float[2,64] y) {{
      zs = Shape (z)
      one = Constant <value = int64[1] {{1}}> ()
      shp = Mul (zs, one)
      s = Sum ({args})
      e = Expand (s, shp)
      y = Relu (e)
    }}"""
    sc = verdict_of(text, ["Sum_3", "Expand_4", "Relu_5"], rule())
    assert sc.verdict is Verdict.FUSE, sc.reason
    assert "shp" not in sc.details["kernel_inputs"] and len(sc.details["kernel_inputs"]) == 8


def _aliased(second: str) -> str:
    """7 activations and a weight read through two Identity nodes (as TorchScript writes
    a tied or repeated parameter) into Sum -> Mul; ``second``: what the second Identity
    reads (the same weight, or another)."""
    ins = ", ".join(f"float[64] x{i}" for i in range(7))
    args = ", ".join(f"x{i}" for i in range(7))
    values = ", ".join(["0.5"] * 64)
    return f"""
    agraph ({ins}) => (float[64] y) {{
      w = Constant <value = float[64] {{{values}}}> ()
      v = Constant <value = float[64] {{{values}}}> ()
      a = Identity (w)
      b = Identity ({second})
      s = Sum ({args}, a)
      y = Mul (s, b)
    }}"""


def test_aliases_of_one_constant_take_one_input_slot() -> None:
    """Two Identity outputs of one weight are one buffer: 7 activations + 1 weight fit
    the 8 inputs of ascend910b; two different weights do not (9)."""
    from ruleengine.cost.inputs import constant_root

    g = graph_from_text(_aliased("w"))
    assert constant_root(g, "a") == constant_root(g, "b") == "w"
    assert constant_root(g, "x0") == "x0"
    sc = verdict_of_graph(g, ["Sum_4", "Mul_5"])
    assert sc.verdict is Verdict.FUSE, sc.reason
    assert len(sc.details["kernel_inputs"]) == 8 and len(sc.details["inputs"]) == 9
    other = verdict_of_graph(graph_from_text(_aliased("v")), ["Sum_4", "Mul_5"])
    assert other.verdict is Verdict.TOO_MANY_INPUTS, other.reason
    assert "9 external inputs > max_fused_inputs 8" in other.reason
