"""``graph.model.replaced``: ``dataclasses.replace``'s result, made faster where it may."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import pytest

from ruleengine.graph.model import Tensor, replaced
from ruleengine.kernels.model import Contract


@dataclass(frozen=True)
class Plain:
    a: int
    b: tuple = ()
    c: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Checked:
    a: int

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("negative")


@dataclass(frozen=True)
class Cached:
    a: int

    @functools.cached_property
    def twice(self) -> int:
        return 2 * self.a


def test_the_same_record_as_replace():
    c = Contract("entry", 1, source="x.yaml")
    for changes in ({"status": "bound", "form": "f"}, {}, {"ports": (("x", "t"),)}):
        got = replaced(c, **changes)
        assert got == replace(c, **changes)
        assert type(got) is Contract and got is not c
    p = Plain(1, (2,))
    assert replaced(p, a=3) == Plain(3, (2,))
    assert p == Plain(1, (2,))  # the original is unchanged


def test_classes_it_cannot_copy_go_through_replace():
    with pytest.raises(ValueError, match="negative"):  # __post_init__ runs
        replaced(Checked(1), a=-1)
    cached = Cached(1)
    assert cached.twice == 2
    assert replaced(cached, a=5).twice == 10  # no stale cached value
    t = Tensor("t", "float32", (2,))  # slots: no __dict__
    assert replaced(t, dtype="float16") == replace(t, dtype="float16")


def test_an_unknown_field_raises_as_replace_does():
    with pytest.raises(TypeError):
        replaced(Plain(1), nope=2)
