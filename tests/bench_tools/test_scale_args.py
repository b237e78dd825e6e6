"""bench/scale.py's argument checks and model discovery (no model is fused here)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("scale", BENCH / "scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


scale = _load()


def _parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog="scale.py")


def test_sizes_are_sorted_and_deduplicated():
    assert scale.sizes_arg(_parser(), "2048,512,512") == [512, 2048]


@pytest.mark.parametrize("text", ["512,x", "", "0,4", "-1"])
def test_bad_sizes_are_a_usage_error(text, capsys):
    with pytest.raises(SystemExit) as exc:
        scale.sizes_arg(_parser(), text)
    assert exc.value.code == 2
    assert "--layers" in capsys.readouterr().err


def test_forms_checked_against_the_known_weight_forms(capsys):
    assert scale.forms_arg(_parser(), "inputs,external") == ["inputs", "external"]
    assert scale.forms_arg(_parser(), "none", allow_none=True) == []
    with pytest.raises(SystemExit) as exc:
        scale.forms_arg(_parser(), "initializers,bogus")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'bogus'" in err and "initializers, inputs, external" in err
    with pytest.raises(SystemExit):
        scale.forms_arg(_parser(), "none")  # only where "none" means something


def test_shared_models_found_recursively_in_order(tmp_path):
    (tmp_path / "families").mkdir()
    for name in ("b.onnx", "a.onnx", "families/c.onnx", "notes.txt"):
        (tmp_path / name).write_bytes(b"")
    found = scale.shared_models([str(tmp_path)])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "a.onnx",
        "b.onnx",
        "families/c.onnx",
    ]
    assert scale.shared_models([str(tmp_path / "b.onnx")]) == [tmp_path / "b.onnx"]


def test_shared_models_refuses_a_missing_path_or_an_empty_folder(tmp_path):
    with pytest.raises(SystemExit, match="no such file or folder"):
        scale.shared_models([str(tmp_path / "missing")])
    with pytest.raises(SystemExit, match=r"no \.onnx file"):
        scale.shared_models([str(tmp_path)])
