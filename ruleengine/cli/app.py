"""The typer application object. Command modules attach their commands to ``app``."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="autofusion",
    help=(
        "Decide operator fusion for ONNX graphs from declarative YAML rules.\n\n"
        "Lint rules with `verify` and `check`, see matches with `match`, the benefit "
        "analysis with `explain`, and write a fused model, plan and report with `fuse`."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
