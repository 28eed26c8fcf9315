"""cluster.protocol.frames: Kafka frames for every supported API and version, garbage, hot paths."""
from __future__ import annotations

import dataclasses
import datetime
import io
import random
import struct
import types
import typing
import uuid

import pytest
from crc32c import crc32c
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.request_header.v2.header import RequestHeader as FlexibleRequestHeader
from kio.serial import entity_writer

from cluster.errors import (
    IllegalArgumentError,
    InvalidRequestError,
    KafkaProtocolError,
    UnsupportedVersionError,
)
from cluster.protocol import frame_descriptor as d, frames as protocol
from cluster.protocol.batch_bodies import ProduceFrame
from cluster.protocol.frames import ApiKey
from segments.record import batch_descriptor as bd
from segments.record.batch_header import BatchHeader
from segments.record.batch_parts import BatchParts


def record_batch(record_count=3, payload=100, base_offset=0):
    """A RecordBatch v2 with a valid CRC; its records are opaque bytes to the protocol."""
    records = bytes(random.Random(record_count).randbytes(record_count * payload))
    length = bd.HEADER_SIZE + len(records) - bd.LOG_OVERHEAD
    header = bytearray(bd.HEADER.pack(
        base_offset, length, 0, bd.MAGIC, 0, 0, record_count - 1, 1_700_000_000_000,
        1_700_000_000_000 + record_count, 4000, 0, 0, record_count))
    batch = header + records
    bd.UINT32.pack_into(batch, bd.CRC_OFFSET, crc32c(bytes(batch[bd.ATTRIBUTES_OFFSET:])))
    return bytes(batch)


BATCH = record_batch()

# -- realistic bodies for every API, built from kio's field declarations ---------------------

STRINGS = {
    "name": "app-logs", "topic": "app-logs", "topic_name": "app-logs",
    "group_id": "log-alerts", "member_id": "consumer-1-8c1f2e0a", "leader": "consumer-1-8c1f2e0a",
    "group_instance_id": "alerts-host-1", "protocol_type": "consumer", "protocol_name": "range",
    "transactional_id": "orders-txn-1", "client_id": "producer-1", "host": "localhost",
    "rack": "rack-a", "cluster_id": "ringlog-7QqUaJ", "key": "log-alerts",
    "committed_metadata": "", "metadata": "", "error_message": "not the leader",
    "config_name": "retention.ms", "value": "604800000", "reason": "consumer poll timeout",
    "assignor": "range",
}
INT8 = {"isolation_level": 1, "key_type": 0}
INT16 = {"acks": -1, "api_key": 3, "min_version": 1, "max_version": 8, "producer_epoch": 0,
         "replication_factor": 3}


def primitive(name, kafka_type, variant):
    if kafka_type == "string":
        return STRINGS.get(name, f"{name}-{variant}")
    if kafka_type == "bytes":
        return b"\x00\x01" + name.encode() + bytes([variant])
    if kafka_type == "records":
        return record_batch(record_count=2 + variant)
    if kafka_type == "bool":
        return variant % 2 == 0
    if kafka_type == "error_code":
        return ErrorCode.none if variant == 0 else ErrorCode.not_leader_or_follower
    if kafka_type == "int8":
        return INT8.get(name, 1)
    if kafka_type == "int16":
        return INT16.get(name, 2 + variant)
    if kafka_type == "int32":
        return 3 + variant if "partition" in name or "index" in name else 1000 + variant
    if kafka_type == "int64":
        return 1_234_567 + variant
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=30_000 + variant)
    if kafka_type == "datetime_i64":
        return datetime.datetime(2024, 5, 1, 12, 0, variant, 125_000, tzinfo=datetime.UTC)
    if kafka_type == "uuid":
        return uuid.UUID(int=0x1234 + variant)
    raise AssertionError(f"no sample for {name} of kafka type {kafka_type}")


def sample(cls, variant=0):
    """An instance of kio class ``cls`` with every field set (nullable ones too)."""
    values = {}
    for f in dataclasses.fields(cls):
        tp = f.type
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        kafka_type = f.metadata.get("kafka_type")
        if typing.get_origin(tp) is tuple:
            inner = typing.get_args(tp)[0]
            if dataclasses.is_dataclass(inner):
                values[f.name] = (sample(inner, variant), sample(inner, variant + 1))
            else:
                values[f.name] = tuple(primitive(f.name, kafka_type, variant + i)
                                       for i in range(3))
        elif dataclasses.is_dataclass(tp):
            values[f.name] = sample(tp, variant)
        else:
            values[f.name] = primitive(f.name, kafka_type, variant)
    return cls(**values)


ALL_VERSIONS = [(key, version) for key, (low, high) in protocol.SUPPORTED_VERSIONS.items()
                for version in range(low, high + 1)]


