"""``TwinMap``: the memo's twins as arrays, equal to the dict they replace."""

from __future__ import annotations

import pytest

from ruleengine.match.model import TwinMap


def test_twinmap_is_the_dict_of_its_arrays() -> None:
    want = {2: (0, 5), 3: (1, 5), 7: (0, 10)}
    twins = TwinMap([2, 3, 7], [0, 1, 0], [5, 5, 10])
    assert twins == want and dict(twins) == want
    assert list(twins.items()) == list(want.items())
    assert len(twins) == 3 and list(twins) == [2, 3, 7]
    assert 3 in twins and 4 not in twins and 8 not in twins and "3" not in twins
    assert twins[7] == (0, 10)
    with pytest.raises(KeyError):
        twins[5]
    empty = TwinMap((), (), ())
    assert empty == {} and 0 not in empty and not list(empty.items())
