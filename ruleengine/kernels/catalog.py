"""Load the kernel catalog: kernels/*.yaml (bundled) plus ``--kernels DIR`` folders.

Each file is one entry (schemas/kernel.schema.json). Reference semantics are ONNX
functions in the ONNX text format: a form gives only ``(inputs) => (outputs) { body }``;
the name (the kernel), the attribute declarations, the domain ``autofusion`` and the
overload (the form's name) are added here, so one text states one thing. Every error is
AF401 with file:line:col; an entry of a user folder replaces the bundled one of the same
name (a user's own kernel library overrides ours).
"""

from __future__ import annotations

import functools
import json
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Diagnostic, Location
from ruleengine.errors import AutofusionError
from ruleengine.kernels.model import (
    FUSED_DOMAIN,
    Binding,
    Catalog,
    Form,
    KernelAttr,
    KernelEntry,
    Port,
    Role,
    Structure,
)
from ruleengine.kernels.opset_down import below_13
from ruleengine.resources import data_dir, schema_path

KERNEL_SUFFIXES = (".yaml", ".yml")
FUNCTION_OPSET = 17  # the opset forms are parsed at; the rewriter sets the model's
# ops the rewriter lowers for older opsets (rewrite.onnx_rewrite): CastLike(x, like) is
# Cast(x, to=the call's float type) before opset 15
LOWERED = {"CastLike": 11}  # lowered to Cast; below 13 bodies are rewritten (opset_down)


class CatalogError(AutofusionError):
    """The kernel catalog cannot be loaded (AF401 diagnostics say where)."""


@functools.cache
def _validator():  # jsonschema type
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(schema_path("kernel").read_text()))


def _attr_decl(a: KernelAttr) -> str:
    """The attribute declaration of a function header: a default makes it typed."""
    if a.default is None:
        return a.name
    kind = {"string": "string", "int": "int", "float": "float", "bool": "int"}.get(a.type)
    if kind is None:
        return a.name
    value = a.default
    if a.type == "string":
        value = json.dumps(str(value))
    elif a.type == "bool":
        value = int(bool(value))
    return f"{a.name}: {kind} = {value}"


def _parse_function(
    kernel: str, form: str, attrs: Sequence[KernelAttr], text: str, where: Location
) -> tuple[bytes, tuple[str, ...], tuple[str, ...]]:
    from ruleengine.graph import onnxlite

    header = (
        f'<domain: "{FUSED_DOMAIN}", opset_import: ["": {FUNCTION_OPSET}], overload: "{form}">\n'
    )
    decl = ", ".join(_attr_decl(a) for a in attrs)
    source = f"{header}{kernel} {'<' + decl + '> ' if decl else ''}{text.strip()}\n"
    try:
        fn = onnxlite.parse_function(source)
    except Exception as exc:  # the parser raises its own error type
        raise _error(f"kernel {kernel} form {form}: not an ONNX function: {exc}", where) from None
    return fn.SerializeToString(), tuple(fn.input), tuple(fn.output)


@functools.cache
def _first_versions() -> dict[str, int]:
    """ONNX op type -> the first default-domain opset that has it."""
    from ruleengine.graph import onnxlite

    first: dict[str, int] = {}
    for schema in onnxlite.all_schemas_with_history():
        if schema.domain in ("", "ai.onnx"):
            v = first.get(schema.name)
            first[schema.name] = schema.since_version if v is None else min(v, schema.since_version)
    return first


@functools.cache
def _attribute_since(op: str, attribute: str) -> int:
    """The first default-domain opset whose ``op`` has ``attribute`` (1: unknown op, or
    an attribute no version has, which onnx.parser and the checker report themselves)."""
    from ruleengine.graph import onnxlite

    versions = [
        s.since_version
        for s in onnxlite.all_schemas_with_history()
        if s.name == op and s.domain in ("", "ai.onnx") and attribute in s.attributes
    ]
    return min(versions, default=1)


