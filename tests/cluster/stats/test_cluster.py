"""Every process of a running cluster publishes its page: a broker, a producer process and a
consumer process appear with their roles and counters that match what they did; their
pages go when they close, the broker's when the cluster stops. ``ringlog chaos``'s worker
processes say what they are."""
from __future__ import annotations

import time

import pytest

from cluster.producer.kafka_producer import KafkaProducer
from cluster.stats.reader import list_pages, read_all
from cluster.supervisor.cluster import Cluster
from cluster.tools.chaos.workload import ClientSpec, consume, produce
from consumer_proc.consumer import KafkaConsumer
from replica_proc.broker_stats import TIMED_EVERY
from shm_ring.naming import list_objects
from tests.support.bounds import BOUND
from tests.support.processes import CTX
from tests.support.topics import create_topic

pytestmark = pytest.mark.multiprocess

RECORDS = 500


def producing(bootstrap, done):
    with KafkaProducer(bootstrap_servers=bootstrap, client_id="stats-producer",
                       linger_ms=1) as producer:
        for i in range(RECORDS):
            producer.send("figures", b"value-%d" % i)
        producer.flush(BOUND)
        done.wait(BOUND)


def consuming(bootstrap, done):
    with KafkaConsumer("figures", bootstrap_servers=bootstrap, client_id="stats-consumer",
                       auto_offset_reset="earliest", fetch_max_wait_ms=50) as consumer:
        seen = 0
        deadline = time.monotonic() + BOUND
        while seen < RECORDS and time.monotonic() < deadline:
            seen += sum(len(r) for r in consumer.poll(100).values())
        done.wait(BOUND)


def wait_for_roles(cluster_id, condition):
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        by_role = {s.role: s for s in read_all(cluster_id)}
        if condition(by_role):
            return by_role
        time.sleep(0.1)
    raise AssertionError(f"pages of {cluster_id}: {read_all(cluster_id)}")


def test_broker_producer_and_consumer_processes_all_publish(tmp_path, publishing, spawn):
    running = Cluster(tmp_path / "data", brokers=1, num_partitions=1).start()
    done = CTX.Event()
    try:
        create_topic(running, "figures", 1)
        producer = spawn(producing, running.bootstrap_servers, done)
        consumer = spawn(consuming, running.bootstrap_servers, done)

        def all_done(by_role):
            return (set(by_role) == {"broker", "producer", "consumer"}
                    and by_role["producer"].counters.get("record-send-total") == RECORDS
                    and by_role["consumer"].counters.get("records-consumed-total") == RECORDS
                    and by_role["broker"].counters.get("records-in-total") == RECORDS)
        by_role = wait_for_roles(running.cluster_id, all_done)
        broker = by_role["broker"]
        assert broker.name == "broker-0" and broker.alive and not broker.stale
        assert broker.counters["request-total:Produce"] >= 1
        assert broker.counters["request-total:Fetch"] >= 1
        produces = int(broker.counters["request-total:Produce"])
        assert broker.histograms["request-latency-ms:Produce"].count == \
            (produces + TIMED_EVERY - 1) // TIMED_EVERY  # the 1st, the 17th, ... timed
        assert broker.counters["bytes-in-total"] > RECORDS * len(b"value-0")
        assert broker.counters["bytes-out-total"] >= broker.counters["bytes-in-total"]
        assert broker.counters["partition-count"] == broker.counters["leader-count"] >= 1
        assert broker.counters["under-replicated-partitions"] == 0
        assert broker.counters["offline-partitions"] == 0
        # the rings of its client connections, two per connection, for rings.png
        rings = broker.counters["ring-count"]
        assert rings >= 4 and rings % 2 == 0
        assert 0 <= broker.counters["ring-occupancy-bytes"] <= \
            broker.counters["ring-capacity-bytes"]
        assert broker.counters["ring-capacity-bytes"] >= rings * 4096
        assert 0.0 <= broker.counters["ring-occupancy-percent-max"] <= 100.0
        assert broker.rss > 0 and broker.threads >= 2
        assert (by_role["producer"].name, by_role["producer"].pid) == \
            ("stats-producer", producer.pid)
        assert by_role["producer"].histograms["request-latency-ms:Produce"].count >= 1
        assert by_role["producer"].counters["buffer-available-bytes"] > 0
        assert (by_role["consumer"].name, by_role["consumer"].pid) == \
            ("stats-consumer", consumer.pid)
        assert by_role["consumer"].histograms["fetch-latency-ms"].count >= 1
        done.set()
        for process in (producer, consumer):
            process.join(BOUND)
            assert process.exitcode == 0
        assert [s.role for s in read_all(running.cluster_id)] == ["broker"]
    finally:
        done.set()
        running.stop()
    assert list_pages(running.cluster_id) == []
    assert list_objects(running.cluster_id) == []


def test_chaos_workers_publish_under_their_roles(tmp_path, publishing, spawn):
    running = Cluster(tmp_path / "data", brokers=1, num_partitions=1).start()
    stop = CTX.Event()
    try:
        create_topic(running, "chaos", 1)
        workers = [spawn(work, ClientSpec(running.bootstrap_servers, "chaos", 1, 3,
                                          str(tmp_path / f"{work.__name__}.jsonl")), stop)
                   for work in (produce, consume)]

        def both(by_role):
            # each page is published on its own clock: wait for both to show records
            return {"chaos-producer", "chaos-consumer"} <= set(by_role) and \
                by_role["chaos-consumer"].counters.get("records-consumed-total", 0) > 0 and \
                by_role["chaos-producer"].counters.get("record-send-total", 0) > 0
        by_role = wait_for_roles(running.cluster_id, both)
        assert by_role["chaos-producer"].name == "chaos-producer-3"
        assert by_role["chaos-producer"].counters["record-send-total"] > 0
        assert by_role["chaos-consumer"].name == "chaos-consumer-3"
        stop.set()
        for worker in workers:
            worker.join(BOUND)
            assert worker.exitcode == 0
    finally:
        stop.set()
        running.stop()
    assert list_objects(running.cluster_id) == []