def kio_body(obj):
    out = io.BytesIO()
    entity_writer(type(obj))(out, obj)
    return out.getvalue()


# -- the table ----------------------------------------------------------------------------------

def tagged(key, version, kind="request"):
    """Bytes of the header's empty tagged fields: 1 for a version carried flexible, else 0;
    0 for ApiVersions' responses, whose header is v0 at every version (Kafka's rule)."""
    if kind == "response" and key == ApiKey.API_VERSIONS:
        return 0
    return d.EMPTY_TAGGED_FIELDS_LENGTH if protocol.is_flexible(key, version) else 0


def test_supported_versions_are_kafkas_non_flexible_ranges():
    assert {key: protocol.SUPPORTED_VERSIONS[key] for key in (
        ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH)} == {
        ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (1, 8), ApiKey.PRODUCE: (3, 8),
        ApiKey.FETCH: (4, 11)}
    assert {key: protocol.SUPPORTED_VERSIONS[key] for key in (
        ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.ELECT_LEADERS)} == {
        ApiKey.DESCRIBE_CONFIGS: (1, 3), ApiKey.ALTER_CONFIGS: (0, 1),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 0), ApiKey.ELECT_LEADERS: (0, 1)}
    assert len(protocol.SUPPORTED_VERSIONS) == 36
    assert {key: protocol.SUPPORTED_VERSIONS[key] for key in (
        ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN,
        ApiKey.END_TXN, ApiKey.WRITE_TXN_MARKERS, ApiKey.TXN_OFFSET_COMMIT,
        ApiKey.FIND_COORDINATOR)} == {
        ApiKey.INIT_PRODUCER_ID: (0, 1), ApiKey.ADD_PARTITIONS_TO_TXN: (0, 2),
        ApiKey.ADD_OFFSETS_TO_TXN: (0, 2), ApiKey.END_TXN: (0, 2),
        ApiKey.WRITE_TXN_MARKERS: (1, 1), ApiKey.TXN_OFFSET_COMMIT: (0, 3),
        ApiKey.FIND_COORDINATOR: (0, 2)}
    assert {key: protocol.SUPPORTED_VERSIONS[key] for key in (
        ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS, ApiKey.DELETE_GROUPS,
        ApiKey.OFFSET_DELETE)} == {
        ApiKey.DESCRIBE_GROUPS: (0, 4), ApiKey.LIST_GROUPS: (0, 2),
        ApiKey.DELETE_GROUPS: (0, 1), ApiKey.OFFSET_DELETE: (0, 0)}
    assert set(protocol.FLEXIBLE_ONLY) == {ApiKey.ALTER_PARTITION, ApiKey.WRITE_TXN_MARKERS,
                                          ApiKey.ALLOCATE_PRODUCER_IDS,
                                          ApiKey.DESCRIBE_PRODUCERS,
                                          ApiKey.DESCRIBE_TRANSACTIONS,
                                          ApiKey.LIST_TRANSACTIONS}
    assert {key: protocol.SUPPORTED_VERSIONS[key] for key in (
        ApiKey.DESCRIBE_PRODUCERS, ApiKey.DESCRIBE_TRANSACTIONS,
        ApiKey.LIST_TRANSACTIONS)} == {
        ApiKey.DESCRIBE_PRODUCERS: (0, 0), ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
        ApiKey.LIST_TRANSACTIONS: (0, 1)}
    assert protocol.SUPPORTED_VERSIONS[ApiKey.ALTER_PARTITION] == (2, 3)
    assert protocol.SUPPORTED_VERSIONS[ApiKey.ALLOCATE_PRODUCER_IDS] == (0, 0)
    assert protocol.SUPPORTED_VERSIONS[ApiKey.INIT_PRODUCER_ID] == (0, 1)
    assert protocol.SUPPORTED_VERSIONS[ApiKey.OFFSET_FOR_LEADER_EPOCH] == (2, 3)
    assert protocol.FLEXIBLE_FROM == {ApiKey.TXN_OFFSET_COMMIT: 3, ApiKey.OFFSET_FETCH: 6,
                                     ApiKey.API_VERSIONS: 3}
    assert protocol.SUPPORTED_VERSIONS[ApiKey.OFFSET_FETCH] == (1, 7)
    for key, version in ALL_VERSIONS:
        flexible = protocol.is_flexible(key, version)
        for cls in (protocol.request_class(key, version), protocol.response_class(key, version)):
            assert (cls.__api_key__, cls.__version__, cls.__flexible__) == (
                key, version, flexible)
        if not flexible:
            assert protocol.request_class(key, version).__header_schema__ is RequestHeader


