"""Errors that stop a run. They carry diagnostics, so the CLI can render them like findings."""

from __future__ import annotations

from ruleengine.diagnostics.model import Diagnostic


class AutofusionError(Exception):
    """A run could not go on (bad model, bad flag, unreadable file). CLI exit code 2."""

    exit_code = 2

    def __init__(self, message: str, diagnostics: tuple[Diagnostic, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.diagnostics = diagnostics


class UsageError(AutofusionError):
    """A flag or argument that makes no sense (unknown target, bad --dim, ...)."""


class RuleLoadError(AutofusionError):
    """Rules could not be loaded well enough to go on (the diagnostics say why)."""


class GraphLoadError(AutofusionError):
    """The ONNX model could not be read or is malformed (cyclic, two producers, ...)."""


class OutputError(AutofusionError):
    """An output could not be written (path escapes the output directory, I/O error)."""
