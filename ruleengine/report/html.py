"""report.html: one self-contained page (inline CSS, JS and SVG; no CDN, no server).

The summary and the per-rule table are written as HTML here, so the totals read the
same with scripts off; the plot, the group cards (a page at a time, each with an SVG of
its subgraph), the rejections and the node search are drawn by a small vanilla script
(assets/report.js) from the embedded document (ruleengine/report/data.py). No chart
library: plain SVG keeps the file self-contained and small. Same plan, same bytes.
"""

from __future__ import annotations

import base64
import gzip
import json
from html import escape
from importlib import resources
from typing import Any

from ruleengine.rewrite.report import fmt_bytes


def _asset(name: str) -> str:
    return resources.files("ruleengine.report").joinpath("assets", name).read_text("utf-8")


def embed_json(document: Any) -> str:
    """JSON safe inside a <script> element: every ``<`` escaped (no ``</script>`` or
    ``<!--`` can end it), ASCII only (no raw U+2028)."""
    text = json.dumps(document, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c")


def embed_packed(document: Any) -> str:
    """The document gzipped (``mtime`` 0: the same bytes for the same document) and in
    base64, which needs no escaping in a <script> element; a fifth of the JSON's size,
    so the browser reads and parses a 10^5-node page in a fraction of the time."""
    data = gzip.compress(embed_json(document).encode("ascii"), compresslevel=6, mtime=0)
    return base64.b64encode(data).decode("ascii")


def unpack(page: bytes) -> dict[str, Any]:
    """The document embedded in a report.html (tests, tools)."""
    text = page.decode("utf-8")
    start = text.index(">", text.index('id="af-data"')) + 1
    body = text[start : text.index("</script>", start)]
    if 'data-encoding="gzip+base64"' in text[:start]:
        body = gzip.decompress(base64.b64decode(body)).decode("ascii")
    return json.loads(body)


def _kpi(label: str, value: str, extra: str = "", key: str = "", exact: int | None = None) -> str:
    attrs = f' data-total="{escape(key)}" data-value="{exact}"' if key else ""
    tail = f'<div class="x">{escape(extra)}</div>' if extra else ""
    return (
        f'<div class="kpi"><div class="k">{escape(label)}</div>'
        f'<div class="v"{attrs}>{escape(value)}</div>{tail}</div>'
    )


def _summary(doc: dict[str, Any]) -> str:
    t, s = doc["totals"], doc["solver"]
    bound = "" if s["bound"] is None or s["bound"] == s["objective"] else f", bound {s['bound']}"
    v = doc["verification"]
    checked = "not run" if v is None else ("passed" if v["ok"] else "FAILED")
    parts = [
        _kpi(
            "HBM traffic before",
            fmt_bytes(t["hbm_bytes_before"]),
            f"{t['hbm_bytes_before']:,} B",
            "hbm_bytes_before",
            t["hbm_bytes_before"],
        ),
        _kpi(
            "HBM traffic after",
            fmt_bytes(t["hbm_bytes_after"]),
            f"{t['hbm_bytes_after']:,} B",
            "hbm_bytes_after",
            t["hbm_bytes_after"],
        ),
        _kpi(
            "gross saved",
            fmt_bytes(t["gross_bytes_saved"]),
            f"{t['gross_bytes_saved']:,} B, {t['saved_percent']}% of the traffic",
            "gross_bytes_saved",
            t["gross_bytes_saved"],
        ),
        _kpi(
            "net saved",
            fmt_bytes(t["net_bytes_saved"]),
            f"{t['net_bytes_saved']:,} B (gross - overhead {t['overhead_bytes']:,} B)",
            "net_bytes_saved",
            t["net_bytes_saved"],
        ),
        _kpi(
            "kernel launches saved",
            str(t["launches_saved"]),
            "",
            "launches_saved",
            t["launches_saved"],
        ),  # fmt: skip
        _kpi("fused groups", str(t["groups"]), "", "groups", t["groups"]),
        _kpi(
            "nodes",
            f"{t['nodes_before']} \u2192 {t['nodes_after']}",
            "",
            "nodes_after",
            t["nodes_after"],
        ),
        _kpi("solver", f"{s['name']}, {s['status']}", f"objective {s['objective']}{bound}"),
        _kpi("verification", checked, "" if v is None else f"{v['mode']}, inputs {v['inputs']}"),
    ]
    return '<div class="kpis">' + "".join(parts) + "</div>"


def _safe_rounds(doc: dict[str, Any]) -> str:
    """What ``--safe`` dropped, round by round (nothing when no group was dropped)."""
    v = doc["verification"]
    rounds = [] if v is None else v.get("rounds", [])
    if not any(dropped for _, _, dropped in rounds):
        return ""
    items = "".join(
        f"<li>round {r}: {len(dropped)} group(s) dropped, then {escape(nxt)}<ul>"
        + "".join(
            f"<li>group {g} ({escape(rule)} \u2192 {escape(op)}): {escape(why)}</li>"
            for g, rule, op, why in dropped
        )
        + "</ul></li>"
        for r, nxt, dropped in rounds
    )
    return f'<p><b>Safe mode</b> (verify, drop, solve again):</p><ul class="safe">{items}</ul>'


def _rule_table(doc: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{escape(r)}</td><td class=n>{m}</td><td class=n>{f}</td>"
        f"<td class=n>{escape(fmt_bytes(g))}</td><td class=n>{escape(fmt_bytes(n))}</td></tr>"
        for r, m, f, g, n in doc["rules"]
    )
    silent = doc["rulesSilent"]
    note = f'<p class="muted">{silent} rules matched nothing.</p>' if silent else ""
    head = (
        "<tr><th>rule</th><th class=n>matched</th><th class=n>fused</th>"
        "<th class=n>gross saved</th><th class=n>net saved</th></tr>"
    )
    return f'<table id="rules">{head}{rows}</table>{note}'


def _rejected_line(doc: dict[str, Any]) -> str:
    r = doc["rejected"]
    by = ", ".join(f"{k} {v}" for k, v in r["by_verdict"].items()) or "none"
    listed = "all listed" if doc["detail"] == "full" else "a few per rule and verdict listed"
    return f"{r['total']} candidates not fused ({by}); {listed}."


def render_html(doc: dict[str, Any]) -> bytes:
    """The page for one report document (``report_document``)."""
    title = f"autofusion report: {doc['model']}"
    body = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{escape(title)}</title>
<style>{_asset("report.css")}</style></head>
<body>
<header><h1>{escape(title)}</h1>
<div class="sub">graph {escape(doc["graph"])}, target {escape(doc["target"])}</div></header>
<nav><a href="#summary">Summary</a><a href="#traffic">Traffic</a><a href="#rules-h">Rules</a>
<a href="#groups">Groups</a><a href="#near-h">Near misses</a><a href="#notfused-h">Not fused</a>
<input id="search" type="search" placeholder="Search node names" aria-label="Search node names">
</nav>
<main>
<div id="found" class="found"></div>
<h2 id="summary">Summary</h2>
{_summary(doc)}
{_safe_rounds(doc)}
<h2 id="traffic">HBM traffic before and after</h2>
<div class="legend muted"><span class="lb" style="background:var(--before)"></span>before
<span style="background:var(--after)"></span>after fusion (a group's saving is split over its
nodes by their unfused traffic)</div>
<div class="charts"><div class="chart"><h3>by op type</h3><div id="chart-op"></div></div>
<div class="chart"><h3 id="chart-layer-title">by layer</h3><div id="chart-layer"></div></div></div>
<h2 id="rules-h">Per-rule statistics</h2>
{_rule_table(doc)}
<h2 id="groups">Fused groups ({len(doc["groups"])})</h2>
<p class="muted">Each picture shows the group's ops; <span style="color:var(--chip)">green</span>
edges stay on chip, <span style="color:var(--hbm)">red dashed</span> ones cross HBM (bytes on
each; hover for tensor names).</p>
<div class="pager"><button id="prev" type="button">&larr; prev</button>
<span id="page-info"></span><button id="next" type="button">next &rarr;</button>
<select id="rule-filter" aria-label="rule"><option value="">all rules</option></select>
<input id="goto" type="number" min="1" placeholder="group id" aria-label="group id"></div>
<div id="cards"></div>
<h2 id="near-h">Near misses per rule</h2>
<p class="muted">{escape(_rejected_line(doc))}</p>
<div id="near"></div>
<h2 id="notfused-h">Not fused, other reasons</h2>
<div id="notfused"></div>
</main>
<script type="application/octet-stream" id="af-data" data-encoding="gzip+base64">
{embed_packed(doc)}</script>
<script>{_asset("report.js")}</script>
</body></html>
"""
    return body.encode("utf-8")
