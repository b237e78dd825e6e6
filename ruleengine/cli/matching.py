"""Matching commands: match, explain-rule."""

from __future__ import annotations

from pathlib import Path

import typer

from ruleengine.cli.app import app
from ruleengine.cli.common import (
    EXIT_OK,
    PANEL_ANALYSIS,
    PANEL_RULES,
    Format,
    Preset,
    examples,
    guarded,
    warn_inputs,
)


def parse_input_shapes(values: list[str]) -> dict[str, tuple[int, ...]]:
    from ruleengine.cli.common import parse_input_shapes as parse

    return parse(values)


def _dims(values: list[str]) -> dict[str, int]:
    from ruleengine.cli.common import parse_dims

    return parse_dims(values)


def natural_order(candidates) -> list:
    """Candidates by rule, then node names in natural order (Conv.2 before Conv.10)."""
    from ruleengine.cli.explain_view import natural_key, nodes_key

    return sorted(candidates, key=lambda c: (natural_key(c.rule), nodes_key(c.nodes)))


def candidates_json(result, *, near_misses: bool = False, fits: dict | None = None) -> dict:
    """The JSON document of ``autofusion match`` (schema_version 1). ``fits`` (with
    --kernels): per candidate, why no form of its kernel accepts it (None: one does)."""
    doc: dict = {
        "schema_version": 1,
        "candidates": [
            {
                "rule": c.rule,
                "nodes": list(c.nodes),
                "inputs": list(c.inputs),
                "outputs": list(c.outputs),
                "alternative": c.alternative,
                "bindings": [list(g) for g in c.bindings],
                **({} if fits is None else {"kernel_misfit": fits.get(c)}),
            }
            for c in natural_order(result.candidates)
        ],
    }
    if near_misses:
        doc["near_misses"] = [
            {
                "rule": n.candidate.rule,
                "nodes": list(n.candidate.nodes),
                "code": n.code,
                "reason": n.reason,
            }
            for n in result.near_misses
        ]
    return doc


def _near_key(n) -> tuple:
    from ruleengine.cli.explain_view import natural_key, nodes_key

    return (natural_key(n.candidate.rule), nodes_key(n.candidate.nodes), n.code)


def candidates_text(
    result, *, near_misses: bool = False, rules_loaded: int | None = None, fits: dict | None = None
) -> str:
    """A plain table: rule, node count, first and last node, outputs (node names in
    natural order); ``rules_loaded`` says how many rules were matched at all; ``fits``
    (--kernels) adds why a candidate's kernel accepts it not."""
    rows = [("RULE", "ALT", "NODES", "FIRST -> LAST", "OUTPUTS")]
    misfits: list[str] = []
    for c in natural_order(result.candidates):
        span = c.nodes[0] if len(c.nodes) == 1 else f"{c.nodes[0]} -> {c.nodes[-1]}"
        rows.append((c.rule, str(c.alternative), str(len(c.nodes)), span, ", ".join(c.outputs)))
        if fits is not None and fits.get(c):
            misfits.append(f"  {c.rule} [{span}]: {fits[c]}")
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
    matched = len({c.rule for c in result.candidates})
    loaded = "" if rules_loaded is None else f"{rules_loaded} rule(s) loaded, "
    lines.append("")
    lines.append(
        f"{len(result.candidates)} candidate(s); {loaded}{matched} matched; "
        f"{len(result.near_misses)} near miss(es); {result.facts} facts; "
        f"{result.seconds * 1000:.0f} ms"
    )
    if fits is not None:
        lines.append(
            f"{len(misfits)} candidate(s) no form of their kernel accepts "
            "(explain and fuse never choose them: contract_mismatch)"
        )
        lines += misfits
    if near_misses and result.near_misses:
        lines.append("")
        lines.append("near misses:")
        for n in sorted(result.near_misses, key=_near_key):
            lines.append(f"  {n.candidate.rule} [{n.code}] {', '.join(n.candidate.nodes)}")
            lines.append(f"      {n.reason}")
    return "\n".join(lines)


def _catalog(kernels: list[Path]):
    """The kernel catalog of ``--kernels`` (None without the flag: match then asks no
    kernel anything, as before)."""
    if not kernels:
        return None
    from ruleengine.kernels.catalog import catalog_for

    return catalog_for(kernels)


