"""Fixtures shared by test folders: a fresh cluster id whose shared-memory objects must all be
gone at the end (``cluster_id``), a process starter that kills by pid (``spawn``), and fake
brokers served by threads of the test process for the clients' tests (``fake_cluster``:
the producer, the client, the admin client, the consumer and the Spark source's readers).

Folder-specific fixtures are in each folder's conftest.py; helpers that are not fixtures
are in tests/support: the one ``wait_for`` (waits) and its bounds, the fake clock, the
two environments of broker tests (``broker.BrokerEnv``: a broker process;
``handlers.HandlerEnv``: a request handler in the test process), fakes, the property
tests' example counts, the process context."""
from __future__ import annotations

import os
import signal
import uuid

import pytest

from shm_ring.naming import cleanup_stale, list_objects
from tests.support.bounds import BOUND
from tests.support.fake_broker import FakeCluster
from tests.support.processes import CTX

#: Rough seconds a test costs, by its heaviest marker (setup.cfg): only to order files.
COST_BY_MARKER = (("spark", 8.0), ("slow", 5.0), ("multiprocess", 1.5))
UNMARKED_COST = 0.05


def _cost(item):
    return next((cost for marker, cost in COST_BY_MARKER if item.get_closest_marker(marker)),
                UNMARKED_COST)


def pytest_collection_modifyitems(config, items):
    """Files in decreasing estimated cost, each file's tests in their order, when the run
    gives each worker whole files (``--dist loadfile``). With the longest files first the
    two workers end together, instead of one running a Spark or e2e file alone at the end
    (xdist's own order, by number of tests, put those last): Longest Processing Time first.
    ``make test`` passes ``--no-loadscope-reorder`` so that xdist keeps this order."""
    if getattr(config.option, "dist", "no") != "loadfile":
        return
    costs = {}
    for item in items:
        costs[item.path] = costs.get(item.path, 0.0) + _cost(item)
    order = {path: rank for rank, path in enumerate(costs)}
    items.sort(key=lambda item: (-costs[item.path], order[item.path]))


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
