"""Produce from idempotent producers, in process (ProduceHandler over real Partitions on a
fake clock): the error codes of the producer-state checks, a retried batch answered with
its original base offset and no error, and acks=all for a retry — answered at once when
the original is below the high watermark, else parked until it is (Kafka's
DelayedProduce waits for the original's last offset)."""
from __future__ import annotations

import types

import pytest
from kio.schema.errors import ErrorCode

from cluster.metadata.model import PartitionState
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.delayed_produce import ProducePurgatory
from replica_proc.partition import Partition
from replica_proc.produce_handler import ProduceHandler
from segments.log import PartitionLog
from segments.record.records import RecordBatchBuilder
from tests.support.broker import produce_request
from tests.support.clock import T0, FakeClock

PID = 4242
VERSION = 8


class FakeAlterPartition:
    def submit(self, *args):
        return True


class FakeReplicas:
    def __init__(self, partition):
        self._partition = partition

    def leader(self, topic, index):
        return self._partition

    def partition(self, topic, index):
        return self._partition


class FakeChannel:
    def __init__(self):
        self.waiting = None  # the acks=all produce waiting for replication
        self.sent = []

    def send(self, frame):
        self.sent.append(bytes(frame))

    def wait_for(self, produce):
        self.waiting = produce

    def answer(self, produce, frame):
        assert produce is self.waiting
        self.waiting = None
        self.send(frame)


def idempotent(epoch, sequence, count=1):
    builder = RecordBatchBuilder(0, 1 << 20, producer_id=PID, producer_epoch=epoch,
                                 base_sequence=sequence)
    for n in range(count):
        builder.append(T0 + n, b"k", b"v%d" % n)
    return bytes(builder.build())


@pytest.fixture
def broker(tmp_path):
    """A partition led by broker 0 with follower 1 in the ISR, and its produce handler."""
    clock = FakeClock(1000.0)
    log = PartitionLog(tmp_path / "t-0", clock=FakeClock(T0))
    partition = Partition("t", 0, "id", 0, log, 1, clock=clock, replica_lag_max=10.0,
                          alter_partition=FakeAlterPartition(),
                          on_high_watermark=lambda p, old: None)
    partition.update(PartitionState("t", 0, 0, 0, (0, 1), (0, 1)), (0, 1))
    purgatory = ProducePurgatory(lambda key: partition)
    handler = ProduceHandler(FakeReplicas(partition), purgatory, clock,
                             on_append=lambda key, size: None,
                             on_high_watermark=lambda p, old, size: None)
    yield types.SimpleNamespace(partition=partition, handler=handler)
    log.close()


def produce(broker, records, acks=-1):
    """Send one produce; the PartitionResult answered at once, or the parked produce."""
    channel = FakeChannel()
    header = types.SimpleNamespace(request_api_version=VERSION, correlation_id=7)
    broker.handler(channel, header, produce_request("t", 0, records, acks=acks))
    if channel.waiting is not None:
        return channel.waiting
    (frame,) = channel.sent
    _, response = protocol.decode_response(frame, ApiKey.PRODUCE, VERSION)
    (topic,) = response.responses
    (partition,) = topic.partition_responses
    return partition


def replicate(broker):
    """Follower 1 fetches up to the leader's end: the HW moves there."""
    partition = broker.partition
    end = partition.log.log_end_offset
    partition.check_follower(1)
    partition.update_follower(1, end, end)
    assert partition.high_watermark == end


def test_the_producer_state_errors_are_answered_per_partition(broker):
    assert produce(broker, idempotent(1, 0), acks=1).error_code == ErrorCode.none
    gap = produce(broker, idempotent(1, 5), acks=1)
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    assert "5 (incoming seq. number), 0" in gap.error_message
    old = produce(broker, idempotent(0, 1), acks=1)
    assert old.error_code == ErrorCode.invalid_producer_epoch
    assert broker.partition.log.log_end_offset == 1


def test_a_retry_is_answered_with_its_original_base_offset_and_no_error(broker):
    produce(broker, idempotent(0, 0, 3), acks=1)
    produce(broker, idempotent(0, 3, 2), acks=1)
    retry = produce(broker, idempotent(0, 0, 3), acks=1)
    assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 0)
    assert broker.partition.log.log_end_offset == 5


def test_an_acks_all_retry_below_the_high_watermark_is_answered_at_once(broker):
    parked = produce(broker, idempotent(0, 0, 2))
    assert parked.waiting  # the original waits for follower 1
    replicate(broker)
    produce(broker, idempotent(0, 2, 1))  # parked: offset 2 is not replicated
    assert broker.partition.high_watermark == 2 < broker.partition.log.log_end_offset
    retry = produce(broker, idempotent(0, 0, 2))
    assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 0)


def test_an_acks_all_retry_above_the_high_watermark_waits_like_its_original(broker):
    produce(broker, idempotent(0, 0, 2))
    retry = produce(broker, idempotent(0, 0, 2))
    (pending,) = retry.waiting.values()
    assert pending.required_offset == 2
    assert pending.results[pending.i].base_offset == 0
    channel, _ = retry.context
    assert channel.sent == []
    replicate(broker)
    broker.handler.on_high_watermark(("t", 0))
    (frame,) = channel.sent  # answered once the original is replicated
    _, response = protocol.decode_response(frame, ApiKey.PRODUCE, VERSION)
    (answer,) = response.responses[0].partition_responses
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