def test_api_versions_response_advertises_the_table():
    for version in (0, 1, 2, 3):
        response = protocol.api_versions_response(version, throttle_time_ms=5)
        assert response.error_code == ErrorCode.none
        assert {entry.api_key: (entry.min_version, entry.max_version)
                for entry in response.api_keys} == protocol.SUPPORTED_VERSIONS
        if version:
            assert response.throttle_time == datetime.timedelta(milliseconds=5)
        frame = protocol.encode_response(response, 1)
        assert protocol.decode_response(frame, ApiKey.API_VERSIONS, version) == (1, response)
    refusal = protocol.api_versions_response(0, error_code=ErrorCode.unsupported_version)
    assert refusal.error_code == ErrorCode.unsupported_version


def test_api_versions_v3_is_flexible_with_response_header_v0():
    """KIP-511: request header v2 and compact strings; the response's header stays v0 (no
    tagged-field byte after the correlation id), its body flexible."""
    request = protocol.request_class(ApiKey.API_VERSIONS, 3)(
        client_software_name="librdkafka", client_software_version="2.0.2")
    frame = protocol.encode_request(request, 4, "rdkafka")
    assert bytes(frame[d.CLIENT_ID_OFFSET:]) == (
        b"rdkafka" + b"\x00" + b"\x0blibrdkafka" + b"\x062.0.2" + b"\x00")
    assert protocol.decode_request(frame)[1] == request
    response = protocol.api_versions_response(3)
    frame = protocol.encode_response(response, 4)
    # correlation id, then error_code 0 and the compact array's length at once
    assert bytes(frame[d.RESPONSE_BODY_OFFSET:d.RESPONSE_BODY_OFFSET + 3]) == (
        b"\x00\x00" + bytes([len(protocol.SUPPORTED_VERSIONS) + 1]))
    assert protocol.decode_response(frame, ApiKey.API_VERSIONS, 3) == (4, response)


def test_request_module_holds_the_nested_classes():
    module = protocol.request_module(ApiKey.PRODUCE, 8)
    assert module.ProduceRequest is protocol.request_class(ApiKey.PRODUCE, 8)
    assert module.PartitionProduceData.__version__ == 8
    assert protocol.response_module(ApiKey.FETCH, 4).AbortedTransaction.__version__ == 4


# -- round trips ------------------------------------------------------------------------------

@pytest.mark.parametrize("key, version", ALL_VERSIONS,
                         ids=[f"{ApiKey(k).name}-v{v}" for k, v in ALL_VERSIONS])
def test_request_round_trip(key, version):
    request = sample(protocol.request_class(key, version))
    frame = protocol.encode_request(request, 123456, "producer-1")
    assert bytes(frame[d.CLIENT_ID_OFFSET + len("producer-1") + tagged(key, version):]) == kio_body(
        request)
    assert len(frame) == protocol.request_frame_size(request, "producer-1")

    header, decoded = protocol.decode_request(bytes(frame))
    assert header == RequestHeader(request_api_key=key, request_api_version=version,
                                   correlation_id=123456, client_id="producer-1")
    assert decoded == request

    slot = bytearray(len(frame) + 11)
    end = protocol.encode_request_into(slot, 5, request, 123456, "producer-1")
    assert end == 5 + len(frame) and slot[5:end] == frame
    assert protocol.decode_request(memoryview(slot)[5:end]) == (header, request)


@pytest.mark.parametrize("key, version", ALL_VERSIONS,
                         ids=[f"{ApiKey(k).name}-v{v}" for k, v in ALL_VERSIONS])
def test_response_round_trip(key, version):
    response = sample(protocol.response_class(key, version))
    frame = protocol.encode_response(response, -7)
    start = d.RESPONSE_BODY_OFFSET + tagged(key, version, "response")
    assert bytes(frame[start:]) == kio_body(response)
    assert protocol.response_correlation_id(frame) == -7
    assert protocol.decode_response(frame, key, version) == (-7, response)

    slot = bytearray(3) + frame
    assert protocol.decode_response(memoryview(slot)[3:], key, version) == (-7, response)


def test_request_header_layout():
    request = sample(protocol.request_class(ApiKey.HEARTBEAT, 3))
    frame = protocol.encode_request(request, 0x01020304, "ab")
    assert frame[:d.CLIENT_ID_OFFSET + 2] == (
        struct.pack(">i", len(frame) - 4) + b"\x00\x0c" + b"\x00\x03" + b"\x01\x02\x03\x04"
        + b"\x00\x02" + b"ab")
    null_client = protocol.encode_request(request, 9, None)
    assert null_client[d.CLIENT_ID_LENGTH_OFFSET:d.CLIENT_ID_OFFSET] == b"\xff\xff"
    header, _ = protocol.decode_request(null_client)
    assert header.client_id is None and header.correlation_id == 9
    header, _ = protocol.decode_request(protocol.encode_request(request, -1, "prod\u00fccer"))
    assert header.client_id == "prod\u00fccer" and header.correlation_id == -1


