"""The wider pool: where the kernel pool hits its budget and the drafting partition's
selection falls short of the bar, the region search runs again with WIDER_POOL_SETS."""

from __future__ import annotations

import ruleengine.suggest.drafting as drafting
import ruleengine.suggest.regions as regions
from ruleengine.suggest.analyses import Given
from ruleengine.suggest.drafting import WIDER_POOL_SETS, WIDER_USED, draft_rules
from ruleengine.suggest.measuring import measure_after
from ruleengine.suggest.rounds import first_pool_round

from .graphs import NOTHING_RULE, save
from .test_redraft import TWO


def _baseline(tmp_path, monkeypatch, budget: int, below: float):
    """The first drafting's baseline of TWO with a pool budget of ``budget`` sets, the
    pools judged by the search (``max_sets`` per call)."""
    model = save(TWO, tmp_path / "two.onnx")
    given = tmp_path / "given"
    given.mkdir(exist_ok=True)
    (given / "nothing.yaml").write_text(NOTHING_RULE)
    calls: list[int] = []
    real = regions.search_regions

    def counted(*args, **kwargs):
        kwargs.setdefault("max_sets", budget)
        calls.append(kwargs["max_sets"])
        return real(*args, **kwargs)

    monkeypatch.setattr(regions, "search_regions", counted)
    monkeypatch.setattr(drafting, "WIDER_BELOW", below)
    baseline, *_ = draft_rules(
        [model], Given([given], None, "ascend910b"), 0, None, lambda _m: None
    )
    return baseline[0], calls


def test_a_capped_pool_under_the_bar_is_searched_again_wider(tmp_path, monkeypatch):
    # a budget of 2 sets caps the pool: its ceiling is not proven
    (_, _, _, _, capped, _), calls = _baseline(tmp_path, monkeypatch, 2, 0.0)
    assert calls == [2] and capped[3] is False
    # the same, under a bar it misses: searched again with the wider pool, complete there,
    # and the figures reported are the wider search's (ceiling proven)
    (_, _, _, _, wider, _), calls = _baseline(tmp_path, monkeypatch, 2, 1.01)
    assert calls == [2, WIDER_POOL_SETS]
    assert wider[3] is True and wider[2] >= capped[2]


def test_a_complete_pool_is_not_searched_again(tmp_path, monkeypatch):
    (_, _, _, _, ceilings, _), calls = _baseline(tmp_path, monkeypatch, 12_000, 1.01)
    assert calls == [12_000] and ceilings[3] is True


def test_the_first_search_drafts_are_carried_over_where_the_wider_pool_was_used(
    tmp_path, monkeypatch
):
    """Where the wider pool was searched, the first search's drafts are carried over
    where they lower no model (another export may take them: stablelm ts -> dynamo).
    Here the drafts in use cover the MatMul piece only; the first search's draft for the
    Sigmoid piece raises the model, so it is carried over, under a name apart."""
    import pytest

    model = save(TWO, tmp_path / "two.onnx")
    given = tmp_path / "given"
    given.mkdir()
    (given / "nothing.yaml").write_text(NOTHING_RULE)
    calls: list[int] = []
    real = regions.search_regions

    def counted(*args, **kwargs):
        kwargs.setdefault("max_sets", 2)
        calls.append(kwargs["max_sets"])
        return real(*args, **kwargs)

    monkeypatch.setattr(regions, "search_regions", counted)
    monkeypatch.setattr(drafting, "WIDER_BELOW", 1.01)
    args = (Given([given], None, "ascend910b"),)

    def quiet(_m: str) -> None:
        return None

    memo: dict = {}
    baseline, drafts, _, graphs = draft_rules([model], *args, 0, None, quiet, memo=memo)
    assert memo[WIDER_USED] == {"two.onnx"} and calls == [2, WIDER_POOL_SETS]
    mm = [d for d in drafts if "mm" in d.cluster.instances[0].region.nodes]
    assert mm and len(mm) < len(drafts)
    kept, _, report = measure_after(baseline, mm, *args, quiet, graphs)
    assert report[0].after < 0.99
    got = first_pool_round([model], baseline, kept, report, *args, 0, quiet, memo)
    assert calls == [2, WIDER_POOL_SETS, 2]  # the first search's pool, never wider
    assert got is not None
    carried, report2, _ = got
    assert {d.name for d in kept} < {d.name for d in carried}
    assert len({d.name for d in carried}) == len(carried)
    assert report2[0].after == pytest.approx(1.0)
    assert all(d.tests and d.kernel for d in carried)
    # nothing of the first search left to carry over: no round
    assert first_pool_round([model], baseline, carried, report2, *args, 0, quiet, memo) is None
