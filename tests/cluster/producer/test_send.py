"""KafkaProducer against fake brokers (threads of this process): futures and callbacks,
partitioning, retries with metadata refresh, broker failures and recovery, acks=0,
serializers, compression, flush and close, metadata waits, the bulk send."""
from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

from cluster.client.future import Future
from cluster.errors import (
    IllegalStateError,
    InvalidTopicError,
    KafkaConnectionError,
    KafkaStorageError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NoBrokersAvailable,
    NotLeaderForPartitionError,
    RecordTooLargeError,
)
from cluster.metadata import data_dir as dd
from cluster.producer.batch import RecordMetadata
from cluster.producer.kafka_producer import KafkaProducer
from cluster.producer.partitioner import partition_for_key
from segments.record import bulk
from segments.record.batch_header import BatchHeader
from segments.record.bulk import build_batches
from tests.support.bounds import IN_PROCESS_BOUND
from tests.support.paths import ROOT

#: What ``producer_of`` (conftest.py) sets here on top of its common settings.
PRODUCER_SETTINGS = {"linger_ms": 0, "reconnect_backoff_ms": 5, "reconnect_backoff_max_ms": 50}


def test_a_cluster_that_is_not_running_gives_no_brokers_available(tmp_path):
    cluster_id = dd.ensure_cluster_id(tmp_path)
    with pytest.raises(NoBrokersAvailable, match=f"cluster {cluster_id} in .* is not running"):
        KafkaProducer(bootstrap_servers=str(tmp_path))


# -- futures ---------------------------------------------------------------------------------------

def test_send_returns_record_metadata(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster)
    first = producer.send("logs", b"hello", key=b"k1", headers=[("h", b"12")],
                          timestamp_ms=1_700_000_000_123)
    second = producer.send("logs", b"world")
    meta = first.get(IN_PROCESS_BOUND)
    assert meta == RecordMetadata("logs", 0, ("logs", 0), 0, 1_700_000_000_123, None, 2, 5, 3)
    assert second.get(IN_PROCESS_BOUND).offset == 1
    null_header = producer.send("logs", b"v", headers=[("k", None)]).get(IN_PROCESS_BOUND)
    assert null_header.serialized_header_size == 1
    assert first.is_done and first.succeeded() and not first.failed()
    assert first.value == meta and first.exception is None
    [r1, r2, _] = cluster.records("logs", 0)
    assert (r1.key, r1.value, r1.headers, r1.timestamp) == (
        b"k1", b"hello", [("h", b"12")], 1_700_000_000_123)
    assert (r2.key, r2.value) == (None, b"world")


def test_records_keep_their_order_across_batches(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster, batch_size=512, linger_ms=2)
    futures = [producer.send("logs", b"%05d" % i, partition=0) for i in range(2000)]
    producer.flush(IN_PROCESS_BOUND)
    assert [f.get(0).offset for f in futures] == list(range(2000))
    assert [r.value for r in cluster.records("logs", 0)] == [b"%05d" % i for i in range(2000)]
    assert len(cluster.batches("logs", 0)) > 1


def test_callbacks_and_errbacks(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster)
    seen, errors = [], []
    future = producer.send("logs", b"a").add_callback(seen.append).add_errback(errors.append)
    future.get(IN_PROCESS_BOUND)
    late = []
    future.add_callback(late.append, )  # after completion: runs at once
    chained = Future()
    future.chain(chained)
    assert seen == late == [future.get(0)] and errors == []
    assert chained.get(0) == future.get(0)
    cluster.fail_next("logs", 0, RecordTooLargeError.errno)
    failed = producer.send("logs", b"b").add_errback(errors.append)
    with pytest.raises(RecordTooLargeError, match="topic 'logs' partition 0 on broker 0"):
        failed.get(IN_PROCESS_BOUND)
    assert errors == [failed.exception] and failed.failed() and not failed.retriable()


def test_get_times_out_while_the_broker_does_not_answer(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster)
    producer.send("logs", b"warm").get(IN_PROCESS_BOUND)
    cluster.brokers[0].paused.set()
    with pytest.raises(KafkaTimeoutError, match="no acknowledgement for record 0"):
        producer.send("logs", b"late").get(0.05)
    cluster.brokers[0].paused.clear()


