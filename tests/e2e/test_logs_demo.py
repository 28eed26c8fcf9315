"""`make demo-logs` end to end at the small size (``--small``: 3 services, 4 windows): the
writers, ``ringlog ship`` killed twice, the Spark alerting job through the ringlog sink; the
demo checks every line and every alert itself and says ``demo passed``, with nothing left
running or in /dev/shm (it checks both)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.support.bounds import DEMO_BOUND
from tests.support.paths import ROOT


@pytest.mark.multiprocess
@pytest.mark.spark
@pytest.mark.slow
def test_the_small_logs_demo_passes():
    process = subprocess.Popen([sys.executable, "-m", "spark_bridge.logs_demo", "--small"],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        out, _ = process.communicate(timeout=2 * DEMO_BOUND)
    finally:
        if process.poll() is None:  # its cluster stops with it (the brokers' supervisor)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    lines = out.rstrip().splitlines()
    assert lines and lines[-1] == "demo passed", out[-4000:]
    assert process.returncode == 0
    assert "0 processes still running, 0 shared-memory objects left" in out
