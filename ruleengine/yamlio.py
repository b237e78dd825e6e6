"""Safe YAML reading that keeps where every key and value came from.

PyYAML composes a node tree (with marks); we build plain Python values from it ourselves
so that we can: keep line/column of every key and value (``Marks``), refuse duplicate keys
(every one, with its line), resolve plain scalars by YAML 1.2 core rules (``1e-5`` is a
number, ``yes`` is a string that is read as a boolean where one is expected), refuse
non-standard tags (no object construction, ever), and budget alias expansion and nesting
depth (alias bombs). Files are refused before parsing when binary or larger than 1 MiB.
"""

from __future__ import annotations

import math
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError

from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Diagnostic, Location

MAX_FILE_BYTES = 1 << 20  # 1 MiB
MAX_NODES = 50_000  # nodes built per file, aliases expanded
MAX_DEPTH = 64  # nesting of mappings/sequences

Path_ = tuple[str | int, ...]

_PLAIN = "!autofusion/plain"
_TAG = "tag:yaml.org,2002:"
_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL_TRUE = re.compile(r"^(?:true|True|TRUE)$")
_BOOL_FALSE = re.compile(r"^(?:false|False|FALSE)$")
_INT = re.compile(r"^[-+]?[0-9]+$")
_INT_OCT = re.compile(r"^0o[0-7]+$")
_INT_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")
_INF = re.compile(r"^([-+]?)\.(?:inf|Inf|INF)$")
_NAN = re.compile(r"^\.(?:nan|NaN|NAN)$")
_NON_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)
YAML11_BOOLS = {
    "yes": True,
    "y": True,
    "on": True,
    "no": False,
    "n": False,
    "off": False,
}


class _PyLoader(yaml.SafeLoader):
    """A SafeLoader used only to compose nodes; plain scalars keep a marker tag."""

    yaml_implicit_resolvers: dict = {}

    def resolve(self, kind: type, value: Any, implicit: Any) -> str:
        if kind is ScalarNode and implicit[0]:
            return _PLAIN
        return super().resolve(kind, value, implicit)


