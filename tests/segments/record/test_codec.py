"""RecordBatch v2 codec: varints, builder, reader, compression, corruption, bulk builder."""
from __future__ import annotations

import gzip
import struct

import lz4.frame
import numpy as np
import pytest
import zstandard
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings, strategies as st

from segments.errors import CorruptRecordError, UnsupportedCompressionTypeError
from segments.record import batch_descriptor as d
from segments.record.batch_header import BatchHeader
from segments.record.batch_parts import PARTS_FROM, BatchParts
from segments.record.bulk import build_batches, generate_batches
from segments.record.compression import (
    CODEC_NAMES,
    MAX_RECORDS_BYTES as LIMIT,
    XERIAL_HEADER,
    codec_id,
    compress,
    decompress,
    records_size_limit,
)
from segments.record.records import RecordBatch, RecordBatchBuilder, iter_records
from segments.record.varint import (
    SIGNED_TABLE_SIZE,
    SIGNED_VARINT,
    SIGNED_VARINT_SIZE,
    SIZED,
    TABLE_SIZE,
    VARINT,
    VARINT_SIZE,
    decode_varint,
    encode_varint,
    size_of_varint,
)
from tests.support.properties import examples

CODECS = sorted(CODEC_NAMES)
BASE_TS = 1_700_000_000_000
SETTINGS = settings(max_examples=examples(60), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

headers_st = st.lists(
    st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=6)), max_size=3)
record_st = st.tuples(
    st.integers(-5000, 5000),                    # timestamp delta; past the varint tables too
    st.none() | st.binary(max_size=24),          # key: null, empty, binary
    st.none() | st.binary(max_size=160),         # value
    headers_st)


def build(records, compression_type=0, **kwargs):
    """Append (timestamp, key, value, headers) records into one batch; return its bytes."""
    builder = RecordBatchBuilder(compression_type, batch_size=1 << 30, **kwargs)
    for offset, (timestamp, key, value, headers) in enumerate(records):
        assert builder.append(timestamp, key, value, headers) == offset
    return bytes(builder.build())


def read(batch):
    reader = RecordBatch(batch)
    reader.validate()
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in reader]


def expected(records):
    return [(offset, ts, key, value, list(headers))
            for offset, (ts, key, value, headers) in enumerate(records)]


# -- varints -----------------------------------------------------------------------------------

@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_varint_round_trip_and_size(value):
    encoded = encode_varint(value)
    assert len(encoded) == size_of_varint(value)
    assert decode_varint(b"\xff" + encoded + b"\x00", 1) == (value, 1 + len(encoded))


