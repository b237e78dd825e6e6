"""A rule file linted again in one process is read from what was kept only while its
name and text are the same (``rules.lint``: suggest loads the same library hundreds of
times)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ruleengine.errors import RuleLoadError
from ruleengine.rules import load_rule_set

pytestmark = pytest.mark.unit

RULE = "name: r\nmatch:\n  ops:\n    - type: {op}\nrewrite:\n  target_op: R\n"


def test_the_same_text_is_reused_and_a_change_is_read(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(RULE.format(op="Relu"), encoding="utf-8")
    first = load_rule_set([path]).rules[0]
    assert load_rule_set([path]).rules[0] is first
    # same size, same second: only the text tells them apart
    path.write_text(RULE.format(op="Tanh"), encoding="utf-8")
    changed = load_rule_set([path]).rules[0]
    assert "Tanh" in repr(changed.alternatives[0].ops[0])
    assert "Relu" in repr(first.alternatives[0].ops[0])
    path.write_text("name: r\nmatch: [\n", encoding="utf-8")
    with pytest.raises(RuleLoadError):
        load_rule_set([path])


def test_the_same_text_under_another_name_is_its_own(tmp_path: Path) -> None:
    broken = "name: r\nmatch: [\n"
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text(broken, encoding="utf-8")
    for name in ("a.yaml", "b.yaml"):
        with pytest.raises(RuleLoadError) as err:
            load_rule_set([tmp_path / name])
        files = {d.location.file.rsplit("/", 1)[-1] for d in err.value.diagnostics}
        assert files == {name}
