"""`make demo` end to end on a small scale: the cluster stage and the Spark stage pass, and
nothing of the demo is left running or in /dev/shm (the demo checks both and says so)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.support.bounds import DEMO_BOUND
from tests.support.paths import ROOT

# The demo runs a cluster and a Spark stage, for tens of seconds.
pytestmark = [pytest.mark.multiprocess, pytest.mark.spark, pytest.mark.slow]


def test_the_demo_passes_on_a_small_run(tmp_path):
    command = [sys.executable, "-m", "spark_bridge.demo", "--data-dir", str(tmp_path / "demo-data"),
               "--records", "2000"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = process.communicate(timeout=DEMO_BOUND)
    finally:
        if process.poll() is None:  # the demo's brokers and Spark are in its session
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, out
    assert "exactly once: 0 missing, 0 duplicated" in out
    assert "counts per key equal to what the producers sent" in out
    assert "0 of its processes still running, 0 shared-memory objects left" in out
    assert out.rstrip().endswith("demo passed")
