"""send()'s fast path and the sender's bursts: RecordBatchBuilder.append_value and the plain
batch encoding (byte for byte what append() and kafka-python make), closing a batch for
appends, when the RecordAccumulator closes a batch, drain_requests and expiry bookkeeping, and
KafkaProducer records going through the fast path — order, placement and exactly-once, with
several threads sending at once."""
from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from cluster.client.metadata import PartitionMetadata, TopicMetadata
from cluster.errors import IllegalStateError
from cluster.producer.accumulator import RecordAccumulator
from cluster.producer.partitioner import DefaultPartitioner
from segments.record.batch_header import BatchHeader
from segments.record.records import RecordBatch, RecordBatchBuilder
from tests.support.bounds import IN_PROCESS_BOUND
from tests.support.clock import FakeClock
from tests.support.properties import examples

BASE_TS = 1_700_000_000_000
SETTINGS = settings(max_examples=examples(60), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- RecordBatchBuilder.append_value and the plain encoding ----------------------------------------

def plain_records(draw):
    """Records a producer's fast path sees: null key, no headers, often one value length,
    timestamps close together (and sometimes not)."""
    count = draw(st.integers(1, 300))
    width = draw(st.sampled_from([0, 1, 60, 100, 200, 5000]))
    spread = draw(st.sampled_from([0, 2, 63, 64, 2000]))
    uniform = draw(st.booleans())
    records = []
    for _ in range(count):
        value = b"v" * (width if uniform else draw(st.integers(0, 130)))
        records.append((BASE_TS + draw(st.integers(-spread, spread)), value))
    return records


@SETTINGS
@given(data=st.data(), batch_size=st.sampled_from([200, 4096, 16384, 1 << 20]))
def test_append_value_answers_and_builds_as_append_does(data, batch_size):
    records = plain_records(data.draw)
    lock = threading.Lock()
    by_append = RecordBatchBuilder(batch_size=batch_size)
    by_value = RecordBatchBuilder(batch_size=batch_size)
    for timestamp, value in records:
        expected = by_append.append(timestamp, None, value)
        got = by_value.append_value(timestamp, value, lock)
        if got is None:  # not taken: append() decides, as the accumulator does
            got = by_value.append(timestamp, None, value)
        assert got == expected and not lock.locked()
        assert by_value.size_in_bytes() == by_append.size_in_bytes()
    assert bytes(by_value.build()) == bytes(by_append.build())


@SETTINGS
@given(data=st.data())
def test_plain_batches_are_byte_identical_to_kafka_python(data):
    records = plain_records(data.draw)
    ours = RecordBatchBuilder(batch_size=1 << 30, partition_leader_epoch=0)
    theirs = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                       producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                       batch_size=1 << 30)
    for offset, (timestamp, value) in enumerate(records):
        assert ours.append(timestamp, None, value) == offset
        theirs.append(offset, timestamp, None, value, [])
    assert bytes(ours.build()) == bytes(theirs.build())


def test_append_value_leaves_the_first_record_and_other_kinds_to_append():
    lock = threading.Lock()
    builder = RecordBatchBuilder()
    assert builder.append_value(BASE_TS, b"v", lock) is None  # the first record sets the base
    assert builder.record_count == 0
    builder.append(BASE_TS, None, b"v")
    assert builder.append_value(BASE_TS + 1, b"w", lock) == 1
    builder.append(BASE_TS, b"key", b"x")                     # a key: no longer plain
    assert builder.append_value(BASE_TS, b"y", lock) is None
    assert builder.append(BASE_TS, None, b"y") == 3
    assert [(r.key, r.value) for r in RecordBatch(builder.build())] == [
        (None, b"v"), (None, b"w"), (b"key", b"x"), (None, b"y")]
    assert not lock.locked()


def test_append_value_refuses_when_full_and_changes_nothing():
    lock = threading.Lock()
    builder = RecordBatchBuilder(batch_size=300)
    builder.append(BASE_TS, None, b"x" * 100)
    assert builder.append_value(BASE_TS, b"x" * 100, lock) == 1
    size = builder.size_in_bytes()
    assert builder.append_value(BASE_TS, b"x" * 100, lock) is None
    assert (builder.record_count, builder.size_in_bytes()) == (2, size)
    assert builder.append_value(BASE_TS, b"x", lock) == 2  # a smaller one still fits


