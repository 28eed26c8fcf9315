"""``ringlog chaos`` as a child process of a test: started in a session of its own, so a
run that overruns its bound is killed with everything it started."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest


def chaos_command(data_dir, out, scenario, duration, *, brokers=2, partitions=2,
                  replication_factor=1, min_insync_replicas=1, kills=2, seed=3,
                  consumers=1, extra=()):
    return [sys.executable, "-m", "cluster.tools.cli", "chaos", "--data-dir", str(data_dir),
            "--brokers", str(brokers), "--scenario", scenario, "--duration", duration,
            "--seed", str(seed), "--partitions", str(partitions), "--replication-factor",
            str(replication_factor), "--min-insync-replicas", str(min_insync_replicas),
            "--producers", "2", "--consumers", str(consumers), "--kills", str(kills),
            "--settle", "15s", "--out", str(out), *extra]


def start_tool(command):
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def finish(process, timeout):
    """(exit code, stdout, stderr); the tool's process group is killed if it overruns."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"chaos did not finish within {timeout} s:\n{out}\n{err}")
    return process.returncode, out, err
