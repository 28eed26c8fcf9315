"""Fixtures shared by the multi-process tests: a fresh cluster id whose shared-memory
objects must all be gone at the end, and a process starter that kills by pid."""

import multiprocessing
import os
import signal
import uuid

import pytest

from shm_ring.naming import cleanup_stale, list_objects

CTX = multiprocessing.get_context("fork")
BOUND = 30.0
"""Seconds any single wait in a multi-process test may take before the test fails."""


@pytest.fixture
def cluster_id():
    """A unique cluster id; the test must leave none of its objects in /dev/shm."""
    cluster = "k" + uuid.uuid4().hex[:16]
    yield cluster
    leftovers = cleanup_stale(cluster)
    assert list_objects(cluster) == []
    assert leftovers == [], f"test left {leftovers}"


@pytest.fixture
def spawn():
    """Start ``target(*args)`` in a forked process; SIGKILL whatever still runs at the end."""
    started = []

    def start(target, *args):
        process = CTX.Process(target=target, args=args, daemon=True)
        process.start()
        started.append(process)
        return process
    yield start
    for process in started:
        if process.is_alive():
            os.kill(process.pid, signal.SIGKILL)
        process.join(BOUND)
