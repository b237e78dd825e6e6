"""The rules loaded by a forked child while the model is read (``rules.pending``): the
same analysis as loading them first, and their errors still come first."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ruleengine import laps, pipeline, procs
from ruleengine.errors import AutofusionError, RuleLoadError
from ruleengine.rules import pending

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mlp_block.onnx"
RULES = ROOT / "tests" / "golden" / "fuse" / "rules"


@pytest.fixture(autouse=True)
def _any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pending, "FORK_FROM_BYTES", 0)  # the small example forks too


# a rules child needs a core beyond the model's reader and its shape inference
FORKING = pending.FORK_FROM_JOBS


def _forks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    names: list[str] = []

    class Counting(procs.Forked):
        def __init__(self, fn, *args) -> None:
            names.append(fn.__name__)
            super().__init__(fn, *args)

    monkeypatch.setattr(procs, "Forked", Counting)
    return names


def test_rules_from_a_child_give_the_same_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    one = pipeline.analyze(EXAMPLE, [RULES], jobs=1)
    names = _forks(monkeypatch)
    two = pipeline.analyze(EXAMPLE, [RULES], jobs=FORKING, disable=["golden_conv_bn_relu"])
    assert "_pickled_rules" in names
    assert two.rule_set.rules == tuple(
        r for r in one.rule_set.rules if r.name != "golden_conv_bn_relu"
    )
    again = pipeline.analyze(EXAMPLE, [RULES], jobs=FORKING)
    assert again.rule_set == one.rule_set
    assert [c.key for c in again.match.candidates] == [c.key for c in one.match.candidates]
    assert again.resolution.chosen == one.resolution.chosen
    stages = [s for s, _ in again.timings]
    assert stages[:2] == ["rules", "graph"] and stages == [s for s, _ in one.timings]


def test_a_bad_rule_file_is_reported_before_a_bad_model(tmp_path: Path) -> None:
    bad_rule = tmp_path / "bad.yaml"
    bad_rule.write_text("name: [unclosed\n")
    bad_model = tmp_path / "model.onnx"
    bad_model.write_bytes(b"not a model")
    errors = []
    for jobs in (1, FORKING):
        with pytest.raises(AutofusionError) as caught:
            pipeline.analyze(bad_model, [bad_rule], jobs=jobs)
        errors.append((type(caught.value), caught.value.message))
    assert errors[0] == errors[1]
    assert errors[0][0] is RuleLoadError
    # an unknown rule name (select_rules) also before the model's error
    with pytest.raises(AutofusionError, match="unknown rule name"):
        pipeline.analyze(bad_model, [RULES], enable=["no_such_rule"], jobs=FORKING)


def test_a_failed_child_leaves_the_rules_to_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(rules, preset):
        raise MemoryError("the child could not load them")

    monkeypatch.setattr(pending, "_pickled_rules", broken)
    got = pipeline.analyze(EXAMPLE, [RULES], jobs=FORKING)
    assert got.rule_set == pipeline.analyze(EXAMPLE, [RULES], jobs=1).rule_set


def test_match_command_with_a_rules_child(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ruleengine.cli import app

    runner = CliRunner()
    args = ["match", str(EXAMPLE), "--rules", str(RULES), "-f", "json"]
    one = runner.invoke(app, [*args, "--jobs", "1"])
    two = runner.invoke(app, [*args, "--jobs", str(FORKING)])
    assert one.exit_code == two.exit_code == 0
    assert one.stdout == two.stdout and "golden_matmul_bias" in one.stdout
    bad_rule = tmp_path / "bad.yaml"
    bad_rule.write_text("name: [unclosed\n")
    bad_model = tmp_path / "model.onnx"
    bad_model.write_bytes(b"not a model")
    outs = [
        runner.invoke(app, ["match", str(bad_model), "--rules", str(bad_rule), "--jobs", j])
        for j in ("1", str(FORKING))
    ]
    assert outs[0].exit_code == outs[1].exit_code == 2
    assert outs[0].output == outs[1].output


def test_small_models_load_their_rules_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pending, "FORK_FROM_BYTES", 4 << 20)
    names = _forks(monkeypatch)
    pipeline.analyze(EXAMPLE, [RULES], jobs=FORKING)
    assert "_pickled_rules" not in names
    assert pending.rules_jobs(EXAMPLE, FORKING) == 1
    assert pending.rules_jobs("no/such.onnx", FORKING) == 1


def test_two_cores_load_the_rules_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """With two processes the model's reader and its shape inference already hold both
    cores: a rules child would only take CPU from them (docs/speed.md)."""
    names = _forks(monkeypatch)
    got = pipeline.analyze(EXAMPLE, [RULES], jobs=FORKING - 1)
    assert "_pickled_rules" not in names
    assert pending.rules_jobs(EXAMPLE, FORKING - 1) == 1
    assert pending.rules_jobs(EXAMPLE, FORKING) == FORKING  # any size here (the fixture)
    assert got.rule_set == pipeline.analyze(EXAMPLE, [RULES], jobs=1).rule_set


def test_the_rules_childs_cpu_counts_in_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rules' child is reaped once the model is read, in the graph's lap: its whole
    CPU (and the catalog's, reaped with it) is moved to the rules' stage."""
    tallies: list[procs.Tally] = []
    real = laps.tally

    @contextmanager
    def recorded() -> Iterator[procs.Tally]:
        with real() as counted:
            tallies.append(counted)
            yield counted

    monkeypatch.setattr(laps, "tally", recorded)
    got = pipeline.analyze(EXAMPLE, [RULES], jobs=FORKING)
    assert len(tallies) == 1 and tallies[0].cpu > 0
    cpu = dict(got.cpu_timings)
    assert cpu["rules"] >= tallies[0].cpu
