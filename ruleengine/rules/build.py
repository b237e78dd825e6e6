"""Semantic checks of one schema-valid rule document, and building the frozen ``Rule``.

Runs only on documents the schema accepted, so the shapes of values are known here.
Findings (``verify``): unknown op types, ``from_op`` not pointing to an earlier op,
rewrite inputs outside the pattern, inverted ranges, duplicate output names, unknown
dtypes, impossible input ports, output paths escaping the output directory.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import posixpath
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Diagnostic
from ruleengine.ops.aliases import known_type_names, op_type_info
from ruleengine.paths import NAME_MAX, PATH_MAX
from ruleengine.rules.model import (
    MAX_VALUE_NUMEL,
    Constraint,
    ConstValue,
    FrozenMap,
    InputSource,
    MatchAlternative,
    OpPattern,
    OutputSpec,
    Rewrite,
    RewriteInput,
    Rule,
    SubgraphSpec,
    is_fuse_output_name,
    rule_output_files,
)
from ruleengine.rules.schema import dotted
from ruleengine.yamlio import Document, Marks

# ONNX tensor element types, lower-case (TensorProto.DataType names).
ONNX_DTYPES = (
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "string",
    "complex64",
    "complex128",
    "float8e4m3fn",
    "float8e4m3fnuz",
    "float8e5m2",
    "float8e5m2fnuz",
    "float8e8m0",
    "uint4",
    "int4",
    "float4e2m1",
)
_DTYPE_SPELLINGS = {
    "float": "float32",
    "fp32": "float32",
    "f32": "float32",
    "half": "float16",
    "fp16": "float16",
    "f16": "float16",
    "bf16": "bfloat16",
    "double": "float64",
    "fp64": "float64",
    "f64": "float64",
    "int": "int32",
    "long": "int64",
    "i8": "int8",
    "i32": "int32",
    "i64": "int64",
}


def freeze(value: Any) -> Any:
    """Plain YAML data -> hashable values (lists -> tuples, dicts -> FrozenMap)."""
    if isinstance(value, dict):
        return FrozenMap({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


class _Checker:
    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.marks: Marks = doc.marks
        self.diags: list[Diagnostic] = []
        self.lenient = False

    def add(self, name: str, message: str, path: tuple, hint: str, *, key: bool = False) -> None:
        loc = self.marks.key(path) if key else self.marks.value(path)
        self.diags.append(codes.make(name, message, loc, hint=hint))

    # ------------------------------------------------------------------ checks
    def check(self, *, lenient: bool = False) -> None:
        """All semantic checks. ``lenient``: the document failed the schema, so each check
        runs best-effort and a check that meets a malformed value is skipped."""
        self.lenient = lenient
        data = self.doc.data
        match = data.get("match")
        alts = self._safely(lambda: self.alternatives(match), default=[]) if match else []
        if isinstance(match, dict) and not alts and not lenient:
            self.add(
                "empty-match",
                "match has neither `ops` nor `branches`",
                ("match",),
                "add `ops:` with a list of op patterns under match",
            )
        for base, ops in alts:
            self._safely(lambda base=base, ops=ops: self.check_ops(base, ops))
        self._safely(lambda: self.check_subgraph(match.get("subgraph") or {}))
        self._safely(lambda: self.check_rewrite(data.get("rewrite") or {}, alts))
        self._safely(lambda: self.check_dtypes(data.get("constraints") or []))
        self._safely(lambda: self.check_paths(data.get("output") or {}))

    def _safely(self, step, default=None):
        if not self.lenient:
            return step()
        try:
            return step()
        except (TypeError, KeyError, AttributeError, ValueError, IndexError):
            return default

    def check_dtypes(self, constraints: list) -> None:
        for i, c in enumerate(constraints):
            if c.get("type") != "dtype_match":
                continue
            for j, dt in enumerate(c.get("allowed_dtypes") or []):
                if dt in ONNX_DTYPES:
                    continue
                better = _DTYPE_SPELLINGS.get(str(dt).lower())
                if better is None:
                    close = difflib.get_close_matches(str(dt), ONNX_DTYPES, n=1)
                    better = close[0] if close else None
                hint = f"did you mean {better!r}? " if better else ""
                self.add(
                    "unknown-dtype",
                    f"constraints[{i}].allowed_dtypes: {dt!r} is not an ONNX dtype",
                    ("constraints", i, "allowed_dtypes", j),
                    hint + "use ONNX names: float16, float32, bfloat16, int8, ...",
                )

    def check_paths(self, output: dict) -> None:
        for key in ("file_path", "dot_graph_path"):
            value = output.get(key)
            if isinstance(value, str) and _escapes(value):
                self.add(
                    "unsafe-path",
                    f"output.{key} {value!r} leaves the output directory",
                    ("output", key),
                    "write a relative path inside the output directory, without `..`",
                )
                return
        name = self.doc.data.get("name")
        for key, path in rule_output_files(output, name if isinstance(name, str) else ""):
            where = ("output", key) if key in output else ("output",)
            raw = os.fsencode(path) if "\0" not in path else b""
            if (
                "\0" in path
                or any(len(p) > NAME_MAX for p in raw.split(b"/"))
                or len(raw) >= PATH_MAX
            ):
                why = "a NUL byte" if "\0" in path else "a name over 255 bytes or a path over 4,095"
                self.add(
                    "impossible-path",
                    f"output file {path[:80]!r}{'...' if len(path) > 80 else ''} has {why}, "
                    "which no file system takes",
                    where,
                    "use a short path of ordinary characters",
                )
                continue
            top = posixpath.normpath(path.replace("\\", "/")).split("/")[0]
            if is_fuse_output_name(top):
                self.add(
                    "reserved-output-path",
                    f"output file {path!r} collides with {top!r}, which fuse writes itself",
                    where,
                    "put rule outputs in a folder of their own, e.g. file_path: kernels/",
                )

    @staticmethod
    def alternatives(match: dict) -> list[tuple[tuple, list]]:
        alts: list[tuple[tuple, list]] = []
        if match.get("ops"):
            alts.append((("match", "ops"), match["ops"]))
        for b, branch in enumerate(match.get("branches") or []):
            alts.append((("match", "branches", b, "ops"), branch.get("ops") or []))
        return alts

    def check_ops(self, base: tuple, ops: list) -> None:
        seen_names: dict[str, int] = {}
        for i, op in enumerate(ops):
            self._safely(lambda i=i, op=op: self.check_op(base, ops, i, op, seen_names))
            self._safely(lambda i=i, op=op: self.check_optional(base, ops, i, op))

    def check_optional(self, base: tuple, ops: list, i: int, op: dict) -> None:
        """``repeat.min: 0`` (an optional op) needs an op before it that it consumes: when
        absent, what reads it reads that op instead (see MatchAlternative)."""
        rep = op.get("repeat") or {}
        if rep.get("min", 1) != 0:
            return
        p = (*base, i, "repeat")
        sources = op.get("input_sources")
        why = None
        if i == 0:
            why = "op 0 has no op before it to stand in for it"
        elif rep.get("fan_out"):
            why = "a fan_out op's copies are siblings, not a chain that can be empty"
        elif sources is not None and any("from_op" in (s or {}) for s in sources.values()):
            why = "its inputs name a from_op, so it does not consume the op before it"
        elif sources is not None and any(
            (s or {}).get("from_op") == i - 1
            for later in ops[i + 1 :]
            for s in (later.get("input_sources") or {}).values()
        ):
            why = f"it starts a new root (a later op takes op {i - 1} by from_op)"
        if why:
            self.add(
                "bad-optional-op",
                f"{dotted(p)}: min 0 (optional) but {why}",
                p,
                "make only an op that chains to the op before it optional, or use a branch",
            )

    def check_op(self, base: tuple, ops: list, i: int, op: dict, seen_names: dict) -> None:
        """One pattern op: its type, ranges, input sources, params and output names."""
        p = (*base, i)
        info = op_type_info(op["type"])
        if not info.known:
            self.unknown_type(p, op["type"])
        inputs = op.get("inputs") or {}
        lo, hi = inputs.get("min_inputs"), inputs.get("max_inputs")
        if lo is not None and hi is not None and lo > hi:
            self.add(
                "bad-range",
                f"{dotted(p)}.inputs: min_inputs {lo} is greater than max_inputs {hi}",
                (*p, "inputs"),
                "swap the two values",
            )
        rep = op.get("repeat") or {}
        rmin, rmax = rep.get("min", 1), rep.get("max")
        if rmax is not None and rmin > rmax:
            self.add(
                "bad-range",
                f"{dotted(p)}.repeat: min {rmin} is greater than max {rmax}",
                (*p, "repeat"),
                "swap the two values",
            )
        onnx_max = info.max_inputs()
        limit = hi if hi is not None else onnx_max
        for port_name, src in (op.get("input_sources") or {}).items():
            self.check_source(ops, i, (*p, "input_sources", port_name), src, limit)
        for name, value in (op.get("params") or {}).items():
            self.check_one_of((*p, "params", name), value)
        for k, name in enumerate(op.get("output_names") or []):
            if name in seen_names:
                self.add(
                    "duplicate-output-name",
                    f"{dotted(p)}.output_names: {name!r} is already the name of an output "
                    f"of op {seen_names[name]}",
                    (*p, "output_names", k),
                    "give every output a distinct name",
                )
            else:
                seen_names[name] = i

    def unknown_type(self, p: tuple, type_name: str) -> None:
        """An op type that is no ONNX op, alias, composite or class: the closest names."""
        close = difflib.get_close_matches(type_name, known_type_names(), n=3, cutoff=0.6)
        lower = [n for n in known_type_names() if n.lower() == type_name.lower()]
        suggestions = lower or close
        hint = f"did you mean {' or '.join(map(repr, suggestions))}? " if suggestions else ""
        self.add(
            "unknown-op-type",
            f"{dotted(p)}: unknown op type {type_name!r}",
            (*p, "type"),
            hint + "use an ONNX op, an alias from ops/aliases.yaml, a composite or an "
            "@class (names are case-sensitive)",
        )

    def check_source(self, ops: list, i: int, sp: tuple, src: dict, limit: int | None) -> None:
        """One ``input_sources`` entry of op ``i``: a port the op has, exactly one of
        ``from_op``/``source_type``/``same_as``, each pointing somewhere it may."""
        port = int(sp[-1][len("input") :])
        if limit is not None and port >= limit:
            self.add(
                "bad-input-port",
                f"{dotted(sp)}: port {port} but the op has at most {limit} "
                + ("input" if limit == 1 else "inputs"),
                sp,
                f"use input0 .. input{max(limit - 1, 0)}",
                key=True,
            )
        has_from = "from_op" in src
        has_type = "source_type" in src
        has_same = "same_as" in src
        if has_from + has_type + has_same != 1:
            self.add(
                "bad-input-port",
                f"{dotted(sp)}: give exactly one of `from_op`, `source_type` or `same_as`",
                sp,
                "from_op: j for an earlier op's output, source_type: const_or_param "
                "(or const, graph_input, any) for a tensor from outside the match, "
                "same_as: {op: j, input: k} for the tensor another op reads",
                key=True,
            )
        if has_same:
            self.check_same_as(ops, i, src["same_as"], (*sp, "same_as"))
        if has_type and "output_idx" in src:
            self.add(
                "bad-input-port",
                f"{dotted(sp)}: `output_idx` only goes with `from_op`",
                (*sp, "output_idx"),
                "remove output_idx",
                key=True,
            )
        if has_from:
            self.check_from_op(ops, i, sp, src)
        if any(k in src for k in VALUE_KEYS):
            self.check_value(ops[i]["type"], sp, src)

    def check_value(self, op_type: str, sp: tuple, src: dict) -> None:
        """``value``/``value_in``/``tolerance``/``shape``: on a constant input only, not
        contradicting itself, small enough to be read, of a type the input can hold."""
        keys = [k for k in VALUE_KEYS if k in src]
        if src.get("source_type") != "const":
            self.add(
                "value-not-const",
                f"{dotted(sp)}: `{keys[0]}` is checked only on a constant input, but this "
                f"input {_source_words(src)}",
                (*sp, keys[0]),
                "write `source_type: const` beside it (the value is read through "
                "Identity/Cast/Transpose), or drop the value check",
                key=True,
            )
            return
        has_value, has_in = "value" in src, "value_in" in src
        if has_value and has_in:
            self.add(
                "bad-value-spec",
                f"{dotted(sp)}: give `value` or `value_in`, not both",
                (*sp, "value_in"),
                "value: v (every element v), value_in: [v1, v2] (each element one of them)",
                key=True,
            )
        if "tolerance" in src and not (has_value or has_in):
            self.add(
                "bad-value-spec",
                f"{dotted(sp)}: `tolerance` without `value` or `value_in` checks nothing",
                (*sp, "tolerance"),
                "add `value: ...` (or `value_in: [...]`), or drop the tolerance",
                key=True,
            )
        self.check_value_size(sp, src)
        wants = _value_numbers(src)
        if wants:
            self.check_value_type(op_type, sp, src, wants)

    def check_value_size(self, sp: tuple, src: dict) -> None:
        """A ``value`` list as long as ``shape`` holds; no value read past the size cap."""
        shape = src.get("shape")
        numel = 1 if shape == "scalar" else math.prod(shape) if isinstance(shape, list) else None
        value = src.get("value")
        if isinstance(value, list) and numel is not None and len(value) != numel:
            self.add(
                "bad-value-spec",
                f"{dotted(sp)}: `value` lists {len(value)} number(s) but `shape` "
                f"{_shape_text(shape)} holds {numel}",
                (*sp, "value"),
                "list one number per element, or write one number (every element equals it)",
                key=True,
            )
        if numel is not None and numel > MAX_VALUE_NUMEL and ("value" in src or "value_in" in src):
            self.add(
                "value-on-big-tensor",
                f"{dotted(sp)}: a value check on a constant of {numel:,} elements; values are "
                f"read only from constants of at most {MAX_VALUE_NUMEL} elements",
                (*sp, "value" if "value" in src else "value_in"),
                "check the shape alone (drop value/value_in), never a weight's bytes",
                key=True,
            )

    def check_value_type(self, op_type: str, sp: tuple, src: dict, wants: list) -> None:
        """A value the input's element types can hold (no fraction on an integer input)."""
        port = int(sp[-1][len("input") :])
        kinds = input_kinds(op_type, port)
        if not kinds:
            return
        key = "value" if "value" in src else "value_in"
        fraction = next((w for w in wants if isinstance(w, float) and not w.is_integer()), None)
        if "float" not in kinds and "int" not in kinds:
            why = f"takes only {' or '.join(sorted(kinds))} tensors"
        elif "float" not in kinds and fraction is not None:
            why = f"takes only integer tensors, so {fraction!r} never holds"
        else:
            return
        self.add(
            "value-type-mismatch",
            f"{dotted(sp)}: input{port} of {op_type} {why}",
            (*sp, key),
            "write a value the input's type can hold (see the op's ONNX schema)",
            key=True,
        )

    def check_from_op(self, ops: list, i: int, sp: tuple, src: dict) -> None:
        """``from_op: j``: an earlier op, with the output ``output_idx`` names."""
        j = src["from_op"]
        if j >= i:
            what = "itself" if j == i else "a later op" if j < len(ops) else "no op"
            allowed = (
                "is the first op and consumes no other op of the pattern"
                if i == 0
                else f"can only consume {'op 0' if i == 1 else f'ops 0..{i - 1}'}"
            )
            self.add(
                "bad-from-op",
                f"{dotted(sp)}.from_op: {j} refers to {what}; op {i} {allowed}",
                (*sp, "from_op"),
                "list ops in data-flow order and point from_op at an earlier one"
                if i
                else "the first op cannot consume another op of the pattern",
            )
        else:
            self.check_output_idx(ops, j, src.get("output_idx", 0), (*sp, "output_idx"))

    def check_same_as(self, ops: list, i: int, same: dict, path: tuple) -> None:
        """``same_as`` names another op of the pattern and an input that op can have."""
        j, k = same["op"], same["input"]
        if j == i or j >= len(ops):
            what = "this op itself" if j == i else f"op {j}, but the pattern has {len(ops)} ops"
            self.add(
                "bad-same-as",
                f"{dotted(path)}.op: {j} is {what}",
                (*path, "op"),
                "point same_as at another op of the same pattern",
            )
            return
        most = op_type_info(ops[j]["type"]).max_inputs()
        if most is not None and k >= most:
            self.add(
                "bad-same-as",
                f"{dotted(path)}.input: {k} but {ops[j]['type']} (op {j}) has at most "
                f"{most} input{'s' if most != 1 else ''}",
                (*path, "input"),
                f"use an input index from 0 to {most - 1}",
            )

    def check_one_of(self, path: tuple, value: Any) -> None:
        """``{one_of: [...]}`` is the only mapping a param value may be, with 1+ options."""
        if not isinstance(value, dict):
            return
        options = value.get("one_of")
        if set(value) != {"one_of"} or not isinstance(options, list) or not options:
            self.add(
                "bad-one-of",
                f"{dotted(path)}: a param given as a mapping must be {{one_of: [values]}} "
                "with at least one value",
                path,
                "write `name: value`, or `name: {one_of: [value1, value2]}`",
            )

    def check_subgraph(self, sub: dict) -> None:
        rng = sub.get("input_count_range")
        if isinstance(rng, list) and len(rng) == 2 and rng[0] > rng[1]:
            self.add(
                "bad-range",
                f"match.subgraph.input_count_range: low {rng[0]} is greater than high {rng[1]}",
                ("match", "subgraph", "input_count_range"),
                "write [low, high] with low <= high",
            )

    def check_output_idx(self, ops: list, j: int, idx: int, path: tuple) -> None:
        """``output_idx`` must be an output the op ``j`` can have (when that is known)."""
        most = op_type_info(ops[j]["type"]).max_outputs()
        if most is not None and idx >= most:
            self.add(
                "bad-rewrite-input" if path[0] == "rewrite" else "bad-from-op",
                f"{dotted(path)}: {idx} but {ops[j]['type']} (op {j}) has "
                f"{'only ' if most > 1 else ''}{most} output{'s' if most != 1 else ''}",
                path,
                f"use an output index from 0 to {most - 1}",
            )

    def check_rewrite(self, rewrite: dict, alts: list[tuple[tuple, list]]) -> None:
        if not alts:
            return
        shortest = min(len(ops) for _, ops in alts)
        ports: dict[int, int] = {}
        for k, entry in enumerate(rewrite.get("inputs") or []):
            p = ("rewrite", "inputs", k)
            j = entry["from_op"]
            if "input_idx" in entry and "output_idx" in entry:
                self.add(
                    "bad-rewrite-input",
                    f"rewrite.inputs[{k}]: give `output_idx` (an output of op {j}) or "
                    f"`input_idx` (a tensor op {j} reads), not both",
                    p,
                    "input_idx names the external tensor behind the port; drop output_idx",
                )
            if j >= shortest:
                self.add(
                    "bad-rewrite-input",
                    f"rewrite.inputs[{k}].from_op: {j} but "
                    + (
                        f"the pattern has only {shortest} ops"
                        if len(alts) == 1
                        else f"the shortest match alternative has only {shortest} ops"
                    ),
                    (*p, "from_op"),
                    f"use an op index from 0 to {shortest - 1}",
                )
            elif any(((ops[j].get("repeat") or {}).get("min", 1) == 0) for _, ops in alts):
                self.add(
                    "bad-rewrite-input",
                    f"rewrite.inputs[{k}].from_op: op {j} is optional (repeat.min 0); a "
                    "group without it would have no tensor for the port",
                    (*p, "from_op"),
                    "name an op every match has",
                )
            elif "input_idx" in entry:
                for _, ops in alts:
                    most = op_type_info(ops[j]["type"]).max_inputs()
                    if most is not None and entry["input_idx"] >= most:
                        self.add(
                            "bad-rewrite-input",
                            f"rewrite.inputs[{k}].input_idx: {entry['input_idx']} but "
                            f"{ops[j]['type']} (op {j}) has at most {most} input"
                            + ("s" if most != 1 else ""),
                            (*p, "input_idx"),
                            f"use an input index from 0 to {most - 1}",
                        )
                        break
            else:
                for _, ops in alts:
                    self.check_output_idx(ops, j, entry.get("output_idx", 0), (*p, "output_idx"))
            port = entry.get("input_port", k)
            if port in ports:
                self.add(
                    "bad-rewrite-input",
                    f"rewrite.inputs[{k}].input_port: port {port} is already fed by "
                    f"rewrite.inputs[{ports[port]}]",
                    (*p, "input_port") if "input_port" in entry else p,
                    "give every fused input its own port",
                )
            else:
                ports[port] = k

    # ------------------------------------------------------------------ build
    def build(self) -> Rule:
        d = self.doc.data
        m = self.marks
        match = d["match"]
        branch_of = {
            ("match", "branches", b, "ops"): br for b, br in enumerate(match.get("branches") or [])
        }
        alternatives = tuple(
            MatchAlternative(
                ops=tuple(self.build_op((*base, i), i, op) for i, op in enumerate(ops)),
                location=m.value(base),
                target_op=branch_of.get(base, {}).get("target_op"),
                kernel_name=branch_of.get(base, {}).get("kernel_name"),
            )
            for base, ops in self.alternatives(match)
        )
        subgraph = _subgraph(match.get("subgraph") or {})
        rewrite = self.build_rewrite()
        constraints = tuple(
            Constraint(
                type=c["type"],
                fields=freeze({k: v for k, v in c.items() if k not in ("type", "description")}),
                description=c.get("description"),
                location=m.value(("constraints", i)),
            )
            for i, c in enumerate(d.get("constraints") or [])
        )
        output = self.build_output()
        scope = d.get("scope") or ()
        version = d.get("version", "1.0")
        if isinstance(version, int | float):
            version = f"{float(version):.1f}" if float(version).is_integer() else str(version)
        return Rule(
            name=d["name"],
            alternatives=alternatives,
            rewrite=rewrite,
            version=str(version),
            priority=d.get("priority", 0),
            scope=(scope,) if isinstance(scope, str) else tuple(scope),
            description=d.get("description"),
            enabled=d.get("enabled", True),
            benefit_threshold=float(d.get("benefit_threshold", 0.0)),
            subgraph=subgraph,
            constraints=constraints,
            output=output,
            location=m.key(("name",)),
        )

    def build_rewrite(self) -> Rewrite:
        m = self.marks
        rw = self.doc.data["rewrite"]
        return Rewrite(
            target_op=rw["target_op"],
            inputs=tuple(
                RewriteInput(
                    from_op=e["from_op"],
                    output_idx=e.get("output_idx", 0),
                    input_port=e.get("input_port", k),
                    input_idx=e.get("input_idx"),
                    description=e.get("description"),
                    location=m.value(("rewrite", "inputs", k)),
                )
                for k, e in enumerate(rw.get("inputs") or [])
            ),
            attributes=freeze(rw.get("attributes") or {}),
            tensor_layout=rw.get("tensor_layout"),
            kernel_config=freeze(rw.get("kernel_config") or {}),
            location=m.value(("rewrite",)),
            attribute_locations=FrozenMap(
                {str(k): m.key(("rewrite", "attributes", k)) for k in rw.get("attributes") or {}}
            ),
        )

    def build_output(self) -> OutputSpec:
        d = self.doc.data
        out = d.get("output") or {}
        return OutputSpec(
            kernel_name=out.get("kernel_name"),
            file_path=out.get("file_path"),
            compiler=out.get("compiler"),
            build_config=freeze(out.get("build_config") or {}),
            debug_symbols=bool(out.get("debug_symbols", False)),
            gen_dot_graph=bool(out.get("gen_dot_graph", False)),
            dot_graph_path=out.get("dot_graph_path"),
            location=self.marks.value(("output",)) if "output" in d else None,
        )

    def build_op(self, path: tuple, index: int, op: dict) -> OpPattern:
        m = self.marks
        params = op.get("params") or {}
        inputs = op.get("inputs") or {}
        sources = op.get("input_sources")
        rep = op.get("repeat") or {}
        rmin = rep.get("min", 1)
        return OpPattern(
            index=index,
            type=op["type"],
            params=freeze(params),
            param_locations=FrozenMap({k: m.key((*path, "params", k)) for k in params}),
            min_inputs=inputs.get("min_inputs"),
            max_inputs=inputs.get("max_inputs"),
            input_sources=None
            if sources is None
            else tuple(
                sorted(
                    (
                        InputSource(
                            port=int(name[len("input") :]),
                            from_op=s.get("from_op"),
                            output_idx=s.get("output_idx", 0),
                            source_type=s.get("source_type"),
                            same_as=(s["same_as"]["op"], s["same_as"]["input"])
                            if "same_as" in s
                            else None,
                            location=m.key((*path, "input_sources", name)),
                            value=const_value(s, m.key((*path, "input_sources", name))),
                        )
                        for name, s in sources.items()
                    ),
                    key=lambda s: s.port,
                )
            ),
            output_names=tuple(op.get("output_names") or ()),
            repeat_min=rmin,
            repeat_max=rep.get("max", max(rmin, 1)) if rep else 1,
            fan_out=bool(rep.get("fan_out", False)),
            location=m.value(path),
        )


