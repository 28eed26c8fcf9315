"""Fixtures shared by test folders: a fresh cluster id whose shared-memory objects must all be
gone at the end (``cluster_id``), a process starter that kills by pid (``spawn``), and fake
brokers served by threads of the test process for the clients' tests (``fake_cluster``:
the producer, the client, the admin client, the consumer and the Spark source's readers).

Folder-specific fixtures are in each folder's conftest.py; helpers that are not fixtures
(bounds, the fake clock, fakes, process context) are in tests/support."""
from __future__ import annotations

import os
import signal
import uuid

import pytest

from shm_ring.naming import cleanup_stale, list_objects
from tests.support.bounds import BOUND
from tests.support.fake_broker import FakeCluster
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


@pytest.fixture
def fake_cluster(tmp_path):
    """``make(brokers=2, **options)`` -> a FakeCluster (tests/support/fake_broker.py), closed
    at the end of the test, which fails if a client left shared-memory objects behind."""
    made = []

    def make(brokers=2, **options):
        cluster = FakeCluster(tmp_path / f"data-{len(made)}", brokers, **options)
        made.append(cluster)
        return cluster
    yield make
    leftovers = [name for cluster in made for name in cluster.close()]
    assert leftovers == [], f"clients left {leftovers}"


@pytest.fixture(autouse=True)
def _process_role_restored():
    """A test that declares this process's stats role (``set_process_role``: the Spark
    source's ``open_consumer`` declares "spark-reader") would otherwise leave it to every
    later test of the session, and to the processes they fork."""
    from cluster.stats.publisher import process_role, set_process_role

    declared = process_role()
    yield
    set_process_role(*(declared or (None,)))
