"""KafkaConsumer across a leader change, against fake brokers (threads of this process,
tests/support/fake_broker.py, whose brokers share each partition's log as in-sync replicas
would): the leader moves mid-stream, its epoch is bumped under the consumer (it sends
``current_leader_epoch``: FENCED_LEADER_EPOCH), the leader dies (before or after the new
one is elected) or hangs, a storage error — the records read are exactly the log's, each
once, in order; a new leader missing the tail (OFFSET_OUT_OF_RANGE) is handled by
``auto_offset_reset``; offset lookups follow the leader too."""
from __future__ import annotations

import time

import pytest

from cluster.errors import (
    FencedLeaderEpochError,
    KafkaStorageError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
)
from cluster.structs import TopicPartition
from consumer_proc.consumer import KafkaConsumer
from tests.support.bounds import IN_PROCESS_BOUND

TP = TopicPartition("t", 0)


@pytest.fixture
def consumer_of():
    made = []

    def make(cluster, **config):
        settings = dict(bootstrap_servers=cluster.data_dir, auto_offset_reset="earliest",
                        retry_backoff_ms=5, reconnect_backoff_ms=5,
                        reconnect_backoff_max_ms=50, request_timeout_ms=2000,
                        fetch_max_wait_ms=10, max_partition_fetch_bytes=4096)
        settings.update(config)
        consumer = KafkaConsumer(**settings)
        made.append(consumer)
        consumer.assign([TP])
        return consumer
    yield make
    for consumer in made:
        consumer.close()


def append(cluster, first, count, per_batch=10):
    """Store records ``first`` .. ``first + count - 1`` in batches of ``per_batch``."""
    for start in range(first, first + count, per_batch):
        cluster.append("t", 0, [b"%05d" % i for i in range(start, min(start + per_batch,
                                                                       first + count))])


def read(consumer, got, total):
    """Poll until ``got`` (a list of (offset, value), extended in place) holds ``total``
    records; returns it."""
    deadline = time.monotonic() + IN_PROCESS_BOUND
    while len(got) < total:
        assert time.monotonic() < deadline, f"{len(got)} of {total} records"
        for records in consumer.poll(timeout_ms=50, max_records=37).values():
            got += [(r.offset, r.value) for r in records]
    return got


def log_of(cluster):
    return [(r.offset, r.value) for r in cluster.records("t", 0)]


