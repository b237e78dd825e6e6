"""The default output of a model with external weights loads in onnx, onnx.checker and
onnxruntime, and so does the user's original afterwards (issue 36): weights are copied
(reflink, else a sparse copy), never hard-linked unless asked; ``-o`` the model's folder
shares them at no cost. The copy is atomic, sparse-aware and reports progress."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from typer.testing import CliRunner

from ruleengine.cli import app
from ruleengine.errors import OutputError
from ruleengine.pipeline import fuse, write_outputs
from ruleengine.rewrite import weights
from tests.rewrite.test_weights import external_weights_dir

FEEDS = {"x": np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)}


def _model(tmp: Path) -> Path:
    """Two MatMul+bias+ReLU blocks, weights in ``src/m.onnx.data`` (onnx.save_model)."""
    return external_weights_dir(tmp) / "m.onnx"


def _fuse(model: Path, out: Path, *flags: str):
    rules = model.parent.parent / "rules.yaml"
    res = CliRunner().invoke(app, ["fuse", str(model), "-r", str(rules), "-o", str(out), *flags])
    assert res.exit_code == 0, res.output
    return res


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _loads_everywhere(fused: Path, original: Path) -> None:
    """onnx.load, onnx.checker on the path (full) and an onnxruntime session on the fused
    model, the same outputs as the original, and onnx.load of the original afterwards."""
    model = onnx.load(str(fused))
    assert sum(n.domain == "autofusion" for n in model.graph.node) == 2
    onnx.checker.check_model(str(fused), full_check=True)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    got = ort.InferenceSession(str(fused), opts, providers=["CPUExecutionProvider"])
    want = ort.InferenceSession(str(original), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(
        got.run(None, FEEDS)[0], want.run(None, FEEDS)[0], rtol=1e-5, atol=1e-5
    )
    onnx.load(str(original))
    onnx.checker.check_model(str(original), full_check=True)


def test_default_output_and_the_original_load_in_onnx_and_onnxruntime(tmp_path):
    model = _model(tmp_path)
    before = _snapshot(model.parent)
    out = tmp_path / "out"
    res = _fuse(model, out)
    data = out / "m.onnx.data"
    assert data.read_bytes() == before["m.onnx.data"]
    assert os.stat(data).st_nlink == 1 and os.stat(model.parent / "m.onnx.data").st_nlink == 1
    _loads_everywhere(out / "m.fused.onnx", model)
    assert _snapshot(model.parent) == before  # the input is unmodified in bytes
    # the weights are listed among the files written: terminal, report.txt, report.json
    listed = res.stdout.split("Files written", 1)[1].split()
    assert listed.index("m.onnx.data") == listed.index("m.fused.onnx") + 1
    assert "  m.onnx.data\n" in (out / "report.txt").read_text()
    assert "m.onnx.data" in (out / "report.json").read_text()


def test_writing_into_the_models_folder_shares_its_weights(tmp_path):
    """The zero-copy way: -o the model's folder; the fused model references the
    original's data file under its name, nothing linked or copied."""
    model = _model(tmp_path)
    before = _snapshot(model.parent)
    res = _fuse(model, model.parent)
    assert "shares the weights" in res.stderr and "m.onnx.data" in res.stderr
    fused = onnx.load(str(model.parent / "m.fused.onnx"), load_external_data=False)
    locations = {weights.external_info(t)[0] for t in fused.graph.initializer}
    assert locations == {"m.onnx.data"}
    assert os.stat(model.parent / "m.onnx.data").st_nlink == 1
    assert sorted(p.name for p in model.parent.glob("*.data")) == ["m.onnx.data"]
    _loads_everywhere(model.parent / "m.fused.onnx", model)
    after = _snapshot(model.parent)
    assert {k: after[k] for k in before} == before  # the input is unmodified in bytes
    listed = res.stdout.split("Files written", 1)[1].split()
    assert "m.onnx.data" not in listed  # shared, not written


def test_weights_share_outside_outdir_warns(tmp_path):
    model = _model(tmp_path)
    res = _fuse(model, tmp_path / "out", "--weights", "share")
    assert "AF524" in res.stderr and "--weights share" in res.stderr
    assert not (tmp_path / "out" / "m.onnx.data").exists()
    fused = onnx.load(str(tmp_path / "out" / "m.fused.onnx"), load_external_data=False)
    assert {weights.external_info(t)[0] for t in fused.graph.initializer} == {"../src/m.onnx.data"}


def test_weights_link_is_an_explicit_opt_in_with_a_warning(tmp_path):
    model = _model(tmp_path)
    out = tmp_path / "out"
    res = _fuse(model, out, "--weights", "link")
    assert os.path.samefile(out / "m.onnx.data", model.parent / "m.onnx.data")
    assert "warning: weights hard-linked" in res.stderr and "refuse" in res.stderr
    opts = ort.SessionOptions()
    ort.InferenceSession(str(out / "m.fused.onnx"), opts, providers=["CPUExecutionProvider"])
    (out / "m.onnx.data").unlink()  # the link gone, the original loads again
    onnx.load(str(model))


def test_a_hard_link_an_older_run_left_is_replaced_by_a_copy(tmp_path):
    model = _model(tmp_path)
    out = tmp_path / "out"
    _fuse(model, out, "--weights", "link")
    assert os.stat(model.parent / "m.onnx.data").st_nlink == 2
    _fuse(model, out)  # the default again: the link is replaced, the original loads
    assert os.stat(model.parent / "m.onnx.data").st_nlink == 1
    _loads_everywhere(out / "m.fused.onnx", model)