@pytest.mark.parametrize("value,encoded", [
    (0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (-64, b"\x7f"),
    (64, b"\x80\x01"), (300, b"\xd8\x04"), ((1 << 63) - 1, b"\xfe" + b"\xff" * 8 + b"\x01"),
])
def test_varint_known_encodings(value, encoded):
    assert encode_varint(value) == encoded


def test_varint_tables_agree_with_the_functions():
    for n in range(TABLE_SIZE):
        assert VARINT[n] == encode_varint(n)
        assert VARINT_SIZE[n] == size_of_varint(n)
        assert SIZED[n] == n + size_of_varint(n)
    for n in range(-SIGNED_TABLE_SIZE + 1, SIGNED_TABLE_SIZE):
        assert SIGNED_VARINT[n] == encode_varint(n)
        assert SIGNED_VARINT_SIZE[n] == size_of_varint(n)


@pytest.mark.parametrize("data,message", [
    (b"\x80\x80", "runs past the end"),
    (b"\xff" * 11, "longer than 10 bytes"),
])
def test_varint_decode_rejects_truncated_and_overlong(data, message):
    with pytest.raises(CorruptRecordError, match=message):
        decode_varint(data, 0)


# -- round trips -------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
@SETTINGS
@given(records=st.lists(record_st, min_size=1, max_size=40))
def test_round_trip_every_codec(codec, records):
    records = [(BASE_TS + delta, key, value, headers)
               for delta, key, value, headers in records]
    batch = build(records, codec)
    assert read(batch) == expected(records)
    header = BatchHeader(batch)
    assert header.compression_type == codec
    assert header.record_count == len(records)
    assert header.last_offset_delta == len(records) - 1
    assert header.base_timestamp == records[0][0]
    assert header.max_timestamp == max(r[0] for r in records)
    assert header.size_in_bytes == len(batch)


@pytest.mark.parametrize("codec", CODECS)
def test_values_keys_counts_and_deltas_beyond_the_lookup_tables(codec):
    big = bytes(range(256)) * 20                          # 5120 bytes > TABLE_SIZE
    records = [(BASE_TS, big, big[:100], [("h", big)])]
    records += [(BASE_TS + (i * 997) % 20000 - 10000, None, b"v%d" % i, [])
                for i in range(TABLE_SIZE + 10)]          # offset deltas past the table
    records.append((BASE_TS - (1 << 40), b"k", None, []))  # a very negative delta
    assert read(build(records, codec)) == expected(records)


def test_header_fields_from_the_builder_arguments():
    builder = RecordBatchBuilder(
        "lz4", producer_id=77, producer_epoch=3, base_sequence=1000, partition_leader_epoch=9,
        is_transactional=True)
    builder.append(BASE_TS, None, b"x")
    header = BatchHeader(builder.build())
    header.validate()
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 1000)
    assert header.partition_leader_epoch == 9
    assert header.is_transactional and not header.is_control_batch
    assert header.compression_type == d.CODEC_LZ4
    assert header.base_offset == 0 and header.magic == 2


def test_set_producer_state_before_build():
    builder = RecordBatchBuilder()
    builder.append(BASE_TS, None, b"x")
    builder.set_producer_state(5, 1, 42, is_transactional=True)
    header = BatchHeader(builder.build())
    header.validate()
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, 42)
    assert header.is_transactional
    with pytest.raises(ValueError, match="already built"):
        builder.set_producer_state(6, 1, 0)


def test_log_append_time_records_carry_the_max_timestamp():
    records = [(BASE_TS + 5, None, b"a", []), (BASE_TS, None, b"b", [])]
    batch = build(records, timestamp_type=1)
    assert BatchHeader(batch).timestamp_type == 1
    assert [(r.timestamp, r.timestamp_type) for r in RecordBatch(batch)] == \
        [(BASE_TS + 5, 1), (BASE_TS + 5, 1)]


def test_none_timestamp_reads_the_injected_clock():
    ticks = iter([BASE_TS, BASE_TS + 3, BASE_TS + 1])
    builder = RecordBatchBuilder(clock=lambda: next(ticks))
    for _ in range(3):
        builder.append(None, None, b"v")
    assert [r.timestamp for r in RecordBatch(builder.build())] == \
        [BASE_TS, BASE_TS + 3, BASE_TS + 1]


def test_bytes_like_keys_and_values_are_copied_at_append():
    value = bytearray(b"before")
    builder = RecordBatchBuilder()
    builder.append(BASE_TS, memoryview(b"key"), value)
    builder.append(BASE_TS, bytearray(b"k2"), np.arange(3, dtype=">u2"))  # raw bytes, 6 long
    value[:] = b"AFTER!"
    records = list(RecordBatch(builder.build()))
    assert [(r.key, r.value) for r in records] == [
        (b"key", b"before"), (b"k2", b"\x00\x00\x00\x01\x00\x02")]


@pytest.mark.parametrize("key,value,timestamp,message", [
    ("text", b"v", BASE_TS, "key must be bytes-like .* found str"),
    (None, 5, BASE_TS, "value must be bytes-like .* found int"),
    (None, b"v", 1.5, "timestamp must be an int .* found float"),
])
def test_append_rejects_wrong_types(key, value, timestamp, message):
    builder = RecordBatchBuilder()
    builder.append(BASE_TS, None, b"first")
    with pytest.raises(TypeError, match=message):
        builder.append(timestamp, key, value)
    with pytest.raises(TypeError, match=message):
        RecordBatchBuilder().append(timestamp, key, value)  # the first record's path too


