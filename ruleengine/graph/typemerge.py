"""Every tensor's (dtype name, shape) as the loader merges them from the declared, the
inferred and the initializers' types, read where asked rather than merged up front."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import chain
from typing import Any

from ruleengine.graph.values import dtype_name

TypeEntry = tuple[str | None, tuple | None]  # (dtype name, shape)


class MergedTypes(Mapping[str, TypeEntry]):
    """Every tensor's (dtype name, shape) as the loader merges them, read where asked
    instead of merged first into one dict of 2 x 10^5 entries (at 2048 layers that
    merge cost 5-6x what it costs at 512: docs/speed.md): an initializer's own (the
    truth), else the inferred type (ONNX's element type named) with the declared one
    (value_info, outputs, inputs, a small Constant's value) where that knows more
    (``_better``), else the declared one."""

    def __init__(
        self,
        declared: Mapping[str, TypeEntry],
        inferred: Mapping[str, tuple[int, tuple | None]],
        inits: Mapping[str, TypeEntry],
    ) -> None:
        self._declared, self._inferred, self._inits = declared, inferred, inits

    def merged(self, name: str, default: Any = None) -> Any:
        """``get`` of a name that is no initializer's."""
        inferred = self._inferred.get(name)
        old = self._declared.get(name)
        if inferred is None:
            return default if old is None else old
        elem, shape = inferred
        if old is None:
            return (dtype_name(elem), shape)
        return (dtype_name(elem) or old[0], _better(shape, old[1]))

    def get(self, name: str, default: Any = None) -> Any:  # Mapping's
        got = self._inits.get(name)
        return got if got is not None else self.merged(name, default)

    def __getitem__(self, name: str) -> TypeEntry:
        got = self.get(name)
        if got is None:
            raise KeyError(name)
        return got

    def __contains__(self, name: object) -> bool:
        return name in self._inits or name in self._inferred or name in self._declared

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(chain(self._declared, self._inferred, self._inits)))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class ShapeView(Mapping[str, "tuple | None"]):
    """The shapes of ``types`` (name -> (dtype, shape)), read where they are asked for:
    two helpers below read a few (Conv weights, Shape's input) of 10^5 tensors."""

    def __init__(self, types: Mapping[str, tuple[str | None, tuple | None]]) -> None:
        self._types = types

    def __getitem__(self, name: str) -> tuple | None:
        return self._types[name][1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._types)

    def __len__(self) -> int:
        return len(self._types)


def _better(a: tuple | None, b: tuple | None) -> tuple | None:
    """The more informative of two shapes (more static dims wins; ``a`` on ties)."""
    if a is None:
        return b
    if b is None or a == b:  # equal: a tie (declared inputs are mostly inferred alike)
        return a

    def static(s: tuple) -> int:
        return sum(isinstance(d, int) for d in s)

    return b if static(b) > static(a) else a
