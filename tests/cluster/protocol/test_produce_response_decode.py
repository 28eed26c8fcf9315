"""The producer's reader of Produce responses (``decode_produce_response``) against kio's:
the same answers field by field at every version, and KafkaProtocolError for what does
not parse."""
from __future__ import annotations

import dataclasses
import datetime
import struct

import pytest

from cluster.errors import KafkaProtocolError
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from cluster.protocol.produce_response import (
    PartitionResult,
    decode_produce_response,
    produce_response_frame,
)

TOPICS = [("orders", [PartitionResult(0, 0, 1234, -1, 17, None),
                      PartitionResult(5, 10, -1, -1, -1, "batch too large: 2000 > 1000")]),
          ("p\u00e4yments", [PartitionResult(2, 0, 99, 1_700_000_000_123, 0, None)]),
          ("empty", [])]


def kio_results(frame, version):
    """kio's reading of ``frame``, in the reader's shape."""
    correlation_id, response = protocol.decode_response(frame, ApiKey.PRODUCE, version)
    return correlation_id, [
        (topic.name, (p.index, int(p.error_code), p.base_offset,
                      -1 if p.log_append_time is None else
                      round(p.log_append_time.timestamp() * 1000),
                      p.log_start_offset if version >= 5 else -1,
                      p.error_message if version >= 8 else None))
        for topic in response.responses for p in topic.partition_responses]


@pytest.mark.parametrize("version", range(3, 9))
@pytest.mark.parametrize("topics", [TOPICS, []], ids=["topics", "none"])
def test_the_reader_reads_what_kio_reads(version, topics):
    frame = bytes(produce_response_frame(version, 4242, topics))
    correlation_id, results = decode_produce_response(memoryview(frame), version)
    assert (correlation_id, [(t, tuple(r)) for t, r in results]) == kio_results(frame, version)


def test_record_errors_are_read_past():
    """A v8 partition answer carrying record errors (a broker that reports them): the
    reader steps over them to the error message and the next partition, as kio does."""
    m = protocol.response_module(ApiKey.PRODUCE, 8)
    _, response = protocol.decode_response(
        produce_response_frame(8, 1, TOPICS[:1]), ApiKey.PRODUCE, 8)
    first = response.responses[0].partition_responses[0]
    errors = (m.BatchIndexAndErrorMessage(batch_index=3, batch_index_error_message="bad"),
              m.BatchIndexAndErrorMessage(batch_index=4, batch_index_error_message=None))
    topic = dataclasses.replace(response.responses[0], partition_responses=(
        dataclasses.replace(first, record_errors=errors),)
        + response.responses[0].partition_responses[1:])
    frame = bytes(protocol.encode_response(dataclasses.replace(response, responses=(topic,)), 9))
    _, results = decode_produce_response(frame, 8)
    assert [(t, tuple(r)) for t, r in results] == kio_results(frame, 8)[1]


@pytest.mark.parametrize("damage", ["cut", "padded", "size prefix", "negative count",
                                    "bad utf-8", "null topic name"])
def test_a_frame_that_does_not_parse_is_a_protocol_error(damage):
    frame = bytearray(produce_response_frame(8, 5, TOPICS))
    if damage == "cut":
        frame = frame[:-3]
        struct.pack_into(">i", frame, 0, len(frame) - 4)
    elif damage == "padded":
        frame += b"\0"
        struct.pack_into(">i", frame, 0, len(frame) - 4)
    elif damage == "size prefix":
        struct.pack_into(">i", frame, 0, len(frame))
    elif damage == "negative count":
        struct.pack_into(">i", frame, 8, -2)
    elif damage == "bad utf-8":
        frame[14:16] = b"\xff\xfe"  # inside "orders"
    else:
        struct.pack_into(">h", frame, 12, -1)
    with pytest.raises(KafkaProtocolError, match="Produce|PRODUCE"):
        decode_produce_response(bytes(frame), 8)
    with pytest.raises(KafkaProtocolError):  # kio refuses it too
        protocol.decode_response(bytes(frame), ApiKey.PRODUCE, 8)


def test_a_frame_shorter_than_its_header_is_a_protocol_error():
    with pytest.raises(KafkaProtocolError, match="Produce response frame of 5 bytes"):
        decode_produce_response(b"\0\0\0\1\0", 8)


def test_log_append_time_is_milliseconds():
    frame = produce_response_frame(8, 1, [("t", [PartitionResult(0, 0, 7, 1_700_000_000_123,
                                                                   0, None)])])
    (_, result), = decode_produce_response(frame, 8)[1]
    assert result.log_append_time == 1_700_000_000_123
    assert datetime.datetime.fromtimestamp(result.log_append_time / 1000, datetime.UTC).year \
        == 2023