def test_copy_weights_is_still_accepted_as_the_default(tmp_path):
    model = _model(tmp_path)
    result = fuse(model, [tmp_path / "rules.yaml"], outdir=tmp_path / "out", weights="copy")
    _fuse(model, tmp_path / "out2", "--copy-weights")
    assert [p.how for p in result.placements] == ["copy"]
    assert (tmp_path / "out2" / "m.onnx.data").read_bytes() == (
        model.parent / "m.onnx.data"
    ).read_bytes()


def _sparse(path: Path, size: int, chunks: dict[int, bytes]) -> None:
    with open(path, "wb") as fh:
        fh.truncate(size)
        for offset, data in chunks.items():
            fh.seek(offset)
            fh.write(data)


@pytest.mark.parametrize("err", [errno.EOPNOTSUPP, errno.EXDEV])
@pytest.mark.parametrize("kernel_copy", [True, False])
def test_reflink_refused_falls_back_to_a_sparse_copy(tmp_path, monkeypatch, err, kernel_copy):
    import fcntl

    def no_reflink(fd, request, arg=0):
        assert request == weights.FICLONE
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(fcntl, "ioctl", no_reflink)
    if not kernel_copy:  # copy_file_range refused too (old kernel, another filesystem)

        def no_copy_file_range(*args):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

        monkeypatch.setattr(os, "copy_file_range", no_copy_file_range, raising=False)
    monkeypatch.setattr(weights, "COPY_CHUNK", 1 << 16)
    monkeypatch.setattr(weights, "PROGRESS_SECONDS", 0.0)
    size = 256 << 20  # 256 MiB apparent, 3 MiB of data
    src = tmp_path / "w.data"
    chunks = {
        0: b"\1" * (1 << 20),
        100 << 20: b"\2" * (1 << 20),
        size - (1 << 20): b"\3" * (1 << 20),
    }
    _sparse(src, size, chunks)
    lines: list[str] = []
    assert weights.copy_file(src, tmp_path / "copy.data", lines.append) == "sparse"
    copy = tmp_path / "copy.data"
    assert copy.stat().st_size == size
    with open(src, "rb") as a, open(copy, "rb") as b:
        for offset, data in chunks.items():
            a.seek(offset)
            b.seek(offset)
            assert b.read(len(data)) == data == a.read(len(data))
        b.seek(50 << 20)
        assert b.read(1 << 20) == b"\0" * (1 << 20)
    if src.stat().st_blocks * 512 < 8 << 20:  # the filesystem keeps holes: so does the copy
        assert copy.stat().st_blocks * 512 < 8 << 20
    assert lines[0] == "copying weights w.data (0.2 GiB)"
    assert len(lines) > 2 and lines[-1].endswith("of 0.2 GiB")


def test_reflink_used_where_the_filesystem_has_one(tmp_path, monkeypatch):
    import fcntl

    calls = []

    def clone(fd, request, arg=0):  # what FICLONE does, by hand (this ext4 has none)
        calls.append(request)
        os.write(fd, os.pread(arg, 1 << 20, 0))

    monkeypatch.setattr(fcntl, "ioctl", clone)
    src = tmp_path / "w.data"
    src.write_bytes(b"abc" * 1000)
    assert weights.copy_file(src, tmp_path / "c.data") == "reflink"
    assert calls == [weights.FICLONE] and (tmp_path / "c.data").read_bytes() == b"abc" * 1000


def test_an_unexpected_reflink_error_is_raised(tmp_path, monkeypatch):
    import fcntl

    def full(fd, request, arg=0):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fcntl, "ioctl", full)
    src = tmp_path / "w.data"
    src.write_bytes(b"x")
    with pytest.raises(OSError, match="space"):
        weights.copy_file(src, tmp_path / "c.data")


def test_a_failed_copy_leaves_no_output(tmp_path, monkeypatch):
    model = _model(tmp_path)
    out = tmp_path / "out"
    result = fuse(model, [tmp_path / "rules.yaml"], outdir=out)
    real = weights.copy_range

    def half_then_full(src, dst, start, end, meter=None):
        real(src, dst, start, start + (end - start) // 2, meter)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(weights, "reflink", lambda src, dst: False)  # a reflink filesystem
    monkeypatch.setattr(weights, "copy_range", half_then_full)
    with pytest.raises(OutputError, match="space"):
        write_outputs(result, out)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rules.yaml", "src"]  # no temporary
    onnx.load(str(model))


def test_an_unknown_weights_mode_is_a_usage_error(tmp_path):
    from ruleengine.errors import UsageError

    model = _model(tmp_path)
    with pytest.raises(UsageError, match="weights mode"):
        fuse(model, [tmp_path / "rules.yaml"], weights="hardlink")
    out = str(tmp_path / "out")
    res = CliRunner().invoke(app, ["fuse", str(model), "-o", out, "--weights", "hardlink"])
    assert res.exit_code == 2 and not (tmp_path / "out").exists()


def test_a_copy_without_hole_finding_copies_everything(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "SEEK_DATA")
    monkeypatch.setattr(weights, "reflink", lambda src, dst: False)
    src = tmp_path / "w.data"
    _sparse(src, 3 << 20, {1 << 20: b"\7" * 100})
    assert weights.copy_file(src, tmp_path / "c.data") == "sparse"
    assert (tmp_path / "c.data").read_bytes() == src.read_bytes()
