"""bench/scale_instructions.py's reading of callgrind dumps (no valgrind run here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(
        "scale_instructions", BENCH / "scale_instructions.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


si = _load()


def _dump(pid: int, part: int, trigger: str, total: int, summary: int | None = None) -> str:
    # the shape of a callgrind 3.19 dump: header, cost lines, totals at the end
    return (
        f"version: 1\ncreator: callgrind-3.19.0\npid: {pid}\ncmd:  python x.py\n"
        f"part: {part}\n\ndesc: I1 cache: \ndesc: Timerange: Basic block 0 - 9\n"
        f"desc: Trigger: {trigger}\n\npositions: line\nevents: Ir\n"
        f"summary: {summary if summary is not None else total}\n\n"
        "ob=(1) /lib/libc.so.6\nfl=(1) x.c\nfn=(1) main\n12 7\ncalls=1 0\n13 5\n\n"
        f"totals: {total}\n"
    )


def test_read_dump_fields():
    d = si.read_dump(_dump(4242, 3, "--dump-before=getsid", 1234))
    assert d == {"pid": 4242, "part": 3, "trigger": "--dump-before=getsid", "total": 1234}


def test_read_dump_prefers_totals_and_falls_back_to_summary():
    assert si.read_dump(_dump(1, 1, "Program termination", 50, summary=99))["total"] == 50
    text = _dump(1, 1, "Program termination", 7).replace("totals: 7\n", "")
    assert si.read_dump(text)["total"] == 7


def test_read_dump_rejects_other_text():
    with pytest.raises(ValueError):
        si.read_dump("hello\nworld\n")


def _d(pid, part, trigger, total, mtime):
    return {"pid": pid, "part": part, "trigger": trigger, "total": total, "mtime": mtime}


MARK = "--dump-before=getsid"


def test_stage_counts_in_mark_order_fork_dumps_and_children():
    labels = ["other", "rules", "graph", "match", "emit"]
    dumps = [
        _d(10, 1, MARK, 100, 1),  # start-up
        _d(10, 2, MARK, 20, 2),  # rules
        _d(10, 3, "--dump-before=fork", 5, 3),  # inside graph: a fork
        _d(10, 4, MARK, 30, 5),  # graph ends
        _d(11, 1, "Program termination", 7, 4),  # the child ended during graph
        _d(10, 5, MARK, 40, 6),  # match
        _d(10, 6, MARK, 9, 7),  # emit -> other
        _d(10, 7, "Program termination", 1, 8),  # exit -> other
    ]
    counts, children, own = si.stage_counts(dumps, labels, 10)
    assert counts["rules"] == 20
    assert counts["graph"] == 5 + 30 + 7
    assert counts["match"] == 40
    assert counts["other"] == 100 + 9 + 1
    assert "emit" not in counts or counts["emit"] == 0
    assert children == 1
    assert own == 205
    assert sum(counts.values()) == own + 7


def test_stage_counts_refuses_a_label_count_that_does_not_match():
    dumps = [_d(10, 1, MARK, 1, 1), _d(10, 2, "Program termination", 1, 2)]
    with pytest.raises(ValueError):
        si.stage_counts(dumps, ["other", "rules"], 10)


def test_self_costs_skip_call_costs_and_follow_name_compression():
    text = (
        "events: Ir\n"
        "ob=(1) /lib/libpython3.11.so\n"
        "fl=(1) ceval.c\n"
        "fn=(1) eval\n"
        "10 100\n"
        "cob=(2) /lib/libc.so.6\n"
        "cfi=(2) malloc.c\n"
        "cfn=(2) malloc\n"
        "calls=3 0\n"
        "12 900\n"  # the calls' inclusive cost: not eval's own
        "+1 5\n"
        "ob=(2)\n"
        "fl=(2)\n"
        "fn=(2)\n"
        "0 900\n"
        "ob=(1)\n"
        "fn=(1)\n"
        "* 7\n"
        "\ntotals: 1012\n"
    )
    costs = si.self_costs(text.splitlines(keepends=True))
    assert costs == {"eval [libpython3.11.so]": 112, "malloc [libc.so.6]": 900}
    assert sum(costs.values()) == 1012


def test_parent_pids_read_from_each_process_log(tmp_path):
    log = tmp_path / "cg-match.log"
    (tmp_path / "cg-match.log.100").write_text(
        "==100== Callgrind, a call-graph generating cache profiler\n"
        "==100== Command: python -m ruleengine match x.onnx\n"
        "==100== Parent PID: 42\n"
        "==100== Collected : 9000\n"
    )
    (tmp_path / "cg-match.log.101").write_text("==101== Parent PID: 100\n==101== Collected : 700\n")
    (tmp_path / "cg-other.log.7").write_text("==7== Parent PID: 42\n")  # another case
    assert si.parent_pids(log) == {100: 42, 101: 100}
    assert si.collected(log) == {100: 9000, 101: 700}


def _row(floor, fuse, nodes, plan_bytes):
    return {"floor": floor, "fuse": fuse, "nodes": nodes, "plan_bytes": plan_bytes}


def test_done_when_prints_each_goal_against_its_measured_figure(capsys):
    rows = {
        ("initializers", 2048): _row(100, 650, 1000, 150_000),
        ("inputs", 2048): _row(100, 1100, 1000, 2_000_000),
    }
    worst = {"initializers": (0.996, "check"), "inputs": (1.2, "graph")}
    compared = {"ours": {"total": 43}, "theirs": {"total": 100}}
    si.done_when(rows, ["initializers", "inputs"], [512, 2048], worst, compared, 1024)
    out = capsys.readouterr().out
    assert "fuse/floor <= 10x, initializers, 2048 layers: 6.5x  met" in out
    assert "fuse/floor <= 10x, inputs, 2048 layers: 11.0x  NOT MET" in out
    assert "plan.json <= 1024 B/node, initializers, 2048 layers: 150  met" in out
    assert "plan.json <= 1024 B/node, inputs, 2048 layers: 2000  NOT MET" in out
    assert "initializers, 512 -> 2048 layers: worst 0.996 (check)  met" in out
    assert "inputs, 512 -> 2048 layers: worst 1.200 (graph)  NOT MET" in out
    assert "match <= 0.5x onnxscript's rewriter, 1024 layers: 0.43x  met" in out