def _min_opset(blob: bytes) -> int:
    """The first opset the body is valid at: every op it uses exists, and every attribute
    it sets to a literal value is one that op has (MaxPool's ``dilations`` is new in
    opset 10). Attributes referring to a kernel attribute (``@name``) do not count: a
    call that does not carry the attribute drops them (``at_opset``)."""
    from ruleengine.graph import onnxlite

    fn = onnxlite.FunctionProto()
    fn.ParseFromString(blob)
    first = {**_first_versions(), **LOWERED}
    needs = [1]
    for n in fn.node:
        if n.domain not in ("", "ai.onnx"):
            continue
        needs.append(first.get(n.op_type, 1))
        needs += [_attribute_since(n.op_type, a.name) for a in n.attribute if not a.ref_attr_name]
    return max(needs)


@functools.cache
def _schema_attributes(op: str, opset: int) -> frozenset[str] | None:
    from ruleengine.graph import onnxlite

    try:
        return frozenset(onnxlite.get_schema(op, opset, "").attributes)
    except Exception:  # onnx raises SchemaError: the op is not at that opset
        return None


@functools.cache
def _newest_default(op: str, attribute: str) -> Any:
    """The default of ``op``'s ``attribute`` in its newest schema (None: no default)."""
    from ruleengine.graph import onnxlite

    try:
        a = onnxlite.newest_schema(op, "").attributes.get(attribute)
    except Exception:  # unknown op
        return None
    default = None if a is None else onnxlite.attribute_default(a)
    if default is None or not default.name:
        return None
    value = onnxlite.attribute_value(default)
    return value.decode() if isinstance(value, bytes) else value


def _is_implied(op: str, attribute: str, value: Any) -> bool:
    """``value`` is what ``op`` computes when ``attribute`` is absent: its newest schema's
    default, or dilations of 1 along every axis (the graph loader writes these implied
    values on every node, whatever its opset)."""
    if value is None:
        return True
    if attribute == "dilations" and isinstance(value, (list, tuple)):
        return all(int(v) == 1 for v in value)
    default = _newest_default(op, attribute)
    if isinstance(value, (list, tuple)) or isinstance(default, (list, tuple)):
        return default is not None and list(value) == list(default)
    return default is not None and value == default


def at_opset(form: Form, opset: int, carried: Mapping[str, Any]) -> tuple[Form, list[str]]:
    """``form`` as a body valid at ``opset``. An attribute the op does not have at that
    opset (MaxPool's ``dilations`` and ``ceil_mode`` before opset 10) is dropped when it
    refers to a kernel attribute whose value in the call (``carried``) is the one absence
    means (not carried, or the op's default); a call asking for another value, or a
    literal one, is a problem: the form does not fit."""
    from ruleengine.graph import onnxlite

    fn = onnxlite.FunctionProto()
    fn.ParseFromString(form.function)
    problems: list[str] = []
    changed = False
    if opset < 13:  # inputs that were attributes, Softmax's axis (opset_down)
        changed, problems = below_13(fn, opset)
    for n in fn.node:
        if n.domain not in ("", "ai.onnx") or n.op_type in LOWERED:
            continue
        known = _schema_attributes(n.op_type, opset)
        if known is None:
            continue  # an op the opset lacks: min_opset says so
        drop = []
        for i, a in enumerate(n.attribute):
            if a.name in known:
                continue
            if a.ref_attr_name and _is_implied(n.op_type, a.name, carried.get(a.ref_attr_name)):
                drop.append(i)
            else:
                what = f"@{a.ref_attr_name}" if a.ref_attr_name else "a literal value"
                problems.append(
                    f"its body sets {n.op_type} {a.name} ({what}), which {n.op_type} does not "
                    f"have at the model's opset {opset}"
                )
        for i in reversed(drop):
            del n.attribute[i]
        changed = changed or bool(drop)
    if problems or not changed:
        return form, problems
    from dataclasses import replace

    return replace(form, function=fn.SerializeToString()), []


def _error(message: str, where: Location | None, hint: str | None = None) -> CatalogError:
    diag = codes.make("kernel-catalog-invalid", message, where, hint=hint)
    return CatalogError(message, (diag,))


def _bindings(spec: Any) -> tuple[Binding, ...]:
    items = spec if isinstance(spec, list) else [spec] if spec else []
    return tuple(
        Binding(
            b["op"],
            int(b.get("nth", 0)),
            b.get("input"),
            b.get("output"),
            bool(b.get("reciprocal", False)),
            b.get("operand"),
            b.get("dim"),
            bool(b.get("all", False)),
        )
        for b in items
    )


