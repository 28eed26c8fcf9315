"""BatchHeader: field reads, validation and stamping against batches kafka-python builds."""
from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from segments.errors import CorruptRecordError
from segments.record import batch_descriptor as d
from segments.record.batch_header import BatchHeader, iter_batches


def kafka_python_batch(count=3, base_ts=1_700_000_000_000):
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp=base_ts + i, key=b"k%d" % i, value=b"v" * 10, headers=[])
    return bytearray(builder.build())


def test_fields_match_what_kafka_python_wrote():
    buf = kafka_python_batch(count=3)
    header = BatchHeader(buf)
    header.validate()
    assert header.magic == 2
    assert header.record_count == 3
    assert header.last_offset_delta == 2
    assert header.base_timestamp == 1_700_000_000_000
    assert header.max_timestamp == 1_700_000_000_002
    assert header.size_in_bytes == len(buf)
    assert header.compression_type == d.CODEC_NONE


def test_stamp_keeps_the_crc_valid_and_is_seen_by_kafka_python():
    from kafka.record.default_records import DefaultRecordBatch

    buf = kafka_python_batch(count=2)
    before = bytes(buf[d.CRC_OFFSET:])
    header = BatchHeader(buf)
    header.stamp(1234, partition_leader_epoch=7)
    header.validate()
    assert bytes(buf[d.CRC_OFFSET:]) == before
    again = BatchHeader(buf)
    assert (again.base_offset, again.partition_leader_epoch) == (1234, 7)
    assert again.last_offset == 1235
    assert [r.offset for r in DefaultRecordBatch(bytes(buf))] == [1234, 1235]


def test_a_flipped_byte_names_stored_and_computed_crc():
    buf = kafka_python_batch()
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match=r"stored CRC 0x[0-9a-f]{8}, computed CRC 0x"):
        BatchHeader(buf).validate()


@pytest.mark.parametrize("field,value,message", [
    (d.MAGIC_OFFSET, b"\x01", "magic 1, expected 2"),
    (d.BATCH_LENGTH_OFFSET, (10).to_bytes(4, "big"), "batchLength 10 is smaller"),
    (d.BATCH_LENGTH_OFFSET, (10_000).to_bytes(4, "big"), "runs past the end"),
])
def test_framing_errors_name_the_bad_value(field, value, message):
    buf = kafka_python_batch()
    buf[field:field + len(value)] = value
    with pytest.raises(CorruptRecordError, match=message):
        BatchHeader(buf).validate()


def test_a_short_buffer_is_corrupt_not_a_struct_error():
    with pytest.raises(CorruptRecordError, match="needs 61 bytes, found 20"):
        BatchHeader(b"\0" * 20)


def test_iter_batches_stops_at_a_partial_trailing_batch():
    one, two = kafka_python_batch(2), kafka_python_batch(5)
    buf = bytes(one + two + two[:30])
    headers = list(iter_batches(buf))
    assert [h.record_count for h in headers] == [2, 5]
    assert [h.position for h in headers] == [0, len(one)]
