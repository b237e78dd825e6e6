"""Within one suggest run a draft is loaded from one file per name and text, so its
file is linted once and its matches kept (``analyses.draft_files``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ruleengine.rules import load_rule_set
from ruleengine.suggest.analyses import DraftPaths, draft_files
from ruleengine.suggest.model import Cluster, DraftRule

pytestmark = pytest.mark.unit

TEXT = "name: {name}\nmatch:\n  ops:\n    - type: {op}\nrewrite:\n  target_op: R\n"


def _draft(name: str, op: str) -> DraftRule:
    return DraftRule(name, TEXT.format(name=name, op=op), Cluster((), ()), 1)


def test_the_same_text_is_one_file_and_one_rule_in_a_run() -> None:
    a, a_again, b = _draft("a", "Relu"), _draft("a", "Relu"), _draft("a", "Tanh")
    with draft_files():
        with DraftPaths([a]) as one, DraftPaths([a_again, _draft("c", "Relu")]) as two:
            first, second = one(), two()
        with DraftPaths([b]) as other:
            changed = other()
        assert first[0] == second[0] and changed[0] != first[0]
        assert Path(first[0]).name == "a.yaml"
        assert load_rule_set(first).rules[0] is load_rule_set(second[:1]).rules[0]
        assert "Tanh" in Path(changed[0]).read_text(encoding="utf-8")
    assert not Path(first[0]).exists()  # the run's folder goes with the run


def test_outside_a_run_each_load_has_its_own_folder() -> None:
    with DraftPaths([_draft("a", "Relu")]) as one, DraftPaths([_draft("a", "Relu")]) as two:
        first, second = one(), two()
        assert first != second and Path(first[0]).exists()
    assert not Path(first[0]).exists()


@pytest.mark.parametrize("in_run", [False, True])
def test_alike_drafts_are_found_whatever_the_working_directory(
    in_run: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from the temporary folder's parent, findings name the drafts by relative paths:
    they must still be told apart (they were not, and the drafts depended on the folder
    suggest was started in)."""
    import tempfile
    from contextlib import nullcontext

    from ruleengine.suggest.draft_tests import _first_clash

    text = "name: {n}\npriority: 5\nmatch:\n  ops:\n    - type: MatMul\n    - type: Relu\n"
    drafts = [
        DraftRule(n, text.format(n=n) + f"rewrite:\n  target_op: R{n}\n", Cluster((), ()), 1)
        for n in ("a", "b")
    ]
    monkeypatch.chdir(tempfile.gettempdir())
    with draft_files() if in_run else nullcontext():
        assert _first_clash(drafts, []) == (0, 1)
