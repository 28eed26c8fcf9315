"""``ringlog profile``: its output folder, the command it runs, and its refusals."""
from __future__ import annotations

import json
import sys

import pytest

from cluster.tools.observe import profile, report
from tests.support.snapshots import snapshot
from tests.support.tools import run_tool


def test_refuses_an_output_folder_with_files(capsys, cluster_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert run_tool(profile, "--data-dir", cluster_dir, "--out", out, "--duration", "1s") == 1
    assert "is not empty; give another --out" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_refuses_a_data_directory_without_a_cluster(capsys, tmp_path):
    assert run_tool(profile, "--data-dir", tmp_path / "none", "--out", tmp_path / "out",
                    "--duration", "1s") == 1
    assert "holds no ringlog cluster" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.multiprocess
def test_samples_while_a_command_runs_and_returns_its_status(capsys, cluster_dir, fake_pages,
                                                            tmp_path):
    fake_pages.reads = [[snapshot(updated=float(n), rss=(10 + n) << 20)] for n in range(50)]
    out = tmp_path / "out"
    status = run_tool(profile, "--data-dir", cluster_dir, "--out", out, "--interval", "50ms",
                      "--", sys.executable, "-c", "import time, sys; time.sleep(0.3); "
                                                  "sys.exit(3)")
    assert status == 3
    assert sorted(p.name for p in out.iterdir()) == sorted(
        (report.SAMPLES_JSON, report.SUMMARY_TXT) + report.PNGS)
    found = json.loads((out / report.SAMPLES_JSON).read_text())
    assert found["run"]["command"][0] == sys.executable
    assert len(found["samples"]) >= 2 and found["samples"][0]["processes"][0]["pid"] == 1000
    summary = (out / report.SUMMARY_TXT).read_text()
    assert "peak RSS per role" in summary
    assert summary in capsys.readouterr().out


@pytest.mark.multiprocess
def test_duration_stops_the_command(capsys, cluster_dir, fake_pages, tmp_path):
    status = run_tool(profile, "--data-dir", cluster_dir, "--out", tmp_path / "out",
                      "--duration", "200ms", "--interval", "50ms", "--",
                      sys.executable, "-c", "import time; time.sleep(60)")
    assert status == -15  # SIGTERM
    assert "stopping the command" in capsys.readouterr().out


def test_no_page_during_the_run_fails(capsys, cluster_dir, fake_pages, tmp_path):
    assert run_tool(profile, "--data-dir", cluster_dir, "--out", tmp_path / "out",
                    "--duration", "100ms", "--interval", "50ms") == 1
    assert "published a stats page" in capsys.readouterr().err
    assert (tmp_path / "out" / report.SUMMARY_TXT).exists()


def test_an_unknown_command_is_one_line(capsys, cluster_dir, fake_pages, tmp_path):
    assert run_tool(profile, "--data-dir", cluster_dir, "--out", tmp_path / "out",
                    "--", "/nonexistent/tool") == 1
    assert "cannot run '/nonexistent/tool'" in capsys.readouterr().err
