"""``ringlog top --once [--json]`` on pages the test hands it."""
from __future__ import annotations

import json

import pytest

from cluster.tools.observe import top
from cluster.tools.observe.top import two_reads
from tests.support.snapshots import generation, snapshot
from tests.support.tools import run_tool


def reads():
    """Two reads one second apart: a broker and a producer republished, a dead consumer."""
    dead = snapshot(role="consumer", name="consumer-1", pid=3, alive=False, updated=50.0,
                    counters={"records-lag-max": 42.0})
    first = [snapshot(pid=1, updated=100.0, cpu_user=1.0, cpu_system=0.0,
                      counters={"records-in-total": 0.0}),
             snapshot(role="producer", name="producer-1", pid=2, updated=100.0, rss=90 << 20,
                      counters={"record-send-total": 0.0}), dead]
    second = [snapshot(pid=1, updated=101.0, cpu_user=1.25, cpu_system=0.0,
                       gc=(generation(7), generation(1), generation(0)),
                       counters={"records-in-total": 3000.0}),
              snapshot(role="producer", name="producer-1", pid=2, updated=101.0, rss=90 << 20,
                       counters={"record-send-total": 3000.0}), dead]
    return [first, second]


def test_once_json_lists_every_process_with_rates(capsys, cluster_dir, fake_pages):
    fake_pages.reads = reads()
    assert run_tool(top, "--data-dir", cluster_dir, "--once", "--json",
                    "--interval", "0.01") == 0
    found = json.loads(capsys.readouterr().out)
    by_pid = {p["pid"]: p for p in found["processes"]}
    assert [p["pid"] for p in found["processes"]] == [1, 3, 2]  # by role, then name
    broker = by_pid[1]
    assert broker["state"] == "alive" and broker["rss"] == 50 << 20
    assert broker["cpu_percent"] == pytest.approx(25.0)
    assert broker["gc_collections"] == [7, 1, 0]
    assert broker["gc_collections_per_s"] == [7.0, 1.0, 0.0]
    assert broker["records_in_per_s"] == 3000.0
    assert by_pid[2]["records_out_per_s"] == 3000.0
    assert by_pid[3]["state"] == "dead" and by_pid[3]["lag"] == 42.0
    assert by_pid[3]["cpu_percent"] is None
    assert {"uss", "pss", "gc_pause_p99", "gc_pause_max", "ctx_voluntary_per_s",
            "threads", "counters"} <= set(broker)


def test_once_prints_a_table_sorted_as_asked(capsys, cluster_dir, fake_pages):
    fake_pages.reads = reads()
    assert run_tool(top, "--data-dir", cluster_dir, "--once", "--sort", "rss",
                    "--interval", "0.01") == 0
    out = capsys.readouterr().out
    assert "ringlog top: cluster" in out and "3 processes" in out
    assert out.index("producer-1") < out.index("broker-0") < out.index("consumer-1")
    assert "dead" in out and "25.0" in out


def test_a_process_not_yet_republished_is_read_again(cluster_dir, fake_pages):
    first, second = reads()
    fake_pages.reads = [first, first, first, second]
    naps = []
    found = two_reads("id", 1.0, sleep=naps.append)
    assert naps == [1.0, 0.25, 0.25]
    assert {r.pid: r.cpu_percent for r in found}[1] == pytest.approx(25.0)


def test_json_goes_with_once(capsys, cluster_dir):
    assert run_tool(top, "--data-dir", cluster_dir, "--json") == 1
    assert "--json goes with --once" in capsys.readouterr().err


def test_no_cluster(capsys, tmp_path):
    assert run_tool(top, "--data-dir", tmp_path, "--once") == 1
    assert "holds no ringlog cluster" in capsys.readouterr().err
