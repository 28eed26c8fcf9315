"""KafkaConsumer end to end against real broker processes (Cluster), records written by
KafkaProducer: exactly once and in order, positions and seeks, long polls, offset resets,
lookups by time, pause/resume, and a broker SIGKILLed and restarted under a consumer.

Every wait is bounded by BOUND; each cluster is stopped in a finally and must leave nothing
of its own in /dev/shm."""
from __future__ import annotations

import threading
import time

import pytest

from cluster.errors import (
    IllegalStateError,
    NoBrokersAvailable,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
)
from cluster.producer.kafka_producer import KafkaProducer
from cluster.structs import OffsetAndTimestamp, TopicPartition
from cluster.supervisor.cluster import Cluster
from consumer_proc.consumer import KafkaConsumer
from consumer_proc.fetch_metrics import GROUP
from shm_ring.naming import list_objects
from tests.support.bounds import BOUND
from tests.support.clock import T0
from tests.support.processes import CTX

PARTITIONS = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("consumer"), brokers=2, num_partitions=PARTITIONS)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        assert cluster.cluster_id is None or list_objects(cluster.cluster_id) == []


def produce(cluster, topic, values, partition=None, keys=None, timestamps=None):
    """Write ``values`` (acks=1); return their RecordMetadata in order."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1, linger_ms=1,
                             max_block_ms=BOUND * 1000)
    try:
        futures = [producer.send(topic, value, key=None if keys is None else keys[i],
                                 partition=partition,
                                 timestamp_ms=None if timestamps is None else timestamps[i])
                   for i, value in enumerate(values)]
        producer.flush(BOUND)
        return [future.get(BOUND) for future in futures]
    finally:
        producer.close()


def consumer(cluster, *topics, **config):
    config.setdefault("auto_offset_reset", "earliest")
    return KafkaConsumer(*topics, bootstrap_servers=cluster.bootstrap_servers, **config)


def collect(consumer, count, batches=False):
    """Poll until ``count`` records came; {TopicPartition: [(offset, value)]}."""
    got = {}
    total = 0
    deadline = time.monotonic() + BOUND
    while total < count:
        assert time.monotonic() < deadline, f"only {total} of {count} records within {BOUND} s"
        if batches:
            for tp, runs in consumer.poll_batches(timeout_ms=200).items():
                for columns in runs:
                    rows = list(zip(columns.offsets.tolist(), columns.values()))
                    got.setdefault(tp, []).extend(rows)
                    total += len(rows)
        else:
            for tp, records in consumer.poll(timeout_ms=200).items():
                got.setdefault(tp, []).extend((r.offset, r.value) for r in records)
                total += len(records)
    return got


def by_partition(metadata, values):
    expected = {}
    for meta, value in zip(metadata, values):
        expected.setdefault(TopicPartition(meta.topic, meta.partition), []).append(
            (meta.offset, value))
    return expected


@pytest.mark.multiprocess
def test_subscribe_reads_every_partition_exactly_once_in_order(cluster):
    values = [b"value-%d" % i for i in range(3000)]
    metadata = produce(cluster, "every", values, keys=[b"k%d" % (i % 50) for i in range(3000)])
    expected = by_partition(metadata, values)
    assert len(expected) == PARTITIONS
    with consumer(cluster, "every", consumer_timeout_ms=BOUND * 1000) as c:
        assert c.assignment() == {TopicPartition("every", p) for p in range(PARTITIONS)}
        assert c.subscription() == {"every"}
        got = {}
        for count, record in enumerate(c, 1):
            got.setdefault(TopicPartition(record.topic, record.partition), []).append(
                (record.offset, record.value))
            if count == len(values):
                break
        assert got == expected  # every record once, in offset order per partition
        assert c.poll(timeout_ms=300) == {}
        assert c.end_offsets(list(expected)) == {
            tp: rows[-1][0] + 1 for tp, rows in expected.items()}


@pytest.mark.multiprocess
def test_subscribing_before_the_topic_exists(cluster):
    with consumer(cluster, "late") as c:  # its metadata request creates the topic
        produce(cluster, "late", [b"first"], partition=2)
        assert collect(c, 1) == {TopicPartition("late", 2): [(0, b"first")]}
        assert len(c.assignment()) == PARTITIONS


@pytest.mark.multiprocess
def test_poll_batches_and_poll_return_the_same_records(cluster):
    values = [b"%05d" % i for i in range(2000)]
    expected = by_partition(produce(cluster, "bulk", values), values)
    with consumer(cluster, "bulk") as c:
        first = c.poll(timeout_ms=BOUND * 1000, max_records=7)
        assert 0 < sum(map(len, first.values())) <= 7
        got = {tp: [(r.offset, r.value) for r in records] for tp, records in first.items()}
        taken = sum(map(len, got.values()))
        for tp, rows in collect(c, len(values) - taken, batches=True).items():
            got.setdefault(tp, []).extend(rows)
        assert got == expected


@pytest.mark.multiprocess
def test_seek_and_positions(cluster):
    tp = TopicPartition("seeks", 0)
    produce(cluster, "seeks", [b"%d" % i for i in range(50)], partition=0)
    with consumer(cluster) as c:
        c.assign([tp])
        assert c.position(tp) == 0  # earliest, resolved by a ListOffsets
        c.seek(tp, 10)
        assert c.position(tp) == 10
        records = c.poll(timeout_ms=BOUND * 1000, max_records=5)[tp]
        assert [r.offset for r in records] == [10, 11, 12, 13, 14]
        assert [r.value for r in records] == [b"10", b"11", b"12", b"13", b"14"]
        assert c.position(tp) == 15
        c.seek_to_end(tp)
        assert c.position(tp) == 50
        c.seek_to_beginning()
        assert c.position(tp) == 0
        assert c.highwater(tp) == 50
        with pytest.raises(ValueError, match="Offset must be int >= 0"):
            c.seek(tp, -1)
        with pytest.raises(ValueError, match="Unassigned partition"):
            c.seek(TopicPartition("seeks", 1), 0)
        with pytest.raises(IllegalStateError, match="not assigned"):
            c.position(TopicPartition("seeks", 1))
        with pytest.raises(IllegalStateError, match="only one way"):
            c.subscribe(["seeks"])
        missing = TopicPartition("seeks", 99)  # no such partition: no leader to ask
        c.assign([tp, missing])
        assert c.position(missing, timeout_ms=300) is None


@pytest.mark.multiprocess
def test_long_poll_returns_when_data_arrives(cluster):
    tp = TopicPartition("waits", 0)
    produce(cluster, "waits", [b"old"], partition=0)
    with consumer(cluster, auto_offset_reset="latest", fetch_max_wait_ms=500) as c:
        c.assign([tp])
        assert c.position(tp) == 1
        assert c.poll(timeout_ms=300) == {}  # nothing new: empty after the timeout
        writer = threading.Timer(0.3, produce, (cluster, "waits", [b"new"], 0))
        writer.start()
        try:
            records = c.poll(timeout_ms=BOUND * 1000)
        finally:
            writer.join(BOUND)
        assert [(r.offset, r.value) for r in records[tp]] == [(1, b"new")]


@pytest.mark.multiprocess
def test_fetch_size_settings(cluster):
    """fetch_min_bytes larger than anything written: the broker answers at fetch_max_wait_ms
    with what there is. Fetch sizes of one byte: still one whole batch per fetch (KIP-74),
    so the consumer gets through every record."""
    tp = TopicPartition("sizes", 0)
    values = [b"s%d" % i for i in range(50)]
    metadata = produce(cluster, "sizes", values, partition=0)
    with consumer(cluster, fetch_min_bytes=10 << 20, fetch_max_wait_ms=100) as c:
        c.assign([tp])
        assert collect(c, 50) == by_partition(metadata, values)
    with consumer(cluster, fetch_max_bytes=1, max_partition_fetch_bytes=1) as c:
        c.assign([tp])
        assert collect(c, 50) == by_partition(metadata, values)


@pytest.mark.multiprocess
def test_auto_offset_reset_variants(cluster):
    tp = TopicPartition("resets", 0)
    produce(cluster, "resets", [b"a", b"b"], partition=0)
    with consumer(cluster, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert collect(c, 2) == {tp: [(0, b"a"), (1, b"b")]}
    with consumer(cluster, auto_offset_reset="latest") as c:
        c.assign([tp])
        assert c.position(tp) == 2
        produce(cluster, "resets", [b"c"], partition=0)
        assert collect(c, 1) == {tp: [(2, b"c")]}
    with consumer(cluster, auto_offset_reset="none") as c:
        c.assign([tp])
        with pytest.raises(NoOffsetForPartitionError, match="resets"):
            c.poll(timeout_ms=100)
        with pytest.raises(NoOffsetForPartitionError):
            c.position(tp)
        c.seek(tp, 1)
        assert collect(c, 2) == {tp: [(1, b"b"), (2, b"c")]}


@pytest.mark.multiprocess
def test_offsets_for_times_and_first_and_last(cluster):
    tp = TopicPartition("times", 0)
    stamps = [T0 + 10 * i for i in range(20)]
    produce(cluster, "times", [b"%d" % i for i in range(20)], partition=0, timestamps=stamps)
    with consumer(cluster) as c:
        found = c.offsets_for_times({tp: T0 + 25, TopicPartition("times", 1): T0})
        assert found == {tp: OffsetAndTimestamp(3, T0 + 30, found[tp].leader_epoch),
                         TopicPartition("times", 1): None}  # an empty partition: none
        assert c.offsets_for_times({tp: T0})[tp].offset == 0
        assert c.offsets_for_times({tp: T0 + 10_000}) == {tp: None}
        with pytest.raises(ValueError, match="cannot be negative"):
            c.offsets_for_times({tp: -5})
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 20}
        assert "times" in c.topics()
        assert c.partitions_for_topic("times") == set(range(PARTITIONS))
        assert c.partitions_for_topic("no-such-topic") == set()


@pytest.mark.multiprocess
def test_pause_and_resume(cluster):
    p0, p1 = TopicPartition("pauses", 0), TopicPartition("pauses", 1)
    produce(cluster, "pauses", [b"zero"], partition=0)
    produce(cluster, "pauses", [b"one"], partition=1)
    with consumer(cluster) as c:
        c.assign([p0, p1])
        c.pause(p0)
        assert c.paused() == {p0}
        assert collect(c, 1) == {p1: [(0, b"one")]}
        assert c.poll(timeout_ms=300) == {}  # p0 holds a record, but is paused
        c.resume(p0)
        assert c.paused() == set()
        assert collect(c, 1) == {p0: [(0, b"zero")]}


@pytest.mark.multiprocess
def test_out_of_range_offsets_reset_or_raise(cluster):
    tp = TopicPartition("ranges", 0)
    produce(cluster, "ranges", [b"a", b"b", b"c"], partition=0)
    with consumer(cluster, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.seek(tp, 1000)
        assert collect(c, 3) == {tp: [(0, b"a"), (1, b"b"), (2, b"c")]}
    with consumer(cluster, auto_offset_reset="none") as c:
        c.assign([tp])
        c.seek(tp, 1000)
        deadline = time.monotonic() + BOUND
        with pytest.raises(OffsetOutOfRangeError, match="fetch offset 1000 of ranges-0"):
            while time.monotonic() < deadline:
                c.poll(timeout_ms=200)


@pytest.mark.multiprocess
def test_deserializers_and_iteration_timeout(cluster):
    produce(cluster, "typed", [b"1", b"2", b"3"], partition=0, keys=[b"a", b"b", b"c"])

    class Upper:
        def deserialize(self, topic, headers, data):
            return (topic, data.decode().upper())
    with consumer(cluster, "typed", key_deserializer=Upper(), value_deserializer=int,
                  consumer_timeout_ms=500) as c:
        records = list(c)  # ends after 500 ms without records
        assert [(r.key, r.value) for r in records] == [
            (("typed", "A"), 1), (("typed", "B"), 2), (("typed", "C"), 3)]
        assert [(r.serialized_key_size, r.serialized_value_size) for r in records] == [
            (1, 1)] * 3


@pytest.mark.multiprocess
def test_commit_without_a_group_and_closed_consumer(cluster):
    produce(cluster, "closing", [b"x"] * 10, keys=[b"%d" % i for i in range(10)])
    before = set(list_objects(cluster.cluster_id))
    c = consumer(cluster)
    c.end_offsets([TopicPartition("closing", p) for p in range(PARTITIONS)])  # both brokers
    assert set(list_objects(cluster.cluster_id)) > before  # its connections' rings
    with pytest.raises(IllegalStateError, match="Requires group_id"):
        c.commit()
    c.close()
    assert set(list_objects(cluster.cluster_id)) <= before  # unlinked by close
    c.close()
    with pytest.raises(IllegalStateError, match="closed"):
        c.poll()


@pytest.mark.multiprocess
def test_pattern_subscription_reads_every_matching_topic(cluster):
    produce(cluster, "pat-a", [b"a"], partition=0)
    produce(cluster, "pat-b", [b"b"], partition=1)
    produce(cluster, "other", [b"x"], partition=0)
    with consumer(cluster) as c:
        c.subscribe(pattern="^pat-")
        got = collect(c, 2)
        assert got == {TopicPartition("pat-a", 0): [(0, b"a")],
                       TopicPartition("pat-b", 1): [(0, b"b")]}
        assert c.subscription() == {"pat-a", "pat-b"}
        assert len(c.assignment()) == 2 * PARTITIONS


def read_partition(data_dir, tp, count, results):
    """A consumer process: read ``count`` records of ``tp`` and report them."""
    with KafkaConsumer(bootstrap_servers=data_dir, auto_offset_reset="earliest") as c:
        c.assign([tp])
        results.put((tp, collect(c, count)[tp]))


@pytest.mark.multiprocess
def test_consumers_in_other_processes(cluster, spawn):
    values = [b"mp-%d" % i for i in range(1000)]
    expected = by_partition(produce(cluster, "processes", values), values)
    results = CTX.Queue()
    workers = [spawn(read_partition, cluster.bootstrap_servers, tp, len(rows), results)
               for tp, rows in expected.items()]
    got = dict(results.get(timeout=BOUND) for _ in workers)
    for worker in workers:
        worker.join(BOUND)
        assert worker.exitcode == 0
    assert got == expected


def test_a_consumer_needs_a_running_cluster(tmp_path):
    with pytest.raises(NoBrokersAvailable, match="ringlog data directory"):
        KafkaConsumer(bootstrap_servers=str(tmp_path))


@pytest.mark.multiprocess
def test_a_broker_killed_and_restarted_under_a_consumer(tmp_path):
    """Partition 0 lives on broker 0, partition 1 on broker 1. Broker 1 is SIGKILLed: the
    consumer keeps reading partition 0, counts the failed fetch, and reads partition 1
    again once broker 1 is back — every acknowledged record exactly once, in order."""
    cluster = Cluster(tmp_path / "data", brokers=2, num_partitions=2)
    try:
        cluster.start()
        before = [b"before-%d" % i for i in range(400)]
        metadata = produce(cluster, "faults", before, keys=[b"%d" % i for i in range(400)])
        leaders = {p: cluster.metadata().partition("faults", p).leader for p in (0, 1)}
        assert sorted(leaders.values()) == [0, 1]
        victim = 1
        survivor = 1 - [p for p, broker in leaders.items() if broker == victim][0]
        expected = by_partition(metadata, before)
        with consumer(cluster, "faults", fetch_max_wait_ms=100) as c:
            got = collect(c, len(before))
            cluster.kill_broker(victim)
            during = [b"during-%d" % i for i in range(100)]
            metadata = produce(cluster, "faults", during, partition=survivor)
            for tp, rows in by_partition(metadata, during).items():
                expected[tp] += rows
            for tp, rows in collect(c, len(during)).items():
                got[tp] += rows
            cluster.start_broker(victim)
            after = [b"after-%d" % i for i in range(100)]
            metadata = produce(cluster, "faults", after, partition=1 - survivor)
            for tp, rows in by_partition(metadata, after).items():
                expected[tp] += rows
            for tp, rows in collect(c, len(after)).items():
                got[tp] += rows
            assert got == expected
            # The connection to the dead broker failed before one to its successor opened.
            assert c.metrics()[GROUP]["fetch-error-total"] >= 1
    finally:
        cluster.stop()
        assert cluster.cluster_id is None or list_objects(cluster.cluster_id) == []


@pytest.mark.multiprocess
def test_a_new_topic_is_looked_up_without_waiting_out_the_retry_backoff(cluster):
    """The consumer's own metadata refresh at start-up does not delay the lookup of a topic
    assigned afterwards by retry_backoff_ms (Kafka's requestUpdateForNewTopics)."""
    produce(cluster, "fresh-topic", [b"one"], partition=0)
    tp = TopicPartition("fresh-topic", 0)
    with consumer(cluster, retry_backoff_ms=60_000) as c:
        c.assign([tp])
        c.seek(tp, 0)
        records = c.poll(timeout_ms=BOUND * 1000 / 3)
    assert [r.value for r in records.get(tp, [])] == [b"one"]