def test_header_must_be_str_keyed():
    with pytest.raises(TypeError, match="header key must be a str, found bytes"):
        RecordBatchBuilder().append(BASE_TS, None, b"v", [(b"k", b"v")])


# -- the "None when full" contract -------------------------------------------------------------

def test_append_returns_none_exactly_when_the_batch_would_pass_batch_size():
    value = b"x" * 100
    builder = RecordBatchBuilder(batch_size=1000)
    accepted = 0
    while builder.append(BASE_TS, None, value) is not None:
        accepted += 1
    size = builder.size_in_bytes()
    assert size <= 1000
    # the refused record would have passed the limit; a smaller one can still fit
    one = RecordBatchBuilder(batch_size=1 << 20)
    for _ in range(accepted + 1):
        one.append(BASE_TS, None, value)
    assert one.size_in_bytes() > 1000
    assert builder.record_count == accepted
    assert len(builder.build()) == size                    # uncompressed: the exact size


def test_a_smaller_record_may_fit_after_a_refusal():
    builder = RecordBatchBuilder(batch_size=200)
    assert builder.append(BASE_TS, None, b"x" * 60) == 0
    assert builder.append(BASE_TS, None, b"x" * 200) is None
    assert builder.append(BASE_TS, None, b"x" * 10) == 1


def test_the_first_record_always_fits():
    builder = RecordBatchBuilder(batch_size=100)
    assert builder.append(BASE_TS, None, b"x" * 1000) == 0
    assert builder.append(BASE_TS, None, b"") is None
    assert read(builder.build()) == [(0, BASE_TS, None, b"x" * 1000, [])]


def test_build_closes_the_batch_and_returns_the_same_bytes():
    builder = RecordBatchBuilder()
    builder.append(BASE_TS, None, b"v")
    first = builder.build()
    assert builder.append(BASE_TS, None, b"w") is None
    assert builder.build() is first
    assert builder.size_in_bytes() == len(first)


def test_building_an_empty_batch_is_an_error():
    with pytest.raises(ValueError, match="no records"):
        RecordBatchBuilder().build()


@given(st.none() | st.binary(max_size=300), st.none() | st.binary(max_size=300), headers_st)
def test_estimate_is_an_upper_bound(key, value, headers):
    builder = RecordBatchBuilder()
    builder.append(None, key, value, headers)
    estimate = RecordBatchBuilder.estimate_size_in_bytes(key, value, headers)
    assert len(builder.build()) <= estimate <= len(builder.build()) + d.HEADER_SIZE


# -- buffers -----------------------------------------------------------------------------------

def test_build_encodes_into_the_given_buffer():
    buffer = bytearray(16384)
    builder = RecordBatchBuilder(buffer=buffer)
    builder.append(BASE_TS, b"k", b"v")
    built = builder.build()
    assert isinstance(built, memoryview) and built.obj is buffer
    assert bytes(built) == build([(BASE_TS, b"k", b"v", [])])


def test_a_batch_larger_than_the_buffer_gets_its_own_bytes():
    buffer = bytearray(64)
    builder = RecordBatchBuilder(batch_size=64, buffer=buffer)
    builder.append(BASE_TS, None, b"x" * 100)
    built = builder.build()
    assert isinstance(built, bytes) and buffer == bytearray(64)
    assert read(built) == [(0, BASE_TS, None, b"x" * 100, [])]


@pytest.mark.parametrize("key, headers, transactional", [
    (None, [], False), (b"k" * 300, [("h", b"v"), ("n", None)], True)])