VALUE_KEYS = ("value", "value_in", "tolerance", "shape")


def const_value(src: dict, location: Any = None) -> ConstValue | None:
    """The value check of one ``input_sources`` entry, or None when it has none."""
    if not any(k in src for k in VALUE_KEYS):
        return None
    value = src.get("value")
    tol = src.get("tolerance") or {}
    shape = src.get("shape")
    return ConstValue(
        value=tuple(value) if isinstance(value, list) else value,
        value_in=tuple(src["value_in"]) if "value_in" in src else None,
        shape=tuple(shape) if isinstance(shape, list) else shape,
        rel=tol.get("rel"),
        abs=tol.get("abs"),
        location=location,
    )


def _value_numbers(src: dict) -> list:
    value = src.get("value")
    if isinstance(value, list):
        return list(value)
    if value is not None:
        return [value]
    return list(src.get("value_in") or [])


def _shape_text(shape: Any) -> str:
    return "scalar" if shape == "scalar" else "[" + ", ".join(map(str, shape)) + "]"


def _source_words(src: dict) -> str:
    """What an input source says its tensor is, in words (for AF213)."""
    if "from_op" in src:
        return f"is op {src['from_op']}'s output"
    if "same_as" in src:
        return "is the same tensor as another op's input (same_as)"
    if "source_type" in src:
        return f"is `source_type: {src['source_type']}`, which may be an activation"
    return "has no `source_type`"


