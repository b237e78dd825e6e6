"""What every command shares: exit codes and turning errors into messages, not tracebacks."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, TypeVar

import typer

from ruleengine.errors import AutofusionError, UsageError
from ruleengine.procs import kill_children, supervised, tell_supervisor
from ruleengine.runtime import (
    Terminated,
    end_process,
    hold_stop_signals,
    one_shot,
    stop_signal,
)

if TYPE_CHECKING:
    from ruleengine.graph.model import Graph
    from ruleengine.rules.model import RuleSet

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM

MAX_DIM = (1 << 63) - 1  # ONNX dims are int64

T = TypeVar("T")

# Help panels, in the order a user meets them.
PANEL_RULES = "Write and lint rules"
PANEL_ANALYSIS = "Analyse a model"
PANEL_FUSE = "Fuse a model (compile time)"


class Preset(StrEnum):
    cnn = "cnn"
    transformer = "transformer"
    all = "all"


class Solver(StrEnum):
    exact = "exact"
    greedy = "greedy"


class PlanDetail(StrEnum):
    compact = "compact"
    full = "full"


class Format(StrEnum):
    text = "text"
    json = "json"


def examples(*lines: str) -> str:
    """A help epilog: ``Examples:`` and one ``$ command`` per line.

    Lines stay under the 78 columns of an 80-column help screen (rich would wrap them) and
    hold no ``[...]`` (rich markup); typer dedents an epilog, hence ``$`` not indentation.
    """
    return "Examples:\n\n" + "\n".join(f"$ {line}" for line in lines)


def parse_dims(values: list[str]) -> dict[str, int]:
    """--dim name=value (several) -> {name: value}.

    The value is ASCII digits (no ``2_0``, no full-width digits) and fits an ONNX dim
    (int64); the same name twice must say the same size.
    """
    dims: dict[str, int] = {}
    for item in values:
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        size = int(value) if value.isascii() and value.isdigit() else -1
        if not sep or not name or size < 1 or size > MAX_DIM:
            raise _bad_dim(
                f"bad --dim {item!r}: expected name=positive integer (at most 2^63-1), e.g. batch=1"
            )
        if dims.get(name, size) != size:
            raise _bad_dim(f"--dim {name} given twice with different sizes ({dims[name]}, {size})")
        dims[name] = size
    return dims


def _bad_dim(message: str) -> UsageError:
    from ruleengine.diagnostics.codes import make

    return UsageError(message, (make("bad-dim-flag", message, hint="write --dim name=value"),))


def parse_input_shapes(values: list[str]) -> dict[str, tuple[int, ...]]:
    """--input-shape NAME:d0,d1,... (several; ATC's ``--input_shape`` convention) ->
    {name: sizes}. Only the syntax is checked here; the loader checks the sizes against
    the model (unknown input, rank, non-positive, overflow: AF510-AF514)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in values:
        name, sep, text = item.strip().rpartition(":")  # ONNX names may hold ':'
        parts = [p.strip() for p in text.split(",")]
        ok = bool(sep and name and text.strip()) and all(
            p.isascii() and p.lstrip("-").isdigit() for p in parts
        )
        if not ok:
            raise UsageError(
                f"bad --input-shape {item!r}: expected NAME:d0,d1,... with integer sizes, "
                "e.g. input_ids:1,128"
            )
        dims = tuple(int(p) for p in parts)
        if shapes.get(name, dims) != dims:
            raise UsageError(f"--input-shape {name} given twice with different shapes")
        shapes[name] = dims
    return shapes


def fail(message: str, hint: str | None = None) -> typer.Exit:
    """Print an error to stderr and return the Exit(2) to raise."""
    typer.echo(f"error: {message}", err=True)
    if hint:
        typer.echo(f"  hint: {hint}", err=True)
    return typer.Exit(EXIT_ERROR)


def report_error(exc: AutofusionError) -> None:
    """The error that stopped a command, with its findings, on stderr. An error that is
    one finding is said once, with its code and place (not once bare, then again)."""
    if len(exc.diagnostics) == 1 and exc.message in exc.diagnostics[0].message:
        diag = exc.diagnostics[0]
        where = f"{diag.location}: " if diag.location else ""
        typer.echo(f"error: {where}{diag.code} {diag.message}", err=True)
        if diag.hint:
            typer.echo(f"  hint: {diag.hint}", err=True)
        return
    typer.echo(f"error: {exc.message}", err=True)
    for diag in exc.diagnostics:
        where = f"{diag.location}: " if diag.location else ""
        typer.echo(f"  {where}{diag.code} {diag.message}", err=True)
        if diag.hint:
            typer.echo(f"    hint: {diag.hint}", err=True)


def guarded(action: Callable[[], T]) -> T:
    """Run a command body; known errors become a message and exit 2, never a traceback.

    Set AUTOFUSION_DEBUG=1 to see the traceback of an unexpected error.
    """
    try:
        return action()
    except (typer.Exit, typer.Abort, SystemExit):
        raise
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated): clean-up has run
        raise typer.Exit(stopped(isinstance(exc, Terminated))) from None
    except AutofusionError as exc:
        if _stopping():  # an error the stop caused (a child it ended)
            raise typer.Exit(stopped(False)) from None
        report_error(exc)
        raise typer.Exit(exc.exit_code) from None
    except Exception as exc:  # the last line of defence against tracebacks
        if _stopping():
            raise typer.Exit(stopped(False)) from None
        if os.environ.get("AUTOFUSION_DEBUG"):
            raise
        typer.echo(
            f"internal error: {type(exc).__name__}: {exc}\n"
            "  hint: this is a bug in autofusion; rerun with AUTOFUSION_DEBUG=1 for the "
            "traceback and report it",
            err=True,
        )
        raise typer.Exit(EXIT_ERROR) from None


