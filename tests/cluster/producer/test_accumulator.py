"""cluster.producer.accumulator: batches fill, linger, drain per broker, retry backoff, expiry,
memory."""
from __future__ import annotations

import threading
import time

import pytest

from cluster.client.metadata import PartitionMetadata, TopicMetadata
from cluster.errors import IllegalStateError, KafkaTimeoutError, MessageSizeTooLargeError
from cluster.producer.accumulator import METADATA_WAIT, RecordAccumulator
from segments.record.records import RecordBatch
from tests.support.clock import FakeClock

VALUE = b"v" * 100
TS = 1_700_000_000_000


def accumulator(clock=None, **overrides):
    settings = dict(batch_size=1024, buffer_memory=64 * 1024, compression_type=None,
                    linger_ms=10, max_block_ms=50, max_request_size=1 << 20)
    settings.update(overrides)
    return RecordAccumulator(clock=clock or FakeClock(100.0), **settings)


def topics(name="t", leaders=(0,)):
    return {name: TopicMetadata(name, 0, False, [
        PartitionMetadata(name, p, leader, 0, (leader,), (leader,), (), 0)
        for p, leader in enumerate(leaders)])}


def fill(acc, partition=0, records=1, topic="t"):
    return [acc.append(topic, partition, TS, None, VALUE, None) for _ in range(records)]


def test_records_go_into_one_batch_until_it_is_full():
    acc = accumulator()
    appended = fill(acc, records=20)
    batches = {id(batch) for batch, _ in appended}
    assert len(batches) == 3  # 1024-byte batches hold 8 records of 100 bytes
    first = appended[0][0]
    assert [index for batch, index in appended if batch is first] == list(range(8))
    assert first.full and not appended[-1][0].full


def test_a_full_batch_is_ready_at_once_and_drains_built():
    clock = FakeClock(100.0)
    acc = accumulator(clock)
    fill(acc, records=9)  # one full batch, one with a single record
    nodes, unknown, delay = acc.ready(clock(), topics())
    assert nodes == {0} and unknown == set()
    drained = acc.drain(clock(), topics(), {0}, 1 << 20)
    [batch] = drained[0]
    data = batch.build()
    assert batch.record_count == 8
    assert [r.value for r in RecordBatch(data)] == [VALUE] * 8
    nodes, _, delay = acc.ready(clock(), topics())
    assert nodes == set() and delay == pytest.approx(0.010)


def test_a_batch_waits_for_linger_then_is_ready():
    clock = FakeClock(100.0)
    acc = accumulator(clock)
    fill(acc, records=2)
    nodes, _, delay = acc.ready(clock(), topics())
    assert nodes == set() and delay == pytest.approx(0.010)
    assert acc.drain(clock(), topics(), {0}, 1 << 20) == {}
    clock.now += 0.010
    assert acc.ready(clock(), topics())[0] == {0}
    assert acc.drain(clock(), topics(), {0}, 1 << 20)[0][0].builder.record_count == 2


def test_flush_makes_lingering_batches_ready():
    clock = FakeClock(100.0)
    acc = accumulator(clock)
    fill(acc)
    acc.begin_flush()
    assert acc.ready(clock(), topics())[0] == {0}
    acc.end_flush()
    assert acc.ready(clock(), topics())[0] == set()


def test_unknown_leaders_are_reported_by_topic():
    clock = FakeClock(100.0)
    acc = accumulator(clock, linger_ms=0)
    fill(acc, topic="t")
    fill(acc, topic="other")
    nodes, unknown, _ = acc.ready(clock(), topics("t", leaders=(-1,)))
    assert nodes == set() and unknown == {"t", "other"}


def test_drain_takes_one_batch_per_partition_up_to_the_request_size():
    clock = FakeClock(100.0)
    acc = accumulator(clock, linger_ms=0)
    leaders = topics(leaders=(0, 0, 1))
    for partition in range(3):
        fill(acc, partition, records=12)  # a full batch and a partial one each
    drained = acc.drain(clock(), leaders, {0, 1}, 1 << 20)
    assert sorted(b.partition for b in drained[0]) == [0, 1]
    assert [b.partition for b in drained[1]] == [2]
    assert all(b.builder.record_count == 8 for bs in drained.values() for b in bs)
    # A request is capped by size, but always carries one batch.
    drained = acc.drain(clock(), leaders, {0}, 10)
    assert len(drained[0]) == 1


def test_muted_partitions_are_not_drained():
    clock = FakeClock(100.0)
    acc = accumulator(clock, linger_ms=0)
    fill(acc, 0)
    batch = acc.append("t", 0, TS, None, VALUE, None)[0]
    assert acc.drain(clock(), topics(), {0}, 1 << 20, muted={batch.topic_partition}) == {}