def test_next_correlation_id_wraps_to_zero_within_the_int32():
    request = sample(protocol.request_class(ApiKey.HEARTBEAT, 3))
    ids = [protocol.next_correlation_id(n)
           for n in (0, protocol.MAX_CORRELATION_ID - 1, protocol.MAX_CORRELATION_ID)]
    assert ids == [1, protocol.MAX_CORRELATION_ID, 0]
    for correlation_id in ids:
        header, _ = protocol.decode_request(
            protocol.encode_request(request, correlation_id, "c"))
        assert header.correlation_id == correlation_id


def test_flexible_frames_carry_request_header_v2_and_response_header_v1():
    """AlterPartition has only flexible versions: its headers are kio's v2 / v1 headers,
    byte for byte, and the decoded request header is the same v1 header as any other."""
    request = sample(protocol.request_class(ApiKey.ALTER_PARTITION, 3))
    frame = protocol.encode_request(request, 77, "broker-1")
    header_v2 = kio_body(FlexibleRequestHeader(
        request_api_key=56, request_api_version=3, correlation_id=77, client_id="broker-1"))
    assert bytes(frame) == struct.pack(">i", len(frame) - 4) + header_v2 + kio_body(request)
    assert header_v2.endswith(b"broker-1\x00")
    assert protocol.decode_request(frame) == (
        RequestHeader(request_api_key=56, request_api_version=3, correlation_id=77,
                      client_id="broker-1"), request)
    response = sample(protocol.response_class(ApiKey.ALTER_PARTITION, 2))
    frame = protocol.encode_response(response, 258)
    assert bytes(frame) == (struct.pack(">ii", len(frame) - 4, 258) + b"\x00"
                            + kio_body(response))
    assert protocol.decode_response(frame, ApiKey.ALTER_PARTITION, 2) == (258, response)
    # a request with a tagged field in its header (a newer client's) still decodes
    tagged_header = kio_body(FlexibleRequestHeader(
        request_api_key=56, request_api_version=3, correlation_id=5, client_id=None))[:-1]
    tagged_header += b"\x01\x07\x02ab"  # one tagged field: tag 7, 2 bytes
    body = kio_body(request)
    frame = struct.pack(">i", len(tagged_header) + len(body)) + tagged_header + body
    assert protocol.decode_request(frame)[1] == request


def test_non_flexible_frames_have_no_tagged_fields():
    request = sample(protocol.request_class(ApiKey.CREATE_TOPICS, 4))
    frame = protocol.encode_request(request, 1, "c")
    assert bytes(frame[d.CLIENT_ID_OFFSET + 1:]) == kio_body(request)


def test_response_header_layout():
    response = sample(protocol.response_class(ApiKey.HEARTBEAT, 3))
    frame = protocol.encode_response(response, 258)
    assert frame[:8] == struct.pack(">ii", len(frame) - 4, 258)


def test_decodes_from_writable_buffers_like_a_ring_slot():
    request = sample(protocol.request_class(ApiKey.PRODUCE, 8))
    slot = bytearray(protocol.encode_request(request, 1, "p"))
    assert protocol.decode_request(slot)[1] == request
    assert protocol.decode_request(memoryview(slot))[1] == request


# -- the hand encoders equal kio byte for byte ----------------------------------------------

def produce_request(version, topics, transactional_id=None, acks=-1, timeout_ms=30000):
    m = protocol.request_module(ApiKey.PRODUCE, version)
    return m.ProduceRequest(
        transactional_id=transactional_id, acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=tuple(m.TopicProduceData(name=name, partition_data=tuple(
            m.PartitionProduceData(index=index, records=records)
            for index, records in partitions)) for name, partitions in topics))


PRODUCE_SHAPES = {
    "one 16 KB batch": dict(topics=[("app-logs", [(3, record_batch(160, 100))])]),
    "many topics and partitions": dict(topics=[
        ("app-logs", [(0, BATCH), (1, record_batch(7)), (2, record_batch(1))]),
        ("metrics", [(0, record_batch(2))]), ("empty", [])]),
    "null and empty records": dict(topics=[("t", [(0, None), (1, b"")])]),
    "transactional, acks 0, no topics": dict(topics=[], transactional_id="orders-txn",
                                               acks=0, timeout_ms=0),
    "non-ascii topic, view records": dict(topics=[("journ\u00e9es", [(5, memoryview(BATCH))]),
                                                   ("b", [(6, bytearray(BATCH))])]),
}


@pytest.mark.parametrize("version", range(3, 9))
@pytest.mark.parametrize("shape", PRODUCE_SHAPES)
def test_produce_request_hand_encoder_equals_kio(version, shape):
    request = produce_request(version, **PRODUCE_SHAPES[shape])
    frame = protocol.encode_request(request, 77, "producer-1")
    assert bytes(frame[d.CLIENT_ID_OFFSET + 10:]) == kio_body(request)
    _, decoded = protocol.decode_request(frame)
    assert decoded == request
    for topic in decoded.topic_data:
        for partition in topic.partition_data:
            if partition.records:
                BatchHeader(partition.records).validate()  # carried intact, CRC and all


