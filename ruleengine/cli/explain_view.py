"""What ``autofusion explain`` shows a person: the answer first, then why.

Order: totals (net and gross bytes named as such), a per-rule table, the chosen groups in
graph order each with the candidates that lost to it (bytes compared; shorter matches of
the same rule inside a group collapsed into a count), what was not fused and why, near
misses per rule and branch. By default the text stays within ``DEFAULT_LINES`` lines on
any model (sections are summarised, never cut mid-way); ``--all`` shows every candidate.
Only rendering: every figure comes from the analysis records.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from ruleengine.cost.model import ScoredCandidate, Verdict
from ruleengine.cost.scoring import human_bytes, kb

DEFAULT_LINES = 300


def natural_key(name: str) -> tuple:
    """``add_5`` before ``add_10``: digit runs compare as numbers."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def nodes_key(nodes: Sequence[str]) -> tuple:
    return tuple(natural_key(n) for n in nodes)


@dataclass(frozen=True)
class LostTo:
    """The chosen group a losing candidate overlaps, and the bytes compared."""

    group: int
    rule: str
    winner_net: int
    loser_net: int
    shared_nodes: int
    inside: bool  # the loser's nodes all lie inside the group and it is the same rule

    @property
    def margin(self) -> int:
        return self.winner_net - self.loser_net


@dataclass
class Story:
    """The analysis regrouped for reading: groups, their losers, the rest."""

    groups: list[tuple[int, ScoredCandidate]] = field(default_factory=list)
    losers: dict[int, list[tuple[ScoredCandidate, LostTo]]] = field(default_factory=dict)
    unplaced_losers: list[ScoredCandidate] = field(default_factory=list)  # cycle, no overlap
    rejected: list[ScoredCandidate] = field(default_factory=list)  # not viable, not near miss
    near: list[ScoredCandidate] = field(default_factory=list)
    lost_to: dict[int, LostTo] = field(default_factory=dict)  # id(row) -> LostTo


def _net(sc: ScoredCandidate) -> int:
    return sc.cost.net_bytes if sc.cost is not None else 0


def build_story(
    rows: Sequence[tuple[ScoredCandidate, int | None]],
    near_misses: frozenset = frozenset(),
    winners: Sequence[ScoredCandidate] = (),
) -> Story:
    """Place every row: a chosen group, a loser under its winner, a rejection, a near miss
    (``near_misses``: the candidates matching rejected, from ``MatchResult.near_misses``).
    ``winners``: every chosen group (group i is ``winners[i - 1]``), so a loser whose
    winner ``--rule``/``--verdict`` left out of ``rows`` is still placed under it."""
    story = Story()
    owner: dict[str, int] = {}
    by_group: dict[int, ScoredCandidate] = dict(enumerate(winners, 1))
    shown: set[int] = set()
    for sc, group in rows:
        if group is not None:
            by_group[group] = sc
            shown.add(group)
    for group, sc in by_group.items():
        for n in sc.candidate.nodes:
            owner[n] = group
    story.groups = sorted((g, sc) for g, sc in by_group.items() if g in shown)
    for sc, group in rows:
        if group is not None:
            continue
        if sc.verdict is Verdict.LOST_CONFLICT:
            shared = Counter(owner[n] for n in sc.candidate.nodes if n in owner)
            if not shared:
                story.unplaced_losers.append(sc)
                continue
            g, count = max(shared.items(), key=lambda kv: (kv[1], _net(by_group[kv[0]])))
            win = by_group[g]
            inside = sc.candidate.rule == win.candidate.rule and (
                sc.candidate.node_set <= win.candidate.node_set
            )
            lost = LostTo(g, win.candidate.rule, _net(win), _net(sc), count, inside)
            story.losers.setdefault(g, []).append((sc, lost))
            story.lost_to[id(sc)] = lost
        elif sc.candidate in near_misses:
            story.near.append(sc)
        else:
            story.rejected.append(sc)
    for lst in story.losers.values():
        lst.sort(key=lambda p: (p[1].margin, natural_key(p[0].candidate.rule)))
    return story


# --------------------------------------------------------------------------- text


def span(nodes: Sequence[str]) -> str:
    if len(nodes) == 1:
        return nodes[0]
    return f"{nodes[0]} .. {nodes[-1]}, {len(nodes)} nodes"


def _us(seconds: float) -> str:
    if abs(seconds) < 5e-9:
        return "0 us"
    return f"{seconds * 1e6:.2f} us" if abs(seconds) < 1e-3 else f"{seconds * 1e3:.2f} ms"


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}" + ("es" if word.endswith(("ch", "sh", "s", "x")) else "s")


def _compared(margin: int) -> str:
    """A loser's net against its winner's: '4.0 KiB less' or '32 B more'."""
    return f"{human_bytes(abs(margin))} {'less' if margin >= 0 else 'more'} net"


