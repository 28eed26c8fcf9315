"""A stand-in for KafkaClient in the consumer's unit tests, and kio responses to feed it.

``FakeClient`` has what the fetcher and the offset lookups use of KafkaClient: the metadata
cache (a real ClusterMetadata, filled by ``set_leaders``), ``send`` (records the request,
returns a Future the test completes; ``send_frame`` the same for a frame written by its
caller, decoded back into the kio request), ``connection_delay`` and ``poll`` (runs the test's
``responder`` on what was sent and advances the fake ``clock``, monotonic seconds from 100.0).
"""
from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from cluster.client.future import Future
from cluster.client.metadata import ClusterMetadata, PartitionMetadata, TopicMetadata
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from cluster.structs import TopicPartition
from segments.record.batch_header import BatchHeader
from segments.record.records import RecordBatchBuilder
from tests.support.clock import T0, FakeClock

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
FETCH = protocol.response_module(ApiKey.FETCH, 11)
LIST_OFFSETS = protocol.response_module(ApiKey.LIST_OFFSETS, 5)


class FakeClient:
    """What the fetcher and the offset lookups use of KafkaClient (module doc)."""

    client_id = "fake-client"

    def __init__(self, leaders, clock=None):
        self.cluster = ClusterMetadata("c")
        self.sent = []  # (node, request, future)
        self.delays = {}
        self.clock = clock or FakeClock(100.0)
        self.responder = None  # called with (node, request, future) for each one sent
        self.set_leaders(leaders)

    def set_leaders(self, leaders, epoch=3):
        topics = {}
        for tp, leader in leaders.items():
            topics.setdefault(tp.topic, []).append(PartitionMetadata(
                tp.topic, tp.partition, leader, epoch, (leader,), (leader,), (), 0))
        self.cluster.update({}, 0, {name: TopicMetadata(name, 0, False, parts)
                                    for name, parts in topics.items()}, 0.0, True,
                            self.cluster.requested)

    def send(self, node, request):
        future = Future()
        self.sent.append((node, request, future))
        return future

    def send_frame(self, node, api_key, api_version, size, write_into):
        frame = bytearray(size)
        with memoryview(frame) as view:
            write_into(view, 0)
        header, request = protocol.decode_request(bytes(frame))
        assert (header.request_api_key, header.request_api_version) == (api_key, api_version)
        assert header.client_id == self.client_id
        return self.send(node, request)

    def connection_delay(self, node):
        return self.delays.get(node, 0.0)

    def poll(self, timeout=0.0):
        """Answer what was sent (through ``responder``), then let ``timeout`` pass."""
        sent, self.sent = self.sent, []
        for node, request, future in sent:
            if self.responder is not None:
                self.responder(node, request, future)
        self.clock.now += timeout
        return len(sent)

    def take(self):
        """The requests sent since the last take: [(node, {tp: fetch offset}, future)]."""
        out = [(node, {TopicPartition(t.topic, p.partition): p.fetch_offset
                       for t in request.topics for p in t.partitions}, future)
               for node, request, future in self.sent]
        self.sent.clear()
        return out


def batch(first, count, value=b"v"):
    builder = RecordBatchBuilder()
    for i in range(count):
        builder.append(T0, None, value + b"%d" % (first + i))
    data = bytearray(builder.build())
    BatchHeader(data).stamp(first, 3)
    return bytes(data)


def fetch_response(*partitions):
    """partitions: (tp, error code, high watermark, records bytes or None)."""
    topics = {}
    for tp, code, high_watermark, records in partitions:
        topics.setdefault(tp.topic, []).append(FETCH.PartitionData(
            partition_index=tp.partition, error_code=ErrorCode(code),
            high_watermark=high_watermark, last_stable_offset=high_watermark,
            log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
            records=records))
    return FETCH.FetchResponse(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
        responses=tuple(FETCH.FetchableTopicResponse(topic=name, partitions=tuple(parts))
                        for name, parts in topics.items()))




def list_offsets_response(*partitions):
    """partitions: (tp, error code, timestamp, offset)."""
    topics = {}
    for tp, code, timestamp, offset in partitions:
        topics.setdefault(tp.topic, []).append(LIST_OFFSETS.ListOffsetsPartitionResponse(
            partition_index=tp.partition, error_code=ErrorCode(code), timestamp=timestamp,
            offset=offset, leader_epoch=3))
    return LIST_OFFSETS.ListOffsetsResponse(
        throttle_time=datetime.timedelta(0),
        topics=tuple(LIST_OFFSETS.ListOffsetsTopicResponse(name=name, partitions=tuple(parts))
                     for name, parts in topics.items()))
