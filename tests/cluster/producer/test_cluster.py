"""KafkaProducer and KafkaAdminClient end to end against a real cluster (broker processes):
records land in the brokers' logs in order, a killed broker gives errors and then serves
again, and the admin client's errors name the topic. Every test stops its cluster; nothing
may be left in /dev/shm."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from cluster.admin.kafka_admin_client import KafkaAdminClient, NewPartitions, NewTopic
from cluster.errors import (
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaConnectionError,
    KafkaTimeoutError,
    TopicAlreadyExistsError,
)
from cluster.producer.kafka_producer import KafkaProducer
from cluster.producer.partitioner import partition_for_key
from cluster.supervisor.cluster import Cluster
from segments.log import PartitionLog
from segments.record.records import iter_records
from shm_ring.naming import list_objects
from tests.support.bounds import BOUND

# Every test runs a real cluster (broker processes).
pytestmark = pytest.mark.multiprocess

FAST = dict(retry_backoff_ms=10, reconnect_backoff_ms=10, reconnect_backoff_max_ms=100)


@pytest.fixture
def cluster(tmp_path):
    started = []

    def start(brokers):
        running = Cluster(tmp_path / "data", brokers=brokers, num_partitions=1).start()
        started.append(running)
        return running
    yield start
    for running in started:
        running.stop()
        assert list_objects(running.cluster_id) == []


def stored(data_dir, topic, partition):
    """The records of a partition, read from whichever broker's log holds it (the cluster
    must be stopped)."""
    [path] = glob.glob(os.path.join(data_dir, "broker-*", f"{topic}-{partition}"))
    log = PartitionLog(path)
    try:
        return list(iter_records(log.read(0, 1 << 30)))
    finally:
        log.close()


def test_records_reach_the_brokers_logs_in_order(cluster):
    running = cluster(brokers=2)
    with KafkaAdminClient(bootstrap_servers=running.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("orders", num_partitions=4, replication_factor=1)])
    keys = [b"customer-%d" % (i % 50) for i in range(2000)]
    with KafkaProducer(bootstrap_servers=running.bootstrap_servers, acks="all",
                       linger_ms=2, **FAST) as producer:
        acknowledged = []
        futures = [producer.send("orders", b"order-%d" % i, key=key).add_callback(
            acknowledged.append) for i, key in enumerate(keys)]
        bulk = producer.send_batch("orders", np.full((20_000, 100), 7, dtype=np.uint8),
                                   partition=3)
        producer.flush(BOUND)
    metas = [f.get(0) for f in futures]
    assert len(acknowledged) == 2000
    assert [m.partition for m in metas] == [partition_for_key(k, 4) for k in keys]
    bulk_records = sum(f.get(0).record_count for f in bulk)
    assert bulk_records == 20_000
    running.stop()
    for partition in range(4):
        mine = [(m.offset, b"order-%d" % i) for i, m in enumerate(metas)
                if m.partition == partition]
        records = stored(running.data_dir, "orders", partition)
        keyed = [(r.offset, r.value) for r in records if r.key is not None]
        assert keyed == mine
        assert [offset for offset, _ in mine] == list(range(len(mine)))
        assert len(records) == len(mine) + (bulk_records if partition == 3 else 0)


def test_large_values_sent_as_parts_land_intact(cluster):
    """Values from 64 KB up are sent as the caller's bytes (``BatchParts``), a 3 MB one as
    fragments of a frame longer than the ring's largest; keys, headers and idempotence
    stamps are checksummed with them."""
    running = cluster(brokers=1)
    with KafkaAdminClient(bootstrap_servers=running.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("blobs", num_partitions=1, replication_factor=1,
                                      topic_configs={"max.message.bytes": str(4 << 20)})])
    rng = np.random.default_rng(24)
    sizes = [64 << 10, 100, 1 << 20, 3 << 20, (256 << 10) + 1]
    values = [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for size in sizes]
    with KafkaProducer(bootstrap_servers=running.bootstrap_servers, acks="all",
                       max_request_size=4 << 20, **FAST) as producer:
        futures = [producer.send("blobs", value, key=b"k%d" % i, headers=[("n", b"%d" % i)])
                   for i, value in enumerate(values)]
        producer.flush(BOUND)
    assert [f.get(0).offset for f in futures] == list(range(len(values)))
    running.stop()
    records = stored(running.data_dir, "blobs", 0)
    assert [(r.key, r.value, list(r.headers)) for r in records] == [
        (b"k%d" % i, value, [("n", b"%d" % i)]) for i, value in enumerate(values)]


def test_a_killed_broker_gives_errors_then_serves_again(cluster):
    running = cluster(brokers=2)
    with KafkaAdminClient(bootstrap_servers=running.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("events", replica_assignments={0: [0], 1: [1]})])
    with KafkaProducer(bootstrap_servers=running.bootstrap_servers, acks=1, linger_ms=0,
                       enable_idempotence=False, request_timeout_ms=1000,
                       delivery_timeout_ms=1500, **FAST) as producer:
        before = [producer.send("events", b"before-%d" % i, partition=1).get(BOUND)
                  for i in range(10)]
        running.kill_broker(1)
        lost = producer.send("events", b"lost", partition=1)
        with pytest.raises((KafkaTimeoutError, KafkaConnectionError)):
            lost.get(BOUND)
        assert producer.send("events", b"elsewhere", partition=0).get(BOUND).offset == 0
        running.start_broker(1)
        after = producer.send("events", b"after", partition=1).get(BOUND)
    assert [m.offset for m in before] == list(range(10))
    assert after.offset == 10
    running.stop()
    assert [r.value for r in stored(running.data_dir, "events", 1)] == [
        b"before-%d" % i for i in range(10)] + [b"after"]


def test_admin_errors_from_real_brokers_name_the_topic(cluster):
    running = cluster(brokers=2)
    with KafkaAdminClient(bootstrap_servers=running.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("logs", 2, 1)])
        with pytest.raises(TopicAlreadyExistsError, match="topic 'logs'"):
            admin.create_topics([NewTopic("logs", 2, 1)])
        with pytest.raises(InvalidReplicationFactorError, match="topic 'wide'"):
            admin.create_topics([NewTopic("wide", 1, 3)])
        with pytest.raises(InvalidTopicError, match="topic 'bad/name'"):
            admin.create_topics([NewTopic("bad/name", 1, 1)])
        admin.create_partitions({"logs": NewPartitions(3)})
        [described] = admin.describe_topics(["logs"])
        assert [p["partition_index"] for p in described["partitions"]] == [0, 1, 2]
        assert {p["leader_id"] for p in described["partitions"]} == {0, 1}
        admin.delete_topics(["logs"])
        assert "logs" not in admin.list_topics()