_Loader: Any = _PyLoader
if getattr(yaml, "__with_libyaml__", False):
    from yaml._yaml import CParser
    from yaml.composer import Composer
    from yaml.resolver import BaseResolver

    class _CLoader(Composer, BaseResolver, CParser):  # type: ignore[misc]
        """libyaml scans and parses (iteratively, depth-limited, ~10x faster); the Python
        composer builds the nodes, so recursion stays bounded by Python's limit."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            BaseResolver.__init__(self)

        def resolve(self, kind: type, value: Any, implicit: Any) -> str:
            if kind is ScalarNode and implicit[0]:
                return _PLAIN
            return BaseResolver.resolve(self, kind, value, implicit)

    _Loader = _CLoader


@dataclass
class Marks:
    """Where each part of a document is: path -> location of the value / of its key."""

    file: str
    values: dict[Path_, Location] = field(default_factory=dict)
    keys: dict[Path_, Location] = field(default_factory=dict)
    yaml11_bools: set[Path_] = field(default_factory=set)  # plain yes/no/on/off scalars

    def value(self, path: Path_) -> Location:
        """Location of the value at ``path``, or of the nearest enclosing value."""
        p = tuple(path)
        while p:
            if p in self.values:
                return self.values[p]
            p = p[:-1]
        return self.values.get((), Location(self.file, 1, 1))

    def key(self, path: Path_) -> Location:
        """Location of the key of the entry at ``path`` (falls back to its value)."""
        return self.keys.get(tuple(path)) or self.value(path)


@dataclass
class Document:
    """One YAML document: its plain data and its marks."""

    data: Any
    marks: Marks
    index: int  # 0-based document number within the file
    has_errors: bool = False  # reading it found an error (duplicate key, bad tag, ...)


class _Budget(Exception):
    def __init__(self, message: str, location: Location | None = None) -> None:
        super().__init__(message)
        self.location = location  # where the budget ran out, when known


def _loc(file: str, node: Node) -> Location:
    return Location(file, node.start_mark.line + 1, node.start_mark.column + 1)


def resolve_plain(text: str) -> Any:
    """YAML 1.2 core schema resolution of a plain (unquoted) scalar."""
    if _NULL.match(text):
        return None
    if _BOOL_TRUE.match(text):
        return True
    if _BOOL_FALSE.match(text):
        return False
    if _INT.match(text):
        return int(text)
    if _INT_OCT.match(text):
        return int(text[2:], 8)
    if _INT_HEX.match(text):
        return int(text[2:], 16)
    if _FLOAT.match(text):
        return float(text)
    m = _INF.match(text)
    if m:
        return -math.inf if m.group(1) == "-" else math.inf
    if _NAN.match(text):
        return math.nan
    return text


class _Builder:
    def __init__(self, file: str, diagnostics: list[Diagnostic]) -> None:
        self.file = file
        self.diags = diagnostics
        self.count = 0
        self.marks = Marks(file)

    def build(self, node: Node, path: Path_, depth: int) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise _Budget(
                f"more than {MAX_NODES} YAML nodes after expanding aliases", _loc(self.file, node)
            )
        if depth > MAX_DEPTH:
            raise _Budget(f"nesting deeper than {MAX_DEPTH} levels", _loc(self.file, node))
        self.marks.values.setdefault(path, _loc(self.file, node))
        if isinstance(node, ScalarNode):
            return self._scalar(node, path)
        if isinstance(node, SequenceNode):
            self._check_tag(node, "seq")
            return [self.build(child, (*path, i), depth + 1) for i, child in enumerate(node.value)]
        if isinstance(node, MappingNode):
            self._check_tag(node, "map")
            return self._mapping(node, path, depth)
        raise _Budget("unknown YAML node")  # pragma: no cover - PyYAML has three kinds

    def _check_tag(self, node: Node, kind: str) -> None:
        if node.tag != _TAG + kind:
            self.diags.append(
                codes.make(
                    "unsupported-tag",
                    f"YAML tag {node.tag!r} is not allowed",
                    _loc(self.file, node),
                    hint="remove the tag; only plain YAML values are accepted",
                )
            )

    def _scalar(self, node: ScalarNode, path: Path_) -> Any:
        text = node.value
        tag = node.tag
        if tag == _PLAIN:
            try:
                value = resolve_plain(text)
            except ValueError:  # an integer of over 4,300 digits (Python refuses to parse it)
                self.diags.append(
                    codes.make(
                        "yaml-syntax",
                        f"integer of {len(text)} digits is out of every range (Python reads "
                        "at most 4,300)",
                        _loc(self.file, node),
                        hint="write a number of ordinary size",
                    )
                )
                return text
            if isinstance(value, str) and text.lower() in YAML11_BOOLS:
                self.marks.yaml11_bools.add(path)
            return value
        if tag == _TAG + "str":
            return text
        try:
            if tag == _TAG + "int":
                return int(text, 0)
            if tag == _TAG + "float":
                return float(text)
            if tag == _TAG + "bool":
                v = resolve_plain(text)
                if isinstance(v, bool):
                    return v
                if text.lower() in YAML11_BOOLS:
                    return YAML11_BOOLS[text.lower()]
                raise ValueError(text)
            if tag == _TAG + "null":
                return None
        except ValueError:
            self.diags.append(
                codes.make(
                    "yaml-syntax",
                    f"{text!r} is not a valid value for tag {tag!r}",
                    _loc(self.file, node),
                    hint="fix the value or remove the tag",
                )
            )
            return text
        self._check_tag(node, "str")
        return text

    def _key(self, node: Node) -> str | None:
        if isinstance(node, ScalarNode):
            return str(node.value)
        self.diags.append(
            codes.make(
                "yaml-syntax",
                "a mapping key must be a plain value, not a list or mapping",
                _loc(self.file, node),
                hint="write keys as simple names",
            )
        )
        return None

    def _mapping(self, node: MappingNode, path: Path_, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first: dict[str, Location] = {}
        merged: dict[str, Any] = {}
        repeats: list[tuple[str, Location]] = []  # duplicate keys of this mapping
        for key_node, value_node in node.value:
            if key_node.tag == _TAG + "merge" or (
                isinstance(key_node, ScalarNode)
                and key_node.tag == _PLAIN
                and key_node.value == "<<"
            ):
                self._merge(value_node, path, depth, merged)
                continue
            key = self._key(key_node)
            if key is None:
                continue
            kloc = _loc(self.file, key_node)
            if key in first:
                repeats.append((key, kloc))
                continue
            first[key] = kloc
            self.marks.keys[(*path, key)] = kloc
            out[key] = self.build(value_node, (*path, key), depth + 1)
        self._report_repeats(path, first, repeats)
        for key, value in merged.items():
            out.setdefault(key, value)
        return out

    def _report_repeats(
        self, path: Path_, first: dict[str, Location], repeats: list[tuple[str, Location]]
    ) -> None:
        """One finding per duplicate key; but rules pasted into one document without
        `---` (``name:`` again at the top) are one finding, not one per repeated field."""
        names = [loc for key, loc in repeats if key == "name"]
        if path == () and names:
            starts = [first["name"], *names]
            lines = ", ".join(str(loc.line) for loc in starts)
            before = " and ".join(f"line {loc.line}" for loc in names)
            keys = ", ".join(f"`{k}`" for k in dict.fromkeys(k for k, _ in repeats))
            self.diags.append(
                codes.make(
                    "duplicate-key",
                    f"{len(starts)} rules in one YAML document (`name:` at lines {lines}); "
                    f"each rule needs its own document (repeated keys: {keys})",
                    names[0],
                    hint=f"add a `---` line before {before}",
                    related=(first["name"], *names[1:]),
                )
            )
            repeats = [(k, loc) for k, loc in repeats if k not in _RULE_KEYS]
        for key, kloc in repeats:
            self.diags.append(
                codes.make(
                    "duplicate-key",
                    f"duplicate key {key!r} (first at line {first[key].line})",
                    kloc,
                    hint=_duplicate_hint(key),
                    related=(first[key],),
                )
            )

    def _merge(self, node: Node, path: Path_, depth: int, merged: dict[str, Any]) -> None:
        sources = node.value if isinstance(node, SequenceNode) else [node]
        for src in sources:
            if not isinstance(src, MappingNode):
                self.diags.append(
                    codes.make(
                        "yaml-syntax",
                        "a merge key `<<` needs a mapping (or a list of mappings)",
                        _loc(self.file, src),
                        hint="merge an anchored mapping: `<<: *defaults`",
                    )
                )
                continue
            value = self._mapping(src, path, depth + 1)
            for k, v in value.items():
                merged.setdefault(k, v)


_RULE_KEYS = {"name", "priority", "match", "rewrite", "version", "scope", "description"}


def _duplicate_hint(key: str) -> str:
    if key in _RULE_KEYS:
        return (
            "several rules pasted into one document? separate rules need a `---` line "
            "between them (one YAML document per rule)"
        )
    return "remove one of the two entries; YAML keeps no duplicate keys"


def _read_text(path: Path, display: str, diags: list[Diagnostic]) -> str | None:
    where = Location(display, 1, 1)  # a whole-file finding is still given a line:col
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            diags.append(
                codes.make(
                    "unreadable-file",
                    "not a regular file (a device, pipe or socket)",
                    where,
                    hint="pass a YAML rule file",
                )
            )
            return None
        size = st.st_size
        if size > MAX_FILE_BYTES:
            diags.append(
                codes.make(
                    "file-too-large",
                    f"file is {size} bytes; rule files are limited to {MAX_FILE_BYTES} bytes",
                    where,
                    hint="split the rules into several files, or check you passed the right file",
                )
            )
            return None
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:  # grew since stat
            diags.append(
                codes.make(
                    "file-too-large",
                    f"file is larger than {MAX_FILE_BYTES} bytes",
                    where,
                    hint="split the rules into several files",
                )
            )
            return None
    except OSError as exc:
        diags.append(
            codes.make(
                "unreadable-file",
                f"cannot read file: {exc.strerror or exc}",
                where,
                hint="check the path and its permissions",
            )
        )
        return None
    if b"\x00" in raw:
        nul = raw.index(b"\x00")
        line = raw.count(b"\n", 0, nul) + 1
        col = nul - (raw.rfind(b"\n", 0, nul) + 1) + 1  # in bytes: the text is not decoded
        diags.append(
            codes.make(
                "unreadable-file",
                "file is binary (contains NUL bytes), not a YAML rule file",
                Location(display, line, col),
                hint="pass the YAML rule file, not a model or archive",
            )
        )
        return None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line, col = _byte_line_col(raw, exc.start)
        diags.append(
            codes.make(
                "unreadable-file",
                f"file is not UTF-8 text: byte 0x{raw[exc.start]:02x} at line {line}, "
                f"column {col} is not valid UTF-8",
                Location(display, line, col),
                hint="save the file as UTF-8 (a byte like this usually means Latin-1 or "
                "Windows-1252, e.g. an accented letter in a comment)",
            )
        )
        return None
    return text


def _byte_line_col(raw: bytes, offset: int) -> tuple[int, int]:
    """1-based line and column (in characters) of a byte offset in undecodable text."""
    start = raw.rfind(b"\n", 0, offset) + 1
    prefix = raw[start:offset].decode("utf-8", errors="replace")
    return raw.count(b"\n", 0, offset) + 1, len(prefix) + 1


def read_documents(
    path: Path, display: str | None = None, text: str | None = None
) -> tuple[list[Document], list[Diagnostic]]:
    """Read every YAML document of a file; return documents and diagnostics found.

    Documents are returned only when the whole file parsed; a syntax error or budget
    overflow leaves no document, so nothing half-read is ever used.
    """
    display = display if display is not None else path.as_posix()
    diags: list[Diagnostic] = []
    if text is None:
        text = _read_text(path, display, diags)
        if text is None:
            return [], diags
    docs: list[Document] = []
    loader: Any = None
    try:
        loader = _Loader(text)
        index = 0
        for node in _compose_all(loader, display, text):
            if node is None:
                index += 1
                continue
            builder = _Builder(display, diags)
            before = len(diags)
            try:
                data = builder.build(node, (), 0)
            except RecursionError as exc:
                raise _Budget("nesting too deep") from exc
            docs.append(Document(data, builder.marks, index, len(diags) > before))
            index += 1
    except _Budget as exc:
        diags.append(
            codes.make(
                "yaml-too-complex",
                f"document refused: {exc}",
                exc.location or Location(display, 1, 1),
                hint="do not expand anchors recursively; write the rule out plainly",
            )
        )
        return [], diags
    except yaml.MarkedYAMLError as exc:
        diags.append(_syntax_finding(text, display, exc))
        return [], diags
    except ReaderError as exc:
        bad = _NON_PRINTABLE.search(text)
        position = bad.start() if bad else 0
        char = bad.group() if bad else exc.character
        if isinstance(char, int):
            char = chr(char)
        line, col = _line_col(text, position)
        diags.append(
            codes.make(
                "yaml-syntax",
                f"character {char!r} is not allowed in YAML",
                Location(display, line, col),
                hint="remove the control character (YAML allows printable text, tab and newline)",
            )
        )
        return [], diags
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        diags.append(
            codes.make(
                "yaml-syntax",
                f"invalid YAML: {exc}",
                Location(display, 1, 1),
                hint="check the file is valid YAML",
            )
        )
        return [], diags
    finally:
        if loader is not None:
            loader.dispose()
    return docs, diags


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _syntax_finding(text: str, display: str, exc: yaml.MarkedYAMLError) -> Diagnostic:
    """A parser error said the way a person fixes it: a tab, a line that lines up with no
    block, an unclosed bracket; the parser's own words follow in parentheses."""
    mark = exc.problem_mark or exc.context_mark
    raw = exc.problem or "invalid YAML"
    if exc.context:
        raw = f"{raw} {exc.context}"
    lines = text.splitlines()
    line_no = mark.line + 1 if mark else None
    col = mark.column + 1 if mark else None
    message, hint = raw, "check indentation, colons and brackets around this point"
    # a tab in the indentation of the line the parser stopped at (or the one before it)
    for n in [line_no, (line_no or 1) - 1] if line_no else []:
        if 1 <= n <= len(lines):
            lead = lines[n - 1][: len(lines[n - 1]) - len(lines[n - 1].lstrip(" \t"))]
            if "\t" in lead:
                line_no, col = n, lead.index("\t") + 1
                message = "a tab indents this line; YAML indents with spaces only"
                hint = "replace the tab with spaces (two per level, lined up with the siblings)"
                return codes.make(
                    "yaml-syntax",
                    f"{message} (YAML parser: {raw})",
                    Location(display, line_no, col),
                    hint=hint,
                )
    opened = exc.context_mark
    if exc.context and "flow" in exc.context and opened is not None and opened is not mark:
        message = (
            f"a bracket opened at line {opened.line + 1}, column {opened.column + 1} is "
            "not closed before this point"
        )
        hint = "close the [ or { (or quote a value that holds one)"
    elif (
        line_no is not None
        and 1 <= line_no <= len(lines)
        and ("expected key" in raw or "block end" in raw or "mapping values" in raw)
    ):
        here = _indent(lines[line_no - 1])
        above = sorted(
            {
                _indent(ln)
                for ln in lines[: line_no - 1]
                if ln.strip() and not ln.lstrip().startswith("#")
            }
        )
        if "mapping values" in raw:
            message = "a second `: ` on one line: a mapping cannot start inside a value"
            hint = (
                "quote the value if it holds ': ' (e.g. description: \"a: b\"), or put the "
                "key on its own line"
            )
        elif above and here not in above:
            levels = ", ".join(str(a) for a in above)
            message = (
                f"this line is indented {here} spaces, which lines up with no block above "
                f"(the lines above are indented {levels})"
            )
            hint = "indent each key exactly like its siblings (two spaces per level)"
        else:
            message = (
                "this line does not continue the block above: a key, a `- ` item or its "
                "indentation is off"
            )
            hint = "check that the line is `key: value` or `- item`, indented like its siblings"
    elif "could not find expected ':'" in raw:
        message = "this line is not a `key: value` pair (no `: ` found)"
        hint = "write `key: value` with a space after the colon, or quote the text"
    return codes.make(
        "yaml-syntax",
        f"{message} (YAML parser: {raw})" if message != raw else raw,
        Location(display, line_no, col) if line_no is not None else Location(display),
        hint=hint,
    )


def _line_col(text: str, position: int) -> tuple[int, int]:
    before = text[:position]
    line = before.count("\n") + 1
    return line, position - (before.rfind("\n") + 1) + 1


def _compose_all(loader: Any, display: str, text: str) -> Iterator[Node | None]:
    loader.get_event()  # StreamStart
    while not loader.check_event(yaml.StreamEndEvent):
        try:
            node = loader.compose_document()
        except RecursionError:  # PyYAML composes recursively: say where it is too deep
            raise _Budget(
                f"nesting deeper than {MAX_DEPTH} levels", _too_deep(text, display)
            ) from None
        yield node


def _too_deep(text: str, display: str) -> Location:
    """Where nesting first passes MAX_DEPTH, found by the (iterative) event parser."""
    depth = 0
    for event in yaml.parse(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                return Location(display, event.start_mark.line + 1, event.start_mark.column + 1)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return Location(display, 1, 1)  # pragma: no cover - compose recursed, so it is deep
