"""JSON text of the outputs (plan, report, `match -f json`), without importing onnx:
the `match` command prints through it and never needs the rewriting stage."""

from __future__ import annotations

import json
from typing import Any

# Above this size a JSON output is laid out one record per line: ``indent`` makes json use
# its pure-Python encoder (measured: 3.8 s for a 5 MB plan of a 512-layer stack), while
# compact records go through the C encoder; jq and json.load read both alike.
INDENT_LIMIT_BYTES = 256 * 1024


def json_bytes(data: Any) -> bytes:
    """JSON text: indented when small; when large, each top-level key on its own line
    and each element of a top-level list on its own line (compact inside)."""
    compact = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    if len(compact) < INDENT_LIMIT_BYTES or not isinstance(data, dict):
        return (json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()

    def dump(v: Any) -> str:
        return json.dumps(v, ensure_ascii=False, allow_nan=False, separators=(",", ":"))

    lines = []
    for k, v in data.items():
        if isinstance(v, list) and v:
            body = ",\n".join(f"    {dump(x)}" for x in v)
            lines.append(f"  {dump(k)}: [\n{body}\n  ]")
        else:
            lines.append(f"  {dump(k)}: {dump(v)}")
    return ("{\n" + ",\n".join(lines) + "\n}\n").encode()
