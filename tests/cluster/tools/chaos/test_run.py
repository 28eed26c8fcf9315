"""``ringlog chaos`` end to end on a real cluster, as a separate process: it stops
everything it started on Ctrl-C, even mid-fault, and uses a running cluster and leaves it
running. (A whole run, its files and the verdict on every scenario: test_scenarios.py.)"""
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
from cluster.tools.chaos.command import ANOMALIES, INTERRUPTED
from tests.cluster.tools.chaos import tool_process
from tests.cluster.tools.chaos.tool_process import finish, start_tool
from tests.support.bounds import BOUND

#: Seconds a whole short run may take (cluster start, spawned clients, restarts, drain).
RUN_BOUND = 240
#: Seconds the tool may take to stop everything after Ctrl-C (it takes a few).
STOP_BOUND = 90

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def chaos_command(data_dir, out, scenario, duration):
    return tool_process.chaos_command(data_dir, out, scenario, duration)


@pytest.mark.parametrize(("scenario", "seed", "after"), [
    ("sigstop-leader", 6, "pause"),      # its first fault 0.5 s in: a broker SIGSTOPped
    ("leader-kill-storm", 2, "kill"),    # 0.1 s in: a broker killed, to be restarted
], ids=["paused-broker", "killed-broker"])
def test_ctrl_c_mid_fault_stops_every_process_the_tool_started(tmp_path, data_dir, scenario,
                                                               seed, after):
    out = tmp_path / "out"
    process = start_tool(tool_process.chaos_command(data_dir, out, scenario, "120s",
                                                    seed=seed))
    deadline = time.monotonic() + BOUND * 4
    faults = out / "faults.jsonl"
    while not (faults.exists() and f'"fault":"{after}"' in faults.read_text()):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"no {after} within the bound"
        time.sleep(0.05)
    started = psutil.Process(process.pid).children(recursive=True)
    assert len(started) >= 2 + 2 + 1  # brokers, producers, consumer
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C on a terminal does
    code, stdout, stderr = finish(process, STOP_BOUND)
    assert code == INTERRUPTED, stderr
    assert "chaos: interrupted (Ctrl-C)" in stdout
    assert "Traceback" not in stderr  # no client was interrupted mid-call
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
