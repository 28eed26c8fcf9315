"""Many client processes against real broker processes, through the public API only: every
record acknowledged to a producer is read exactly once, at the offset it was acknowledged
at, in the order its producer sent it (per partition).

Each producer and consumer is its own OS process (forked from the test); the ``e2e``
fixture stops the cluster and fails the test if any process it started still runs or any
shared-memory object of its cluster is left."""
from __future__ import annotations

import time

import pytest

from shm_ring.naming import list_objects
from tests.e2e.helpers import (
    check_exactly_once_in_order,
    consume_partitions,
    expected_layout,
    produce_keyed,
)
from tests.support.bounds import BOUND
from tests.support.processes import CTX
from tests.support.topics import create_topic

# Every test runs a real cluster (broker processes) and client processes.
pytestmark = pytest.mark.multiprocess


def test_three_producers_and_three_consumers_on_three_brokers(e2e):
    """A 6-partition topic over 3 brokers (2 partitions each); 3 producer processes send
    keyed records while 3 consumer processes, 2 partitions each, read them."""
    cluster = e2e.cluster(brokers=3)
    leaders = create_topic(cluster, "orders", 6)
    assert sorted(leaders.values()) == [0, 0, 1, 1, 2, 2]  # spread evenly
    producers, count = range(3), 8000
    layout = expected_layout(producers, count, 6)
    assert all(layout.values())  # the keys reach every partition
    readers = [e2e.start(f"consumer-{n}", consume_partitions, cluster.bootstrap_servers,
                         "orders", {p: len(layout[p]) for p in (n, n + 3)},
                         fetch_max_wait_ms=100)
               for n in range(3)]
    writers = [e2e.start(f"producer-{n}", produce_keyed, cluster.bootstrap_servers, "orders",
                         n, count, acks="all", linger_ms=5)
               for n in producers]
    acknowledged = {n: writer.result() for n, writer in zip(producers, writers)}
    consumed = {}
    for reader in readers:
        consumed.update(reader.result())
    check_exactly_once_in_order(consumed, layout, acknowledged)


def test_thirty_two_client_processes_on_one_broker(e2e):
    """16 producer and 16 consumer processes connected to one broker at the same time (a
    barrier holds them until all 32 are connected); each consumer reads one of 16
    partitions that every producer writes to."""
    cluster = e2e.cluster(brokers=1)
    create_topic(cluster, "crowd", 16)
    producers, count = range(16), 1500
    layout = expected_layout(producers, count, 16)
    assert all(layout.values())
    barrier = CTX.Barrier(33)  # 32 clients and this test
    readers = [e2e.start(f"consumer-{p}", consume_partitions, cluster.bootstrap_servers,
                         "crowd", {p: len(layout[p])}, barrier, fetch_max_wait_ms=100)
               for p in range(16)]
    writers = [e2e.start(f"producer-{n}", produce_keyed, cluster.bootstrap_servers, "crowd",
                         n, count, barrier, acks=1, linger_ms=5)
               for n in producers]
    deadline = time.monotonic() + BOUND
    while barrier.n_waiting < 32:  # each waits there once its client is made
        assert time.monotonic() < deadline, f"only {barrier.n_waiting} of 32 clients ready"
        time.sleep(0.01)
    pids = {child.pid for child in readers + writers}
    names = list_objects(cluster.cluster_id)
    connected = {pid for pid in pids if any(f".c{pid}-" in name for name in names)}
    assert connected == pids  # 32 client processes hold a connection to the broker now
    barrier.wait(BOUND)
    acknowledged = {n: writer.result() for n, writer in zip(producers, writers)}
    consumed = {}
    for reader in readers:
        consumed.update(reader.result())
    check_exactly_once_in_order(consumed, layout, acknowledged)
