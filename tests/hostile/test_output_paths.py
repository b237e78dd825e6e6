"""Issue 15 items 1, 6, 8: rule output paths are refused by lint when fuse could not write
them or they would overwrite fuse's own files; output writing resolves real paths."""

from __future__ import annotations

import json
import os

import pytest

from ruleengine.errors import OutputError
from ruleengine.rewrite.emit import write_atomically
from tests.hostile.helpers import copy_model, leftovers, rule_file, run


@pytest.mark.parametrize(
    "output",
    [
        "  file_path: plan.json\n",
        "  file_path: report.txt/sub\n",
        "  file_path: ./x/../graph.dot\n",
        "  file_path: mlp_block.fused.onnx\n",
        "  kernel_name: graph\n  gen_dot_graph: true\n",
        "  gen_dot_graph: true\n  dot_graph_path: report.json\n",
    ],
)
def test_rule_output_colliding_with_a_fuse_output_fails_lint(tmp_path, output):
    rules = rule_file(tmp_path, output)
    res = run("verify", "--format", "json", rules)
    assert res.exit_code == 1, res.output
    diags = json.loads(res.stdout)["diagnostics"]
    assert [d["code"] for d in diags] == ["AF220"]
    assert diags[0]["line"] >= 11 and diags[0]["column"] >= 1


def test_fuse_with_a_colliding_rule_writes_nothing(tmp_path):
    """Item 1: fuse exited 2 but left the fused model behind in a fresh OUTDIR."""
    model = copy_model(tmp_path)
    rules = rule_file(tmp_path, "  file_path: plan.json\n")
    out = tmp_path / "out"
    res = run("fuse", model, "--rules", rules, "-o", out)
    assert res.exit_code == 2, res.output
    assert "AF220" in res.stderr and "internal error" not in res.output
    assert not out.exists()
    assert leftovers(tmp_path) == []


def test_writer_refuses_a_file_that_another_output_needs_as_a_folder(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(OutputError) as err:
        write_atomically(out, {"m.fused.onnx": b"m", "plan.json": b"p", "plan.json/k.json": b"k"})
    assert err.value.diagnostics[0].code == "AF220"
    assert not out.exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "output",
    [
        '  file_path: "kernels\\0x"\n',
        '  gen_dot_graph: true\n  dot_graph_path: "\\0"\n',
        "  file_path: " + "a" * 5100 + "\n",
        "  file_path: " + "/".join(["abcdefgh"] * 520) + "\n",
        "  file_path: k\n  kernel_name: " + "k" * 250 + "\n",
    ],
)
def test_paths_no_file_system_takes_fail_lint(tmp_path, output):
    """Item 6: they passed lint and ended in internal error (ValueError, OSError)."""
    model = copy_model(tmp_path)
    rules = rule_file(tmp_path, output)
    res = run("verify", "--format", "json", rules)
    assert res.exit_code == 1, res.output
    assert {d["code"] for d in json.loads(res.stdout)["diagnostics"]} == {"AF221"}
    res = run("fuse", model, "--rules", rules, "-o", tmp_path / "out")
    assert res.exit_code == 2 and "AF221" in res.stderr
    assert "internal error" not in res.output and not (tmp_path / "out").exists()


def test_paths_on_the_command_line_too_long_are_coded_errors(tmp_path):
    """A shell cannot pass a NUL byte, but any length: -o, the model, --inputs, --target."""
    model = copy_model(tmp_path)
    deep = str(tmp_path / "/".join(["x" * 200] * 21))
    long_name = str(tmp_path / ("y" * 300))
    for args in (
        ("fuse", model, "-o", deep),
        ("fuse", model, "-o", long_name),
        ("fuse", long_name, "-o", tmp_path / "o"),
        ("fuse", deep, "-o", tmp_path / "o"),
        ("fuse", model, "--verify", "--inputs", long_name, "-o", tmp_path / "o"),
        ("match", deep, "--preset", "all"),
        ("fuse", model, "--target", long_name + ".yaml", "-o", tmp_path / "o"),
    ):
        res = run(*args)
        assert res.exit_code == 2, res.output
        assert "internal error" not in res.output and "AF221" in res.stderr, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp_block.onnx"]


def test_api_output_directory_with_a_nul_byte_is_a_coded_error(tmp_path):
    with pytest.raises(OutputError) as err:
        write_atomically(f"{tmp_path}/o\0x", {"plan.json": b"{}"})
    assert err.value.diagnostics[0].code == "AF221"
    assert list(tmp_path.iterdir()) == []


def test_a_symlink_inside_outdir_cannot_carry_an_output_outside(tmp_path):
    """Item 8: the check was textual; a symlink already in OUTDIR led outside it."""
    model = copy_model(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(outside, out / "kernels")
    rules = rule_file(tmp_path, "  file_path: kernels\n")
    res = run("fuse", model, "--rules", rules, "-o", out)
    assert res.exit_code == 2, res.output
    assert "AF208" in res.stderr and "symlink" in res.stderr
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in out.iterdir()) == ["kernels"]
    assert leftovers(tmp_path) == []


def test_a_symlinked_outdir_is_written_where_it_points(tmp_path):
    model = copy_model(tmp_path)
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    res = run("fuse", model, "-o", tmp_path / "link")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "link").is_symlink() and (real / "plan.json").is_file()


def test_an_output_that_is_a_symlink_to_outside_is_replaced_not_followed(tmp_path):
    """The final name of an output being a symlink: the link is replaced by the file, the
    file it pointed to (outside OUTDIR) is never written."""
    model = copy_model(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / "plan.json")
    res = run("fuse", model, "-o", out)
    assert res.exit_code == 0, res.output
    assert victim.read_text() == "keep me"
    assert not (out / "plan.json").is_symlink()
    assert json.loads((out / "plan.json").read_text())["model"] == "mlp_block.onnx"