_TYPE_KINDS = (
    ("float", ("float", "double", "bfloat16")),
    ("int", ("int", "uint")),
    ("bool", ("bool",)),
    ("string", ("string",)),
)


@functools.cache
def input_kinds(op_type: str, port: int) -> frozenset[str]:
    """The element kinds (float, int, bool, string) input ``port`` of an ONNX op (or
    of the ONNX ops an alias stands for) takes in any opset version; empty when not
    known (composites, classes, an op with no such input)."""
    from ruleengine.graph.onnxlite import all_schemas_with_history

    info = op_type_info(op_type)
    if info.kind not in ("alias", "onnx") or info.composites:
        return frozenset()
    out: set[str] = set()
    for schema in all_schemas_with_history():
        if schema.name not in info.onnx_types or schema.domain not in ("", "ai.onnx"):
            continue
        inputs = list(schema.inputs)
        if not inputs:
            continue
        formal = inputs[min(port, len(inputs) - 1)]
        if port >= len(inputs) and "Variadic" not in str(formal.option):
            continue  # no such input in this version
        allowed = [formal.type_str]
        for c in schema.type_constraints:
            if c.type_param_str == formal.type_str:
                allowed = list(c.allowed_type_strs)
        for t in allowed:
            elem = t.removeprefix("tensor(").removeprefix("seq(tensor(").split(")")[0]
            out.update(kind for kind, prefixes in _TYPE_KINDS if elem.startswith(prefixes))
    return frozenset(out)