def test_a_large_value_is_built_as_parts_holding_the_callers_bytes(key, headers, transactional):
    value = bytes(range(256)) * (PARTS_FROM // 256)
    batches = []
    for parts in (False, True):
        builder = RecordBatchBuilder(batch_size=16384, producer_id=7, producer_epoch=1,
                                     base_sequence=5, is_transactional=transactional)
        builder.append(BASE_TS, key, value, headers)
        batches.append(builder.build_parts() if parts else builder.build())
    whole, parts = batches
    assert isinstance(parts, BatchParts) and parts.parts[1] is value  # not copied
    assert len(parts) == len(whole) and bytes(parts.joined()) == bytes(whole)
    assert builder.build() is parts and builder.build_parts() is parts
    header = BatchHeader(parts.joined())
    assert header.crc == header.compute_crc()
    assert read(parts.joined()) == [(0, BASE_TS, key, value, headers)]


@pytest.mark.parametrize("value, codec, more", [
    (b"x" * (PARTS_FROM - 1), 0, False), (b"x" * PARTS_FROM, 3, False),
    (b"x" * PARTS_FROM, 0, True)])
def test_other_batches_are_built_whole(value, codec, more):
    builder = RecordBatchBuilder(codec, batch_size=4 * PARTS_FROM)
    builder.append(BASE_TS, None, value)
    if more:
        builder.append(BASE_TS, None, b"v")
    assert not isinstance(builder.build_parts(), BatchParts)


# -- fixed CRCs ----------------------------------------------------------------------------------

KNOWN = [(BASE_TS, None, b"hello", []), (BASE_TS + 1, b"key", b"world", [("h", b"1")]),
         (BASE_TS - 2, b"", None, [("n", None)])]


@pytest.mark.parametrize("codec,crc", [
    (0, 0x46D4DE5C), (1, 0x32132D53), (2, 0x55C6C685), (3, 0x02C2CD09), (4, 0x3B279A24),
])
def test_known_batches_have_fixed_crcs(codec, crc):
    batch = build(KNOWN, codec)
    header = BatchHeader(batch)
    assert header.crc == crc == header.compute_crc()
    assert read(batch) == expected(KNOWN)


def test_known_uncompressed_bytes():
    batch = build([(BASE_TS, None, b"hi", [])])
    assert batch.hex() == (
        "0000000000000000"      # baseOffset
        "0000003a"              # batchLength: 61 - 12 + 9 record bytes
        "ffffffff" "02"         # partitionLeaderEpoch -1, magic 2
        + f"{crc32c(batch[d.ATTRIBUTES_OFFSET:]):08x}"
        + "0000" "00000000"     # attributes, lastOffsetDelta
        + f"{BASE_TS:016x}" * 2
        + "ffffffffffffffff" "ffff" "ffffffff" "00000001"
        # length 8, attrs, ts, offset, null key, "hi", 0 headers
        "10" "00" "00" "00" "01" "04" "6869" "00")


# -- compression names and framing ---------------------------------------------------------------

@pytest.mark.parametrize("given_type,codec", [
    (0, 0), (None, 0), ("none", 0), ("gzip", 1), ("GZIP", 1), (2, 2), ("snappy", 2),
    ("lz4", 3), ("zstd", 4), (4, 4),
])
def test_compression_type_by_id_or_name(given_type, codec):
    assert codec_id(given_type) == codec
    assert RecordBatchBuilder(given_type)._codec == codec


@pytest.mark.parametrize("bad", [5, -1, "brotli", "", 1.0, True])
def test_unsupported_compression_type_is_named(bad):
    with pytest.raises(UnsupportedCompressionTypeError, match=repr(bad).replace(".", r"\.")):
        RecordBatchBuilder(bad)


def test_snappy_is_xerial_framed_in_32k_blocks():
    data = bytes(range(256)) * 300                        # 76800 bytes: three blocks
    blob = compress(d.CODEC_SNAPPY, data)
    assert blob.startswith(XERIAL_HEADER)
    pos, blocks = len(XERIAL_HEADER), 0
    while pos < len(blob):
        (length,) = struct.unpack_from(">i", blob, pos)
        pos += 4 + length
        blocks += 1
    assert (pos, blocks) == (len(blob), 3)
    assert decompress(d.CODEC_SNAPPY, blob, LIMIT, 0) == data


def test_readers_accept_what_other_writers_emit():
    import cramjam
    data = b"kafka " * 1000
    raw_snappy = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(d.CODEC_SNAPPY, raw_snappy, LIMIT, 0) == data
    two_members = gzip.compress(data[:10]) + gzip.compress(data[10:])
    assert decompress(d.CODEC_GZIP, two_members, LIMIT, 0) == data
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert decompress(d.CODEC_ZSTD, no_size + no_size, LIMIT, 0) == data + data
    assert lz4.frame.compress(data)[4] & 0x08  # content size flag: what kafka-python writes
    no_size = lz4.frame.compress(data, store_size=False)
    assert decompress(d.CODEC_LZ4, no_size + no_size, LIMIT, 0) == data + data


@pytest.mark.parametrize("codec", CODECS[1:])
def test_damaged_compressed_data_raises_corrupt_record_naming_the_codec(codec):
    blob = compress(codec, b"kafka " * 1000)
    damaged = blob[: len(blob) // 2] + bytes(len(blob) - len(blob) // 2)
    with pytest.raises(CorruptRecordError, match=CODEC_NAMES[codec]):
        decompress(codec, damaged, LIMIT, 0)


def other_writers(codec, data):
    """``data`` compressed as other writers do: two gzip members, raw snappy, two lz4
    frames and two zstd frames without a content size."""
    import cramjam
    half = len(data) // 2
    return {
        d.CODEC_GZIP: gzip.compress(data[:half]) + gzip.compress(data[half:]),
        d.CODEC_SNAPPY: bytes(cramjam.snappy.compress_raw(data)),
        d.CODEC_LZ4: lz4.frame.compress(data[:half], store_size=False)
        + lz4.frame.compress(data[half:], store_size=False),
        d.CODEC_ZSTD: b"".join(zstandard.ZstdCompressor(write_content_size=False).compress(p)
                               for p in (data[:half], data[half:])),
    }[codec]


@pytest.mark.parametrize("writer", ["ours", "others"])
@pytest.mark.parametrize("codec", CODECS[1:])
def test_decompression_stops_at_the_limit_naming_offset_codec_and_limit(codec, writer):
    data = bytes(range(256)) * 400  # 102400 bytes: several snappy blocks
    blob = compress(codec, data) if writer == "ours" else other_writers(codec, data)
    assert decompress(codec, blob, len(data), 42) == data
    with pytest.raises(CorruptRecordError) as e:
        decompress(codec, blob, len(data) - 1, 42)
    assert str(e.value).startswith("[Error 2] batch at offset 42: "
                                   f"{CODEC_NAMES[codec]}: ")
    assert f"inflate past the limit of {len(data) - 1} bytes" in str(e.value)


def test_the_limit_is_what_the_records_may_hold():
    assert records_size_limit(3) == LIMIT
    assert records_size_limit(3, 1000) == 3000
    assert records_size_limit(0, 1000) == 1000
    assert records_size_limit(10 ** 6, 10 ** 6) == LIMIT
    assert records_size_limit(10 ** 6, 10 ** 6, cap=5) == 5


# -- corruption --------------------------------------------------------------------------------

def restamp_crc(batch):
    batch = bytearray(batch)
    struct.pack_into(">I", batch, d.CRC_OFFSET, crc32c(batch[d.ATTRIBUTES_OFFSET:]))
    return batch


def test_a_flipped_bit_fails_validation_naming_both_crcs():
    batch = bytearray(build(KNOWN))
    batch[70] ^= 0x04
    with pytest.raises(CorruptRecordError, match="stored CRC 0x46d4de5c, computed CRC 0x"):
        RecordBatch(batch).validate()


@pytest.mark.parametrize("codec", CODECS)
@SETTINGS
@given(records=st.lists(record_st, min_size=1, max_size=8), data=st.data())
def test_damaged_records_raise_corrupt_record_only(codec, records, data):
    """Bytes changed or cut inside the records (with a CRC that matches) never escape as
    IndexError, struct.error or UnicodeDecodeError."""
    batch = bytearray(build([(BASE_TS + t, k, v, h) for t, k, v, h in records], codec))
    position = data.draw(st.integers(d.RECORDS_OFFSET, len(batch) - 1))
    if data.draw(st.booleans()):
        batch[position] = data.draw(st.integers(0, 255))
    else:
        del batch[position:]
        struct.pack_into(">i", batch, d.BATCH_LENGTH_OFFSET, len(batch) - d.LOG_OVERHEAD)
    batch = restamp_crc(batch)
    reader = RecordBatch(batch)
    reader.validate()
    try:
        list(reader)
    except CorruptRecordError:
        pass


@pytest.mark.parametrize("change,message", [
    (lambda b: b.__setitem__(slice(d.RECORD_COUNT_OFFSET, d.RECORDS_OFFSET),
                             (5).to_bytes(4, "big")), "runs past the end"),
    (lambda b: b.__setitem__(slice(d.RECORD_COUNT_OFFSET, d.RECORDS_OFFSET),
                             (2).to_bytes(4, "big")), "bytes left after its 2 records"),
    (lambda b: b.__setitem__(d.RECORDS_OFFSET, 0x7E), "has length 63"),
])
def test_inconsistent_records_name_what_is_wrong(change, message):
    batch = bytearray(build(KNOWN))
    change(batch)
    with pytest.raises(CorruptRecordError, match=message):
        list(RecordBatch(restamp_crc(batch)))


LARGE = [(BASE_TS, b"k", b"x" * PARTS_FROM, [("h", b"1")]), (BASE_TS + 1, None, b"y" * 9, [])]


def test_a_large_batch_in_a_fetched_buffer_decodes_to_bytes():
    """Its values are sliced from the buffer once (no copy of the whole batch first)."""
    fetched = build(LARGE) + build(KNOWN)
    records = list(RecordBatch(fetched))
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == expected(
        LARGE)
    assert {type(r.value) for r in records} == {bytes}


@pytest.mark.parametrize("count, message", [(3, "record 2"), (1, "bytes left after its 1")])
def test_a_large_batch_miscounting_its_records_is_refused_not_read_past(count, message):
    large = bytearray(build(LARGE))
    large[d.RECORD_COUNT_OFFSET:d.RECORDS_OFFSET] = count.to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match=message):
        list(RecordBatch(bytes(restamp_crc(large)) + build(KNOWN)))


def test_an_unknown_codec_id_in_a_batch_is_named():
    batch = bytearray(build(KNOWN))
    struct.pack_into(">h", batch, d.ATTRIBUTES_OFFSET, 5)
    with pytest.raises(UnsupportedCompressionTypeError, match="codec 5"):
        list(RecordBatch(restamp_crc(batch)))


# -- many batches ------------------------------------------------------------------------------

def test_iter_records_walks_batches_and_skips_a_partial_last_one():
    first = bytearray(build([(BASE_TS, None, b"a", []), (BASE_TS, None, b"b", [])]))
    second = bytearray(build([(BASE_TS + 1, b"k", b"c", [])], "zstd"))
    BatchHeader(first).stamp(100, 1)
    BatchHeader(second).stamp(102, 1)
    fetched = bytes(first + second + second[:30])
    assert [(r.offset, r.key, r.value) for r in iter_records(fetched)] == [
        (100, None, b"a"), (101, None, b"b"), (102, b"k", b"c")]
    assert [r.value for r in iter_records(fetched, position=len(first))] == [b"c"]


def test_iter_records_checks_crcs_unless_told_not_to():
    batch = bytearray(build(KNOWN))
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="stored CRC"):
        list(iter_records(batch))
    with pytest.raises(CorruptRecordError):  # the damaged headers' value count, or unconsumed bytes
        list(iter_records(batch, check_crc=False))