LARGE_BATCH = record_batch(3, protocol.VIEW_RECORDS_FROM // 3)


@pytest.mark.parametrize("version", range(3, 9))
@pytest.mark.parametrize("shape", PRODUCE_SHAPES)
@pytest.mark.parametrize("client_id", ["producer-1", None, "cli\u00e9nt"])
def test_a_produce_frame_writes_the_bytes_of_the_equivalent_request(version, shape,
                                                                     client_id):
    """The producer's ProduceFrame (prefix encoded once, no kio objects) writes what
    ``encode_request`` writes for the same ProduceRequest, request after request."""
    fields = PRODUCE_SHAPES[shape]
    request = produce_request(version, **fields)
    frame = ProduceFrame(ApiKey.PRODUCE, version, client_id, fields.get("transactional_id"),
                         fields.get("acks", -1), fields.get("timeout_ms", 30000))
    topics = tuple((name, list(partitions)) for name, partitions in fields["topics"])
    for correlation_id in (0, 77, protocol.MAX_CORRELATION_ID):
        size = frame.size(topics)
        slot = bytearray(b"\xee" * (size + 5))
        with memoryview(slot) as view:
            assert frame.write_into(view, size, correlation_id, topics) == size
        assert slot[:size] == protocol.encode_request(request, correlation_id, client_id)
        assert slot[size:] == b"\xee" * 5


def test_a_produce_frame_writes_a_batch_held_as_parts_as_the_joined_batch():
    whole = LARGE_BATCH
    parts = BatchParts((whole[:100], memoryview(whole)[100:-7], whole[-7:]))
    frame = ProduceFrame(ApiKey.PRODUCE, 8, "c", None, 1, 30000)
    topics = (("app-logs", [(0, BATCH)]), ("large", [(2, parts)]))
    slot = bytearray(frame.size(topics))
    with memoryview(slot) as view:
        frame.write_into(view, len(slot), 9, topics)
    request = produce_request(8, [("app-logs", [(0, BATCH)]), ("large", [(2, whole)])], acks=1)
    assert slot == protocol.encode_request(request, 9, "c")


def test_a_produce_frame_refuses_a_client_id_no_header_can_carry():
    with pytest.raises(ValueError, match="32768 bytes"):
        ProduceFrame(ApiKey.PRODUCE, 8, "c" * 0x8000, None, 1, 30000)




@pytest.mark.parametrize("version", range(3, 9))
@pytest.mark.parametrize("shape", PRODUCE_SHAPES)
def test_a_large_produce_requests_records_are_views_of_the_frame(version, shape):
    topics = PRODUCE_SHAPES[shape]["topics"] + [("large", [(9, LARGE_BATCH)])]
    request = produce_request(version, **dict(PRODUCE_SHAPES[shape], topics=topics))
    frame = protocol.encode_request(request, 77, "producer-1")
    assert len(frame) >= protocol.VIEW_RECORDS_FROM
    _, decoded = protocol.decode_request(frame)
    assert decoded == request
    records = [p.records for t in decoded.topic_data for p in t.partition_data
               if p.records is not None]
    assert all(isinstance(r, memoryview) and r.readonly and r.obj is frame for r in records)
    BatchHeader(records[-1]).validate()


def test_a_batch_held_as_parts_is_written_as_the_joined_batch():
    """A producer's large value (``BatchParts``): the frame, in a slot or on its own,
    carries the same bytes as the joined batch."""
    whole = LARGE_BATCH
    parts = BatchParts((whole[:100], memoryview(whole)[100:-7], whole[-7:]))
    frames = []
    for records in (whole, parts):
        request = produce_request(8, [("app-logs", [(0, BATCH)]), ("large", [(2, records)])])
        slot = bytearray(protocol.request_frame_size(request, "c") + 3)
        end = protocol.encode_request_into(slot, 3, request, 5, "c")
        assert end == len(slot) and slot[3:] == protocol.encode_request(request, 5, "c")
        frames.append(bytes(slot[3:]))
    assert frames[0] == frames[1]


def test_a_damaged_large_produce_request_is_read_as_kio_reads_it(monkeypatch):
    """Fields flipped, the frame cut or padded: the view reader parses what kio parses,
    to the same request, and refuses what kio refuses, with InvalidRequestError."""
    rng = random.Random(24)
    request = produce_request(8, [("app-logs", [(0, BATCH), (1, None)]),
                                  ("large", [(2, LARGE_BATCH)])], transactional_id="tx")
    valid = bytes(protocol.encode_request(request, 5, "c"))
    outcomes = set()
    for trial in range(300):
        body = bytearray(valid[d.SIZE_PREFIX_LENGTH:])
        if trial % 3 == 0:
            del body[rng.randrange(len(body) - 100, len(body)):]
        elif trial % 3 == 1:
            body += rng.randbytes(rng.randint(1, 20))
        for _ in range(rng.randint(1, 4)):  # the fields, not the batch bodies
            body[rng.randrange(12, len(BATCH) + 60)] = rng.choice((0, 0xFF, rng.randrange(256)))
        frame = struct.pack(">i", len(body)) + bytes(body)
        results = []
        for threshold in (protocol.VIEW_RECORDS_FROM, 1 << 62):  # the view reader, kio
            monkeypatch.setattr(protocol, "VIEW_RECORDS_FROM", threshold)
            try:
                results.append(protocol.decode_request(frame)[1])
            except InvalidRequestError as exc:
                assert exc.header is not None
                results.append(InvalidRequestError)
        assert results[0] == results[1]
        outcomes.add("refused" if results[0] is InvalidRequestError else "parsed")
    assert outcomes == {"refused", "parsed"}


def fetch_response(version, topics, throttle_ms=0, error_code=ErrorCode.none, session_id=0):
    m = protocol.response_module(ApiKey.FETCH, version)
    top = {"error_code": error_code, "session_id": session_id} if version >= 7 else {}
    partition_extra = {}
    if version >= 5:
        partition_extra["log_start_offset"] = 10
    if version >= 11:
        partition_extra["preferred_read_replica"] = 2
    return m.FetchResponse(
        throttle_time=datetime.timedelta(milliseconds=throttle_ms), **top,
        responses=tuple(m.FetchableTopicResponse(topic=name, partitions=tuple(
            m.PartitionData(
                partition_index=index, error_code=code, high_watermark=hw,
                last_stable_offset=hw, aborted_transactions=None if aborted is None else tuple(
                    m.AbortedTransaction(producer_id=pid, first_offset=first)
                    for pid, first in aborted),
                records=records, **partition_extra)
            for index, code, hw, aborted, records in partitions)) for name, partitions in topics))


FETCH_SHAPES = {
    "1 MB of records": dict(topics=[("app-logs", [
        (3, ErrorCode.none, 1_000_000, None, bytes(random.Random(1).randbytes(1 << 20)))])]),
    "several partitions, errors, aborted": dict(topics=[
        ("app-logs", [(0, ErrorCode.none, 500, [(4000, 12), (4001, 99)], BATCH),
                      (1, ErrorCode.not_leader_or_follower, -1, [], None),
                      (2, ErrorCode.offset_out_of_range, 0, None, b"")]),
        ("metrics", [(7, ErrorCode.none, 3, None, record_batch(3))])]),
    "empty, throttled, session": dict(topics=[], throttle_ms=250,
                                      error_code=ErrorCode.fetch_session_id_not_found,
                                      session_id=42),
}


@pytest.mark.parametrize("version", range(4, 12))
@pytest.mark.parametrize("shape", FETCH_SHAPES)
def test_fetch_response_round_trip(version, shape):
    """Fakes and tests encode Fetch responses with kio (the broker writes its own in place,
    checked against kio in tests/replica_proc/test_responses.py); the client decodes them."""
    response = fetch_response(version, **FETCH_SHAPES[shape])
    frame = protocol.encode_response(response, 5)
    assert bytes(frame[d.RESPONSE_BODY_OFFSET:]) == kio_body(response)
    assert protocol.decode_response(memoryview(frame), ApiKey.FETCH, version) == (5, response)


# -- garbage ----------------------------------------------------------------------------------

def heartbeat_frame(correlation_id=11):
    request = sample(protocol.request_class(ApiKey.HEARTBEAT, 1))
    return bytes(protocol.encode_request(request, correlation_id, "c"))


def with_size(frame_after_size):
    return struct.pack(">i", len(frame_after_size)) + frame_after_size


@pytest.mark.parametrize("frame, match", [
    (b"", "shorter than the 14-byte header"),
    (b"\x00\x00\x00\x02\x00\x0c", "shorter than the 14-byte header"),
    (b"\x7f\xff\xff\xff" + bytes(20), "size prefix says 2147483647 bytes follow"),
    (b"\xff\xff\xff\xff" + bytes(20), "size prefix says -1 bytes follow"),
    (with_size(b"\x00\x0c\x00\x01\x00\x00\x00\x01\x00\x09ab"), "request header does not parse"),
    (with_size(b"\x00\x0c\x00\x01\x00\x00\x00\x01\xff\xf0"), "request header does not parse"),
    (with_size(b"\x00\x0c\x00\x01\x00\x00\x00\x01\x00\x02\xff\xfe"),
     "request header does not parse"),
])
def test_garbage_before_the_body_has_no_header(frame, match):
    with pytest.raises(InvalidRequestError, match=match) as caught:
        protocol.decode_request(frame)
    assert caught.value.header is None and caught.value.errno == 42


def test_frame_size_must_match_exactly():
    frame = heartbeat_frame()
    with pytest.raises(InvalidRequestError, match="says .* bytes follow, the frame has"):
        protocol.decode_request(frame + b"\x00")
    with pytest.raises(InvalidRequestError, match="says .* bytes follow, the frame has"):
        protocol.decode_request(frame[:-1])


def test_truncated_or_padded_body_names_the_request():
    frame = heartbeat_frame(correlation_id=31)
    for bad in (with_size(frame[4:-3]), with_size(frame[4:] + b"\x00\x00")):
        with pytest.raises(InvalidRequestError, match=r"HEARTBEAT v1 request \(correlation_id "
                                                      r"31\) does not parse") as caught:
            protocol.decode_request(bad)
        assert caught.value.header.correlation_id == 31


@pytest.mark.parametrize("api_key, api_version, match", [
    (99, 0, "api key 99 is not one of the supported"),
    (ApiKey.PRODUCE, 9, "PRODUCE version 9 is outside the supported 3..8"),
    (ApiKey.PRODUCE, 2, "PRODUCE version 2 is outside the supported 3..8"),
    (ApiKey.API_VERSIONS, 4, "API_VERSIONS version 4 is outside the supported 0..3"),
])
def test_unsupported_api_or_version_keeps_the_header(api_key, api_version, match):
    frame = with_size(struct.pack(">hhih", api_key, api_version, 17, 1) + b"x" + b"\x00" * 9)
    with pytest.raises(UnsupportedVersionError, match=match) as caught:
        protocol.decode_request(frame)
    assert caught.value.errno == 35
    assert caught.value.header == RequestHeader(
        request_api_key=api_key, request_api_version=api_version, correlation_id=17,
        client_id="x")


def test_random_garbage_raises_only_the_two_kafka_errors():
    rng = random.Random(2024)
    outcomes = set()
    for key, version in ALL_VERSIONS:
        valid = protocol.encode_request(sample(protocol.request_class(key, version)), 1, "c")
        for trial in range(40):
            body = bytearray(valid[d.CLIENT_ID_OFFSET + 1:])
            if trial % 2 and body:  # flip bytes in a valid body
                for _ in range(rng.randint(1, 8)):
                    body[rng.randrange(len(body))] = rng.randrange(256)
            else:  # random bytes, sometimes huge lengths
                body = rng.randbytes(rng.randint(0, 80))
                if trial % 4 == 0:
                    body = b"\x7f\xff\xff\xff" * 3 + body
            frame = with_size(struct.pack(">hhih", key, version, trial, 1) + b"c" + body)
            try:
                protocol.decode_request(frame)
                outcomes.add("parsed")
            except (InvalidRequestError, UnsupportedVersionError) as exc:
                assert exc.header is not None
                outcomes.add(type(exc).__name__)
    assert "InvalidRequestError" in outcomes
    for _ in range(500):
        frame = rng.randbytes(rng.randint(0, 40))
        try:
            protocol.decode_request(frame)
        except (InvalidRequestError, UnsupportedVersionError):
            pass


def test_garbage_responses_raise_kafka_protocol_error():
    response = sample(protocol.response_class(ApiKey.METADATA, 8))
    frame = bytes(protocol.encode_response(response, 3))
    with pytest.raises(KafkaProtocolError, match="shorter than the 8-byte header"):
        protocol.decode_response(frame[:6], ApiKey.METADATA, 8)
    with pytest.raises(KafkaProtocolError, match="size prefix says"):
        protocol.response_correlation_id(frame + b"\x00")
    with pytest.raises(KafkaProtocolError, match=r"METADATA v8 response \(correlation_id 3\)"):
        protocol.decode_response(with_size(frame[4:-1]), ApiKey.METADATA, 8)
    rng = random.Random(5)
    for key, version in ALL_VERSIONS:
        for _ in range(20):
            garbage = with_size(b"\x00\x00\x00\x01" + rng.randbytes(rng.randint(0, 60)))
            try:
                protocol.decode_response(garbage, key, version)
            except KafkaProtocolError:
                pass


# -- encoding mistakes ------------------------------------------------------------------------

def test_encoding_rejects_what_is_not_a_supported_request():
    with pytest.raises(IllegalArgumentError, match="dict is not a kio request class"):
        protocol.encode_request({}, 1, "c")
    response = sample(protocol.response_class(ApiKey.HEARTBEAT, 1))
    with pytest.raises(IllegalArgumentError, match="is not the request class"):
        protocol.encode_request(response, 1, "c")
    nested = protocol.request_module(ApiKey.PRODUCE, 8).PartitionProduceData(index=0,
                                                                             records=None)
    with pytest.raises(IllegalArgumentError, match="is not the request class"):
        protocol.encode_request(nested, 1, "c")
    from kio.schema.produce.v9.request import ProduceRequest as ProduceV9
    with pytest.raises(UnsupportedVersionError, match="PRODUCE version 9"):
        protocol.encode_request(ProduceV9(acks=1, timeout=datetime.timedelta(0),
                                          topic_data=()), 1, "c")


def test_encoding_rejects_values_the_wire_cannot_hold():
    with pytest.raises(IllegalArgumentError, match="cannot encode ProduceRequest v8"):
        protocol.encode_request(produce_request(8, [], acks=70000), 1, "c")
    with pytest.raises(IllegalArgumentError, match="cannot encode ProduceRequest v8"):
        protocol.encode_request(produce_request(8, [(None, [])]), 1, "c")
    heartbeat = sample(protocol.request_class(ApiKey.HEARTBEAT, 1))
    with pytest.raises(IllegalArgumentError, match="cannot encode HeartbeatRequest v1"):
        protocol.encode_request(dataclasses.replace(heartbeat, generation_id=2**31), 1, "c")
    with pytest.raises(IllegalArgumentError, match="correlation_id 2147483648"):
        protocol.encode_request(heartbeat, 2**31, "c")
    with pytest.raises(IllegalArgumentError, match="client_id of 40000 bytes"):
        protocol.encode_request(heartbeat, 1, "x" * 40000)
    with pytest.raises(IllegalArgumentError, match="correlation_id None"):
        protocol.encode_response(sample(protocol.response_class(ApiKey.FETCH, 11)), None)


def test_encoding_into_a_buffer_too_small_writes_nothing():
    request = produce_request(8, [("t", [(0, BATCH)])])
    size = protocol.request_frame_size(request, "c")
    slot = bytearray(size + 4)
    with pytest.raises(IllegalArgumentError, match=f"a frame of {size} bytes does not fit at "
                                                   f"position 5 of a {size + 4}-byte buffer"):
        protocol.encode_request_into(slot, 5, request, 1, "c")
    assert slot == bytearray(size + 4)
    with pytest.raises(IllegalArgumentError, match="does not fit at position -1"):
        protocol.encode_request_into(bytearray(100), -1, request, 1, "c")


def fetch_request(version, topics, forgotten=(), rack_id="", **top):
    m = protocol.request_module(ApiKey.FETCH, version)
    extra = {}
    session = dict(session_id=top.pop("session_id", 0), session_epoch=top.pop("session_epoch", -1))
    if version >= 7:
        extra["forgotten_topics_data"] = tuple(
            m.ForgottenTopic(topic=name, partitions=tuple(partitions))
            for name, partitions in forgotten)
        extra.update(session)
    if version >= 11:
        extra["rack_id"] = rack_id
    def partition_extra(epoch):
        return {"current_leader_epoch": epoch} if version >= 9 else {}
    return m.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=top.pop("max_wait_ms", 500)),
        min_bytes=top.pop("min_bytes", 1), **top, **extra,
        topics=tuple(m.FetchTopic(topic=name, partitions=tuple(
            m.FetchPartition(partition=index, fetch_offset=offset,
                             partition_max_bytes=max_bytes, **partition_extra(epoch),
                             **({"log_start_offset": 17} if version >= 5 else {}))
            for index, epoch, offset, max_bytes in partitions)) for name, partitions in topics))


