"""Convert the compact JSON rule format into YAML rule files.

The compact format (one JSON object, rule name -> ``{pattern, output_op, conditions}``)
has no params, sources or constraints: ``pattern`` becomes a chain of ``match.ops``,
``output_op`` becomes ``rewrite.target_op``. ``conditions`` are mapped where they have a
meaning in the rule format (``bn_mode: inference`` -> BatchNormalization
``training_mode: 0``); anything else is kept as a comment and reported as not mapped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Diagnostic, Location
from ruleengine.errors import RuleLoadError

MAX_JSON_BYTES = 1 << 20
DEFAULT_PRIORITY = 100


@dataclass(frozen=True)
class ConvertedRule:
    name: str
    filename: str
    text: str  # the YAML rule file
    unmapped: tuple[str, ...] = ()  # conditions that could not be mapped (kept as comments)


def _bn_mode(value: Any, ops: list[dict]) -> bool:
    """bn_mode: inference/eval -> BatchNormalization training_mode 0 (train -> 1)."""
    modes = {"inference": 0, "eval": 0, "test": 0, "training": 1, "train": 1}
    if not isinstance(value, str) or value.lower() not in modes:
        return False
    targets = [op for op in ops if op["type"] in ("BatchNormalization", "BatchNorm")]
    if not targets:
        return False
    for op in targets:
        op.setdefault("params", {})["training_mode"] = modes[value.lower()]
    return True


_CONDITION_MAPPERS = {"bn_mode": _bn_mode}


def _safe_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    if not cleaned or not re.match(r"[A-Za-z_]", cleaned[0]):
        cleaned = "rule_" + cleaned
    return cleaned[:128]


def _target_op(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return cleaned if re.match(r"[A-Za-z_]", cleaned[:1]) else "Fused_" + cleaned


def convert_data(data: Any, source: str) -> list[ConvertedRule]:
    """Convert parsed compact JSON into YAML rule texts; raise RuleLoadError on bad input."""
    where = Location(source)
    if not isinstance(data, dict) or not data:
        raise RuleLoadError(
            f"{source}: expected a JSON object mapping rule names to rules",
            (
                codes.make(
                    "wrong-type",
                    "the compact rule file must be a non-empty JSON object "
                    '{"rule_name": {"pattern": [...], "output_op": "..."}}',
                    where,
                    hint="see the compact format in docs/rules.md",
                ),
            ),
        )
    out: list[ConvertedRule] = []
    problems = []
    used: set[str] = set()
    for raw_name, spec in data.items():
        name = base = _safe_name(str(raw_name))
        n = 2
        while name.lower() in used:  # distinct names (and file names, case-insensitively)
            name, n = f"{base}_{n}", n + 1
        used.add(name.lower())
        problem = _spec_problem(raw_name, spec, where)
        if problem is not None:
            problems.append(problem)
            continue
        out.append(_converted(name, raw_name, spec, source))
    if problems:
        raise RuleLoadError(f"{source}: cannot convert", tuple(problems))
    return out


def _spec_problem(raw_name: Any, spec: Any, where: Location) -> Diagnostic | None:
    """Why a compact rule cannot be converted (not an object, no pattern, no output op)."""
    if not isinstance(spec, dict):
        return codes.make("wrong-type", f"rule {raw_name!r}: expected an object", where, hint=None)
    pattern = spec.get("pattern")
    if (
        not isinstance(pattern, list)
        or not pattern
        or not all(isinstance(p, str) and p for p in pattern)
    ):
        return codes.make(
            "missing-field",
            f"rule {raw_name!r}: `pattern` must be a non-empty list of op type names",
            where,
            hint='e.g. "pattern": ["Conv", "Relu"]',
        )
    output_op = spec.get("output_op")
    if not isinstance(output_op, str) or not output_op:
        return codes.make(
            "missing-field",
            f"rule {raw_name!r}: `output_op` must be the fused op's name",
            where,
            hint='e.g. "output_op": "ConvReLU"',
        )
    return None


def _converted(name: str, raw_name: Any, spec: dict, source: str) -> ConvertedRule:
    """One compact rule (already checked) as a YAML rule text; what has no equivalent in
    the rule format is kept as a comment."""
    pattern, output_op = spec["pattern"], spec["output_op"]
    ops: list[dict] = [{"type": t} for t in pattern]
    unmapped = []
    conditions = spec.get("conditions") or {}
    if not isinstance(conditions, dict):
        unmapped.append(f"conditions: {json.dumps(conditions)}")
        conditions = {}
    for key, value in conditions.items():
        mapper = _CONDITION_MAPPERS.get(key)
        if mapper is None or not mapper(value, ops):
            unmapped.append(f"{key}: {json.dumps(value)}")
    extra = sorted(set(spec) - {"pattern", "output_op", "conditions"})
    for key in extra:
        unmapped.append(f"{key}: {json.dumps(spec[key])}")
    rule = {
        "name": name,
        "priority": DEFAULT_PRIORITY,
        "description": f"Converted from {Path(source).name} rule {raw_name!r}: "
        + " -> ".join(pattern)
        + f" fused into {output_op}.",
        "match": {"ops": ops},
        "rewrite": {"target_op": _target_op(output_op)},
    }
    header = [
        f"# Converted by `autofusion convert` from {Path(source).name}.",
    ]
    if conditions and len(unmapped) < len(conditions) + len(extra):
        header.append("# Conditions mapped onto op params where the rule format has them.")
    for u in unmapped:
        header.append(f"# not mapped (no equivalent in the rule format): {u}")
    body = yaml.safe_dump(rule, sort_keys=False, allow_unicode=True, width=100)
    return ConvertedRule(name, f"{name}.yaml", "\n".join(header) + "\n" + body, tuple(unmapped))


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json object hook: a key given twice is an error (json.loads keeps the last)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _key_location(text: str, key: str, source: str) -> Location:
    """Line and column of the second ``"key":`` in the text (best effort)."""
    hits = list(re.finditer(re.escape(json.dumps(key)) + r"\s*:", text))
    if len(hits) < 2:
        hits = list(re.finditer(re.escape(json.dumps(key, ensure_ascii=False)) + r"\s*:", text))
    if len(hits) < 2:
        return Location(source)
    start = hits[1].start()
    line = text.count("\n", 0, start) + 1
    return Location(source, line, start - (text.rfind("\n", 0, start) + 1) + 1)


def convert_file(path: str | Path) -> list[ConvertedRule]:
    """Read a compact JSON rule file and convert it."""
    p = Path(path)
    source = p.as_posix()
    try:
        if p.stat().st_size > MAX_JSON_BYTES:
            raise RuleLoadError(f"{source}: file larger than {MAX_JSON_BYTES} bytes")
        text = p.read_text(encoding="utf-8-sig")  # a BOM, as Windows editors write, is fine
    except FileNotFoundError:
        raise RuleLoadError(f"no such file: {source}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleLoadError(f"cannot read {source}: {exc}") from None
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as dup:
        loc = _key_location(text, dup.key, source)
        raise RuleLoadError(
            f"{source}: duplicate key {dup.key!r}",
            (
                codes.make(
                    "duplicate-key",
                    f"duplicate key {dup.key!r} (JSON keeps only the last one)",
                    loc,
                    hint="keep one of the two (rule names must be unique)",
                ),
            ),
        ) from None
    except RecursionError:
        raise RuleLoadError(f"{source}: JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        loc = Location(source, exc.lineno, exc.colno)
        raise RuleLoadError(
            f"{source}: not valid JSON",
            (
                codes.make(
                    "yaml-syntax", f"invalid JSON: {exc.msg}", loc, hint="fix the JSON syntax"
                ),
            ),
        ) from None
    return convert_data(data, source)


def output_files(converted: list[ConvertedRule], out_dir: Path, *, force: bool) -> dict[str, bytes]:
    """The YAML file of each rule (file name -> bytes), to be written as one set under
    ``out_dir`` (the caller writes them: ``rewrite.writer.write_set``); refuse to
    overwrite unless ``force``."""
    from ruleengine.errors import OutputError

    targets = [out_dir / c.filename for c in converted]
    existing = [t.as_posix() for t in targets if t.exists()]
    if existing and not force:
        raise OutputError(
            f"would overwrite {', '.join(existing)}; pass --force to replace them",
        )
    return {c.filename: c.text.encode("utf-8") for c in converted}
