"""The run's stop of its client processes (``Chaos._stop_clients``, which Ctrl-C and the end
of every run go through) whatever became of a client: one SIGKILLed (by a copier or member
fault, or by the stop itself) while it waited on its stop event must not hold the stop up.
(Ctrl-C on the whole tool: test_run.py.)"""
from __future__ import annotations

import argparse
import os
import signal
import threading

import psutil
import pytest

from cluster.tools.chaos.run import Chaos
from cluster.tools.chaos.workload import StopEvent
from tests.support.bounds import BOUND
from tests.support.waits import wait_for

pytestmark = pytest.mark.multiprocess


def parked(ready_path, stop):
    """A client (spawned: module level) that says it is up, then waits for its stop."""
    with open(ready_path, "w", encoding="utf-8") as file:
        file.write(str(os.getpid()))
    stop.wait(BOUND * 4)


def chaos(tmp_path):
    return Chaos(argparse.Namespace(data_dir=str(tmp_path / "data"), out=str(tmp_path / "out"),
                                    scenario="sigstop-leader", seed=0, kills=1,
                                    duration=1.0))


def test_a_client_killed_while_it_waits_for_its_stop_does_not_hold_up_the_stop(tmp_path):
    run = chaos(tmp_path)
    ready = tmp_path / "ready"
    run._spawn_client("consumer", parked, 0, str(ready))
    (_kind, process, _stop), = run.processes
    try:
        wait_for(ready.exists, "the client to start")
        wait_for(lambda: psutil.Process(process.pid).status() == psutil.STATUS_SLEEPING,
                 "the client to wait on its stop event")
        os.kill(process.pid, signal.SIGKILL)
        stopper = threading.Thread(target=run._stop_clients, daemon=True)
        stopper.start()
        stopper.join(BOUND)
        assert not stopper.is_alive(), "the stop hangs on the killed client's stop event"
        assert run.processes == []
    finally:
        if process.is_alive():
            process.kill()
        process.join(BOUND)


def test_a_stop_event_is_seen_by_its_client_and_after_close():
    stop = StopEvent()
    assert not stop.is_set() and not stop.wait(0.01)
    stop.set()
    stop.set()  # twice: nothing more
    assert stop.is_set() and stop.wait(None)
    stop.close()
    stop.close()
    assert stop.is_set()