def _ports(specs: Any) -> tuple[Port, ...] | None:
    if specs is None:
        return None
    return tuple(
        Port(
            p["name"],
            bool(p.get("optional", False)),
            _bindings(p.get("bind")),
            p.get("description"),
        )
        for p in specs
    )


def _structure(spec: Any, name: str, where: Location | None) -> Structure | None:
    if spec is None:
        return None
    from ruleengine.ops.classes import op_classes

    classes = op_classes()
    roles = []
    for r in spec["roles"]:
        unknown = [op for op in r["ops"] if op.startswith("@") and op not in classes]
        if unknown:
            raise _error(
                f"kernel {name} structure role {r['name']}: unknown op class {unknown[0]}",
                where,
                hint=f"op classes: {', '.join(sorted(classes))} (ops/classes.yaml)",
            )
        roles.append(
            Role(
                r["name"],
                tuple(r["ops"]),
                int(r.get("min", 0)),
                r.get("max"),
                r.get("operands", "any"),
                bool(r.get("first", False)),
                r.get("description"),
            )
        )
    return Structure(tuple(roles), spec.get("max_outputs"), spec.get("description"))


def load_entry(path: Path) -> KernelEntry:
    """One catalog file -> a KernelEntry (raises CatalogError with AF401)."""
    from ruleengine.yamlio import read_documents

    docs, diags = read_documents(path)
    errors = [d for d in diags if d.severity == "error"]
    if errors or len(docs) != 1:
        message = errors[0].message if errors else f"{path} must hold exactly one kernel entry"
        raise _error(message, errors[0].location if errors else Location(str(path)))
    doc = docs[0]
    data = doc.data
    problems = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    if problems:
        err = problems[0]
        where = doc.marks.value(tuple(err.absolute_path))
        field = ".".join(str(p) for p in err.absolute_path) or "(top)"
        raise _error(
            f"{path.name}: {field}: {err.message}",
            where,
            hint="see docs/kernels.md and schemas/kernel.schema.json",
        )
    name = data["kernel"]
    attrs = _attributes(data.get("attributes") or {})
    inputs, outputs = _ports(data.get("inputs")), _ports(data.get("outputs"))
    forms = [
        _form(name, f, attrs, (inputs, outputs), doc.marks.value(("forms", i, "function")),
              doc.marks.value(("forms", i)))
        for i, f in enumerate(data.get("forms") or ())
    ]  # fmt: skip
    return KernelEntry(
        name,
        int(data.get("version", 1)),
        data.get("description", ""),
        inputs,
        outputs,
        tuple(attrs),
        tuple(forms),
        Location(str(path), 1, 1),
        open_attributes="attributes" not in data,
        structure=_structure(data.get("structure"), name, doc.marks.value(("structure",))),
    )


def _attributes(specs: dict[str, Any]) -> list[KernelAttr]:
    """The kernel's typed attributes, as its entry declares them."""
    attrs = []
    for key, spec in specs.items():
        source = spec.get("from") or {}
        attrs.append(
            KernelAttr(
                key,
                spec["type"],
                tuple(spec["values"]) if "values" in spec else None,
                spec.get("default"),
                source.get("op"),
                source.get("attribute"),
                spec.get("description"),
            )
        )
    return attrs


