"""Paths named on the command line, checked before anything is read or computed.

Every such path gets the same treatment, whatever the command: a NUL byte or an over-long
path is refused with a code (not a ValueError/OSError from deep inside), a missing file is
told apart from one that exists but is not a regular file (a directory, a FIFO that would
block, a device such as /dev/zero that never ends).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ruleengine.diagnostics.codes import make
from ruleengine.diagnostics.model import Location
from ruleengine.errors import AutofusionError, UsageError

NAME_MAX = 255  # bytes of one path component (Linux)
PATH_MAX = 4096  # bytes of a whole path with its terminating NUL (Linux)


def path_problem(path: str | os.PathLike[str]) -> str | None:
    """Why no file system can take ``path`` (NUL byte, name or path too long), or None."""
    text = os.fspath(path)
    if "\0" in text:
        return "contains a NUL byte"
    raw = os.fsencode(text)
    if len(os.fsencode(os.path.abspath(text))) >= PATH_MAX:
        return f"is longer than {PATH_MAX - 1} bytes"
    if any(len(part) > NAME_MAX for part in raw.split(b"/")):
        return f"has a name longer than {NAME_MAX} bytes"
    return None


def check_input_file(
    path: str | os.PathLike[str], what: str = "model", error: type[AutofusionError] = UsageError
) -> Path:
    """``path`` if it is an existing regular file; else ``error`` with AF221/AF540/AF541."""
    text = os.fspath(path)
    shown = repr(text) if "\0" in text else text
    problem = path_problem(text)
    if problem is not None:
        raise _error(error, "impossible-path", f"{what} path {shown[:200]} {problem}", None)
    try:
        st = os.stat(text)
    except FileNotFoundError:
        raise _error(
            error, "input-not-found", f"{what} file not found: {text}", text,
            "check the path (relative paths start at the current directory)",
        ) from None  # fmt: skip
    except NotADirectoryError:
        raise _error(
            error, "input-not-found", f"{what} file not found: {text} (a parent is a file)",
            text,
        ) from None  # fmt: skip
    except OSError as exc:
        raise _error(
            error, "input-not-found", f"cannot open the {what} file {text}: {exc.strerror}",
            text, "check the path and its permissions",
        ) from None  # fmt: skip
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a directory"
            if stat.S_ISDIR(st.st_mode)
            else "a named pipe (FIFO)"
            if stat.S_ISFIFO(st.st_mode)
            else "a device"
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
            else "a socket"
            if stat.S_ISSOCK(st.st_mode)
            else "not a regular file"
        )
        raise _error(
            error, "input-not-a-file", f"{what} {text} is {kind}, not a file", text,
            f"pass the {what} file itself",
        )  # fmt: skip
    if not os.access(text, os.R_OK):
        raise _error(
            error, "input-not-found", f"cannot read the {what} file {text}: permission denied",
            text, "check its permissions",
        )  # fmt: skip
    return Path(text)


def _error(
    error: type[AutofusionError], name: str, message: str, where: str | None,
    hint: str | None = None,
) -> AutofusionError:  # fmt: skip
    return error(message, (make(name, message, Location(where) if where else None, hint=hint),))