def kernel_misfits(graph, rule_set, result, catalog) -> dict:
    """Per candidate, why no form of its kernel accepts it (None: one does, or the
    kernel has no catalog entry), as cost asks before the solver chooses."""
    from ruleengine.kernels.fit import ContractFit

    fit = ContractFit(graph, catalog)
    rules = {r.name: r for r in rule_set.rules}
    return {c: fit.misfit(c, rules.get(c.rule), tuple(c.outputs)) for c in result.candidates}


def user_rule_names(rule_set, paths: list[Path]) -> list[str]:
    """The rules loaded from the files or folders named by ``--rules`` (not a preset's)."""
    roots = [Path(p).resolve() for p in paths]
    out = []
    for rule in rule_set.rules:
        loc = rule.location
        if loc is None:
            continue
        f = Path(loc.file).resolve()
        if any(f == r or r in f.parents for r in roots):
            out.append(rule.name)
    return out


# At most this many rules get a why-not line in match and explain (each costs about one
# match of the rule); the others are named with the command that explains them.
WHY_NOT_MAX = 8


def why_not_records(graph, rule_set, result, names: list[str]) -> tuple:
    """``match.whynot`` for the named rules that have no candidate in ``result`` (the
    first ``WHY_NOT_MAX`` of them), and the names of the others."""
    from ruleengine.match.whynot import why_not

    have = {c.rule for c in result.candidates}
    zero = sorted(n for n in names if n not in have)
    asked, rest = zero[:WHY_NOT_MAX], zero[WHY_NOT_MAX:]
    return (why_not(graph, rule_set, asked, result=result) if asked else ()), rest


def with_why_not(doc: dict, whys: tuple) -> dict:
    """A JSON document with its ``why_not`` records (when there are any)."""
    if whys:
        from ruleengine.match.whynot_text import whynot_json

        doc["why_not"] = [whynot_json(w) for w in whys]
    return doc


def echo_why_not_lines(whys: tuple, rest: list[str]) -> None:
    """One why-not line per rule, then the rules left out."""
    from ruleengine.match.whynot_text import whynot_line

    for w in whys:
        typer.echo(whynot_line(w))
    if rest:
        typer.echo(why_not_more(rest))


def why_not_more(rest: list[str]) -> str:
    """The line naming the rules without candidates that got no why-not line."""
    shown = ", ".join(rest[:5]) + (", ..." if len(rest) > 5 else "")
    return (
        f"{len(rest)} more rule(s) without candidates ({shown}): "
        "autofusion explain-rule NAME --rules ... --model MODEL says why"
    )


@app.command(
    "match",
    rich_help_panel=PANEL_ANALYSIS,
    epilog=examples(
        "autofusion match model.onnx",
        "autofusion match model.onnx --rules my_rules/ --near-misses",
        "autofusion match model.onnx --preset transformer --dim seq=128 -f json",
        "autofusion match model.onnx --preset cnn --rules my_rules/ --kernels my_kernels/",
    ),
)
def match_command(
    model: Path = typer.Argument(..., help="ONNX model to match rules against."),
    rules: list[Path] = typer.Option(
        [], "--rules", "-r", help="Rule file or directory (several allowed)."
    ),
    preset: Preset | None = typer.Option(
        None, "--preset", help="Bundled rule preset (default: all, when no --rules)."
    ),
    dim: list[str] = typer.Option([], "--dim", help="Bind a symbolic dimension: name=value."),
    input_shape: list[str] = typer.Option(
        [], "--input-shape", help="Set a graph input's shape: NAME:d0,d1,... (several allowed)."
    ),
    fmt: Format = typer.Option(Format.text, "--format", "-f", help="Output format."),
    near: bool = typer.Option(
        False, "--near-misses", help="Also list bindings a check rejected, with the reason."
    ),
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        "-j",
        min=1,
        help="Processes for matching and shape inference (default: the cores).",
    ),
    kernels: list[Path] = typer.Option(
        [],
        "--kernels",
        help="Kernel catalog folder added to the bundled one (several allowed): list the "
        "candidates no form of their kernel accepts (contract_mismatch in explain/fuse).",
    ),
) -> None:
    """List every candidate subgraph of every rule (overlapping ones included)."""

    def run() -> int:
        from ruleengine.graph import load_graph
        from ruleengine.match import find_candidates
        from ruleengine.paths import check_input_file
        from ruleengine.procs import FORK_FROM_NODES, cores
        from ruleengine.rules.pending import PendingRules, rules_jobs

        check_input_file(model, "model")
        catalog = _catalog(kernels)  # a bad --kernels folder is refused before matching
        chosen = preset.value if preset else (None if rules else "all")
        n_jobs = cores() if jobs is None else jobs
        # with a core to spare, the rules load in a forked child while the model is read
        # (``rules_jobs``; their errors first)
        pending = PendingRules([str(p) for p in rules], chosen, rules_jobs(model, n_jobs))
        rule_set = None if pending.forked else pending.result()
        try:
            graph = load_graph(model, _dims(dim), parse_input_shapes(input_shape), jobs=n_jobs)
        except Exception:
            if rule_set is None:
                pending.result()
            raise
        if rule_set is None:
            rule_set = pending.result()
        warn_inputs(graph, rule_set)
        # the Datalog queries of a large graph shared among processes (the same result)
        result = find_candidates(
            graph, rule_set, jobs=n_jobs if len(graph.nodes) >= FORK_FROM_NODES else 1
        )
        # why a rule of --rules (the user's own) has no candidate (match.whynot)
        whys, rest = why_not_records(graph, rule_set, result, user_rule_names(rule_set, rules))
        fits = None if catalog is None else kernel_misfits(graph, rule_set, result, catalog)
        if fmt is Format.json:
            from ruleengine.jsontext import json_bytes

            doc = with_why_not(candidates_json(result, near_misses=near, fits=fits), whys)
            # large documents one record per line through json's C encoder (indent=2
            # makes json use its pure-Python encoder: 1.3 s at 1024 layers)
            typer.echo(json_bytes(doc).decode().rstrip("\n"))
        else:
            typer.echo(
                candidates_text(
                    result, near_misses=near, rules_loaded=len(rule_set.rules), fits=fits
                )
            )
            echo_why_not_lines(whys, rest)
        return EXIT_OK

    raise typer.Exit(guarded(run))


