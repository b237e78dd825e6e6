"""Hardware targets: bundled ``targets/<name>.yaml`` or a user YAML file, schema-checked.

Numbers live in data, never in Python: the cost model only reads a ``Target`` record.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jsonschema
import yaml

from ruleengine.cost.model import Target
from ruleengine.diagnostics.codes import make
from ruleengine.diagnostics.model import Location
from ruleengine.errors import UsageError
from ruleengine.resources import data_dir, schema_path

DEFAULT_TARGET = "ascend910b"
_MAX_TARGET_BYTES = 1 << 20  # a target file is a few dozen lines; refuse anything huge


def known_targets() -> tuple[str, ...]:
    """Names of the bundled targets, sorted."""
    return tuple(sorted(p.stem for p in data_dir("targets").glob("*.yaml")))


@cache
def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(schema_path("target").read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _error(path: str, message: str, hint: str | None = None) -> UsageError:
    """A UsageError about the invalid target file ``path`` (AF902), with its diagnostic."""
    diag = make("target-invalid", message, Location(path), hint=hint)
    return UsageError(f"cannot load target {path}: {message}", (diag,))


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: object, first: yaml.Mark, mark: yaml.Mark) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key, self.first, self.mark = key, first, mark


class _TooLong(yaml.YAMLError):
    def __init__(self, digits: int, mark: yaml.Mark) -> None:
        super().__init__(f"integer of {digits} digits")
        self.digits, self.mark = digits, mark


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (YAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[object, yaml.Mark] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.setdefault(key, key_node.start_mark)
            except TypeError:  # unhashable key: the schema reports it
                continue
            if first is not key_node.start_mark:
                raise _DuplicateKey(key, first, key_node.start_mark)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        """An integer, refused (at its line:col) when longer than any target quantity:
        Python would otherwise build a 401-digit int that overflows every float
        division, or refuse one over 4,300 digits with a ValueError."""
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise _TooLong(digits, node.start_mark)
        return super().construct_yaml_int(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)

MAX_NUMBER = 1e18  # above every byte count, core count, bandwidth or flop rate of a chip
MAX_INT_DIGITS = 19


def _first(data: Any, bad: Any, where: str = "") -> str | None:
    """The dotted path of the first number in ``data`` for which ``bad`` holds (or None)."""
    if isinstance(data, int | float) and not isinstance(data, bool) and bad(data):
        return where or "(top level)"
    items = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list)
        else ()
    )
    for key, value in items:
        sub = (
            f"{where}[{key}]" if isinstance(data, list) else f"{where}.{key}" if where else str(key)
        )
        found = _first(value, bad, sub)
        if found:
            return found
    return None


def _out_of_range(data: Any) -> str | None:
    """The first number above ``MAX_NUMBER`` in magnitude."""
    return _first(data, lambda v: abs(v) > MAX_NUMBER)


def _non_finite(data: Any) -> str | None:
    """The first NaN or infinite number."""
    return _first(data, lambda v: isinstance(v, float) and not math.isfinite(v))


def load_target(name_or_path: str | Path) -> Target:
    """A target by bundled name (``ascend910b``) or by a path to a YAML file.

    An unknown name is a UsageError listing the bundled names; a file that does not
    satisfy ``schemas/target.schema.json`` is a UsageError naming each offending field.
    """
    text = str(name_or_path)
    looks_like_path = isinstance(name_or_path, Path) or text.endswith((".yaml", ".yml"))
    looks_like_path = looks_like_path or "/" in text or "\\" in text
    if looks_like_path:
        from ruleengine.paths import check_input_file, path_problem

        if path_problem(text) is not None:
            check_input_file(text, "target")  # raises AF221, naming the problem
        path = Path(text)
        if not path.is_file():
            raise UsageError(
                f"target file {text} does not exist",
                (
                    make(
                        "target-not-found",
                        f"no such target file: {text}",
                        Location(text),
                        hint=f"use a bundled target ({', '.join(known_targets())}) or a YAML path",
                    ),
                ),
            )
    else:
        path = data_dir("targets") / f"{text}.yaml"
        if not path.is_file():
            raise UsageError(
                f"unknown target {text!r}; known targets: {', '.join(known_targets())}",
                (
                    make(
                        "target-not-found",
                        f"unknown target {text!r}",
                        None,
                        hint=f"choose one of {', '.join(known_targets())}, or pass a YAML file",
                    ),
                ),
            )
    return _load_file(path)


def _load_file(path: Path) -> Target:
    """Read, check and convert one target file; every problem is a UsageError (AF902)."""
    shown = str(path)
    data = _read_yaml(path, shown)
    _check(data, shown)
    return _target_of(data, shown)


def _read_yaml(path: Path, shown: str) -> Any:
    """The file's YAML, refused when too large, unreadable, malformed, with a key given
    twice or an integer longer than any target quantity."""
    try:
        if path.stat().st_size > _MAX_TARGET_BYTES:
            raise _error(shown, "file is larger than 1 MiB")
        raw = path.read_text(encoding="utf-8")
        return yaml.load(raw, Loader=_StrictLoader)  # a SafeLoader
    except UsageError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise _error(shown, f"cannot read: {exc}") from None
    except RecursionError:  # a target is a flat mapping; thousands of levels are not one
        raise _error(shown, "YAML nested too deeply to be a target") from None
    except _DuplicateKey as exc:
        loc = Location(shown, exc.mark.line + 1, exc.mark.column + 1)
        diag = make(
            "target-invalid",
            f"duplicate key {exc.key!r} (first at line {exc.first.line + 1})",
            loc,
            hint="keep one of the two; YAML would silently use the last",
        )
        raise UsageError(
            f"cannot load target {shown}: duplicate key {exc.key!r}", (diag,)
        ) from None
    except _TooLong as exc:
        message = f"integer of {exc.digits} digits is out of range (at most {MAX_NUMBER:.0e})"
        diag = make(
            "target-invalid",
            message,
            Location(shown, exc.mark.line + 1, exc.mark.column + 1),
            hint="write the quantity in its unit: bytes, bytes/s, flop/s, seconds",
        )
        raise UsageError(f"cannot load target {shown}: {message}", (diag,)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = Location(shown, mark.line + 1, mark.column + 1) if mark else Location(shown)
        diag = make("target-invalid", f"YAML error: {exc}", loc)
        raise UsageError(f"cannot load target {shown}: malformed YAML", (diag,)) from None


def _check(data: Any, shown: str) -> None:
    """Refuse what is not a target: no mapping, against the schema, a number that is
    not finite or out of range, a reserve not below the UB size."""
    if not isinstance(data, dict):
        raise _error(shown, "expected a mapping of target fields")
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(map(str, e.path)))
    if errors:
        diags = tuple(
            make(
                "target-invalid",
                f"{'/'.join(map(str, e.path)) or '(top level)'}: {e.message}",
                Location(shown),
                hint="see schemas/target.schema.json for the fields a target takes",
            )
            for e in errors
        )
        raise UsageError(f"target {shown} does not satisfy the target schema", diags)
    bad = _non_finite(data)
    if bad:
        raise _error(
            shown,
            f"{bad} is not a finite number (.nan and .inf make every cost meaningless)",
            "write a positive number, e.g. 1.6e+12",
        )
    big = _out_of_range(data)
    if big:
        raise _error(
            shown,
            f"{big} is out of range (at most {MAX_NUMBER:.0e} in magnitude)",
            "write the quantity in its unit: bytes, bytes/s, flop/s, seconds",
        )
    if data["ub_reserve_bytes"] >= data["ub_bytes"]:
        raise _error(shown, "ub_reserve_bytes must be below ub_bytes")


def _target_of(data: dict, shown: str) -> Target:
    """The checked mapping as a ``Target``, defaults filled in."""
    return Target(
        name=data["name"],
        ub_bytes=int(data["ub_bytes"]),
        ub_reserve_bytes=int(data["ub_reserve_bytes"]),
        l1_bytes=int(data["l1_bytes"]),
        l0a_bytes=int(data["l0a_bytes"]),
        l0b_bytes=int(data["l0b_bytes"]),
        l0c_bytes=int(data["l0c_bytes"]),
        hbm_bandwidth=float(data["hbm_bandwidth"]),
        peak_flops=MappingProxyType({k: float(v) for k, v in data["peak_flops"].items()}),
        cores=int(data["cores"]),
        vector_cores=int(data["vector_cores"]),
        ub_align_bytes=int(data.get("ub_align_bytes", 32)),
        buffer_factor=int(data.get("buffer_factor", 2)),
        launch_overhead_s=float(data.get("launch_overhead_s", 5e-6)),
        max_fused_inputs=int(data.get("max_fused_inputs", 8)),
        description=data.get("description"),
        cube_min_tile=tuple(int(x) for x in data.get("cube_min_tile", (16, 16))),  # type: ignore[arg-type]
        cube_buffer_factor=int(data.get("cube_buffer_factor", 2)),
        accumulate_bytes=int(data.get("accumulate_bytes", 4)),
        source=shown,
    )