def test_a_batch_closed_for_appends_refuses_all_and_still_builds():
    lock = threading.Lock()
    builder = RecordBatchBuilder()
    builder.append(BASE_TS, None, b"a")
    builder.append(BASE_TS, None, b"b")
    size = builder.size_in_bytes()
    builder.close_for_appends()
    builder.close_for_appends()  # twice: no change
    assert builder.size_in_bytes() == size
    assert builder.append_value(BASE_TS, b"c", lock) is None
    assert builder.append(BASE_TS, None, b"c") is None
    assert builder.append(BASE_TS, b"k", b"c", [("h", b"1")]) is None
    built = builder.build()
    assert len(built) == size
    assert [r.value for r in RecordBatch(built)] == [b"a", b"b"]
    empty = RecordBatchBuilder()
    empty.close_for_appends()
    assert empty.append(BASE_TS, None, b"a") is None


# -- RecordAccumulator --------------------------------------------------------------------------

def accumulator(clock, batch_size=1024, linger_ms=5):
    return RecordAccumulator(batch_size=batch_size, buffer_memory=64 * 1024,
                             compression_type=None, linger_ms=linger_ms, max_block_ms=1000,
                             max_request_size=1 << 20, clock=clock)


def topics(partitions=1, leader=0):
    parts = [PartitionMetadata("t", p, leader, 0, (leader,), (leader,), (), 0)
             for p in range(partitions)]
    return {"t": TopicMetadata("t", 0, False, parts)}


def test_a_batch_takes_fast_appends_while_it_is_the_open_one():
    acc = accumulator(FakeClock(100.0))
    lock = acc.append_lock
    batch, index = acc.append("t", 0, BASE_TS, None, b"v" * 100, None)
    indexes = []
    while (index := batch.builder.append_value(BASE_TS, b"v" * 100, lock)) is not None:
        indexes.append(index)
    assert indexes == list(range(1, len(indexes) + 1)) and not batch.full
    newer, index = acc.append("t", 0, BASE_TS, None, b"v" * 100, None)  # refused: a new one
    assert newer is not batch and index == 0 and batch.full
    assert batch.builder.append_value(BASE_TS, b"v", lock) is None  # closed, though b"v" fits
    assert newer.builder.append_value(BASE_TS, b"v", lock) == 1


def one_batch(value):
    builder = RecordBatchBuilder()
    builder.append(BASE_TS, None, value)
    return bytes(builder.build())


def test_a_batch_queued_behind_the_open_one_closes_it():
    clock = FakeClock(100.0)
    acc = accumulator(clock)
    open_batch, _ = acc.append("t", 0, BASE_TS, None, b"a", None)
    bulk = acc.append_built("t", 0, one_batch(b"b"), 1, [0])
    assert open_batch.builder.append_value(BASE_TS, b"c", acc.append_lock) is None
    later, _ = acc.append("t", 0, BASE_TS, None, b"c", None)
    assert acc.drain_requests(clock(), topics(), {0: 5}, 1 << 20) == {
        0: [[open_batch], [bulk]]}
    clock.now += 0.005
    assert acc.drain(clock(), topics(), {0}, 1 << 20) == {0: [later]}


def test_a_batch_that_left_its_queue_refuses_fast_appends():
    clock = FakeClock(100.0)
    acc = accumulator(clock, linger_ms=0)
    batch, _ = acc.append("t", 0, BASE_TS, None, b"v", None)
    assert acc.drain(clock(), topics(), {0}, 1 << 20) == {0: [batch]}
    assert batch.builder.append_value(BASE_TS, b"w", acc.append_lock) is None
    assert [r.value for r in RecordBatch(batch.build())] == [b"v"]


def test_close_refuses_fast_appends_too():
    acc = accumulator(FakeClock(100.0))
    batch, _ = acc.append("t", 0, BASE_TS, None, b"v", None)
    acc.close()
    assert batch.builder.append_value(BASE_TS, b"w", acc.append_lock) is None
    with pytest.raises(IllegalStateError, match="t-0"):
        acc.append("t", 0, BASE_TS, None, b"w", None)


def fill(acc, partition, batches, value=b"v" * 300):
    """Append until ``batches`` batches are full and one more is open; returns them."""
    made = []
    while len(made) <= batches:
        batch, _ = acc.append("t", partition, BASE_TS, None, value, None)
        if not made or made[-1] is not batch:
            made.append(batch)
    return made


def test_drain_requests_takes_that_many_requests_in_order():
    clock = FakeClock(100.0)
    acc = accumulator(clock)
    first, second, third, open_batch = fill(acc, 0, 3)
    assert acc.drain_requests(clock(), topics(), {0: 2}, 1 << 20) == {0: [[first], [second]]}
    assert acc.drain_requests(clock(), topics(), {0: 5}, 1 << 20) == {0: [[third]]}
    assert acc.drain_requests(clock(), topics(), {0: 5}, 1 << 20) == {}  # lingering
    clock.now += 0.005
    assert acc.drain_requests(clock(), topics(), {0: 5}, 1 << 20) == {0: [[open_batch]]}


