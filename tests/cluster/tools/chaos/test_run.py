"""``ringlog chaos`` end to end on a real cluster, as a separate process: it starts the
cluster, injects faults, records, checks and reports, and stops everything it started,
after a run and on Ctrl-C. What the verdict is depends on the brokers of the day (until
replication lands, RF 3 shows real anomalies); these tests check the tool, and that the
checker flags a history corrupted on purpose."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from cluster.supervisor.supervisor import running_brokers
from cluster.tools.chaos import history as chaos_history
from cluster.tools.chaos.checker import check
from cluster.tools.chaos.command import ANOMALIES
from cluster.tools.chaos.workload import parse_value
from tests.cluster.tools.chaos import tool_process
from tests.cluster.tools.chaos.tool_process import finish, start_tool
from tests.support.bounds import BOUND

#: Seconds a whole short run may take (cluster start, spawned clients, restarts, drain).
RUN_BOUND = 240

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def chaos_command(data_dir, out, scenario, duration):
    return tool_process.chaos_command(data_dir, out, scenario, duration)


def test_a_short_leader_kill_storm_injects_records_checks_and_reports(tmp_path, data_dir):
    out = tmp_path / "out"
    code, stdout, stderr = finish(start_tool(chaos_command(data_dir, out, "leader-kill-storm",
                                                           "8s")), RUN_BOUND)
    assert code in (0, ANOMALIES), stderr
    assert running_brokers(data_dir) == {}  # the tool stopped the cluster it started
    assert "verdict: " in stdout
    assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((out / "history.json").read_text())
    assert saved["run"]["scenario"] == "leader-kill-storm" and saved["run"]["seed"] == 3
    assert len(saved["schedule"]) == 2
    kills = [f for f in saved["history"]["faults"] if f["fault"] == "kill"]
    assert kills and all(isinstance(f["pid"], int) for f in kills)
    assert saved["verdict"]["ok"] == (code == 0)
    counts = saved["verdict"]["counts"]
    assert counts["sent"] > 0 and counts["acknowledged"] > 0 and counts["drained"] > 0
    # every killed broker's pid is gone, and so is every broker the run started
    for fault in saved["history"]["faults"]:
        if fault.get("pid"):
            assert not psutil.pid_exists(fault["pid"]) or \
                psutil.Process(fault["pid"]).status() == psutil.STATUS_ZOMBIE

    # the same history with a drained acknowledged record removed, and one read twice
    loaded = chaos_history.load(out, saved["run"])
    loaded.drain = saved["history"]["drain"]
    acked = {(op["p"], op["seq"]) for op in loaded.ops if op["op"] == "ok"}
    victim = next(r for r in loaded.drain_reads if parse_value(r["value"]) in acked)
    loaded.drain_reads.remove(victim)
    kinds = check(loaded).by_kind()
    assert kinds.get("lost", 0) >= 1
    loaded.reads.append(dict(victim, offset=victim["offset"] + 10_000))
    assert check(loaded).counts["duplicates"] >= 1
    assert check(loaded, idempotent=True).by_kind().get("duplicated", 0) >= 1


def test_ctrl_c_stops_every_process_the_tool_started(tmp_path, data_dir):
    out = tmp_path / "out"
    process = start_tool(chaos_command(data_dir, out, "sigstop-leader", "120s"))
    deadline = time.monotonic() + BOUND * 4
    while not (out / "faults.jsonl").exists() or not (out / "faults.jsonl").read_text():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no fault within the bound"
        time.sleep(0.1)
    started = psutil.Process(process.pid).children(recursive=True)
    assert len(started) >= 2 + 2 + 1  # brokers, producers, consumer
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C on a terminal does
    code, _stdout, stderr = finish(process, RUN_BOUND)
    assert code != 0, stderr
    assert running_brokers(data_dir) == {}
    # multiprocessing's resource tracker leaves when its pipe from the tool closes
    _gone, alive = psutil.wait_procs(started, timeout=BOUND)
    assert alive == [], f"left running: {alive}"


def test_a_running_cluster_is_used_and_left_running(tmp_path, data_dir):
    start = subprocess.run([sys.executable, "-m", "cluster.tools.cli", "cluster", "start",
                            "--data-dir", str(data_dir), "--brokers", "2", "--detach"],
                           capture_output=True, text=True, timeout=RUN_BOUND)
    assert start.returncode == 0, start.stderr
    out = tmp_path / "out"
    code, stdout, stderr = finish(start_tool(chaos_command(data_dir, out, "rolling-sigterm",
                                                           "6s")), RUN_BOUND)
    assert code in (0, ANOMALIES), stderr
    assert "using the running cluster" in stdout
    terminated = [f for f in json.loads((out / "history.json").read_text())["history"]["faults"]
                  if f["fault"] == "terminate"]
    assert terminated
    # the supervisor restarted what the tool stopped, and the tool stopped nothing else
    assert sorted(running_brokers(data_dir)) == [0, 1]
    # a second run refuses the topic it did not create, and changes nothing
    code, _stdout, stderr = finish(start_tool(chaos_command(data_dir, tmp_path / "again",
                                                            "rolling-sigterm", "6s")),
                                   RUN_BOUND)
    assert code == 2 and "topic 'chaos' exists" in stderr
    assert sorted(running_brokers(data_dir)) == [0, 1]
