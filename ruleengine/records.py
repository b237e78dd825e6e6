"""Immutable records shared by every layer (rules, op tables, kernels): kept at the
bottom of the package so that no lower layer imports an upper one."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

# A parameter value after loading: scalars, tuples of values, or nested FrozenMap.
ParamValue = Any


class FrozenMap(Mapping[str, Any]):
    """An immutable, hashable, ordered mapping (keys keep the order of the YAML file)."""

    __slots__ = ("_items", "_index")

    def __init__(self, items: Mapping[str, Any] | tuple[tuple[str, Any], ...] = ()) -> None:
        pairs = tuple(items.items()) if isinstance(items, Mapping) else tuple(items)
        self._items = pairs
        self._index = dict(pairs)

    def __getitem__(self, key: str) -> Any:
        return self._index[key]

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._items == other._items
        return isinstance(other, Mapping) and dict(self._items) == dict(other)

    def __repr__(self) -> str:
        return f"FrozenMap({dict(self._items)!r})"