def test_retried_batch_goes_first_after_its_backoff():
    clock = FakeClock(100.0)
    acc = accumulator(clock, linger_ms=0)
    fill(acc)
    [batch] = acc.drain(clock(), topics(), {0}, 1 << 20)[0]
    batch.build()
    batch.attempts = 1
    fill(acc)  # a newer batch behind it
    acc.reenqueue(batch, clock() + 0.1)
    nodes, _, delay = acc.ready(clock(), topics())
    assert nodes == set() and delay == pytest.approx(0.1)
    clock.now += 0.1
    assert acc.drain(clock(), topics(), {0}, 1 << 20)[0] == [batch]


def test_a_retry_after_invalid_metadata_waits_for_the_refresh_it_asked_for():
    clock = FakeClock(100.0)
    acc = accumulator(clock, linger_ms=0)
    fill(acc)
    [batch] = acc.drain(clock(), topics(), {0}, 1 << 20)[0]
    batch.build()
    batch.attempts = 1
    acc.reenqueue(batch, clock() + 0.01, metadata_ticket=7)
    clock.now += 0.01  # the backoff passed; the refresh asked for (ticket 7) not answered
    nodes, _, delay = acc.ready(clock(), topics(), answered=6)
    assert nodes == set() and delay == pytest.approx(METADATA_WAIT)
    assert acc.drain(clock(), topics(), {0}, 1 << 20, answered=6) == {}
    nodes, _, _ = acc.ready(clock(), topics(), answered=7)
    assert nodes == {0}
    assert acc.drain(clock(), topics(), {0}, 1 << 20, answered=7)[0] == [batch]


def test_expired_batches_leave_the_queue():
    clock = FakeClock(100.0)
    acc = accumulator(clock)
    old = fill(acc)[0][0]
    clock.now += 5
    young = acc.append("t", 1, TS, None, VALUE, None)[0]
    assert acc.expired(clock(), 4.0) == [old]
    assert acc.expired(clock(), 4.0) == []
    assert acc.drain_all() == [young]


def test_exhausted_memory_times_out_after_max_block_ms():
    acc = accumulator(time.monotonic, buffer_memory=2048, max_block_ms=50)
    fill(acc, 0)
    fill(acc, 1)
    with pytest.raises(KafkaTimeoutError, match="t-2: failed to allocate 1024 bytes within "
                                                "max_block_ms=50"):
        fill(acc, 2)
    assert acc.pool.exhausted_total == 1


def test_memory_given_back_wakes_a_blocked_append():
    acc = accumulator(time.monotonic, buffer_memory=1024, max_block_ms=10_000)
    first = fill(acc, 0)[0][0]
    result = []
    blocked = threading.Thread(target=lambda: result.append(fill(acc, 1)))
    blocked.start()
    while acc.pool.queued == 0:
        blocked.join(0.001)
    acc.deallocate(first)
    blocked.join(10)
    assert result and result[0][0][0].partition == 1


def test_a_record_larger_than_a_batch_gets_a_batch_of_its_own():
    acc = accumulator()
    fill(acc)
    big, index = acc.append("t", 0, TS, None, b"x" * 5000, None)
    assert index == 0 and len(big.buffer) > 5000
    assert [r.value for r in RecordBatch(big.build())] == [b"x" * 5000]


def test_records_beyond_the_request_or_memory_limits_are_refused():
    acc = accumulator(max_request_size=4096)
    with pytest.raises(MessageSizeTooLargeError, match="t-0: .* larger than 4096, the value "
                                                       "of max_request_size"):
        acc.append("t", 0, TS, None, b"x" * 5000, None)
    acc = accumulator(buffer_memory=4096)
    with pytest.raises(MessageSizeTooLargeError, match="buffer_memory"):
        acc.append("t", 0, TS, None, b"x" * 5000, None)


def test_abort_on_new_batch_leaves_the_choice_to_the_caller():
    acc = accumulator()
    assert acc.append("t", 0, TS, None, VALUE, None, abort_on_new_batch=True) is None
    fill(acc, records=8)
    assert acc.append("t", 0, TS, None, VALUE, None, abort_on_new_batch=True) is None
    assert acc.append("t", 0, TS, None, VALUE, None)[1] == 0


def test_built_batches_queue_behind_the_open_one_and_keep_memory_accounted():
    clock = FakeClock(100.0)
    acc = accumulator(clock, linger_ms=0)
    open_batch = fill(acc)[0][0]
    data = bytes(open_batch.builder.build())
    built = acc.append_built("t", 0, data, 1, [7])
    assert acc.pool.available_memory == 64 * 1024 - 1024 - len(data)
    assert built.full and built.record_indices == [7]
    assert acc.drain(clock(), topics(), {0}, 1 << 20)[0] == [open_batch]
    assert acc.drain(clock(), topics(), {0}, 1 << 20)[0] == [built]
    assert bytes(built.build()) == data
    acc.deallocate(built)
    acc.deallocate(open_batch)
    assert acc.pool.available_memory == 64 * 1024
    assert acc.incomplete() == []


def test_closed_accumulator_refuses_appends():
    acc = accumulator()
    fill(acc)
    acc.close()
    with pytest.raises(IllegalStateError, match="t-0"):
        fill(acc)
    assert acc.has_undrained()