# -- partitioning ----------------------------------------------------------------------------------

def test_same_key_same_partition_as_kafka(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("keyed", 6)
    producer = producer_of(cluster)
    keys = [b"user-%d" % i for i in range(60)]
    futures = [(key, producer.send("keyed", b"v", key=key)) for key in keys * 2]
    partitions = {}
    for key, future in futures:
        partitions.setdefault(key, set()).add(future.get(IN_PROCESS_BOUND).partition)
    assert all(len(p) == 1 for p in partitions.values())
    assert {k: p.pop() for k, p in partitions.items()} == {
        k: partition_for_key(k, 6) for k in keys}
    assert len(set(partition_for_key(k, 6) for k in keys)) == 6


def test_unkeyed_records_stick_to_a_partition_per_batch(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("sticky", 4)
    producer = producer_of(cluster, linger_ms=1000, batch_size=1024)
    futures = [producer.send("sticky", b"x" * 100) for _ in range(40)]
    producer.flush(IN_PROCESS_BOUND)
    partitions = [f.get(0).partition for f in futures]
    runs = [p for i, p in enumerate(partitions) if i == 0 or p != partitions[i - 1]]
    assert len(runs) == 5  # 8 records per 1 KB batch, then the sticky partition moves
    assert all(a != b for a, b in zip(runs, runs[1:]))


def test_explicit_partition_and_unknown_partition(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("logs", 2)
    producer = producer_of(cluster, max_block_ms=IN_PROCESS_BOUND * 1000)
    assert producer.send("logs", b"v", partition=1).get(IN_PROCESS_BOUND).partition == 1
    # kafka-python 3: ValueError at once (after one fresh look at the metadata), naming the
    # topic's partitions, not a wait of max_block_ms
    with pytest.raises(ValueError, match="^Unrecognized partition 5 for topic logs: it has 2 "
                                         "partitions, 0..1$"):
        producer.send("logs", b"v", partition=5)
    assert producer.partitions_for("logs") == {0, 1}


# -- retries and failures --------------------------------------------------------------------------

def test_not_leader_refreshes_metadata_and_retries_at_the_new_leader(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("moving", leaders=[0])
    producer = producer_of(cluster)
    assert producer.send("moving", b"before").get(IN_PROCESS_BOUND).offset == 0
    before = sum(1 for _, name, _ in cluster.requests if name == "PRODUCE")
    cluster.move_leader("moving", 0, 1)  # broker 0 now answers NOT_LEADER_OR_FOLLOWER
    meta = producer.send("moving", b"after").get(IN_PROCESS_BOUND)
    assert meta.offset == 1
    produces = [broker for broker, name, _ in cluster.requests if name == "PRODUCE"][before:]
    # Broker 0 refuses until the refreshed metadata arrives (once, or more under load),
    # then broker 1 takes the batch; every refusal was one retry.
    assert produces[-1] == 1 and set(produces[:-1]) == {0}
    assert producer.metrics()["producer-metrics"]["record-retry-total"] == len(produces) - 1


def test_retriable_errors_are_retried_until_retries_run_out(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("flaky")
    producer = producer_of(cluster, retries=2)
    cluster.fail_next("flaky", 0, NotLeaderForPartitionError.errno, times=2)
    assert producer.send("flaky", b"a").get(IN_PROCESS_BOUND).offset == 0
    cluster.fail_next("flaky", 0, NotLeaderForPartitionError.errno, times=3)
    with pytest.raises(NotLeaderForPartitionError, match="topic 'flaky' partition 0"):
        producer.send("flaky", b"b").get(IN_PROCESS_BOUND)
    assert producer.metrics()["producer-metrics"]["record-error-total"] == 1


def test_kafka_storage_error_is_retried_after_a_metadata_refresh(fake_cluster, producer_of):
    # A broker whose disk is full answers KAFKA_STORAGE_ERROR for that partition and has
    # stored nothing: as Kafka's producer, refresh metadata and retry; ack once stored.
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("disk")
    producer = producer_of(cluster)
    assert producer.send("disk", b"first").get(IN_PROCESS_BOUND).offset == 0
    before = len(cluster.requests)
    cluster.fail_next("disk", 0, KafkaStorageError.errno, times=2)
    assert producer.send("disk", b"second").get(IN_PROCESS_BOUND).offset == 1
    names = [name for _, name, _ in cluster.requests[before:]]
    produces = [n for n, name in enumerate(names) if name == "PRODUCE"]
    assert len(produces) == 3
    for refused, retry in zip(produces, produces[1:]):  # a metadata refresh in between
        assert "METADATA" in names[refused + 1:retry], names
    assert [r.value for r in cluster.records("disk", 0)] == [b"first", b"second"]
    assert producer.metrics()["producer-metrics"]["record-retry-total"] == 2


def test_broker_failure_gives_errors_then_the_producer_recovers(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("logs", leaders=[0])
    producer = producer_of(cluster, delivery_timeout_ms=2300, request_timeout_ms=2000,
                           linger_ms=0)
    producer.send("logs", b"one").get(IN_PROCESS_BOUND)
    cluster.stop_broker(0)
    lost = producer.send("logs", b"lost")
    with pytest.raises((KafkaTimeoutError, KafkaConnectionError)):
        lost.get(IN_PROCESS_BOUND)
    assert lost.retriable()
    cluster.start_broker(0)
    assert producer.send("logs", b"two").get(IN_PROCESS_BOUND).offset == 1
    assert [r.value for r in cluster.records("logs", 0)] == [b"one", b"two"]


def test_a_retry_after_the_broker_returns_delivers_the_record(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("logs", leaders=[0])
    producer = producer_of(cluster)
    producer.send("logs", b"one").get(IN_PROCESS_BOUND)
    cluster.stop_broker(0)
    pending = producer.send("logs", b"two")
    restarter = threading.Timer(0.3, cluster.start_broker, args=(0,))
    restarter.start()
    try:
        assert pending.get(IN_PROCESS_BOUND).offset == 1
    finally:
        restarter.join()


def test_one_request_in_flight_keeps_order_through_retries(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("ordered")
    producer = producer_of(cluster, max_in_flight_requests_per_connection=1, batch_size=256,
                           linger_ms=1)
    cluster.fail_next("ordered", 0, NotLeaderForPartitionError.errno, times=3)
    futures = [producer.send("ordered", b"%04d" % i) for i in range(300)]
    producer.flush(IN_PROCESS_BOUND)
    assert [f.get(0).offset for f in futures] == list(range(300))
    assert [r.value for r in cluster.records("ordered", 0)] == [b"%04d" % i for i in range(300)]


def test_delivery_timeout_expires_queued_records(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster, linger_ms=0, request_timeout_ms=100,
                           delivery_timeout_ms=200)
    producer.send("logs", b"warm").get(IN_PROCESS_BOUND)
    cluster.brokers[0].paused.set()
    future = producer.send("logs", b"stuck")
    with pytest.raises(KafkaTimeoutError, match="Expiring 1 record"):
        future.get(IN_PROCESS_BOUND)
    cluster.brokers[0].paused.clear()


def test_batches_never_outgrow_a_request(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster, batch_size=1 << 22, max_request_size=16 * 1024,
                           linger_ms=20)
    futures = [producer.send("logs", b"x" * 100) for _ in range(1000)]
    producer.flush(IN_PROCESS_BOUND)
    assert [f.get(0).offset for f in futures] == list(range(1000))
    assert all(len(data) <= 16 * 1024 for _, data in cluster.batches("logs", 0))


def test_oversized_record_gives_a_failed_future(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster, max_request_size=2048)
    future = producer.send("logs", b"x" * 4000)
    assert future.failed()
    with pytest.raises(MessageSizeTooLargeError, match="max_request_size"):
        future.get(0)


# -- acks, serializers, compression ---------------------------------------------------------------

def test_acks_zero_completes_without_offsets(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("fire")
    producer = producer_of(cluster, acks=0)
    futures = [producer.send("fire", b"%d" % i) for i in range(100)]
    producer.flush(IN_PROCESS_BOUND)
    assert {f.get(0).offset for f in futures} == {-1}
    deadline = threading.Event()
    while len(cluster.records("fire", 0)) < 100 and not deadline.wait(0.01):
        pass
    assert [r.value for r in cluster.records("fire", 0)] == [b"%d" % i for i in range(100)]


class JsonishSerializer:
    def __init__(self):
        self.closed = False

    def serialize(self, topic, headers, data):
        return f"{topic}:{data}".encode()

    def close(self):
        self.closed = True


def test_key_and_value_serializers(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("ser")
    serializer = JsonishSerializer()
    producer = producer_of(cluster, key_serializer=serializer, value_serializer=str.encode)
    meta = producer.send("ser", "héllo", key=42).get(IN_PROCESS_BOUND)
    assert (meta.serialized_key_size, meta.serialized_value_size) == (6, 6)
    [record] = cluster.records("ser", 0)
    assert (record.key, record.value) == (b"ser:42", "héllo".encode())
    producer.close()
    assert serializer.closed


def test_bad_arguments(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster)
    with pytest.raises(ValueError, match="key or value"):
        producer.send("logs")
    with pytest.raises(TypeError, match="headers must be a list"):
        producer.send("logs", b"v", headers=[("k", 5)])
    with pytest.raises(TypeError, match="value must be bytes-like"):
        producer.send("logs", 12345)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches(fake_cluster, producer_of, codec):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("packed")
    producer = producer_of(cluster, compression_type=codec, linger_ms=50)
    values = [b"%d-" % i + b"a" * 200 for i in range(50)]
    for value in values:
        producer.send("packed", value)
    producer.flush(IN_PROCESS_BOUND)
    [(_, data)] = cluster.batches("packed", 0)
    assert BatchHeader(data).compression_type != 0
    assert len(data) < sum(map(len, values))
    assert [r.value for r in cluster.records("packed", 0)] == values


# -- metadata --------------------------------------------------------------------------------------

def test_unknown_topic_without_auto_creation_times_out_naming_it(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1, auto_create=False)
    producer = producer_of(cluster, max_block_ms=200)
    with pytest.raises(KafkaTimeoutError, match="topic 'nowhere' not present in metadata "
                                                "after 200 ms .*UNKNOWN_TOPIC_OR_PARTITION"):
        producer.send("nowhere", b"v")


def test_auto_created_topic_is_waited_for(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1, num_partitions=3)
    producer = producer_of(cluster)
    assert producer.send("fresh", b"v").get(IN_PROCESS_BOUND).topic == "fresh"
    assert producer.partitions_for("fresh") == {0, 1, 2}


def test_invalid_topic_name_is_refused_naming_it(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    producer = producer_of(cluster)
    with pytest.raises(InvalidTopicError, match="topic 'bad name!'"):
        producer.send("bad name!", b"v")


# -- flush and close -------------------------------------------------------------------------------

def test_flush_sends_lingering_records(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("slow")
    producer = producer_of(cluster, linger_ms=60_000, delivery_timeout_ms=120_000)
    futures = [producer.send("slow", b"%d" % i) for i in range(10)]
    assert not any(f.is_done for f in futures)
    producer.flush(IN_PROCESS_BOUND)
    assert all(f.succeeded() for f in futures)


def test_flush_times_out_while_the_broker_stalls(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster)
    producer.send("logs", b"warm").get(IN_PROCESS_BOUND)
    cluster.brokers[0].paused.set()
    producer.send("logs", b"stuck")
    with pytest.raises(KafkaTimeoutError, match="flush: logs-0"):
        producer.flush(0.05)
    cluster.brokers[0].paused.clear()
    producer.flush(IN_PROCESS_BOUND)


def test_close_sends_what_is_queued_then_refuses_sends(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster, linger_ms=60_000, delivery_timeout_ms=120_000)
    futures = [producer.send("logs", b"%d" % i) for i in range(5)]
    producer.close(IN_PROCESS_BOUND)
    assert [f.get(0).offset for f in futures] == list(range(5))
    with pytest.raises(IllegalStateError, match="closed"):
        producer.send("logs", b"late")
    producer.close()  # twice is fine


def test_close_with_zero_timeout_fails_what_is_left(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster, linger_ms=60_000, delivery_timeout_ms=120_000)
    future = producer.send("logs", b"dropped")
    producer.close(timeout=0)
    with pytest.raises(IllegalStateError, match="closed forcefully"):
        future.get(IN_PROCESS_BOUND)


@pytest.mark.multiprocess
def test_interpreter_exit_sends_what_is_queued_and_unlinks(fake_cluster):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("exit")
    script = (f"from cluster.producer.kafka_producer import KafkaProducer\n"
              f"p = KafkaProducer(bootstrap_servers={cluster.data_dir!r}, linger_ms=60000,\n"
              f"                  enable_idempotence=False, acks=1)\n"
              f"p.send('exit', b'bye')\n")  # no close(): the interpreter exits
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=IN_PROCESS_BOUND, check=True)
    assert [r.value for r in cluster.records("exit", 0)] == [b"bye"]


def test_send_from_many_threads(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("shared", 3)
    producer = producer_of(cluster, linger_ms=2)

    def work(thread):
        for i in range(500):
            producer.send("shared", b"%d-%d" % (thread, i), partition=thread % 3)
    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(IN_PROCESS_BOUND)
    producer.flush(IN_PROCESS_BOUND)
    for partition in range(3):
        values = [r.value for r in cluster.records("shared", partition)]
        assert len(values) == 1000
        for thread in (partition, partition + 3):
            mine = [v for v in values if v.startswith(b"%d-" % thread)]
            assert mine == [b"%d-%d" % (thread, i) for i in range(500)]


def test_metrics_count_records_and_requests(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster)
    for _i in range(10):
        producer.send("logs", b"v").get(IN_PROCESS_BOUND)
    metrics = producer.metrics()["producer-metrics"]
    assert metrics["record-send-total"] == 10
    assert metrics["request-total"] == 10
    assert metrics["buffer-available-bytes"] == metrics["buffer-total-bytes"]
    assert producer.bootstrap_connected()


# -- the bulk send ---------------------------------------------------------------------------------

def test_bulk_send_of_a_numpy_array(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("bulk")
    producer = producer_of(cluster)
    values = np.arange(50_000 * 8, dtype=np.uint64).view(np.uint8).reshape(50_000, 64)
    futures = producer.send_batch("bulk", values, batch_size=64 * 1024)
    assert len(futures) > 1
    metas = [f.get(IN_PROCESS_BOUND) for f in futures]
    assert sum(m.record_count for m in metas) == 50_000
    assert [m.base_offset for m in metas] == list(np.cumsum([0] + [m.record_count
                                                                   for m in metas])[:-1])
    stored = cluster.records("bulk", 0)
    assert [r.value for r in stored[:3]] == [values[i].tobytes() for i in range(3)]
    assert stored[-1].value == values[-1].tobytes()
    assert np.concatenate([f.record_indices for f in futures]).tolist() == list(range(50_000))


def test_bulk_send_builds_large_batches_into_pool_buffers(fake_cluster, producer_of):
    """Batches of a megabyte go out in the very pool buffers they were built into, and the
    memory comes back once they are acknowledged (pool spares)."""
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("bulk")
    producer = producer_of(cluster)
    values = np.random.default_rng(3).integers(0, 256, size=(30_000, 100), dtype=np.uint8)
    accumulator = producer._accumulator
    append_built, pooled = accumulator.append_built, []

    def spy(*args):
        pooled.append(args[-1])
        return append_built(*args)
    accumulator.append_built = spy
    futures = producer.send_batch("bulk", values, partition=0)
    assert pooled == [True, True, True, False]
    metas = [f.get(IN_PROCESS_BOUND) for f in futures]
    full = metas[0].record_count
    assert [m.record_count for m in metas] == [full] * 3 + [30_000 - 3 * full]
    pool = producer._accumulator.pool
    assert pool.available_memory == pool.total_memory
    length = len(build_batches(values[:full], batch_size=producer.bulk_batch_size)[0])
    # one to three spares (a batch acknowledged before the next is built hands its buffer
    # on); the last batch, 160 KB, was copied into a bytearray
    assert pool.spare_memory in (length, 2 * length, 3 * length)
    stored = cluster.records("bulk", 0)
    assert [r.value for r in stored] == [row.tobytes() for row in values]


def test_bulk_send_gives_back_the_buffer_of_a_batch_that_failed_to_build(
        fake_cluster, producer_of, monkeypatch):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("bulk")
    producer = producer_of(cluster)
    values = np.zeros((30_000, 100), dtype=np.uint8)
    finish = bulk._finish
    made = []

    def failing(area, *args):
        if made:
            raise MemoryError("the second batch fails")
        made.append(area)
        return finish(area, *args)
    monkeypatch.setattr(bulk, "_finish", failing)
    with pytest.raises(MemoryError, match="second batch"):
        producer.send_batch("bulk", values, partition=0)
    producer.flush(IN_PROCESS_BOUND)
    pool = producer._accumulator.pool
    assert pool.available_memory == pool.total_memory
    assert len(cluster.records("bulk", 0)) == BatchHeader(made[0].tobytes()).record_count


def test_bulk_send_of_keyed_records_lands_where_send_would(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("keyed", 4)
    producer = producer_of(cluster)
    keys = [b"k%d" % (i % 37) for i in range(3000)]
    values = [b"value-%d" % i for i in range(3000)]
    futures = producer.send_batch("keyed", values, keys=keys)
    producer.flush(IN_PROCESS_BOUND)
    for future in futures:
        meta = future.get(0)
        indices = future.record_indices
        assert {partition_for_key(keys[i], 4) for i in indices} == {meta.partition}
        stored = cluster.records("keyed", meta.partition)
        by_offset = {r.offset: r for r in stored}
        for position, i in enumerate(indices):
            record = by_offset[meta.base_offset + position]
            assert (record.key, record.value) == (keys[i], values[i])


def test_bulk_send_refuses_null_keys(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("keyed")
    producer = producer_of(cluster)
    with pytest.raises(ValueError, match="found None at index 1"):
        producer.send_batch("keyed", [b"a", b"b"], keys=[b"k", None])


def test_bulk_send_to_one_partition_and_unkeyed_spread(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("spread", 3)
    producer = producer_of(cluster)
    values = [b"v%d" % i for i in range(5000)]
    pinned = producer.send_batch("spread", values, partition=2, batch_size=4096)
    assert {f.get(IN_PROCESS_BOUND).partition for f in pinned} == {2}
    spread = producer.send_batch("spread", values, batch_size=4096)
    partitions = [f.get(IN_PROCESS_BOUND).partition for f in spread]
    assert all(a != b for a, b in zip(partitions, partitions[1:]))
    assert sum(f.get(0).record_count for f in spread) == 5000


def test_bulk_send_with_headers_keeps_each_records_headers(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("headed", 2)
    producer = producer_of(cluster)
    values = [b"v%d" % i for i in range(600)]
    keys = [b"k%d" % (i % 3) for i in range(600)]
    headers = [[("n", b"%d" % i), ("file", b"a.log")] if i % 4 else None for i in range(600)]
    futures = producer.send_batch("headed", values, keys=keys, headers=headers,
                                  batch_size=2048)
    producer.flush(IN_PROCESS_BOUND)
    assert len(futures) > 2
    seen = 0
    for future in futures:
        meta = future.get(0)
        by_offset = {r.offset: r for r in cluster.records("headed", meta.partition)}
        for position, i in enumerate(future.record_indices):
            record = by_offset[meta.base_offset + position]
            assert (record.key, record.value) == (keys[i], values[i])
            assert list(record.headers or []) == (headers[i] or [])
            seen += 1
    assert seen == 600
    with pytest.raises(ValueError, match="2 headers for 3 values"):
        producer.send_batch("headed", [b"a", b"b", b"c"], headers=[None, None])
