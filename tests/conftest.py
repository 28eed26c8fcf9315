"""Fixtures shared by test folders: a fresh cluster id whose shared-memory objects must all be
gone at the end (``cluster_id``), and a process starter that kills by pid (``spawn``).

Folder-specific fixtures are in each folder's conftest.py; helpers that are not fixtures
(bounds, the fake clock, fakes, process context) are in tests/support."""
from __future__ import annotations

import os
import signal
import uuid

import pytest

from shm_ring.naming import cleanup_stale, list_objects
from tests.support.bounds import BOUND
from tests.support.processes import CTX


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
    """Start ``target(*args)`` in a forked process; SIGKILL whatever still runs at the end.
    Tests that use it start processes: mark them ``multiprocess``."""
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