def totals(chosen: Sequence[ScoredCandidate]) -> dict[str, int]:
    """Gross (traffic removed), overhead and net (gross - overhead) bytes of the groups."""
    gross = sum(sc.cost.bytes_saved for sc in chosen if sc.cost is not None)
    overhead = sum(sc.cost.overhead_bytes for sc in chosen if sc.cost is not None)
    return {
        "gross_bytes_saved": gross,
        "overhead_bytes": overhead,
        "net_bytes_saved": gross - overhead,
    }


def _rule_table(
    story: Story, rows: Sequence[tuple[ScoredCandidate, int | None]], idle_rows: bool = True
) -> list[str]:
    """Groups, nodes and bytes per rule; rules that fused nothing get a row each
    (``idle_rows``) or one line naming them with their candidate counts."""
    matched = Counter(sc.candidate.rule for sc, _ in rows)
    per: dict[str, list[ScoredCandidate]] = defaultdict(list)
    for _, sc in story.groups:
        per[sc.candidate.rule].append(sc)
    names = sorted(set(matched), key=lambda r: (-len(per.get(r, ())), natural_key(r)))
    idle = [n for n in names if n not in per]
    if not idle_rows:
        names = [n for n in names if n in per]
    table = [("rule", "groups", "nodes", "gross saved", "net saved", "candidates")]
    for name in names:
        chosen = per.get(name, [])
        t = totals(chosen)
        table.append(
            (
                name,
                str(len(chosen)),
                str(sum(len(sc.candidate.nodes) for sc in chosen)),
                human_bytes(t["gross_bytes_saved"]),
                human_bytes(t["net_bytes_saved"]),
                str(matched[name]),
            )
        )
    t = totals([sc for _, sc in story.groups])
    table.append(
        (
            "total",
            str(len(story.groups)),
            str(sum(len(sc.candidate.nodes) for _, sc in story.groups)),
            human_bytes(t["gross_bytes_saved"]),
            human_bytes(t["net_bytes_saved"]),
            str(len(rows)),
        )
    )
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]

    def line(r: tuple[str, ...]) -> str:
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        return "  " + "  ".join(cells).rstrip()

    out = [line(r) for r in table]
    if idle and not idle_rows:
        listed = ", ".join(f"{n} {matched[n]}" for n in idle)
        out.append(f"  matched but fused nothing (candidates): {listed}")
    return out


def _cost_lines(sc: ScoredCandidate, target_ub: int) -> list[str]:
    c = sc.cost
    if c is None:
        return []
    fits = "fits" if c.ub_bytes <= c.ub_limit else "exceeds"
    return [
        f"HBM access {c.accesses_before} -> {c.accesses_after}, "
        f"bytes {human_bytes(c.bytes_before)} -> {human_bytes(c.bytes_after)}, "
        f"gross saved {human_bytes(c.bytes_saved)}, overhead {human_bytes(c.overhead_bytes)}, "
        f"net {human_bytes(c.net_bytes)}; launches saved {c.launches_saved}, "
        f"est. {_us(c.time_saved_s)} saved",
        f"UB {kb(c.ub_bytes)} ({fits} {kb(target_ub)})",
    ]


def _loser_line(sc: ScoredCandidate, lost: LostTo) -> str:
    return (
        f"{sc.candidate.rule} [{span(sc.candidate.nodes)}] net {human_bytes(lost.loser_net)} "
        f"({_compared(lost.margin)}; {_plural(lost.shared_nodes, 'node')} shared)"
    )


def _group_block(
    gid: int, sc: ScoredCandidate, losers: list, target_ub: int, full: bool, max_losers: int
) -> list[str]:
    head = f"#{gid} {sc.candidate.rule} [{span(sc.candidate.nodes)}]"
    c = sc.cost
    inside = [p for p in losers if p[1].inside]
    rivals = [p for p in losers if not p[1].inside]
    if not full:
        net = human_bytes(c.net_bytes) if c else "?"
        gross = human_bytes(c.bytes_saved) if c else "?"
        ub = kb(c.ub_bytes) if c else "?"
        line = f"  {head}  net {net} (gross {gross}), UB {ub}"
        if rivals:
            best = rivals[0]
            line += (
                f"; beat {len(rivals)}, closest {best[0].candidate.rule} "
                f"({_compared(best[1].margin)})"
            )
        if inside:
            line += f"; {_plural(len(inside), 'shorter match')} inside"
        return [line]
    out = [f"  {head}"] + [f"      {x}" for x in _cost_lines(sc, target_ub)]
    shown = rivals if max_losers < 0 else rivals[:max_losers]
    if rivals:
        out.append(f"      beat {len(rivals)}:")
        out += [f"        {_loser_line(s, lt)}" for s, lt in shown]
        if len(shown) < len(rivals):
            out.append(f"        ... {len(rivals) - len(shown)} more (--all)")
    if inside:
        out.append(
            f"      + {_plural(len(inside), 'shorter match')} of {sc.candidate.rule} inside "
            "this group (collapsed)"
        )
    return out


def _branch_name(alternative: int) -> str:
    return "match.ops" if alternative == 0 else f"branches[{alternative - 1}]"


