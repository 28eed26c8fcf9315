"""The chaos command's argument handling, before it starts anything."""
from __future__ import annotations

import pytest

from cluster.tools.chaos import command
from cluster.tools.chaos.command import TOOL_FAILED, duration
from tests.support.tools import run_tool


@pytest.mark.parametrize("text, seconds", [("60s", 60.0), ("2m", 120.0), ("500ms", 0.5),
                                           ("1.5h", 5400.0), ("10", 10.0)])
def test_durations_read_as_seconds(text, seconds):
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "-1s", "ten", "10d"])
def test_bad_durations_are_refused(text):
    with pytest.raises(ValueError):
        duration(text)


def test_an_output_folder_with_files_is_refused_before_anything_starts(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("not the tool's")
    code = run_tool(command, "--data-dir", tmp_path / "data", "--scenario", "divergence",
                    "--out", out)
    assert code == TOOL_FAILED
    assert "is not empty" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()
    assert (out / "mine.txt").read_text() == "not the tool's"


def test_bad_counts_are_refused(tmp_path, capsys):
    code = run_tool(command, "--data-dir", tmp_path / "data", "--scenario", "divergence",
                    "--partitions", "0", "--out", tmp_path / "out")
    assert code == TOOL_FAILED
    assert "--partitions must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("extra, message", [
    (("--scenario", "divergence"), "runs with the scenarios leader-kill-storm"),
    (("--scenario", "sigstop-leader", "--records", "0"), "--records must be >= 1"),
    (("--scenario", "sigstop-leader", "--zombies", "-1"), "--zombies >= 0")])
def test_a_transactional_copy_refuses_what_it_cannot_check(tmp_path, capsys, extra,
                                                           message):
    code = run_tool(command, "--data-dir", tmp_path / "data", "--workload",
                    "transactional-copy", *extra, "--out", tmp_path / "out")
    assert code == TOOL_FAILED
    assert message in capsys.readouterr().err
    assert not (tmp_path / "data").exists()