def test_drain_requests_puts_one_batch_per_partition_in_each_request():
    clock = FakeClock(100.0)
    acc = accumulator(clock)
    a = fill(acc, 0, 2)
    b = fill(acc, 1, 1)
    drained = acc.drain_requests(clock(), topics(2), {0: 5}, 1 << 20)
    assert drained == {0: [[a[0], b[0]], [a[1]]]}
    assert acc.drain_requests(clock(), topics(2), {0: 0}, 1 << 20) == {}


def test_expired_reports_the_oldest_batch_left():
    clock = FakeClock(100.0)
    acc = accumulator(clock)
    old = fill(acc, 0, 0)[0]
    clock.now += 3
    young = fill(acc, 1, 0)[0]
    assert acc.expired(clock(), 10.0) == [] and acc.oldest_created == old.created
    clock.now += 8
    assert acc.expired(clock(), 10.0) == [old] and acc.oldest_created == young.created
    assert old.builder.append_value(BASE_TS, b"v", acc.append_lock) is None
    acc.drain_all()
    assert young.builder.append_value(BASE_TS, b"v", acc.append_lock) is None
    assert acc.expired(clock(), 10.0) == [] and acc.oldest_created is None


# -- KafkaProducer -------------------------------------------------------------------------------

#: What ``producer_of`` (conftest.py) sets here on top of its common settings.
PRODUCER_SETTINGS = {"linger_ms": 2}


