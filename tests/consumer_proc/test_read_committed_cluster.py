"""KafkaConsumer's isolation_level against a real broker process: with read_committed it
returns the committed records only — none of an aborted transaction, nothing at or past
the last stable offset (an open transaction holds it) — and its end offset is the LSO;
with read_uncommitted it returns every data record; neither ever returns a transaction
marker. Transactions are written as a producer and its coordinator would
(tests/support/transactions.py)."""
from __future__ import annotations

import time

import pytest

from cluster import KafkaAdminClient, NewTopic
from cluster.structs import TopicPartition
from cluster.supervisor.cluster import Cluster
from consumer_proc.consumer import KafkaConsumer
from shm_ring.naming import list_objects
from tests.support.bounds import BOUND
from tests.support.transactions import (
    INTERLEAVED,
    committed_values,
    data_values,
    write_interleaved,
)

pytestmark = pytest.mark.multiprocess

TOPIC = "txn"
TP = TopicPartition(TOPIC, 0)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("read-committed"), brokers=1, num_partitions=1)
    try:
        cluster.start()
        with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 1)])
        cluster.wait_for_metadata(lambda image: TOPIC in image.topics)
        broker = cluster.broker_ids[0]
        offsets = write_interleaved(cluster.namespace, broker, TOPIC)
        yield cluster, offsets
    finally:
        cluster.stop()
        assert cluster.cluster_id is None or list_objects(cluster.cluster_id) == []


def read_all(cluster, isolation_level, until):
    """Values polled from offset 0 until the position reaches ``until`` (bounded)."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                             isolation_level=isolation_level, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.assign([TP])
        consumer.seek(TP, 0)
        values = []
        deadline = time.monotonic() + BOUND
        while consumer.position(TP) < until:
            assert time.monotonic() < deadline, f"position {consumer.position(TP)} < {until}"
            for records in consumer.poll(timeout_ms=100).values():
                values += [bytes(r.value) for r in records]
        end = consumer.end_offsets([TP])[TP]
        # nothing more comes: the rest is past the LSO (read_committed) or the log end
        time.sleep(0.3)
        more = consumer.poll(timeout_ms=300)
        return values, end, more, consumer.position(TP)
    finally:
        consumer.close()


def test_read_committed_returns_committed_records_only(written):
    cluster, offsets = written
    lso = offsets[[value for value, _, _ in INTERLEAVED].index(b"p4-open")]
    values, end, more, position = read_all(cluster, "read_committed", lso)
    assert values == committed_values()
    assert end == lso and position == lso and not more


def test_read_uncommitted_returns_every_data_record_and_no_marker(written):
    cluster, offsets = written
    log_end = offsets[-1] + 1
    values, end, more, position = read_all(cluster, "read_uncommitted", log_end)
    assert values == data_values()
    assert end == log_end == position and not more