def test_the_leader_moves_mid_stream(fake_cluster, consumer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", leaders=[0])
    append(cluster, 0, 500)
    consumer = consumer_of(cluster)
    got = read(consumer, [], 100)
    cluster.move_leader("t", 0, 1)  # broker 0 answers NOT_LEADER_OR_FOLLOWER
    append(cluster, 500, 200)
    read(consumer, got, 700)
    cluster.move_leader("t", 0, 0)
    append(cluster, 700, 100)
    read(consumer, got, 800)
    assert got == log_of(cluster)
    assert consumer.position(TP) == 800
    fetched_from = {broker for broker, name, _ in cluster.requests if name == "FETCH"}
    assert fetched_from == {0, 1}


def test_a_bumped_leader_epoch_fences_the_fetch_until_the_metadata_is_refreshed(
        fake_cluster, consumer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    append(cluster, 0, 300)
    consumer = consumer_of(cluster)
    got = read(consumer, [], 50)
    cluster.move_leader("t", 0, 0)  # same leader, epoch 0 -> 1
    append(cluster, 300, 300)
    read(consumer, got, 600)
    assert got == log_of(cluster)
    epochs = [p.current_leader_epoch for _, name, request in cluster.requests
              if name == "FETCH" for topic in request.topics for p in topic.partitions]
    assert epochs[0] == 0 and epochs[-1] == 1 and sorted(epochs) == epochs


def test_the_leader_dies_mid_stream(fake_cluster, consumer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", leaders=[0])
    append(cluster, 0, 400)
    consumer = consumer_of(cluster)
    got = read(consumer, [], 150)
    cluster.move_leader("t", 0, 1)
    cluster.stop_broker(0)  # the connection dies under the consumer
    append(cluster, 400, 100)
    read(consumer, got, 500)
    assert got == log_of(cluster)


def test_a_leader_elected_after_its_predecessor_died_is_found(fake_cluster, consumer_of):
    # A real failover's order: the metadata names the dead leader until the controller
    # has elected another.
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", leaders=[0])
    append(cluster, 0, 100)
    consumer = consumer_of(cluster)
    got = read(consumer, [], 100)
    before = len(cluster.requests)
    cluster.stop_broker(0)
    deadline = time.monotonic() + IN_PROCESS_BOUND
    while "METADATA" not in [name for _, name, _ in cluster.requests[before:]]:
        assert time.monotonic() < deadline, "no metadata refresh after the death"
        assert consumer.poll(timeout_ms=10) == {}
    cluster.move_leader("t", 0, 1)
    append(cluster, 100, 100)
    read(consumer, got, 200)
    assert got == log_of(cluster)


def test_a_hung_leader_is_given_up_after_the_request_timeout(fake_cluster, consumer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", leaders=[0])
    append(cluster, 0, 100)
    consumer = consumer_of(cluster, request_timeout_ms=300)
    got = read(consumer, [], 100)
    cluster.brokers[0].paused.set()  # alive, reads nothing: the fetch in flight hangs
    try:
        cluster.move_leader("t", 0, 1)
        append(cluster, 100, 100)
        read(consumer, got, 200)
    finally:
        cluster.brokers[0].paused.clear()
    assert got == log_of(cluster)


def test_a_storage_error_is_fetched_again_after_a_metadata_refresh(fake_cluster,
                                                                   consumer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    append(cluster, 0, 200)
    consumer = consumer_of(cluster)
    got = read(consumer, [], 20)
    before = len(cluster.requests)
    cluster.fail_next("t", 0, KafkaStorageError.errno, times=2, api="FETCH")
    append(cluster, 200, 200)
    read(consumer, got, 400)
    assert got == log_of(cluster)
    assert "METADATA" in [name for _, name, _ in cluster.requests[before:]]


def test_a_new_leader_missing_the_tail_resets_by_auto_offset_reset(fake_cluster,
                                                                   consumer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", leaders=[0])
    append(cluster, 0, 100)
    latest = consumer_of(cluster, auto_offset_reset="latest")
    earliest = consumer_of(cluster, auto_offset_reset="earliest")
    strict = consumer_of(cluster, auto_offset_reset="none")
    for consumer in (latest, earliest, strict):
        consumer.seek(TP, 0)
        assert len(read(consumer, [], 100)) == 100
    cluster.truncate("t", 0, 60)  # an unclean election: the new leader has 60 records
    cluster.move_leader("t", 0, 1)
    append(cluster, 60, 10)  # offsets 60..69 again: the new leader's records
    assert read(earliest, [], 70) == log_of(cluster)  # out of range at 100: from the start
    deadline = time.monotonic() + IN_PROCESS_BOUND
    while latest.position(TP) != 70:  # out of range at 100: from the end
        assert time.monotonic() < deadline
        assert latest.poll(timeout_ms=50) == {}
    with pytest.raises(OffsetOutOfRangeError, match="fetch offset 100 of t-0 is out of range"):
        deadline = time.monotonic() + IN_PROCESS_BOUND
        while time.monotonic() < deadline:
            strict.poll(timeout_ms=50)


def test_offset_lookups_of_unassigned_partitions_follow_the_leader(fake_cluster):
    # The lookup's topic is of interest to the metadata refreshes while it runs (Kafka's
    # transient topics): without that, the refresh after the dead leader would not name it.
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", leaders=[0])
    append(cluster, 0, 30)
    consumer = KafkaConsumer(bootstrap_servers=cluster.data_dir, retry_backoff_ms=5,
                             reconnect_backoff_ms=5, default_api_timeout_ms=5000)
    try:
        assert consumer.end_offsets([TP]) == {TP: 30}
        cluster.move_leader("t", 0, 1)
        cluster.stop_broker(0)
        append(cluster, 30, 10)
        assert consumer.end_offsets([TP]) == {TP: 40}
        assert consumer.beginning_offsets([TP]) == {TP: 0}
        # KIP-207: a new leader whose high watermark has not caught up yet answers
        # OFFSET_NOT_AVAILABLE (retriable); FENCED_LEADER_EPOCH asks for fresh metadata.
        before = len(cluster.requests)
        cluster.fail_next("t", 0, OffsetNotAvailableError.errno, times=2, api="LIST_OFFSETS")
        cluster.fail_next("t", 0, FencedLeaderEpochError.errno, api="LIST_OFFSETS")
        assert consumer.end_offsets([TP]) == {TP: 40}
        names = [name for _, name, _ in cluster.requests[before:]]
        assert names.count("LIST_OFFSETS") == 4 and "METADATA" in names
    finally:
        consumer.close()
