"""The install and pre-commit instructions work on a fresh machine: no package name that
is not ours on the index, a pre-commit rev that names a real commit defining the hooks
the example uses, and hook file patterns that never silently skip a rule file."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_no_doc_tells_to_pip_install_autofusion_from_the_index():
    for doc in DOCS:
        for line in doc.read_text().splitlines():
            assert not re.search(r"pip install autofusion\b", line), f"{doc.name}: {line}"


def _hooks() -> dict[str, dict]:
    return {h["id"]: h for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}


def test_verify_hook_covers_rule_files_in_any_folder_but_not_dot_folders():
    hook = _hooks()["autofusion-verify"]
    files, exclude = re.compile(hook["files"]), re.compile(hook["exclude"])

    def runs_on(path: str) -> bool:
        return bool(files.search(path)) and not exclude.search(path)

    for path in ("rules/cnn/a.yaml", "my_rules/b.yml", "fusion/c.yaml", "d.yaml"):
        assert runs_on(path), path
    for path in (".pre-commit-config.yaml", ".github/workflows/ci.yaml", "README.md"):
        assert not runs_on(path), path


def test_the_documented_pre_commit_rev_is_a_commit_with_those_hooks():
    text = (REPO / "docs" / "rules.md").read_text()
    block = text[text.index("repos:") :]
    block = block[: block.index("```")]
    config = yaml.safe_load(block)
    (repo,) = config["repos"]
    rev = str(repo["rev"])
    assert re.fullmatch(r"[0-9a-f]{40}", rev), rev
    shown = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:.pre-commit-hooks.yaml"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, f"rev {rev} is not a commit of this repository: {shown.stderr}"
    defined = {h["id"] for h in yaml.safe_load(shown.stdout)}
    used = {h["id"] for h in repo["hooks"]}
    assert used <= defined, f"hooks {sorted(used - defined)} are not defined at {rev}"
    assert used <= set(_hooks())