@app.command(
    "explain-rule",
    rich_help_panel=PANEL_RULES,
    epilog=examples(
        "autofusion explain-rule my_rule.yaml",
        "autofusion explain-rule my_rule.yaml --datalog",
        "autofusion explain-rule my_rule.yaml --model model.onnx --dim batch=1",
        "autofusion explain-rule hard_swish --rules my_rules/ --model det.onnx "
        "--input-shape x:1,3,640,640",
        "autofusion explain-rule conv_bn_relu --preset cnn --model model.onnx -f json",
    ),
)
def explain_rule_command(
    rule_args: list[str] = typer.Argument(
        ..., help="Rule file(s) or folders; or rule names, found in --rules / --preset."
    ),
    datalog: bool = typer.Option(
        False, "--datalog", help="Print the compiled Datalog program (facts and clauses)."
    ),
    model: Path | None = typer.Option(
        None,
        "--model",
        "-m",
        help="Also match against this model: candidates, near misses, and why a rule "
        "does not match (the failing pattern op, where, and how to fix it).",
    ),
    rules: list[Path] = typer.Option(
        [], "--rules", "-r", help="Rule file or directory holding the named rules."
    ),
    preset: Preset | None = typer.Option(
        None, "--preset", help="Bundled rule preset holding the named rules."
    ),
    dim: list[str] = typer.Option([], "--dim", help="Bind a symbolic dimension: name=value."),
    input_shape: list[str] = typer.Option(
        [], "--input-shape", help="Set a graph input's shape: NAME:d0,d1,... (several allowed)."
    ),
    fmt: Format = typer.Option(Format.text, "--format", "-f", help="Output format."),
) -> None:
    """Show how rules are matched, and why a rule does not match a model (--model)."""

    def run() -> int:
        from ruleengine.match import compiled_program
        from ruleengine.match.compile import fact_schema, program_text

        rule_set, names = _rules_named(rule_args, rules, preset)
        prog = compiled_program(rule_set)
        # the rule's own lint first (a disconnected op, AF306, explains a why-not below)
        text: list[str] = _lint_lines(rule_set, names) if fmt is Format.text else []
        if datalog:
            text.append(fact_schema(prog) + program_text(prog, comments=True).rstrip("\n"))
        elif fmt is Format.text:
            text.append(_explain_text(rule_set, prog, names))
        whys: tuple = ()
        if model is not None:
            from ruleengine.graph import load_graph
            from ruleengine.match import find_candidates
            from ruleengine.match.whynot import why_not

            graph = load_graph(model, _dims(dim), parse_input_shapes(input_shape))
            warn_inputs(graph)
            result = find_candidates(graph, rule_set)
            whys = why_not(graph, rule_set, names, result=result)
            mine = _only(result, names)
            # the table only when it has rows: the answer below says the rest
            if fmt is Format.text and (mine.candidates or mine.near_misses):
                text += ["", candidates_text(mine, near_misses=True)]
        _echo_whys(text, whys, fmt, model)
        return EXIT_OK

    raise typer.Exit(guarded(run))


