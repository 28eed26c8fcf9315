"""The idempotent producer against fake brokers (threads of this process; their
sequence checks are tests/support/fake_broker.py's): InitProducerId before the first
batch, producer id, epoch and per-partition sequences stamped on every batch, a batch
whose response was lost stored once, retries kept in sequence order with five requests
in flight, the epoch bumped on UNKNOWN_PRODUCER_ID and on a real sequence gap, duplicates
as successes, INVALID_PRODUCER_EPOCH fatal, and nothing of it without idempotence."""
from __future__ import annotations

import numpy as np
import pytest
from kio.schema.errors import ErrorCode

from cluster.errors import InvalidProducerEpochError, UnknownProducerIdError
from cluster.producer.batch import ProducerBatch
from cluster.producer.transaction_manager import (
    MAX_EPOCH,
    RETRY,
    TransactionManager,
    increment_sequence,
)
from segments.log_config import INT_MAX
from segments.record.batch_header import BatchHeader
from segments.record.batch_parts import PARTS_FROM, BatchParts
from segments.record.records import RecordBatch, RecordBatchBuilder
from tests.support.bounds import IN_PROCESS_BOUND
from tests.support.waits import wait_for

#: What ``producer_of`` (conftest.py) sets here on top of its common settings.
PRODUCER_SETTINGS = {"enable_idempotence": True, "acks": "all", "linger_ms": 0,
                     "delivery_timeout_ms": 20000}


def headers(cluster, topic, partition):
    return [BatchHeader(data) for _, data in cluster.batches(topic, partition)]


def stamps(cluster, topic, partition):
    """(producer id, epoch, base sequence, records) of each stored batch."""
    return [(h.producer_id, h.producer_epoch, h.base_sequence, h.record_count)
            for h in headers(cluster, topic, partition)]


def names(cluster, since=0):
    return [name for _, name, _ in cluster.requests[since:]]


