"""Issue 15 item 10 (and 1): an output set is staged and swapped in as a set, under a lock;
what killed runs left behind is cleaned; a failure leaves the old set exactly as it was."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

import pytest

import ruleengine.rewrite.writer as writer
from ruleengine.errors import OutputError
from ruleengine.rewrite.emit import write_atomically
from tests.hostile.helpers import copy_model, leftovers, run

NEW = {"m.fused.onnx": b"model-2", "plan.json": b"plan-2", "report.txt": b"report-2"}
OLD = {"m.fused.onnx": b"model-1", "plan.json": b"plan-1", "report.txt": b"report-1"}


def contents(folder):
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_a_fresh_outdir_appears_whole(tmp_path):
    out = tmp_path / "out"
    write_atomically(out, {**NEW, "k/x.kernel.json": b"k"})
    assert contents(out) == {**NEW, "k/x.kernel.json": b"k"}
    assert leftovers(tmp_path) == []


def test_an_existing_outdir_keeps_other_files_and_their_inodes(tmp_path):
    out = tmp_path / "out"
    write_atomically(out, OLD)
    (out / "notes").mkdir()
    (out / "notes" / "mine.txt").write_bytes(b"mine")
    inode = (out / "notes" / "mine.txt").stat().st_ino
    write_atomically(out, NEW)
    assert contents(out) == {**NEW, "notes/mine.txt": b"mine"}
    assert (out / "notes" / "mine.txt").stat().st_ino == inode  # linked, not copied
    assert leftovers(tmp_path) == []


def test_a_failure_while_writing_leaves_the_old_set_untouched(tmp_path, monkeypatch):
    """A kill between two renames left a new model and plan beside an old report."""
    out = tmp_path / "out"
    write_atomically(out, OLD)
    real = writer._write_file
    written = []

    def failing(dest, data):
        if len(written) == 2:
            raise KeyboardInterrupt  # Ctrl-C (or SIGTERM) in the middle of the set
        written.append(dest)
        real(dest, data)

    monkeypatch.setattr(writer, "_write_file", failing)
    with pytest.raises(KeyboardInterrupt):
        write_atomically(out, NEW)
    assert contents(out) == OLD
    assert leftovers(tmp_path) == []


def test_leftovers_of_a_killed_run_are_removed_by_the_next(tmp_path):
    """SIGKILL during writing left hidden temporaries that no later run removed."""
    out = tmp_path / "out"
    write_atomically(out, OLD)
    stage = tmp_path / ".out.autofusion-stage-abc123"
    (stage / "k").mkdir(parents=True)
    (stage / "plan.json").write_bytes(b"half")
    old_style = out / ".plan.json.a1b2c3d4.tmp"  # the per-file temporaries of older versions
    old_style.write_bytes(b"half")
    (tmp_path / ".out.autofusion.lock").write_bytes(b"99999")  # its holder is dead
    write_atomically(out, NEW)
    assert contents(out) == NEW
    assert leftovers(tmp_path) == []


def test_a_second_writer_is_refused_while_one_holds_the_lock(tmp_path):
    out = tmp_path / "out"
    write_atomically(out, OLD)
    lock = tmp_path / ".out.autofusion.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; f = open(sys.argv[1], 'w'); f.write(str(os.getpid())); "
            "f.flush(); fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); "
            "sys.stdin.read()",
            str(lock),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(OutputError) as err:
            write_atomically(out, NEW)
        assert err.value.diagnostics[0].code == "AF545"
        assert f"pid {holder.pid}" in err.value.message
        assert contents(out) == OLD
    finally:
        holder.communicate("")
    write_atomically(out, NEW)  # the lock died with its holder
    assert contents(out) == NEW and leftovers(tmp_path) == []


def test_the_lock_is_not_taken_over_through_an_unlinked_file(tmp_path):
    """A writer that opened the lock file just before its holder removed it must not
    believe it holds the lock of the path (the inode check)."""
    out = tmp_path / "out"
    lock = tmp_path / ".out.autofusion.lock"
    lock.write_bytes(b"")
    stale = os.open(lock, os.O_RDWR)
    lock.unlink()
    fcntl.flock(stale, fcntl.LOCK_EX)  # someone holds the old, unlinked inode
    try:
        write_atomically(out, NEW)  # a fresh lock file at the path: not blocked
    finally:
        os.close(stale)
    assert contents(out) == NEW


def test_writing_into_the_current_directory_works_and_keeps_it(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_bytes(b"mine")
    inode = out.stat().st_ino
    monkeypatch.chdir(out)
    write_atomically(".", NEW)
    assert out.stat().st_ino == inode  # never swapped away under a shell sitting in it
    assert contents(out) == {**NEW, "mine.txt": b"mine"}
    assert leftovers(tmp_path) == []


def test_refusing_to_overwrite_the_input_has_a_code(tmp_path):
    """A model called plan.json (an ONNX file may have any name) fused into its own folder."""
    model = copy_model(tmp_path).rename(tmp_path / "plan.json")
    before = model.read_bytes()
    res = run("fuse", model, "-o", tmp_path)
    assert res.exit_code == 2, res.output
    assert "AF544" in res.stderr and "internal error" not in res.output
    assert model.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_unwritable_outdir_is_a_coded_error_with_nothing_left(tmp_path):
    if os.geteuid() == 0:
        target = "/proc/autofusion-out"  # even root cannot create directories in /proc
    else:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        target = str(ro / "out")
    model = copy_model(tmp_path)
    res = run("fuse", model, "-o", target)
    assert res.exit_code == 2, res.output
    assert "AF543" in res.stderr and "internal error" not in res.output
