"""Write an output set as a set: staged, then swapped in; locked; leftovers cleaned.

Every file of a fuse run is first written (and fsynced) into a staging folder beside
OUTDIR, ``.<name>.autofusion-stage-XXXX``. Only then is the set swapped in:

- OUTDIR does not exist: the staging folder is renamed to OUTDIR (one atomic rename);
- OUTDIR exists: whatever else it holds is hard-linked into the staging folder (no byte
  is copied, nothing is modified) and the two folders are exchanged in one atomic
  ``renameat2(RENAME_EXCHANGE)``; the old folder, now under the staging name, is removed;
- when the exchange cannot be used (the current directory is inside OUTDIR, a file system
  without hard links or renameat2, a very large OUTDIR) the staged files are renamed in
  one by one, each atomically (the only case where a kill can mix two runs' files).

A lock file beside OUTDIR (``.<name>.autofusion.lock``, flock) refuses a second writer
of the same OUTDIR while one runs; the holder cleans staging folders and hidden
temporaries that killed runs (even SIGKILL) left behind, then removes the lock file.
On any error, Ctrl-C or SIGTERM the staging folder and every directory this run
created are removed: no partial set, no temporary.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from ruleengine.diagnostics.codes import make
from ruleengine.diagnostics.model import Location
from ruleengine.errors import OutputError

STAGE_TAG = ".autofusion-stage-"
LOCK_TAG = ".autofusion.lock"
LINK_LIMIT = 10_000  # entries of an existing OUTDIR carried over by hard links
PATH_MAX = 4096  # Linux: bytes of a path, with its terminating NUL
NAME_MAX = 255  # bytes of one path component
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _default_mode(base: int) -> int:
    mask = os.umask(0)
    os.umask(mask)
    return base & ~mask


FILE_MODE = _default_mode(0o666)
DIR_MODE = _default_mode(0o777)


def output_error(
    message: str, *, name: str = "output-write-failed", where: Path | str | None = None,
    hint: str | None = None,
) -> OutputError:  # fmt: skip
    """An OutputError carrying its registered code (the CLI prints code, place and hint)."""
    loc = Location(str(where)) if where is not None else None
    return OutputError(message, (make(name, message, loc, hint=hint),))


def write_set(
    outdir: str | Path, files: Mapping[str, bytes], *, protect: tuple[Path, ...] = ()
) -> tuple[Path, ...]:
    """Write ``files`` (normalised relative path -> bytes) as one set under ``outdir``."""
    check_output_dir(outdir)
    root = Path(os.path.realpath(outdir))  # a symlinked OUTDIR: write where it points
    _check_set(root, files, protect)
    created: list[Path] = []
    try:
        _makedirs(root.parent, created)
        # Stage and lock beside OUTDIR; inside it when its parent is not ours to write.
        base = root.parent if os.access(root.parent, os.W_OK) else root
        if base == root:
            _makedirs(root, created)
        with _locked(root, base):
            _clean_leftovers(root, base, files)
            stage = Path(tempfile.mkdtemp(prefix=_stage_prefix(root, base), dir=base))
            try:
                for rel, data in files.items():
                    _write_file(stage / rel, data)
                _swap_in(stage, root, files, exchange=base != root)
            finally:
                shutil.rmtree(stage, ignore_errors=True)
            _fsync_dir(root)
            _fsync_dir(root.parent)
    except BaseException as exc:  # also Ctrl-C / SIGTERM: nothing partial stays behind
        for d in reversed(created):
            with contextlib.suppress(OSError):
                d.rmdir()
        if isinstance(exc, OSError):
            raise output_error(
                f"cannot write the outputs to {root}: {exc.strerror or exc}",
                where=exc.filename or root,
                hint="check the free space and permissions of the output directory, or "
                "choose another -o",
            ) from None
        raise
    return tuple(Path(outdir) / rel for rel in files)


# ---------------------------------------------------------------------------- checks


def check_output_dir(outdir: str | Path) -> None:
    """Refuse an OUTDIR no file system can take, or one that is a file (AF221, AF543)."""
    from ruleengine.paths import path_problem

    problem = path_problem(outdir)
    if problem is not None:
        text = os.fspath(outdir)
        raise output_error(
            f"output directory {text[:200]!r}{'...' if len(text) > 200 else ''} {problem}",
            name="impossible-path",
            hint="choose a shorter -o of ordinary characters",
        )
    if os.path.lexists(outdir) and not os.path.isdir(outdir):
        raise output_error(
            f"output path {outdir} exists and is not a directory", where=outdir,
            hint="choose another -o",
        )  # fmt: skip


def _check_set(root: Path, files: Mapping[str, bytes], protect: tuple[Path, ...]) -> None:
    """Everything that can be known before writing: nothing is touched when this fails."""
    names = set(files)
    for rel in files:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in names:
                raise output_error(
                    f"output {rel} needs {'/'.join(parts[:i])} to be a directory, but that is "
                    "also an output file",
                    name="reserved-output-path",
                    hint="change the rule's output.file_path or dot_graph_path",
                )
    for p in protect:
        with contextlib.suppress(OSError):
            real = os.path.realpath(p)
            for rel in files:
                dest = root / rel
                if os.path.realpath(dest) == real or (
                    dest.exists() and os.path.samefile(dest, real)
                ):
                    raise output_error(
                        f"refusing to overwrite the input model {p} with output {rel}",
                        name="overwrite-input",
                        where=p,
                        hint="choose another -o (the input model is never modified)",
                    )
    for rel in files:
        dest = root / rel
        full = len(os.fsencode(dest))
        longest = max(len(os.fsencode(part)) for part in rel.split("/"))
        if full >= PATH_MAX or longest > NAME_MAX:
            raise output_error(
                f"output path {dest} is too long for the file system ({full} bytes, "
                f"{longest} in one name; at most {PATH_MAX - 1} and {NAME_MAX})",
                name="impossible-path",
                hint="choose a shorter -o or shorter output paths in the rules",
            )
        cur = root
        for part in rel.split("/")[:-1]:
            cur = cur / part
            if cur.is_symlink():
                raise output_error(
                    f"output {rel} would be written through the symlink {cur} (to "
                    f"{os.path.realpath(cur)}), possibly outside the output directory",
                    name="unsafe-path",
                    where=cur,
                    hint="remove the symlink or choose another -o",
                )
            if cur.exists() and not cur.is_dir():
                raise output_error(
                    f"cannot write {rel}: {cur} exists and is not a directory",
                    where=cur,
                    hint="remove it or choose another -o",
                )
        if dest.is_dir() and not dest.is_symlink():
            raise output_error(
                f"cannot write {dest}: a directory of that name is in the way",
                where=dest,
                hint="remove it or choose another -o",
            )
    if root.exists() and not root.is_dir():
        raise output_error(
            f"output path {root} exists and is not a directory", where=root,
            hint="choose another -o",
        )  # fmt: skip


# ---------------------------------------------------------------------------- locking


@contextlib.contextmanager
def _locked(root: Path, base: Path) -> Iterator[None]:
    """Hold ``.<name>.autofusion.lock`` beside OUTDIR; refuse if another run holds it."""
    path = base / (f".{root.name}{LOCK_TAG}" if base != root else LOCK_TAG)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise output_error(
                f"another autofusion run (pid {holder}) is writing to {root}",
                name="output-locked",
                where=root,
                hint="wait for it to finish, or write to another -o",
            ) from None
        except BaseException:
            os.close(fd)
            raise
        try:  # the file we locked must still be the one at the path (unlinked by a holder)
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # still holding the lock: no one else can have it
        os.close(fd)


def _stage_prefix(root: Path, base: Path) -> str:
    return f".{root.name}{STAGE_TAG}" if base != root else STAGE_TAG


def _clean_leftovers(root: Path, base: Path, files: Mapping[str, bytes]) -> None:
    """Remove what killed runs left: staging folders, and older per-file temporaries."""
    prefix = _stage_prefix(root, base)
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            if entry.name.startswith(prefix) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
    dirs: dict[Path, set[str]] = {}
    for rel in files:
        dest = root / rel
        dirs.setdefault(dest.parent, set()).add(dest.name)
    for folder, names in dirs.items():
        pattern = re.compile(
            r"^\.(" + "|".join(map(re.escape, names)) + r")\.[A-Za-z0-9_]{8}\.tmp$"
        )
        with contextlib.suppress(OSError):
            for entry in os.scandir(folder):
                if pattern.match(entry.name) and entry.is_file(follow_symlinks=False):
                    os.unlink(entry.path)


# ---------------------------------------------------------------------------- writing


def _write_file(dest: Path, data: bytes | tuple[Path, str]) -> None:
    if isinstance(data, tuple):  # a weights file: a weights.WeightSource, never read in
        from ruleengine.rewrite.weights import materialize

        materialize(dest, *data)
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _swap_in(stage: Path, root: Path, files: Mapping[str, bytes], *, exchange: bool) -> None:
    if exchange and not os.path.lexists(root):
        os.chmod(stage, DIR_MODE)
        os.rename(stage, root)
        return
    if exchange and _can_exchange(root) and _carry_over(root, stage, set(files)):
        os.chmod(stage, stat.S_IMODE(os.stat(root).st_mode))
        if _exchange(stage, root):
            return  # the old folder is now at ``stage``; the caller removes it
    # Fallback: each file renamed in on its own (atomic per file).
    for rel in files:
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(stage / rel, dest)


def _can_exchange(root: Path) -> bool:
    try:
        cwd = Path(os.path.realpath(os.getcwd()))
    except OSError:
        return False
    return not (cwd == root or root in cwd.parents) and not os.path.ismount(root)


def _carry_over(src: Path, dst: Path, skip: set[str]) -> bool:
    """Hard-link every entry of ``src`` not replaced by the new set into ``dst``.

    False (and ``dst`` left for the fallback to ignore) when linking is impossible or
    OUTDIR is too large to carry over cheaply.
    """
    count = 0

    def walk(s: Path, d: Path, rel: str) -> bool:
        nonlocal count
        for entry in os.scandir(s):
            sub = f"{rel}{entry.name}"
            count += 1
            if count > LINK_LIMIT:
                return False
            target = d / entry.name
            if entry.is_dir(follow_symlinks=False):
                target.mkdir(exist_ok=True)
                os.chmod(target, stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode))
                if not walk(Path(entry.path), target, f"{sub}/"):
                    return False
            elif sub in skip:
                continue
            elif entry.is_symlink():
                os.symlink(os.readlink(entry.path), target)
            else:
                os.link(entry.path, target, follow_symlinks=False)
        return True

    try:
        return walk(src, dst, "")
    except OSError:
        return False


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2); False when not supported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EPERM, errno.EXDEV, errno.EBUSY):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _makedirs(path: Path, created: list[Path]) -> None:
    missing: list[Path] = []
    p = path
    while not os.path.lexists(p):
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    if not p.is_dir():
        raise output_error(
            f"cannot create {path}: {p} exists and is not a directory", where=p,
            hint="choose another -o",
        )  # fmt: skip
    for d in reversed(missing):
        d.mkdir()
        created.append(d)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
