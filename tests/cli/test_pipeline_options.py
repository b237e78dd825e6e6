"""The pipeline's options records: the keyword forms build them, and they refuse bad values
in the order the flags were always checked (no model is read)."""

from __future__ import annotations

import dataclasses

import pytest

from ruleengine import pipeline
from ruleengine.errors import UsageError
from ruleengine.pipeline import AnalyzeOptions, FuseOptions


def test_fuse_options_hand_analyze_every_field_of_its_own() -> None:
    options = FuseOptions(rules=("r.yaml",), solver="greedy", jobs=3, seed=7, safe=True)
    got = options.analyze_options
    assert type(got) is AnalyzeOptions
    for f in dataclasses.fields(AnalyzeOptions):
        assert getattr(got, f.name) == getattr(options, f.name)
    assert options.verifying and not FuseOptions().verifying
    assert FuseOptions(safe=True, verify=None).verifying


def test_an_unknown_keyword_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        pipeline.fuse("m.onnx", no_such_option=1)
    with pytest.raises(TypeError):
        pipeline.analyze("m.onnx", verify=True)  # a fuse option, not analyze's


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (FuseOptions(plan_detail="verbose", seed=-1), "unknown plan detail 'verbose'"),
        (FuseOptions(seed=-1, safe=True, verify=False), "seed -1 must be an integer"),
        (FuseOptions(safe=True, verify=False), "--safe needs verification"),
    ],
)
def test_fuse_checks_its_own_options_first(options: FuseOptions, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        options.check()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (AnalyzeOptions(solver="best", time_limit_s=-1), "unknown solver 'best'"),
        (AnalyzeOptions(benefit_threshold=float("nan")), "benefit threshold nan"),
        (AnalyzeOptions(jobs=0), "jobs 0: the number of processes"),
        (AnalyzeOptions(time_limit_s=0.0), "time limit 0.0 s"),
        (AnalyzeOptions(dims={"seq": True}), r"dims\['seq'\] = True"),
    ],
)
def test_analyze_refuses_out_of_range_values(options: AnalyzeOptions, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        options.check()