def test_record_is_a_tuple_with_named_fields():
    (record,) = list(RecordBatch(build([(BASE_TS, b"k", b"v", [("a", b"b")])])))
    offset, timestamp, timestamp_type, key, value, headers = record
    assert (offset, timestamp, timestamp_type, key, value, headers) == \
        (record.offset, record.timestamp, record.timestamp_type, record.key, record.value,
         record.headers) == (0, BASE_TS, 0, b"k", b"v", [("a", b"b")])
    assert "key=b'k'" in repr(record)


# -- bulk builder ------------------------------------------------------------------------------

def one_by_one(values, keys, timestamps, headers, codec, batch_size, **kwargs):
    """What RecordBatchBuilder makes, one append at a time, for the bulk builder's inputs."""
    batches, builder = [], None
    sequence = kwargs.pop("base_sequence", -1)
    for i, value in enumerate(values):
        record = (timestamps[i], None if keys is None else keys[i], value,
                  () if headers is None else headers[i])
        if builder is None or builder.append(*record) is None:
            if builder is not None:
                batches.append(bytes(builder.build()))
                if sequence >= 0:  # int32, wrapping to 0 as Kafka's sequences do
                    sequence = (sequence + builder.record_count) % (1 << 31)
            builder = RecordBatchBuilder(codec, batch_size, base_sequence=sequence, **kwargs)
            assert builder.append(*record) == 0
    batches.append(bytes(builder.build()))
    return batches