def test_unkeyed_records_fill_sticky_batches_in_order(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("logs", 4)
    producer = producer_of(cluster, batch_size=512)
    futures = [producer.send("logs", b"%05d" % i) for i in range(3000)]
    producer.flush(IN_PROCESS_BOUND)
    metadata = [f.get(0) for f in futures]
    stored = {p: cluster.records("logs", p) for p in range(4)}
    assert sum(len(records) for records in stored.values()) == 3000
    for i, meta in enumerate(metadata):  # each future names where its record is
        assert stored[meta.partition][meta.offset].value == b"%05d" % i
    for records in stored.values():  # a partition holds records in send order
        numbers = [int(r.value) for r in records]
        assert numbers == sorted(numbers)
    # sticky: whole batches go to one partition; the partition changes only between batches
    for p in range(4):
        for _, data in cluster.batches("logs", p):
            numbers = [int(r.value) for r in RecordBatch(data)]
            assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
            assert BatchHeader(data).size_in_bytes <= 512


def test_threads_sending_at_once_lose_and_repeat_nothing(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs", 2)
    producer = producer_of(cluster, batch_size=1024, linger_ms=1)
    per_thread = 2000
    futures = {}

    def send(name):
        futures[name] = [producer.send("logs", b"%s-%05d" % (name, i))
                         for i in range(per_thread)]
    threads = [threading.Thread(target=send, args=(b"t%d" % n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(IN_PROCESS_BOUND)
    producer.flush(IN_PROCESS_BOUND)
    stored = [r.value for p in range(2) for r in cluster.records("logs", p)]
    assert sorted(stored) == sorted(b"t%d-%05d" % (n, i) for n in range(4)
                                    for i in range(per_thread))
    for _name, sent in futures.items():
        places = [(f.get(0).partition, f.get(0).offset) for f in sent]
        for p in range(2):  # one thread's records keep their order in each partition
            offsets = [offset for partition, offset in places if partition == p]
            assert offsets == sorted(offsets)


def test_fast_and_general_records_interleave_in_order(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster, batch_size=400)
    futures = []
    for i in range(300):
        kind = i % 5
        if kind == 0:
            futures.append(producer.send("logs", b"%04d" % i, key=b"k"))
        elif kind == 1:
            futures.append(producer.send("logs", b"%04d" % i, headers=[("h", b"1")]))
        elif kind == 2:
            futures.append(producer.send("logs", bytearray(b"%04d" % i),
                                         timestamp_ms=BASE_TS + i))
        else:
            futures.append(producer.send("logs", b"%04d" % i))
    producer.flush(IN_PROCESS_BOUND)
    assert [f.get(0).offset for f in futures] == list(range(300))
    records = cluster.records("logs", 0)
    assert [r.value for r in records] == [b"%04d" % i for i in range(300)]
    assert [r.key for r in records[:5]] == [b"k", None, None, None, None]
    assert records[2].timestamp == BASE_TS + 2 and records[1].headers == [("h", b"1")]


def test_sends_after_close_are_refused(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster)
    producer.send("logs", b"a").get(IN_PROCESS_BOUND)
    producer.send("logs", b"b")  # the lane is set: the next send would take the fast path
    producer.close(timeout=IN_PROCESS_BOUND)
    with pytest.raises(IllegalStateError):
        producer.send("logs", b"c")
    assert [r.value for r in cluster.records("logs", 0)] == [b"a", b"b"]


def test_a_record_sent_after_a_bulk_send_lands_after_it(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster, linger_ms=100)
    producer.send("logs", b"a")
    producer.send("logs", b"b")  # the fast path's batch, open for another 100 ms
    producer.send_batch("logs", [b"c", b"d"])
    producer.send("logs", b"e")
    producer.flush(IN_PROCESS_BOUND)
    assert [r.value for r in cluster.records("logs", 0)] == [b"a", b"b", b"c", b"d", b"e"]


def test_a_partitioner_subclass_is_asked_for_every_record(fake_cluster, producer_of):
    class Counting(DefaultPartitioner):
        calls = 0

        def partition(self, topic, key_bytes, all_partitions, available):
            Counting.calls += 1
            return all_partitions[-1]

    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs", 2)
    producer = producer_of(cluster, partitioner=Counting(), linger_ms=1000)
    futures = [producer.send("logs", b"%d" % i) for i in range(6)]
    producer.flush(IN_PROCESS_BOUND)
    assert Counting.calls >= 6  # it may choose per record: no lane skips it
    assert {f.get(0).partition for f in futures} == {1}


def test_fast_path_futures_report_each_records_metadata_and_run_callbacks_in_order(
        fake_cluster, producer_of):
    """Each fast-path future reports its own record's offset, timestamp and sizes, and
    callbacks run in send order."""
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster, batch_size=1024)
    values = [b"x" * (i % 7) for i in range(500)]  # several batches, and values of 0 bytes
    called = []
    futures = []
    for i, value in enumerate(values):
        future = producer.send("logs", value)
        futures.append(future.add_callback(lambda meta, i=i: called.append((i, meta.offset))))
    producer.flush(IN_PROCESS_BOUND)
    records = cluster.records("logs", 0)
    assert called == [(i, i) for i in range(500)]
    assert len({id(f) for f in futures}) == 500
    for i, future in enumerate(futures):
        meta = future.get(0)
        assert (meta.topic, meta.partition, meta.offset) == ("logs", 0, i)
        assert meta.timestamp == records[i].timestamp
        assert (meta.serialized_key_size, meta.serialized_value_size,
                meta.serialized_header_size) == (-1, len(values[i]), -1)
        assert future.is_done and future.succeeded() and future.value == meta


def test_fast_path_futures_fail_with_their_batch(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster, linger_ms=5000)
    producer.send("logs", b"a")  # the general path opens the batch and the lane
    futures = [producer.send("logs", b"b%d" % i) for i in range(3)]
    errors = []
    futures[1].add_errback(errors.append)
    producer.close(timeout=0)  # a forced close fails what is queued
    assert len(errors) == 1 and all(f.failed() for f in futures)
    with pytest.raises(type(errors[0])):
        futures[2].get(0)


def test_the_compiled_send_answers_as_the_python_send(fake_cluster, producer_of):
    """With the compiled record paths, KafkaProducer.send is _lane_accel's send: the fast
    path in C, every other call handed to the Python send (its __wrapped__). Both hand out
    the same futures for records of the same lane, and every record lands in order."""
    from cluster.producer.kafka_producer import KafkaProducer
    python_send = getattr(KafkaProducer.send, "__wrapped__", None)
    if python_send is None:
        pytest.skip("pure-Python paths: send() is the Python send")
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster, linger_ms=50)
    producer.send("logs", b"a").get(IN_PROCESS_BOUND)
    first = producer.send("logs", b"b")               # opens the batch and its lane
    compiled = producer.send("logs", b"cc", timestamp_ms=BASE_TS)  # the lane, in C
    python = python_send(producer, "logs", b"dd", timestamp_ms=BASE_TS)  # in Python
    assert type(compiled) is type(python)
    assert compiled.batch is python.batch is first.batch
    assert tuple(compiled)[1:] == (1, BASE_TS, -1, 2, -1)
    assert tuple(python)[1:] == (2, BASE_TS, -1, 2, -1)
    keyed = producer.send("logs", b"e", key=b"k")     # handed to the Python send
    producer.flush(IN_PROCESS_BOUND)
    assert keyed.get(0).serialized_key_size == 1
    assert [r.value for r in cluster.records("logs", 0)] == [b"a", b"b", b"cc", b"dd", b"e"]
    producer.close(timeout=IN_PROCESS_BOUND)
    with pytest.raises(IllegalStateError):
        producer.send("logs", b"f")
