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

from spark_bridge import logs_demo
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


def test_the_demos_rotation_keeps_every_copy(tmp_path):
    # Keeping two copies deleted the oldest file at the third rotation: on a loaded machine
    # the demo's shipper, killed and restarting, had not read it yet (240 lines lost).
    path = str(tmp_path / "svc.log")
    for content in (b"first\n", b"second\n", b"third\n", b"fourth\n"):
        with open(path, "wb") as file:
            file.write(content)
        logs_demo._rotate(path)
    assert sorted(os.listdir(tmp_path)) == ["svc.log.1", "svc.log.2", "svc.log.3", "svc.log.4"]
    assert [(tmp_path / f"svc.log.{k}").read_bytes() for k in (4, 3, 2, 1)] == [
        b"first\n", b"second\n", b"third\n", b"fourth\n"]