def as_rows(items, width):
    return np.frombuffer(b"".join(items), np.uint8).reshape(len(items), width)


@pytest.mark.parametrize("codec", CODECS)
@SETTINGS
@given(data=st.data())
def test_bulk_equals_one_by_one_for_list_inputs(codec, data):
    n = data.draw(st.integers(1, 60))
    values = data.draw(st.lists(st.none() | st.binary(max_size=90), min_size=n, max_size=n))
    keys = data.draw(st.none() | st.lists(st.none() | st.binary(max_size=12), min_size=n,
                                          max_size=n))
    timestamps = data.draw(st.lists(st.integers(BASE_TS - 5000, BASE_TS + 5000),
                                    min_size=n, max_size=n))
    headers = data.draw(st.none() | st.lists(headers_st, min_size=n, max_size=n))
    batch_size = data.draw(st.integers(60, 2000))
    got = [bytes(b) for b in build_batches(values, keys, timestamps, headers, codec, batch_size)]
    assert got == one_by_one(values, keys, timestamps, headers, codec, batch_size)


@pytest.mark.parametrize("codec", CODECS)
@SETTINGS
@given(data=st.data())
def test_bulk_equals_one_by_one_for_fixed_size_rows(codec, data):
    """The vectorised path: fixed-size values (2-D array or equal-length bytes), keys null
    or fixed-size, timestamps close together — with up to 3 offset-delta widths per batch."""
    n = data.draw(st.integers(1, 400))
    width = data.draw(st.sampled_from([0, 1, 7, 60, 100]))
    values = data.draw(st.lists(st.binary(min_size=width, max_size=width),
                                min_size=n, max_size=n))
    key_width = data.draw(st.none() | st.sampled_from([0, 4]))
    keys = None if key_width is None else data.draw(
        st.lists(st.binary(min_size=key_width, max_size=key_width), min_size=n, max_size=n))
    spread = data.draw(st.sampled_from([0, 10, 63]))
    timestamps = data.draw(st.lists(st.integers(BASE_TS, BASE_TS + spread),
                                    min_size=n, max_size=n))
    batch_size = data.draw(st.sampled_from([61, 500, 4000, 16384, 1 << 20]))
    sequence = data.draw(st.sampled_from([-1, 0, (1 << 31) - 10]))
    as_array = data.draw(st.booleans())
    bulk_values = as_rows(values, width) if as_array else values
    bulk_keys = keys if keys is None or not as_array else as_rows(keys, key_width)
    got = [bytes(b) for b in build_batches(
        bulk_values, bulk_keys, np.array(timestamps), None, codec, batch_size,
        base_sequence=sequence, producer_id=7, producer_epoch=0)]
    assert got == one_by_one(values, keys, timestamps, None, codec, batch_size,
                             base_sequence=sequence, producer_id=7, producer_epoch=0)


