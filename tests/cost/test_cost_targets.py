"""Bundled targets: schema-valid, sourced, loadable by name or path; bad ones refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from ruleengine.cost import DEFAULT_TARGET, known_targets, load_target
from ruleengine.errors import UsageError
from ruleengine.resources import data_dir

EXPECTED = {"ascend910", "ascend910b", "ascend910b3", "ascend910b4", "ascend310p"}


def test_every_expected_target_is_bundled_and_loads() -> None:
    assert EXPECTED <= set(known_targets())
    assert DEFAULT_TARGET == "ascend910b"
    for name in known_targets():
        t = load_target(name)
        assert t.name == name
        assert 0 < t.ub_usable_bytes < t.ub_bytes
        assert t.max_fused_inputs == 8
        assert t.peak_flops["float16"] > 0 and t.hbm_bandwidth > 0


def test_ascend910b_figures_match_the_cann_platform_config() -> None:
    t = load_target("ascend910b")
    assert (t.ub_bytes, t.ub_usable_bytes) == (196608, 196352)
    assert (t.l1_bytes, t.l0a_bytes, t.l0b_bytes, t.l0c_bytes) == (524288, 65536, 65536, 131072)
    assert (t.cores, t.vector_cores) == (24, 48)
    assert (t.ub_align_bytes, t.buffer_factor) == (32, 2)
    assert load_target("ascend910").ub_bytes == 262144
    assert load_target("ascend310p").vector_cores == 7


def test_every_number_in_a_bundled_target_carries_a_source_comment() -> None:
    for path in sorted(data_dir("targets").glob("*.yaml")):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            body = line.split("#", 1)[0]
            if (
                any(ch.isdigit() for ch in body)
                and ":" in body
                and not body.startswith(("name", "description"))
            ):
                assert "#" in line, f"{path.name}:{lineno} has a number without a source"


def test_unknown_target_name_lists_the_known_ones() -> None:
    with pytest.raises(UsageError) as err:
        load_target("ascend999")
    assert "ascend910b" in err.value.message and "ascend310p" in err.value.message


def test_target_from_a_yaml_path(tmp_path: Path) -> None:
    text = (data_dir("targets") / "ascend910b.yaml").read_text()
    p = tmp_path / "mine.yaml"
    p.write_text(
        text.replace("name: ascend910b", "name: mine").replace(
            "ub_bytes: 196608", "ub_bytes: 262144"
        )
    )
    t = load_target(str(p))
    assert (t.name, t.ub_bytes, t.source) == ("mine", 262144, str(p))


def test_target_violating_the_schema_names_each_field(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("name: bad\nub_bytes: lots\nl1_bytes: 1\nbogus: 3\n")
    with pytest.raises(UsageError) as err:
        load_target(str(p))
    messages = "\n".join(d.message for d in err.value.diagnostics)
    assert "ub_bytes" in messages and "bogus" in messages and "required" in messages
    assert all(d.code == "AF902" for d in err.value.diagnostics)


def test_missing_or_malformed_target_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        load_target(str(tmp_path / "absent.yaml"))
    p = tmp_path / "broken.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(UsageError) as err:
        load_target(str(p))
    assert err.value.diagnostics[0].location.line is not None


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("hbm_bandwidth: 1.6e+12", "hbm_bandwidth: .nan", "hbm_bandwidth"),
        ("hbm_bandwidth: 1.6e+12", "hbm_bandwidth: .inf", "hbm_bandwidth"),
        ("  float16: 3.54e+14", "  float16: .nan", "peak_flops.float16"),
        ("launch_overhead_s: 5.0e-6", "launch_overhead_s: .inf", "launch_overhead_s"),
    ],
)
def test_non_finite_numbers_are_refused(tmp_path: Path, old: str, new: str, field: str) -> None:
    """.nan/.inf pass the schema's bounds; hbm_bandwidth .nan used to be an internal error
    (cannot convert float NaN to integer) and launch_overhead_s .inf printed 'inf ms'."""
    text = (data_dir("targets") / "ascend910b.yaml").read_text()
    assert old in text
    p = tmp_path / "t.yaml"
    p.write_text(text.replace(old, new))
    with pytest.raises(UsageError, match=f"{field} is not a finite number"):
        load_target(str(p))


def test_duplicate_key_is_refused_with_its_line(tmp_path: Path) -> None:
    """A key given twice used to be read silently as its last value."""
    text = (data_dir("targets") / "ascend910b.yaml").read_text()
    p = tmp_path / "t.yaml"
    p.write_text(text.replace("name: ascend910b\n", "name: ascend910b\nname: other\n", 1))
    with pytest.raises(UsageError, match="duplicate key 'name'") as err:
        load_target(str(p))
    assert err.value.diagnostics[0].location.line == 6


def test_deeply_nested_target_yaml_is_a_usage_error(tmp_path: Path) -> None:
    """900 nested mappings (well under the 1 MiB limit) were an internal RecursionError."""
    p = tmp_path / "deep.yaml"
    p.write_text("name: x\nub_bytes:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 900)))
    with pytest.raises(UsageError, match="nested too deeply"):
        load_target(str(p))
