"""Immutable records shared by every layer (rules, op tables, kernels): kept at the
bottom of the package so that no lower layer imports an upper one."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")

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


class LazyTuple(Sequence[T], Generic[T]):
    """A sequence equal to the tuple of its records, each made on first read: on an
    LLM-sized graph the stages hand over ~10^5-10^6 candidates and a compact ``fuse``
    reads a few thousand. Subclasses give ``__len__``, ``all`` (every record, in order)
    and, where one record can be made alone, ``_record``; pickling sends the
    plain tuple (a forked matcher's result)."""

    @abstractmethod
    def all(self) -> Sequence[T]:
        """Every record, in order (made now where missing)."""

    def _record(self, k: int) -> T:
        """Record ``k`` (0 <= k < len); subclasses that can make one alone override it."""
        return self.all()[k]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self.all()[index])
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(index)
        return self._record(index)

    def __iter__(self) -> Iterator[T]:
        return iter(self.all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple:
        return (tuple, (tuple(self),))
