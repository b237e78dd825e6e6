"""HBM bytes, overhead, UB working set and verdicts on small graphs, computed by hand."""

from __future__ import annotations

from dataclasses import replace

from af_graphs import candidate, graph_from_text, node_named

from ruleengine.cost import Verdict, load_target, score_candidates
from ruleengine.cost.formula import overhead_bytes
from ruleengine.resolve import resolve
from ruleengine.rules.model import RuleSet

T910B = load_target("ascend910b")
NO_RULES = RuleSet()

CONV_RELU_SIGMOID = """
agraph (float[1,64,32,32] x, float[64,64,3,3] w) => (float[1,64,32,32] y) {
  c = Conv <pads=[1,1,1,1]> (x, w)
  r = Relu (c)
  y = Sigmoid (r)
}"""


def score_one(graph, cand, target=T910B, rules=NO_RULES):
    (sc,) = score_candidates(graph, [cand], rules, target)
    return sc


def test_conv_relu_bytes_by_hand() -> None:
    g = graph_from_text(CONV_RELU_SIGMOID)
    act = 1 * 64 * 32 * 32 * 4  # 262144 bytes: x, c, r, y are all this size
    weight = 64 * 64 * 3 * 3 * 4  # 147456
    sc = score_one(g, candidate(g, "conv_relu", ["Conv_0", "Relu_1"]))
    cost = sc.cost
    # Unfused: Conv reads x, w and writes c; Relu reads c and writes r.
    assert cost.bytes_before == act + weight + act + act + act == 1196032
    assert cost.accesses_before == 5
    # Fused: x and w read once, r written once; c never leaves the chip.
    assert cost.bytes_after == act + weight + act == 671744
    assert cost.accesses_after == 3
    assert cost.bytes_saved == 2 * act
    # Overhead: 5% of the group's compute time at the fp32 peak, in bytes at 1.6 TB/s.
    conv_flops = 2 * (64 * 32 * 32) * 64 * 9
    assert cost.flops == conv_flops + 64 * 32 * 32
    expected = round(0.05 * cost.flops / T910B.peak_flops["float32"] * T910B.hbm_bandwidth)
    assert cost.overhead_bytes == expected == overhead_bytes(cost.flops, "float32", T910B)
    assert cost.net_bytes == cost.bytes_saved - cost.overhead_bytes
    assert cost.launches_saved == 1
    assert abs(cost.time_saved_s - (cost.net_bytes / 1.6e12 + 5e-6)) < 1e-15
    assert sc.verdict is Verdict.FUSE and sc.code == "fuse"


def test_three_op_chain_saves_both_intermediates() -> None:
    g = graph_from_text(CONV_RELU_SIGMOID)
    act, weight = 262144, 147456
    cost = score_one(g, candidate(g, "all", ["Conv_0", "Relu_1", "Sigmoid_2"])).cost
    assert cost.bytes_before == (act + weight + act) + 2 * act + 2 * act
    assert cost.bytes_after == act + weight + act
    assert cost.bytes_saved == 4 * act
    assert cost.launches_saved == 2


def test_broadcast_bias_is_read_once_and_counted_at_its_own_size() -> None:
    g = graph_from_text(
        """
        agraph (float16[1,8,64] x, float16[64] b) => (float16[1,8,64] y) {
          s = Add (x, b)
          y = Relu (s)
        }"""
    )
    n = 8 * 64 * 2  # 1024 bytes per activation
    cost = score_one(g, candidate(g, "bias_relu", ["Add_0", "Relu_1"])).cost
    assert cost.bytes_before == (n + 128 + n) + (n + n)
    assert cost.bytes_after == n + 128 + n
    assert cost.bytes_saved == 2 * n


MATMUL_RESHAPE_MATMUL = """
agraph (float[16,64] a, float[64,64] b, float[32,64] c) => (float[32,32] z) {
  shape = Constant <value = int64[2] {32, 32}> ()
  y = MatMul (a, b)
  y2 = Reshape (y, shape)
  z = MatMul (y2, c)
}"""


def test_matmul_reshape_matmul_has_no_benefit() -> None:
    # Reshape only relabels y: it reads and writes nothing. Fusing it with either MatMul
    # leaves every HBM transfer in place, so the verdict is "no benefit".
    g = graph_from_text(MATMUL_RESHAPE_MATMUL.replace("float[32,64] c", "float[32,32] c"))
    mm0, rs, mm1 = node_named(g, "MatMul", 0), node_named(g, "Reshape"), node_named(g, "MatMul", 1)
    for nodes in ([mm0, rs], [rs, mm1]):
        sc = score_one(g, candidate(g, "MatMul_Reshape_Fusion", nodes))
        assert sc.cost.bytes_saved == 0, nodes
        assert sc.cost.bytes_before == sc.cost.bytes_after
        assert sc.verdict is Verdict.NO_BENEFIT and sc.code == "no-benefit"
        assert sc.cost.launches_saved == 0