def test_bulk_sequences_wrap_like_kafka():
    values = [b"v"] * 6
    batches = build_batches(values, batch_size=61 + 3 * 10, base_sequence=(1 << 31) - 2,
                            producer_id=1, producer_epoch=0, timestamps=[BASE_TS] * 6)
    assert [BatchHeader(b).record_count for b in batches] == [3, 3]
    assert [BatchHeader(b).base_sequence for b in batches] == [(1 << 31) - 2, 1]


def test_bulk_without_timestamps_stamps_one_clock_reading():
    batches = build_batches(np.zeros((1000, 100), np.uint8), clock=lambda: BASE_TS)
    assert len(batches) == 7
    records = list(iter_records(b"".join(bytes(b) for b in batches)))
    assert len(records) == 1000
    assert {r.timestamp for r in records} == {BASE_TS}
    assert all(r.value == bytes(100) and r.key is None for r in records)


def test_bulk_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="3 keys for 2 values"):
        build_batches([b"a", b"b"], keys=[b"1", b"2", b"3"])
    with pytest.raises(ValueError, match="1 timestamps for 2 values"):
        build_batches([b"a", b"b"], timestamps=[BASE_TS])
    with pytest.raises(ValueError, match="2-D uint8"):
        build_batches(np.zeros((2, 3), np.int32))
    assert build_batches([]) == []