def test_the_producer_id_comes_first_and_each_partition_counts_its_own_sequences(
        fake_cluster, producer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", partitions=2)
    producer = producer_of(cluster)
    for n in range(3):
        for partition in (0, 1):
            producer.send_batch("t", [b"v"] * (n + 2), partition=partition)
        producer.flush(IN_PROCESS_BOUND)
    sent = names(cluster)
    assert sent.index("INIT_PRODUCER_ID") < sent.index("PRODUCE")
    assert sent.count("INIT_PRODUCER_ID") == 1
    for partition in (0, 1):
        assert stamps(cluster, "t", partition) == [(1000, 0, 0, 2), (1000, 0, 2, 3),
                                                   (1000, 0, 5, 4)]
        for header in headers(cluster, "t", partition):
            header.validate()  # the re-stamped bulk batches have a good CRC


def test_records_sent_one_by_one_carry_their_sequences(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    producer = producer_of(cluster)
    offsets = [producer.send("t", b"%d" % i).get(IN_PROCESS_BOUND).offset for i in range(5)]
    assert offsets == [0, 1, 2, 3, 4]
    found = stamps(cluster, "t", 0)
    sequences = [sequence for _, _, sequence, _ in found]
    assert sequences == [sum(c for *_, c in found[:n]) for n in range(len(found))]


def test_init_producer_id_is_retried_while_the_broker_waits_for_a_block(fake_cluster,
                                                                       producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    cluster.fail_next(None, None, ErrorCode.coordinator_load_in_progress, times=3,
                      api="INIT_PRODUCER_ID")
    producer = producer_of(cluster)
    assert producer.send("t", b"x").get(IN_PROCESS_BOUND).offset == 0
    sent = [n for n in names(cluster) if n in ("INIT_PRODUCER_ID", "PRODUCE")]
    assert sent == ["INIT_PRODUCER_ID"] * 4 + ["PRODUCE"]


def test_a_fatal_init_producer_id_error_fails_the_sends(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    cluster.fail_next(None, None, ErrorCode.cluster_authorization_failed,
                      api="INIT_PRODUCER_ID")
    producer = producer_of(cluster)
    with pytest.raises(Exception, match="InitProducerId"):
        producer.send("t", b"x").get(IN_PROCESS_BOUND)
    assert "PRODUCE" not in names(cluster)


@pytest.mark.parametrize("code", [ErrorCode.not_leader_or_follower,
                                  ErrorCode.request_timed_out])
def test_a_batch_whose_response_was_lost_is_stored_once(fake_cluster, producer_of, code):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    producer = producer_of(cluster)
    assert producer.send("t", b"first").get(IN_PROCESS_BOUND).offset == 0
    cluster.fail_next("t", 0, code, api="PRODUCE_AFTER_APPEND")
    assert producer.send("t", b"second").get(IN_PROCESS_BOUND).offset == 1
    assert [r.value for r in cluster.records("t", 0)] == [b"first", b"second"]
    assert names(cluster).count("PRODUCE") == 3  # the retry was answered as a duplicate


def test_a_broker_that_dies_after_writing_does_not_duplicate(fake_cluster, producer_of):
    # The leader writes the batch and never answers; the client gives up on it and sends
    # the same bytes to the new leader, which shares the log (an in-sync follower).
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", leaders=[0])
    producer = producer_of(cluster, request_timeout_ms=300)
    assert producer.send("t", b"first").get(IN_PROCESS_BOUND).offset == 0
    cluster.fail_next("t", 0, ErrorCode.not_leader_or_follower, api="PRODUCE_AFTER_APPEND")
    cluster.brokers[0].tamper = lambda frame: None
    future = producer.send("t", b"second")
    wait_for(lambda: len(cluster.records("t", 0)) == 2, "the write at broker 0")
    cluster.move_leader("t", 0, 1)
    cluster.stop_broker(0)
    assert future.get(IN_PROCESS_BOUND).offset == 1
    assert [r.value for r in cluster.records("t", 0)] == [b"first", b"second"]


def test_retries_keep_the_sequence_order_with_five_requests_in_flight(fake_cluster,
                                                                       producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    producer = producer_of(cluster, max_in_flight_requests_per_connection=5)
    assert producer.send("t", b"first").get(IN_PROCESS_BOUND).offset == 0
    broker = cluster.brokers[0]
    broker.paused.set()
    values = np.arange(40, dtype=np.uint8).reshape(40, 1)
    futures = producer.send_batch("t", values, partition=0, batch_size=90)
    assert len(futures) >= 6
    wait_for(lambda: producer._client.in_flight_count() == 5, "five requests in flight")
    cluster.fail_next("t", 0, ErrorCode.not_enough_replicas)  # the first of them fails
    broker.paused.clear()
    for future in futures:
        future.get(IN_PROCESS_BOUND)
    stored = [r.value for r in cluster.records("t", 0)]
    assert stored == [b"first"] + [bytes([i]) for i in range(40)]
    found = stamps(cluster, "t", 0)
    assert [s for _, _, s, _ in found] == [
        sum(c for *_, c in found[:n]) for n in range(len(found))]
    assert {e for _, e, _, _ in found} == {0}  # no epoch bump: the gaps were not real


def test_unknown_producer_id_bumps_the_epoch_and_restarts_the_sequence(fake_cluster,
                                                                      producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t", partitions=2)
    producer = producer_of(cluster)
    for partition in (0, 1):
        producer.send("t", b"a", partition=partition).get(IN_PROCESS_BOUND)
    cluster.fail_next("t", 0, ErrorCode.unknown_producer_id)
    assert producer.send("t", b"b", partition=0).get(IN_PROCESS_BOUND).offset == 1
    assert producer.send("t", b"c", partition=1).get(IN_PROCESS_BOUND).offset == 1
    assert stamps(cluster, "t", 0) == [(1000, 0, 0, 1), (1000, 1, 0, 1)]
    # the other partition moves to the new epoch at sequence 0 too
    assert stamps(cluster, "t", 1) == [(1000, 0, 0, 1), (1000, 1, 0, 1)]
    assert names(cluster).count("INIT_PRODUCER_ID") == 1  # a local bump


def test_a_real_gap_bumps_the_epoch_and_a_duplicate_is_a_success(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    producer = producer_of(cluster)
    producer.send("t", b"a").get(IN_PROCESS_BOUND)
    # the next expected sequence is refused: the leader lost acknowledged batches
    cluster.fail_next("t", 0, ErrorCode.out_of_order_sequence_number)
    assert producer.send("t", b"b").get(IN_PROCESS_BOUND).offset == 1
    cluster.fail_next("t", 0, ErrorCode.duplicate_sequence_number)
    assert producer.send("t", b"c").get(IN_PROCESS_BOUND) is not None
    assert stamps(cluster, "t", 0) == [(1000, 0, 0, 1), (1000, 1, 0, 1)]
    # the leader never stored "c" (the fake only said so): the next batch finds a real
    # gap after the acknowledged "c", and the epoch moves on again
    assert producer.send("t", b"d").get(IN_PROCESS_BOUND).offset == 2
    assert stamps(cluster, "t", 0)[-1] == (1000, 2, 0, 1)


def test_invalid_producer_epoch_is_fatal(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    producer = producer_of(cluster)
    producer.send("t", b"a").get(IN_PROCESS_BOUND)
    cluster.fail_next("t", 0, ErrorCode.invalid_producer_epoch)
    with pytest.raises(InvalidProducerEpochError):
        producer.send("t", b"b").get(IN_PROCESS_BOUND)
    with pytest.raises(InvalidProducerEpochError):
        producer.send("t", b"c").get(IN_PROCESS_BOUND)
    assert [r.value for r in cluster.records("t", 0)] == [b"a"]


def test_without_idempotence_nothing_is_stamped(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    producer = producer_of(cluster, enable_idempotence=False, acks=1)
    producer.send("t", b"a").get(IN_PROCESS_BOUND)
    producer.send_batch("t", [b"b", b"c"], partition=0)
    producer.flush(IN_PROCESS_BOUND)
    assert stamps(cluster, "t", 0) == [(-1, -1, -1, 1), (-1, -1, -1, 2)]
    assert "INIT_PRODUCER_ID" not in names(cluster)


def test_sequences_wrap_at_int_max():
    assert increment_sequence(5, 3) == 8
    assert increment_sequence(INT_MAX - 2, 2) == INT_MAX
    assert increment_sequence(INT_MAX - 2, 3) == 0
    assert increment_sequence(INT_MAX, 10) == 9


def test_a_used_up_epoch_takes_a_new_producer_id_and_restamps_the_unfinished_batch():
    builder = RecordBatchBuilder()
    builder.append(0, None, b"v")
    batch = ProducerBatch("t", 0, builder, None, 0.0)
    txn = TransactionManager()
    assert not txn.may_drain(batch)  # no producer id yet
    txn.set_producer_id_and_epoch(5, MAX_EPOCH)
    assert txn.may_drain(batch)
    txn.stamp(batch)
    BatchHeader(batch.build()).validate()
    txn.request_done(batch)
    assert txn.retry_decision(batch, UnknownProducerIdError("gone")) == RETRY
    assert txn.maybe_bump_epoch()  # past 32767: a new producer id is needed
    assert not txn.has_producer_id and not txn.may_drain(batch)
    txn.set_producer_id_and_epoch(6, 0)
    assert txn.may_drain(batch)
    header = BatchHeader(batch.built)
    header.validate()  # re-stamped in place, CRC rewritten
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (6, 0, 0)


def test_a_large_value_held_as_parts_is_restamped_joined():
    value = bytes(range(256)) * (PARTS_FROM // 256)
    builder = RecordBatchBuilder()
    builder.append(0, None, value)
    batch = ProducerBatch("t", 0, builder, None, 0.0)
    txn = TransactionManager()
    txn.set_producer_id_and_epoch(5, MAX_EPOCH)
    assert txn.may_drain(batch)
    txn.stamp(batch)
    assert isinstance(batch.build(), BatchParts)
    txn.request_done(batch)
    assert txn.retry_decision(batch, UnknownProducerIdError("gone")) == RETRY
    assert txn.maybe_bump_epoch()
    txn.set_producer_id_and_epoch(6, 0)
    assert txn.may_drain(batch)
    header = BatchHeader(batch.built)
    header.validate()  # joined once, re-stamped, CRC rewritten
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (6, 0, 0)
    assert [r.value for r in RecordBatch(bytes(batch.built))] == [value]