def _escapes(path: str) -> bool:
    if path.startswith(("/", "\\", "~")) or PureWindowsPath(path).drive:
        return True
    depth = 0
    for part in PurePosixPath(path.replace("\\", "/")).parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in (".", ""):
            depth += 1
    return False


def check_and_build(doc: Document) -> tuple[Rule | None, list[Diagnostic]]:
    """Semantic checks of a schema-valid document; the Rule when no error was found."""
    checker = _Checker(doc)
    checker.check()
    if any(d.severity == "error" for d in checker.diags):
        return None, checker.diags
    return checker.build(), checker.diags


def provisional_ops(doc: Document) -> list[OpPattern]:
    """The op patterns of a document that has errors elsewhere, each built on its own
    (one that cannot be built is skipped), so ``check`` can still show their warnings."""
    data = doc.data if isinstance(doc.data, dict) else {}
    match = data.get("match")
    if not isinstance(match, dict):
        return []
    checker = _Checker(doc)
    out: list[OpPattern] = []
    try:
        alternatives = checker.alternatives(match)
    except (TypeError, AttributeError):
        return []
    for base, ops in alternatives:
        for i, op in enumerate(ops if isinstance(ops, list) else []):
            if not isinstance(op, dict) or not isinstance(op.get("type"), str):
                continue
            if not isinstance(op.get("params") or {}, dict):
                continue
            try:
                out.append(checker.build_op((*base, i), i, op))
            except (TypeError, KeyError, AttributeError, ValueError, IndexError):
                continue
    return out


def semantic_findings(doc: Document) -> list[Diagnostic]:
    """Best-effort semantic checks of a document the schema refused (more findings at once)."""
    checker = _Checker(doc)
    try:
        checker.check(lenient=True)
    except (TypeError, KeyError, AttributeError, ValueError, IndexError):
        pass
    return checker.diags


def _subgraph(sub: dict) -> SubgraphSpec:
    """``match.subgraph`` as a record (defaults when absent)."""
    rng = sub.get("input_count_range")
    return SubgraphSpec(
        input_count_range=(rng[0], rng[1]) if rng else None,
        output_count=sub.get("output_count"),
        allow_intermediate_outputs=bool(sub.get("allow_intermediate_outputs", False)),
    )