def _rules_named(rule_args: list[str], rules: list[Path], preset) -> tuple:
    """The rule set to load and the rules asked about: the positional arguments are files
    (every rule in them) or, with --rules/--preset, names of rules found there."""
    from ruleengine.errors import UsageError
    from ruleengine.rules import load_rule_set

    files = [a for a in rule_args if Path(a).exists()]
    wanted = [a for a in rule_args if not Path(a).exists()]
    if wanted and not (rules or preset):
        raise UsageError(
            f"no rule file {wanted[0]!r}: name an existing file, or give --rules/--preset "
            "to find rules by name"
        )
    sources = [str(p) for p in rules] + files
    rule_set = (
        load_rule_set(sources, preset=preset.value)
        if preset is not None
        else load_rule_set(sources)
    )
    known = {r.name for r in rule_set.rules}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], sorted(known), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UsageError(f"no rule named {unknown[0]!r} in the rules given{hint}")
    from_files = user_rule_names(rule_set, [Path(f) for f in files]) if files else []
    names = list(dict.fromkeys(wanted + from_files)) or [r.name for r in rule_set.rules]
    return rule_set, names


def _lint_lines(rule_set, names: list[str]) -> list[str]:
    """The warnings and errors of ``check``'s per-rule lint for the named rules."""
    from ruleengine.diagnostics.model import Severity
    from ruleengine.rules.checks import lint_rule

    keep = set(names)
    lines = []
    for rule in rule_set.rules:
        if rule.name not in keep:
            continue
        for d in lint_rule(rule):
            if d.severity in (Severity.ERROR, Severity.WARNING):
                where = f"{d.location}: " if d.location else ""
                lines.append(f"{where}{d.severity} {d.code} {d.name}: {d.message}")
                lines += [f"  hint: {d.hint}"] if d.hint else []
    return lines + [""] if lines else []


def _only(result, names: list[str]):
    """The match result of the named rules only."""
    from dataclasses import replace

    keep = set(names)
    return replace(
        result,
        candidates=tuple(c for c in result.candidates if c.rule in keep),
        near_misses=tuple(n for n in result.near_misses if n.candidate.rule in keep),
    )


def _echo_whys(text: list[str], whys: tuple, fmt: Format, model: Path | None) -> None:
    import json

    from ruleengine.match.whynot_text import whynot_json, whynot_text

    if fmt is Format.json:
        doc = {
            "schema_version": 1,
            "model": str(model) if model else None,
            "rules": [whynot_json(w) for w in whys],
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    for w in whys:
        text += ["", *whynot_text(w)]
    typer.echo("\n".join(text))


def _explain_text(rule_set, prog, names: list[str] | None = None) -> str:
    from ruleengine.match.compile import resolve_type
    from ruleengine.match.matcher import default_aliases

    aliases = default_aliases()
    lines: list[str] = []
    for rule in rule_set.rules:
        if names is not None and rule.name not in names:
            continue
        _head, _arity, combos = prog.rules[rule.name]
        lines.append(f"rule {rule.name}: {len(combos)} Datalog clause(s)")
        for a, alt in enumerate(rule.alternatives):
            label = "match.ops" if a == 0 else f"branch {a - 1}"
            lines.append(f"  alternative {a} ({label}):")
            for op in alt.ops:
                spec = resolve_type(op.type, aliases)
                parts = []
                if spec.types:
                    shown = sorted(spec.types)
                    parts.append(
                        "ONNX " + (", ".join(shown) if len(shown) <= 8 else f"{len(shown)} types")
                    )
                if spec.forms:
                    parts.append("composite forms " + ", ".join(f.name for f in spec.forms))
                rep = (
                    f" x{op.repeat_min}..{op.repeat_max}"
                    if (op.repeat_min, op.repeat_max) != (1, 1)
                    else ""
                )
                lines.append(
                    f"    op {op.index}: {op.type}{rep} -> {'; '.join(parts) or 'nothing'}"
                )
    return "\n".join(lines)
