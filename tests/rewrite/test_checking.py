"""onnx's full check of the fused model in a forked child (``rewrite/checking.py``): the
same outputs, the same errors, and a check that cannot run in the child is run here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ruleengine import pipeline, procs
from ruleengine.errors import GraphLoadError
from ruleengine.rewrite import checking

from .test_checker_inputs import failing_the_checker

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mlp_block.onnx"

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@pytest.fixture
def forks(monkeypatch):
    """Fork the check (and the DOT graph's rendering) of any graph; the list of checks
    begun in a child."""
    monkeypatch.setattr(checking, "FORK_FROM_NODES", 0)
    monkeypatch.setattr(procs, "FORK_FROM_NODES", 0)
    begun: list[object] = []
    real = checking.PendingCheck.__init__

    def counted(self, fused):
        begun.append(fused)
        real(self, fused)

    monkeypatch.setattr(checking.PendingCheck, "__init__", counted)
    return begun


@pytest.fixture
def verdicts(monkeypatch):
    """What each forked check gave: (wall, CPU) seconds, or None (it failed)."""
    got: list[object] = []
    real = checking.PendingCheck.passed

    def recorded(self):
        got.append(real(self))
        return got[-1]

    monkeypatch.setattr(checking.PendingCheck, "passed", recorded)
    return got


def _without_times(files: dict[str, bytes]) -> dict[str, bytes]:
    out = dict(files)
    report = json.loads(out.pop("report.json"))
    for key in ("timings_s", "cpu_s", "solver"):
        report.pop(key, None)
    out["report.json"] = json.dumps(report, sort_keys=True).encode()
    out.pop("report.txt")
    return out


def test_the_forked_check_gives_the_same_files(forks, verdicts):
    alone = pipeline.fuse(EXAMPLE, jobs=1)
    assert forks == []
    beside = pipeline.fuse(EXAMPLE, jobs=2)
    assert len(forks) == 1
    assert _without_times(beside.files) == _without_times(alone.files)
    # the check passed in the child; its own time is given in the reports rendered after it
    ((wall, child_cpu),) = verdicts
    cpu = json.loads(beside.files["report.json"])["cpu_s"]
    assert cpu["check"] >= round(child_cpu, 6) > 0
    assert round(dict(beside.plan.cpu_timings)["check"], 6) == cpu["check"]


def test_no_fork_with_one_job_a_small_graph_or_verification(forks, monkeypatch):
    pipeline.fuse(EXAMPLE, jobs=1)
    pipeline.fuse(EXAMPLE, jobs=2, verify=True)
    monkeypatch.setattr(checking, "FORK_FROM_NODES", 10**6)
    pipeline.fuse(EXAMPLE, jobs=2)
    assert forks == []


def test_a_failed_forked_check_raises_the_in_process_error(forks, verdicts, tmp_path: Path):
    path = failing_the_checker(tmp_path)
    with pytest.raises(GraphLoadError, match="input model bad.onnx fails onnx.checker"):
        pipeline.fuse(path, disable=["conv_bn_relu"], jobs=2)
    assert len(forks) == 1
    assert verdicts == [None]  # the child failed; the parent's check raised


def test_a_child_that_cannot_check_leaves_the_check_to_the_parent(forks, monkeypatch):
    def broken(fused):
        raise MemoryError

    monkeypatch.setattr(checking, "_check", broken)
    result = pipeline.fuse(EXAMPLE, jobs=2)
    assert len(forks) == 1
    assert result.fused_name in result.files
