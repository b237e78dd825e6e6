"""JSON text of the outputs (plan, report, `match -f json`), without importing onnx:
the `match` command prints through it and never needs the rewriting stage."""

from __future__ import annotations

import json
from typing import Any

# Above this size a JSON output is laid out one record per line: ``indent`` makes json use
# its pure-Python encoder (measured: 3.8 s for a 5 MB plan of a 512-layer stack), while
# compact records go through the C encoder; jq and json.load read both alike.
INDENT_LIMIT_BYTES = 256 * 1024
_CHUNK = 4096  # list records per encoded chunk


# one encoder for every record (``json.dumps`` with options makes a new one per call)
_COMPACT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def json_bytes(data: Any) -> bytes:
    """JSON text: indented when small; when large, each top-level key on its own line
    and each element of a top-level list on its own line (compact inside). Each record
    is encoded once: the compact document's size is the sum of its parts'."""
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        return _indented(data)
    dump = _COMPACT.encode
    parts: list[tuple[str, list[str] | str]] = []
    size = 1 + max(len(data), 1)  # braces and the commas between entries
    for k, v in data.items():
        key = dump(k)
        if isinstance(v, list) and v:
            items = [dump(x) for x in v]
            size += len(key) + 2 + sum(map(len, items)) + len(items)
            parts.append((key, items))
        else:
            text = dump(v)
            size += len(key) + 1 + len(text)
            parts.append((key, text))
    if size < INDENT_LIMIT_BYTES:
        return _indented(data)
    # Encoded chunk by chunk, each record's text let go once encoded: the peak is the
    # records' text and the bytes, not also every line, each list's body and the document
    # as one string (a 10 MB plan: 41 -> ~25 MiB).
    out = [b"{\n"]
    for i, (key, val) in enumerate(parts):
        if i:
            out.append(b",\n")
        if isinstance(val, list):
            out.append(f"  {key}: [\n".encode())
            for j in range(0, len(val), _CHUNK):
                if j:
                    out.append(b",\n")
                chunk = val[j : j + _CHUNK]
                out.append(",\n".join([f"    {x}" for x in chunk]).encode())
                val[j : j + _CHUNK] = [""] * len(chunk)
            out.append(b"\n  ]")
        else:
            out.append(f"  {key}: {val}".encode())
    out.append(b"\n}\n")
    return b"".join(out)


def _indented(data: Any) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()