def _near_lines(near: Sequence[ScoredCandidate], limit: int) -> list[str]:
    """Near misses per rule, branch and reason code: a count and one example each."""
    buckets: dict[tuple, list[ScoredCandidate]] = defaultdict(list)
    for sc in near:
        # the near-miss code as rule tests record it (``# near-miss: intermediate-escapes``)
        buckets[(sc.candidate.rule, sc.candidate.alternative, sc.code)].append(sc)
    keys = sorted(buckets, key=lambda k: (natural_key(k[0]), k[1], k[2]))
    out = []
    for key in keys if limit < 0 else keys[:limit]:
        items = sorted(buckets[key], key=lambda s: nodes_key(s.candidate.nodes))
        rule, alt, code = key
        ex = items[0]
        out.append(
            f"  {rule} {_branch_name(alt)}: {len(items)} {code}, e.g. "
            f"[{span(ex.candidate.nodes)}] {ex.reason}"
        )
    if 0 <= limit < len(keys):
        out.append(f"  ... {len(keys) - limit} more rule/branch/reason lines (--all)")
    return out


def _rejected_lines(
    rejected: Sequence[ScoredCandidate], verdict_text: dict, per_verdict: int, target_ub: int
) -> list[str]:
    """Per verdict, the most common first; every candidate with its bytes when in full
    (``per_verdict`` < 0), else a few examples and a count."""
    by: dict[Verdict, list[ScoredCandidate]] = defaultdict(list)
    for sc in rejected:
        by[sc.verdict].append(sc)
    out = []
    for verdict in sorted(by, key=lambda v: (-len(by[v]), v.value)):
        items = sorted(
            by[verdict], key=lambda s: (natural_key(s.candidate.rule), nodes_key(s.candidate.nodes))
        )
        out.append(f"  {verdict_text[verdict]} ({len(items)})")
        shown = items if per_verdict < 0 else items[:per_verdict]
        for sc in shown:
            out.append(f"    {sc.candidate.rule} [{span(sc.candidate.nodes)}]: {sc.reason}")
            if per_verdict < 0:
                out += [f"        {x}" for x in _cost_lines(sc, target_ub)]
        if len(shown) < len(items):
            out.append(f"    ... {len(items) - len(shown)} more (--all)")
    return out


def render_text(
    header: list[str],
    rows: Sequence[tuple[ScoredCandidate, int | None]],
    target_ub: int,
    verdict_text: dict,
    *,
    show_all: bool = False,
    max_lines: int = DEFAULT_LINES,
    near_misses: frozenset = frozenset(),
    winners: Sequence[ScoredCandidate] = (),
) -> str:
    """The explain text; within ``max_lines`` unless ``show_all`` (``winners``: every
    chosen group, see ``build_story``)."""
    story = build_story(rows, near_misses, winners)
    counts = Counter(sc.verdict for sc, _ in rows)
    tail = ", ".join(
        f"{verdict_text[v]} {n}" for v, n in sorted(counts.items(), key=lambda kv: kv[0].value)
    )
    footer = ["", f"{_plural(len(rows), 'candidate')}: {tail or 'none'}"]

    def compose(level: int) -> list[str]:
        # level 0: everything; higher levels summarise more
        full_groups = level <= 1
        max_losers = -1 if level == 0 else 3
        per_verdict = -1 if level == 0 else (5 if level == 1 else 2)
        near_limit = -1 if level == 0 else (40 if level == 1 else 15)
        lines = list(header)
        if rows:
            lines += ["", "Fused groups per rule"] + _rule_table(story, rows, level == 0)
        if story.groups:
            lines += ["", f"Chosen groups ({len(story.groups)}), in graph order"]
            for gid, sc in story.groups:
                lines += _group_block(
                    gid, sc, story.losers.get(gid, []), target_ub, full_groups, max_losers
                )
        shown = {g for g, _ in story.groups}
        hidden = sorted(g for g in story.losers if g not in shown)
        if hidden:
            lines += ["", "Lost to groups not listed here (left out by --rule/--verdict)"]
            for g in hidden:
                for sc, lost in story.losers[g][: None if max_losers < 0 else max_losers]:
                    lines.append(f"  {_loser_line(sc, lost)} -> #{g} {lost.rule}")
        if story.unplaced_losers:
            lines += ["", "Lost without overlapping a group (would close a cycle)"]
            lines += _rejected_lines(story.unplaced_losers, verdict_text, per_verdict, target_ub)
        if story.rejected:
            lines += ["", "Not fused"]
            lines += _rejected_lines(story.rejected, verdict_text, per_verdict, target_ub)
        if story.near:
            lines += ["", "Near misses (structure matched, a check failed), per rule and branch"]
            lines += _near_lines(story.near, near_limit)
        return lines + footer

    if show_all:
        return "\n".join(compose(0)) + "\n"
    for level in (0, 1, 2):
        lines = compose(level)
        if len(lines) <= max_lines:
            return "\n".join(lines) + "\n"
    # still too long (thousands of groups): keep the head, say what was left out
    hidden = len(lines) - (max_lines - 2)
    lines = lines[: max_lines - 2] + [
        f"... {hidden} more lines: --all shows every candidate, -f json has everything",
        footer[-1],
    ]
    return "\n".join(lines) + "\n"
