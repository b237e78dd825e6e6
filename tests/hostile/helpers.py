"""Shared by the hostile-input tests: the example model, running the CLI in-process."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from ruleengine.cli import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mlp_block.onnx"
# Conv -> BatchNormalization -> Relu occurs once in the example model and is worth fusing.
RULE = (
    "name: {name}\nmatch:\n  ops:\n    - type: Conv\n    - type: BatchNormalization\n"
    "    - type: Relu\n  subgraph:\n    output_count: 1\nrewrite:\n  target_op: A\n"
)


def run(*args: object):
    """The autofusion app in-process; stdout and stderr stay separate."""
    return CliRunner().invoke(app, [str(a) for a in args])


def copy_model(tmp_path: Path) -> Path:
    dest = tmp_path / "mlp_block.onnx"
    shutil.copy(EXAMPLE, dest)
    return dest


def rule_file(tmp_path: Path, output: str, name: str = "relu_k") -> Path:
    """A rule fusing one group of the example, with the given ``output:`` section (YAML
    lines, already indented)."""
    p = tmp_path / f"{name}.yaml"
    p.write_bytes((RULE.format(name=name) + "output:\n" + output).encode())
    return p


def leftovers(folder: Path) -> list[str]:
    """Hidden autofusion temporaries, staging folders or lock files under ``folder``."""
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob(".*")
        if "autofusion" in p.name or p.name.endswith(".tmp")
    )