def test_fixed_size_rows_take_the_vectorised_path_through_three_offset_delta_widths():
    values = np.random.default_rng(1).integers(0, 256, size=(9000, 3), dtype=np.uint8)
    timestamps = [BASE_TS + i % 50 for i in range(9000)]
    batches = build_batches(values, None, timestamps, None, 0, 1 << 20)
    assert len(batches) == 1 and isinstance(batches[0], memoryview)  # views into one buffer
    rows = [bytes(row) for row in values]
    assert [bytes(b) for b in batches] == one_by_one(rows, None, timestamps, None, 0, 1 << 20)
    assert [r.offset for r in RecordBatch(batches[0])][-1] == 8999


def test_bulk_with_allocate_builds_each_large_batch_into_its_own_buffer_when_asked():
    """generate_batches with an allocate: every batch of half a chunk or more is written
    into the buffer allocate gave, asked for when that batch is made, and yielded as that
    very buffer; smaller batches and compressed ones as without allocate; same bytes."""
    values = np.random.default_rng(2).integers(0, 256, size=(20_000, 100), dtype=np.uint8)
    asked = []

    def allocate(size):
        asked.append(memoryview(bytearray(size)))
        return asked[-1]

    batches = generate_batches(values, None, BASE_TS, None, 0, 1 << 20, allocate=allocate)
    assert asked == []
    first = next(batches)
    assert len(asked) == 1 and first is asked[0]
    rest = list(batches)
    assert len(asked) == 2 and rest[0] is asked[1]
    assert all(b is not a for b in rest[1:] for a in asked)  # the small last batch
    expected = [bytes(b) for b in build_batches(values, None, BASE_TS, None, 0, 1 << 20)]
    assert [bytes(b) for b in [first, *rest]] == expected and len(expected) == 3
    assert list(generate_batches(values, None, BASE_TS, None, "gzip", 1 << 20,
                                 allocate=allocate)) and len(asked) == 2


def test_bulk_items_whose_len_is_not_their_byte_count_are_copied_as_bytes():
    wide = memoryview(np.array([258], dtype="<u2"))          # len 1, 2 bytes
    values = [b"a", wide, bytearray(b"c")]
    got = [bytes(b) for b in build_batches(values, timestamps=BASE_TS)]
    assert got == one_by_one(values, None, [BASE_TS] * 3, None, 0, 16384)
    assert [r.value for r in RecordBatch(got[0])] == [b"a", b"\x02\x01", b"c"]
