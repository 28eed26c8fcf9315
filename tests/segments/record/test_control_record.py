"""Transaction markers (control batches) against kafka-python's reader: what we build it
reads as a control batch with the right key, value and header fields, byte for byte in the
fields Kafka defines, and what we recognise is what it recognises."""
from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch

from segments.errors import CorruptRecordError
from segments.record import batch_descriptor as bd
from segments.record.batch_header import BatchHeader
from segments.record.control_record import (
    ABORT,
    COMMIT,
    UNKNOWN,
    build_end_txn_marker,
    is_abort_marker,
    parse_control_key,
    parse_end_txn_marker,
    read_control_record,
)
from segments.record.records import RecordBatchBuilder, pack_batch
from segments.record.varint import encode_varint

TS = 1_700_000_000_123


@pytest.mark.parametrize("control_type", [ABORT, COMMIT])
def test_marker_reads_in_kafka_python(control_type):
    data = build_end_txn_marker(control_type, coordinator_epoch=42, producer_id=123456789,
                                producer_epoch=7, timestamp=TS, partition_leader_epoch=3)
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional
    assert batch.producer_id == 123456789 and batch.producer_epoch == 7
    assert batch.base_sequence == -1 and batch.compression_type == 0
    assert batch.leader_epoch == 3
    records = list(batch)
    assert len(records) == 1
    record = records[0]
    assert record.type == control_type and record.version == 0
    assert record.abort == (control_type == ABORT)
    assert record.timestamp == TS and record.offset == 0 and record.headers == []
    # EndTransactionMarker value: version 0, coordinatorEpoch
    assert struct.unpack(">hi", record.value) == (0, 42)
    assert len(data) == 78  # Kafka's size of a marker batch


def test_marker_read_back():
    data = build_end_txn_marker(COMMIT, 9, 5, 1, TS)
    header = BatchHeader(data)
    header.validate()
    assert header.is_control_batch and header.is_transactional
    assert header.record_count == 1 and header.last_offset_delta == 0
    record = read_control_record(data, header)
    assert record.control_type == COMMIT and record.coordinator_epoch == 9
    assert not is_abort_marker(data, header)
    abort = build_end_txn_marker(ABORT, 9, 5, 1, TS)
    assert is_abort_marker(abort, BatchHeader(abort))


def _control_batch_with_key(key, value=b"\x00\x00\x00\x00\x00\x01"):
    body = (b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(len(key)) + key
            + encode_varint(len(value)) + value + encode_varint(0))
    return pack_batch(encode_varint(len(body)) + body, 1, TS, TS,
                      bd.TRANSACTIONAL_MASK | bd.CONTROL_MASK, producer_id=1,
                      producer_epoch=0, base_sequence=-1, partition_leader_epoch=-1)


def test_unknown_type_and_newer_versions():
    # a type Kafka does not know (e.g. a future one) reads as UNKNOWN, as ControlRecordType
    data = _control_batch_with_key(struct.pack(">hh", 0, 9))
    assert read_control_record(data, BatchHeader(data)).control_type == UNKNOWN
    assert not is_abort_marker(data, BatchHeader(data))
    # a newer key version with trailing bytes still reads its type
    assert parse_control_key(struct.pack(">hhi", 1, ABORT, 5)) == ABORT
    assert parse_end_txn_marker(struct.pack(">hiq", 1, 77, 0)) == 77


@pytest.mark.parametrize("key", [b"", b"\x00\x00\x00", struct.pack(">hh", -1, 0)])
def test_bad_keys_refused(key):
    with pytest.raises(CorruptRecordError):
        parse_control_key(key)


@pytest.mark.parametrize("value", [None, b"\x00\x00\x00", struct.pack(">hi", -2, 1)])
def test_bad_values_refused(value):
    with pytest.raises(CorruptRecordError):
        parse_end_txn_marker(value)


def test_data_batch_is_not_a_control_record():
    builder = RecordBatchBuilder()
    builder.append(TS, None, b"v")
    data = bytes(builder.build())
    with pytest.raises(CorruptRecordError, match="not a control batch"):
        read_control_record(data, BatchHeader(data))
    assert not is_abort_marker(data, BatchHeader(data))


def test_builder_refuses_nonsense():
    with pytest.raises(ValueError):
        build_end_txn_marker(5, 0, 1, 0, TS)
    with pytest.raises(ValueError):
        build_end_txn_marker(ABORT, 0, -1, 0, TS)