def _stopping() -> bool:
    """Did Ctrl-C or SIGTERM ask this one-shot process to stop? (A library process, such
    as a test session, may have seen one long before: there its own exception decides.)"""
    return one_shot() and stop_signal() is not None


def stopped(terminated: bool) -> int:
    """Say why the command stops (``terminated``: SIGTERM, else Ctrl-C) and its exit code.

    Its clean-up has run (the stop exception unwound the stack). A one-shot process (the
    ``autofusion`` command) ends here: its forked children are killed and reaped, and it
    exits without freeing its objects one by one (``runtime.end_process``: seconds for a
    large graph, while a second signal would go unanswered). Elsewhere the code is
    returned, for the caller to raise."""
    if one_shot():
        hold_stop_signals()  # a second signal must not raise into this
    if _stopping():  # the first signal decides, whatever unwound the stack
        terminated = stop_signal() == signal.SIGTERM
    if not (one_shot() and supervised()):  # (the supervisor says it: told, or killed)
        typer.echo("terminated" if terminated else "interrupted", err=True)
    code = EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    if one_shot():
        kill_children()
        end_process(code, told=tell_supervisor)
    return code


def progress_printer() -> Callable[[str], None] | None:
    """Progress lines on stderr while a long stage runs, where stderr is a terminal
    (piped or captured output stays the result alone)."""
    if not sys.stderr.isatty():
        return None

    def show(message: str) -> None:
        typer.echo(f"autofusion: {message}...", err=True)

    return show


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def warn_inputs(graph: Graph | None = None, rule_set: RuleSet | None = None) -> None:
    """Tell, on stderr, what the loaded rules and model warn about: rule lint warnings,
    graph loading warnings, opaque nodes never fused, and unbound symbolic dims (whose
    candidates come out as dynamic_shape)."""
    seen: set[tuple] = set()
    for diag in getattr(rule_set, "diagnostics", ()) or ():
        key = (diag.code, str(diag.location), diag.message)
        if key in seen:
            continue
        seen.add(key)
        where = f"{diag.location}: " if diag.location else ""
        typer.echo(f"{diag.severity}: {where}{diag.code} {diag.message}", err=True)
        if diag.hint:
            typer.echo(f"  hint: {diag.hint}", err=True)
    if graph is None:
        return
    for diag in graph.warnings:
        typer.echo(f"warning: {diag.code} {diag.message}", err=True)
    if graph.opaque_nodes:
        shown = ", ".join(graph.opaque_nodes[:5]) + (", ..." if len(graph.opaque_nodes) > 5 else "")
        typer.echo(
            f"note: {len(graph.opaque_nodes)} opaque node(s) (control flow, unknown domain "
            f"or a shared name) are never fused: {shown}",
            err=True,
        )
    if graph.unbound_dims:
        names = {axis: name for name, axis in graph.dim_sources.items()}
        shown = ", ".join(
            f"{axis} ({names[axis]})" if axis in names else axis for axis in graph.unbound_dims
        )
        typer.echo(
            f"note: unbound input dims: {shown} (bind them with --input-shape NAME:d0,d1,... "
            "or --dim name=value; candidates of unknown size are not fused)",
            err=True,
        )