def _form(
    name: str,
    f: dict[str, Any],
    attrs: list[KernelAttr],
    ports: tuple[tuple[Port, ...] | None, tuple[Port, ...] | None],
    where: Location | None,
    form_where: Location | None,
) -> Form:
    """One form of kernel ``name`` (its reference function parsed); refused when it
    names a port or an attribute the kernel does not have."""
    inputs, outputs = ports
    blob, fin, fout = _parse_function(name, f["name"], attrs, f["function"], where)
    known_in = {p.name for p in inputs or ()}
    known_out = {p.name for p in outputs or ()}
    unknown = [p for p in fin if p not in known_in] + [p for p in fout if p not in known_out]
    if unknown:
        raise _error(
            f"kernel {name} form {f['name']}: {', '.join(unknown)} not among the kernel's "
            "inputs/outputs",
            where,
        )
    ops = None
    if "ops" in f:  # one op type sequence, or a list of alternative sequences
        seqs = f["ops"] if isinstance(f["ops"][0], list) else [f["ops"]]
        ops = tuple(tuple(seq) for seq in seqs)
    declared = {a.name for a in attrs}
    names = known_in | known_out | declared
    wrong = [k for k in (*f.get("attributes", {}), *f.get("bind", {})) if k not in names]
    wrong += [k for k in f.get("attributes", {}) if k not in declared]
    if wrong:
        raise _error(
            f"kernel {name} form {f['name']}: {wrong[0]} is not a port or attribute of the kernel",
            form_where,
        )
    return Form(
        f["name"],
        ops,
        fin,
        fout,
        blob,
        tuple(f.get("attributes", {}).items()),
        tuple((k, _bindings(v)) for k, v in f.get("bind", {}).items()),
        _min_opset(blob),
    )


def _files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise _error(
            f"kernel catalog folder {folder} does not exist or is not a directory",
            Location(str(folder)),
            hint="pass a folder of kernel YAML files to --kernels",
        )
    return sorted(p for p in folder.rglob("*") if p.suffix in KERNEL_SUFFIXES and p.is_file())


def load_catalog(folders: Sequence[str | Path] = (), *, bundled: bool = True) -> Catalog:
    """The bundled catalog, then each folder of ``folders`` (later entries replace)."""
    entries: dict[str, KernelEntry] = {}
    sources: list[str] = []
    roots = ([data_dir("kernels")] if bundled else []) + [Path(f) for f in folders]
    for root in roots:
        sources.append(str(root))
        seen: dict[str, Path] = {}
        for path in _files(root):
            entry = load_entry(path)
            if entry.name in seen:
                raise _error(
                    f"kernel {entry.name} defined twice in {root}: {seen[entry.name]} and {path}",
                    Location(str(path), 1, 1),
                )
            seen[entry.name] = path
            entries[entry.name] = entry
    return Catalog(tuple(entries[k] for k in sorted(entries)), tuple(sources))


_BUNDLED: Catalog | None = None  # the bundled catalog, once loaded in this process


def bundled_catalog() -> Catalog:
    global _BUNDLED
    if _BUNDLED is None:
        _BUNDLED = load_catalog()
    return _BUNDLED


def catalog_for(folders: Sequence[str | Path] = ()) -> Catalog:
    """The catalog a run uses: the bundled one, extended by ``--kernels`` folders."""
    return load_catalog(folders) if folders else bundled_catalog()


class PendingCatalog:
    """``catalog_for(folders)`` begun. The bundled catalog alone, not loaded yet in this
    process, with ``jobs`` > 1: a forked child (``procs.Forked``) loads it (YAML,
    JSON Schema, ONNX's function parser: 0.2-0.3 s) while the caller loads the rules, and
    sends it back pickled. A catalog with ``--kernels`` folders loads here at once, so
    that their errors come first as before; so does the bundled one when the child
    fails (``result`` then raises what loading raises)."""

    def __init__(self, folders: Sequence[str | Path] = (), jobs: int = 1) -> None:
        from ruleengine.procs import Forked, forkable

        self._folders = tuple(folders)
        self._child: Forked | None = None
        self._catalog: Catalog | None = None
        if self._folders:
            self._catalog = load_catalog(self._folders)
        elif _BUNDLED is None and type(jobs) is int and forkable(jobs):  # (checked later)
            self._child = Forked(_pickled_bundled)

    def result(self) -> Catalog:
        global _BUNDLED
        child, self._child = self._child, None
        if child is not None and _BUNDLED is None:
            try:
                _BUNDLED = pickle.loads(child.result())
            except Exception:  # any fault of the child: loaded here
                pass
        if self._catalog is None:
            self._catalog = bundled_catalog()
        return self._catalog


def _pickled_bundled() -> bytes:
    """The forked child's work: the bundled catalog, pickled."""
    return pickle.dumps(load_catalog(), protocol=pickle.HIGHEST_PROTOCOL)


def as_diagnostics(exc: CatalogError) -> tuple[Diagnostic, ...]:
    return exc.diagnostics