def test_ub_overflow_example_from_the_design() -> None:
    # The user's example: a MatMul tile needing 192 KB plus a ReLU tile of 128 KB is
    # 320 KB and overflows a 192 KB UB. With a target whose cube hands over at least a
    # 128x128 output tile (cube_min_tile) in three L0C->UB buffers (cube_buffer_factor 3):
    #   MatMul hand-off tile: 128*128 elements * 4 B (fp32 accumulator) * 3 = 192 KB
    #   ReLU output tile:     128*128 elements * 4 B (float32)          * 2 = 128 KB
    #   a and b are matrix operands of the cube (L1/L0A/L0B), so they take no UB.
    # The smallest legal tiling is the whole 128x128 output, 320 KB > 191.75 KB usable.
    g = graph_from_text(
        """
        agraph (float[128,256] a, float[256,128] b) => (float[128,128] y) {
          m = MatMul (a, b)
          y = Relu (m)
        }"""
    )
    target = replace(T910B, cube_min_tile=(128, 128), cube_buffer_factor=3)
    sc = score_one(g, candidate(g, "matmul_relu", ["MatMul_0", "Relu_1"]), target)
    assert dict(sc.details["ub_buffers"]) == {"m": 192 * 1024, "y": 128 * 1024}
    assert sc.cost.ub_bytes == 320 * 1024 > sc.cost.ub_limit == 196352
    assert sc.cost.tile == (128, 128)
    assert sc.verdict is Verdict.UB_OVERFLOW and sc.code == "ub-overflow"
    assert "320 KiB exceeds 191.8 KiB" in sc.reason
    # On the stock 910B (16x16 fractal, double buffering) the same group fits easily.
    ok = score_one(g, candidate(g, "matmul_relu", ["MatMul_0", "Relu_1"]))
    assert ok.verdict is Verdict.FUSE
    assert ok.cost.ub_bytes == 16 * 16 * 4 * 2 * 2 == 4096


def test_reduction_holds_whole_rows_and_can_overflow() -> None:
    # Softmax over a 32768-wide row of float32: one row is 128 KB; the input and output
    # tiles double-buffered need 4 x 128 KB = 512 KB, more than any UB we ship.
    g = graph_from_text(
        """
        agraph (float[4,32768] x) => (float[4,32768] y) {
          e = Exp (x)
          y = Softmax <axis = -1> (e)
        }"""
    )
    sc = score_one(g, candidate(g, "exp_softmax", ["Exp_0", "Softmax_1"]))
    assert sc.cost.tile == (1, 32768)
    assert sc.cost.ub_bytes == 32768 * 4 * 2 * 3  # x, e, y tiles
    assert sc.verdict is Verdict.UB_OVERFLOW
    narrow = graph_from_text(
        """
        agraph (float[4,256] x) => (float[4,256] y) {
          e = Exp (x)
          y = Softmax <axis = -1> (e)
        }"""
    )
    sc = score_one(narrow, candidate(narrow, "exp_softmax", ["Exp_0", "Softmax_1"]))
    assert sc.cost.tile == (1, 256) and sc.verdict is Verdict.FUSE


def test_chain_abc_beats_bcd_and_resolution_picks_it() -> None:
    # x(fp32) -A Relu-> a(fp32) -B Cast-> b(fp16) -C Relu-> c(fp16) -D Sigmoid-> d(fp16)
    # With N elements: ABC unfused 8N + 6N + 4N = 18N, fused x + c = 6N, saves 12N;
    # BCD unfused 6N + 4N + 4N = 14N, fused a + d = 6N, saves 8N. They share B and C.
    g = graph_from_text(
        """
        agraph (float[1024,1024] x) => (float16[1024,1024] d) {
          a = Relu (x)
          b = Cast <to = 10> (a)
          c = Relu (b)
          d = Sigmoid (c)
        }"""
    )
    n = 1024 * 1024
    abc = candidate(g, "ABC", ["Relu_0", "Cast_1", "Relu_2"])
    bcd = candidate(g, "BCD", ["Cast_1", "Relu_2", "Sigmoid_3"])
    scored = score_candidates(g, [abc, bcd], NO_RULES, T910B)
    by_rule = {s.candidate.rule: s for s in scored}
    assert by_rule["ABC"].cost.bytes_saved == 12 * n
    assert by_rule["BCD"].cost.bytes_saved == 8 * n
    for solver in ("exact", "greedy"):
        res = resolve(g, scored, solver=solver)
        assert [c.candidate.rule for c in res.chosen] == ["ABC"]
        ((lost, why),) = res.lost
        assert lost.candidate.rule == "BCD" and lost.verdict is Verdict.LOST_CONFLICT
        assert why == "lost a conflict to ABC group (nodes Relu_0, Cast_1, Relu_2)"


def test_embedding_gather_reads_rows_not_the_table() -> None:
    # A 50,000 x 768 float32 table (150 MB) gathered for 16 tokens, then a LayerNorm: the
    # kernel moves the 16 gathered rows, never the table, so the group fits the UB.
    g = graph_from_text(
        """
        agraph (int64[1,16] ids, float[50000,768] table, float[768] w, float[768] b)
            => (float[1,16,768] y) {
          e = Gather <axis = 0> (table, ids)
          y = LayerNormalization <axis = -1> (e, w, b)
        }"""
    )
    sc = score_one(g, candidate(g, "embedding_norm", ["Gather_0", "LayerNormalization_1"]))
    assert sc.verdict is Verdict.FUSE, sc.reason
    # one gathered row of 768 floats per tile for the table, like e, y, w and b (5 x 6 KB,
    # double-buffered), plus the 16 int64 ids
    assert sc.cost.ub_bytes == 5 * 768 * 4 * 2 + 16 * 8 * 2
    # the same table read elementwise (not gathered) is streamed like any input
    h = graph_from_text(
        """
        agraph (float[64,768] table, float[64,768] x) => (float[64,768] y) {
          s = Add (table, x)
          y = Relu (s)
        }"""
    )
    sc2 = score_one(h, candidate(h, "add_relu", ["Add_0", "Relu_1"]))
    assert sc2.verdict is Verdict.FUSE