FETCH_REQUEST_SHAPES = {
    "one partition": dict(topics=[("app-logs", [(0, 3, 123_456_789_012, 1 << 20)])]),
    "several topics, forgotten, rack": dict(
        topics=[("app-logs", [(0, -1, 0, 1), (5, 7, 2**40, 2**31 - 1)]), ("journ\u00e9es", []),
                ("m", [(1, 0, 9, 100)])],
        forgotten=[("old", [1, 2, 3]), ("gone", [])], rack_id="rack-\u00e9",
        replica_id=2, max_wait_ms=0, min_bytes=0, max_bytes=52_428_800, isolation_level=1,
        session_id=9, session_epoch=4),
    "no topics": dict(topics=[]),
}


@pytest.mark.parametrize("version", range(4, 12))
@pytest.mark.parametrize("shape", FETCH_REQUEST_SHAPES)
def test_fetch_request_hand_encoder_equals_kio(version, shape):
    request = fetch_request(version, **FETCH_REQUEST_SHAPES[shape])
    frame = protocol.encode_request(request, 78, "consumer-1")
    assert bytes(frame[d.CLIENT_ID_OFFSET + 10:]) == kio_body(request)
    assert protocol.request_frame_size(request, "consumer-1") == len(frame)
    assert protocol.decode_request(frame)[1] == request

