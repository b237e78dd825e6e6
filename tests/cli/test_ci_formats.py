"""What CI reads from verify/check: valid output in every format even when the command
could not run (exit 2), paths relative to the working directory, findings only for the
files asked about, and SARIF fingerprints that survive a line moving."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.rules.helpers import MINIMAL, run_cli

RULES = Path(__file__).resolve().parents[2] / "rules"


@pytest.mark.parametrize("command", ["verify", "check"])
@pytest.mark.parametrize("fmt", ["text", "json", "github", "sarif"])
def test_every_format_is_valid_output_on_exit_2(tmp_path, monkeypatch, command, fmt):
    monkeypatch.chdir(tmp_path)
    res = run_cli(command, "missing/", "--format", fmt)
    assert res.exit_code == 2
    assert "AF001" in res.stderr and "Traceback" not in res.stderr
    if fmt == "text":
        assert res.stdout == ""
    elif fmt == "json":
        doc = json.loads(res.stdout)
        assert doc["execution_successful"] is False and doc["error"]
        assert doc["diagnostics"][0]["code"] == "AF001"
    elif fmt == "github":
        assert res.stdout.startswith("::error title=autofusion could not run::")
        assert "::error file=missing/,title=AF001 path-not-found::" in res.stdout
    else:
        doc = json.loads(res.stdout)
        (run,) = doc["runs"]
        (invocation,) = run["invocations"]
        assert invocation["executionSuccessful"] is False and invocation["exitCode"] == 2
        (note,) = invocation["toolExecutionNotifications"]
        assert note["level"] == "error" and note["descriptor"]["id"] == "AF001"
        assert "missing/" in note["message"]["text"]
        assert run["results"] == []
        assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["AF001"]


def test_a_successful_sarif_run_says_so(tmp_path, monkeypatch):
    (tmp_path / "ok.yaml").write_text(MINIMAL)
    monkeypatch.chdir(tmp_path)
    doc = json.loads(run_cli("check", "ok.yaml", "-f", "sarif").stdout)
    assert doc["runs"][0]["invocations"] == [{"executionSuccessful": True}]


def test_paths_print_relative_to_the_working_directory(tmp_path, monkeypatch):
    sub = tmp_path / "repo" / "rules"
    sub.mkdir(parents=True)
    (sub / "bad.yaml").write_text(MINIMAL + "bogus: 1\n")
    monkeypatch.chdir(tmp_path / "repo")
    for given in (str(sub / "bad.yaml"), "../repo/rules/bad.yaml", "./rules/../rules"):
        res = run_cli("check", given, "-f", "json")
        files = {d["file"] for d in json.loads(res.stdout)["diagnostics"]}
        assert files == {"rules/bad.yaml"}, given


def test_check_with_a_preset_reports_only_the_files_asked_about(tmp_path, monkeypatch):
    """A user rule named like a bundled one: the duplicate is pinned to the user's file
    (GitHub drops annotations on files outside the change), never to the bundled file."""
    mine = tmp_path / "mine.yaml"
    mine.write_text(MINIMAL.replace("name: r", "name: conv_bn_relu"))
    monkeypatch.chdir(tmp_path)
    res = run_cli("check", "mine.yaml", "--preset", "all", "-f", "json")
    doc = json.loads(res.stdout)
    assert {d["file"] for d in doc["diagnostics"]} == {"mine.yaml"}
    dup = [d for d in doc["diagnostics"] if d["name"] == "duplicate-rule-name"]
    assert len(dup) == 1 and dup[0]["related"][0]["file"].endswith("conv_bn_relu.yaml")
    assert doc["summary"]["files"] == 1


def test_sarif_fingerprints_are_unique_and_survive_a_line_move(tmp_path, monkeypatch):
    rule = tmp_path / "two.yaml"
    body = MINIMAL + "bogus: 1\n---\n" + MINIMAL.replace("name: r", "name: s") + "bogus: 2\n"
    rule.write_text(body)
    monkeypatch.chdir(tmp_path)

    def prints() -> list[str]:
        doc = json.loads(run_cli("check", "two.yaml", "-f", "sarif").stdout)
        return [r["partialFingerprints"]["autofusionFinding/v1"] for r in doc["runs"][0]["results"]]

    before = prints()
    assert len(before) >= 2 and len(set(before)) == len(before)
    rule.write_text("# a comment moves every line down\n" + body)
    assert prints() == before
