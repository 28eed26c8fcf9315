"""The consumer's record parsing: columns_parser (vectorised and per-record paths),
RecordColumns, PartitionRecords. Everything is checked against the storage layer's own
per-record decoder (segments.record.records.iter_records) on the same bytes."""
from __future__ import annotations

import random

import numpy as np
import pytest

from cluster.structs import TopicPartition
from consumer_proc import columns_parser
from consumer_proc.columns_parser import parse_batches
from consumer_proc.partition_records import PartitionRecords
from consumer_proc.record_columns import RecordColumns
from segments.errors import CorruptRecordError
from segments.record import batch_descriptor as d, compression
from segments.record.batch_header import BatchHeader, iter_batches
from segments.record.bulk import build_batches
from segments.record.compression import CODEC_NAMES
from segments.record.records import RecordBatchBuilder, iter_records, pack_batch
from segments.record.varint import encode_varint
from tests.support.zip_bomb import INFLATED, bomb_batch, peak_memory

T0 = 1_700_000_000_000
TP = TopicPartition("t", 3)


def log_of(batches, first_offset=0, epoch=5):
    """Batches stamped with consecutive offsets from ``first_offset``, back to back."""
    buf = bytearray()
    offset = first_offset
    for batch in batches:
        position = len(buf)
        buf += bytes(batch)
        header = BatchHeader(buf, position)
        header.stamp(offset, epoch)
        offset = header.next_offset
    return bytes(buf)


def built(records, compression=0, timestamp_type=0, batch_size=1 << 20):
    """One batch of ``records``: (timestamp, key, value, headers) tuples."""
    builder = RecordBatchBuilder(compression, batch_size, timestamp_type=timestamp_type)
    for timestamp, key, value, headers in records:
        assert builder.append(timestamp, key, value, headers) is not None
    return builder.build()


def hand_batch(records, attributes=0, base_timestamp=T0):
    """A batch with explicit offset deltas: records are (offset delta, timestamp delta,
    key, value); what a compacted batch looks like (gaps in the deltas)."""
    payload = b""
    for delta, stamp, key, value in records:
        body = (b"\x00" + encode_varint(stamp) + encode_varint(delta)
                + (b"\x01" if key is None else encode_varint(len(key)) + key)
                + (b"\x01" if value is None else encode_varint(len(value)) + value) + b"\x00")
        payload += encode_varint(len(body)) + body
    last = records[-1][0] if records else 0
    batch = pack_batch(payload, len(records), base_timestamp, base_timestamp, attributes,
                       producer_id=-1, producer_epoch=-1, base_sequence=-1,
                       partition_leader_epoch=-1)
    batch = bytearray(batch)
    d.INT32.pack_into(batch, d.LAST_OFFSET_DELTA_OFFSET, last)  # kept across compaction
    crc = BatchHeader(batch).compute_crc()
    d.UINT32.pack_into(batch, d.CRC_OFFSET, crc)
    return bytes(batch)


def parsed(buf, check_crcs=True):
    runs = parse_batches(buf, list(iter_batches(buf)), check_crcs)
    rows = []
    for columns in runs:
        assert len(columns.keys()) == len(columns) == len(columns.values())
        headers = [list(h) for h in columns.headers or [()] * len(columns)]
        rows += list(zip(columns.offsets.tolist(), columns.timestamps.tolist(),
                         [columns.timestamp_type] * len(columns), columns.keys(),
                         columns.values(), headers))
    return rows


def expected(buf):
    return [tuple(r) for r in iter_records(buf)]


def vector_batches(monkeypatch):
    """Count the batches the vectorised path accepted (offered every run, however small)."""
    monkeypatch.setattr(columns_parser, "VECTOR_MIN_RECORDS", 1)
    accepted = []
    original = columns_parser._vector_parse

    def spy(data, headers, *args):
        columns, ok = original(data, headers, *args)
        if ok.all():
            accepted.extend(headers)
        return columns, ok
    monkeypatch.setattr(columns_parser, "_vector_parse", spy)
    strided = strided_batches(monkeypatch)
    return _Both(accepted, strided)


class _Both(list):
    """The batches either vectorised path accepted (a list of their headers)."""

    def __init__(self, vectorised, strided):
        super().__init__()
        self._parts = (vectorised, strided)

    def __iter__(self):
        return iter(self._parts[0] + self._parts[1])

    def __len__(self):
        return len(self._parts[0]) + len(self._parts[1])

    def __bool__(self):
        return len(self) > 0


def strided_batches(monkeypatch):
    """Count the batches the strided path (strided_batches.parse_groups) accepted."""
    accepted = []
    original = columns_parser.parse_groups

    def spy(data, headers, *args):
        found = original(data, headers, *args)
        if found is not None:
            accepted.extend(headers)
        return found
    monkeypatch.setattr(columns_parser, "parse_groups", spy)
    return accepted


# -- columns_parser ---------------------------------------------------------------------------

@pytest.mark.parametrize("value_size", [1, 50, 100, 200, 9000])
def test_uniform_batches_vectorised_match_the_record_decoder(monkeypatch, value_size):
    accepted = vector_batches(monkeypatch)
    values = np.random.default_rng(value_size).integers(0, 256, (3000, value_size), np.uint8)
    buf = log_of(build_batches(values, timestamps=T0, batch_size=16384), first_offset=77)
    assert parsed(buf) == expected(buf)
    assert len(accepted) == len(list(iter_batches(buf)))  # all took the fast path


@pytest.mark.parametrize("count", [1, 5, columns_parser.VECTOR_MIN_RECORDS - 1])
def test_small_runs_are_walked_record_by_record(monkeypatch, count):
    accepted = []
    original = columns_parser._vector_parse
    monkeypatch.setattr(columns_parser, "_vector_parse",
                        lambda data, headers, *args: accepted.extend(headers)
                        or original(data, headers, *args))
    values = np.random.default_rng(count).integers(0, 256, (count, 100), np.uint8)
    buf = log_of(build_batches(values, timestamps=T0, batch_size=16384), first_offset=9)
    assert parsed(buf) == expected(buf)
    assert not accepted
    big = np.random.default_rng(0).integers(0, 256, (columns_parser.VECTOR_MIN_RECORDS, 100),
                                            np.uint8)
    buf = log_of(build_batches(big, timestamps=T0, batch_size=1 << 20))
    assert parsed(buf) == expected(buf)
    assert accepted


def test_fixed_keys_spread_timestamps_and_big_batches(monkeypatch):
    accepted = vector_batches(monkeypatch)
    count = 10000  # one batch past offset delta 8192: three-byte... two-byte deltas and more
    values = np.full((count, 3), 7, np.uint8)
    keys = np.arange(count * 8, dtype=np.uint8).reshape(count, 8)
    stamps = T0 + (np.arange(count) % 64)  # every delta from the first within one byte
    buf = log_of(build_batches(values, keys=keys, timestamps=stamps, batch_size=1 << 20))
    assert parsed(buf) == expected(buf)
    assert accepted


def test_log_append_time_batches_take_the_max_timestamp(monkeypatch):
    accepted = vector_batches(monkeypatch)
    batch = bytearray(built([(T0 + i % 60, None, b"v%03d" % i, ()) for i in range(100)]))
    BatchHeader(batch).set_log_append_time(T0 + 5000)
    buf = log_of([batch])
    rows = parsed(buf)
    assert rows == expected(buf)
    assert {r[1] for r in rows} == {T0 + 5000} and {r[2] for r in rows} == {1}
    assert accepted


@pytest.mark.parametrize("records", [
    [(T0 + i, None, b"x" * (i % 5), ()) for i in range(200)],                    # sizes vary
    [(T0 + i, None, b"v", [("h", b"1")] if i == 150 else ()) for i in range(200)],  # headers
    [(T0 + 100 * i, None, b"v", ()) for i in range(200)],                        # spread times
    [(T0, None if i % 3 else b"k", b"v", ()) for i in range(200)],               # null keys mixed
    [(T0, b"k", None if i == 90 else b"v", ()) for i in range(200)],             # a tombstone
    [(T0 + i, b"key-%d" % i, b"value-%d" % i, [("a", None), ("b", b"")]) for i in range(70)],
])
def test_non_uniform_batches_decode_record_by_record(records):
    buf = log_of([built(records), built(records[:3])])
    assert parsed(buf) == expected(buf)


def test_a_batch_that_changes_shape_after_its_first_record_is_not_guessed(monkeypatch):
    """The first 69 records look uniform; record 69 has a longer value. The guess fails its
    checks and the batch is decoded record by record, its neighbours still vectorised."""
    accepted = vector_batches(monkeypatch)
    uniform = built([(T0, None, b"abc", ())] * 100)
    odd = built([(T0, None, b"abc", ())] * 69 + [(T0, None, b"abcd", ())] + [
        (T0, None, b"abc", ())] * 30)
    buf = log_of([uniform, odd, uniform])
    assert parsed(buf) == expected(buf)
    assert [h.record_count for h in accepted] == [100, 100]


def test_compacted_batches_keep_their_gaps():
    compacted = hand_batch([(0, 0, b"a", b"1"), (3, 0, b"b", b"2"), (9, 0, b"c", b"3")])
    buf = log_of([compacted, built([(T0, b"d", b"4", ())])])
    rows = parsed(buf)
    assert rows == expected(buf)
    assert [r[0] for r in rows] == [0, 3, 9, 10]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches(monkeypatch, codec):
    accepted = vector_batches(monkeypatch)
    values = np.random.default_rng(1).integers(0, 4, (500, 100), np.uint8)
    uniform = build_batches(values, timestamps=T0, compression_type=codec, batch_size=16384)
    mixed = built([(T0 + i, b"k%d" % i, b"v" * i, ()) for i in range(50)], compression=codec)
    buf = log_of(list(uniform) + [mixed] + list(uniform))
    assert parsed(buf) == expected(buf)
    assert len(accepted) == 2 * len(uniform)


def test_control_batches_are_skipped():
    control = bytearray(hand_batch([(0, 0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")]))
    attributes = d.INT16.unpack_from(control, d.ATTRIBUTES_OFFSET)[0] | d.CONTROL_MASK
    d.INT16.pack_into(control, d.ATTRIBUTES_OFFSET, attributes)
    d.UINT32.pack_into(control, d.CRC_OFFSET, BatchHeader(control).compute_crc())
    buf = log_of([built([(T0, None, b"a", ())]), control, built([(T0, None, b"b", ())])])
    assert [(r[0], r[4]) for r in parsed(buf)] == [(0, b"a"), (2, b"b")]


def test_bulk_sends_parse_as_strided_groups(monkeypatch):
    """Batches of a few send_batch calls (each: full batches of one shape and a shorter
    last one), fixed keys, spread timestamps, LogAppendTime: the strided path takes them
    all and gives what the record decoder gives."""
    strided = strided_batches(monkeypatch)
    rng = np.random.default_rng(4)
    batches = []
    for count, key_size in ((5000, None), (3001, 0), (2000, 9)):
        values = rng.integers(0, 256, (count, 100), np.uint8)
        keys = None if key_size is None else rng.integers(0, 256, (count, key_size), np.uint8)
        batches += build_batches(values, keys=keys, timestamps=T0 + rng.integers(0, 60, count),
                                 batch_size=1 << 16)
    buf = log_of(batches, first_offset=1 << 33)
    assert parsed(buf) == expected(buf)
    assert len(strided) == len(batches)
    appended = bytearray(buf)
    for header in iter_batches(appended):
        header.set_log_append_time(T0 + 9)
    rows = parsed(bytes(appended))
    assert rows == expected(bytes(appended)) and {r[1] for r in rows} == {T0 + 9}


def test_a_damaged_byte_in_a_strided_group_parses_as_the_other_paths_read_it(monkeypatch):
    """Every byte of a batch's records (and the one before them) flipped in turn, no CRC
    check: the strided path refuses what its guess does not hold, and the outcome —
    columns, or CorruptRecordError — is the one the parser's other paths (the vectorised
    guess, then the record-by-record walk) have on the same bytes."""
    strided = strided_batches(monkeypatch)
    values = np.random.default_rng(5).integers(0, 256, (600, 3), np.uint8)
    batches = build_batches(values, timestamps=T0, batch_size=d.HEADER_SIZE + 100 * 7)
    buf = log_of(batches)
    assert parsed(buf, check_crcs=False) == expected(buf) and len(strided) == len(batches)
    second = list(iter_batches(buf))[1]
    refused = 0
    for position in range(second.position + d.RECORDS_OFFSET - 1,
                          second.position + second.size_in_bytes):
        damaged = bytearray(buf)
        damaged[position] ^= 0x40 if position % 2 else 0x01
        del strided[:]
        got = _outcome(bytes(damaged))
        refused += not strided
        with monkeypatch.context() as patch:
            patch.setattr(columns_parser, "parse_groups", lambda *args: None)
            assert got == _outcome(bytes(damaged)), position
    assert refused > 100  # length, offset delta, value length, headerCount bytes


def _outcome(buf):
    try:
        return parsed(buf, check_crcs=False)
    except CorruptRecordError:
        return "CorruptRecordError"


def test_crc_mismatch_raises_only_when_checked():
    buf = bytearray(log_of([built([(T0, None, b"v%d" % i, ()) for i in range(10)])]))
    d.UINT32.pack_into(buf, d.CRC_OFFSET, BatchHeader(buf).crc ^ 1)
    with pytest.raises(CorruptRecordError, match="stored CRC"):
        parsed(bytes(buf))
    assert len(parsed(bytes(buf), check_crcs=False)) == 10


def test_corrupt_record_bytes_are_not_guessed_past():
    """A length byte damaged without a CRC check: the vectorised checks refuse the batch
    and the record decoder names the damage."""
    batch = bytearray(built([(T0, None, b"abcdef", ())] * 20))
    record_size = 1 + (batch[d.RECORDS_OFFSET] >> 1)
    batch[d.RECORDS_OFFSET + 3 * record_size] ^= 0x04  # record 3's length varint
    with pytest.raises(CorruptRecordError):
        parsed(log_of([batch]), check_crcs=False)


def test_random_mixes_match_the_record_decoder():
    rng = random.Random(11)
    for _ in range(30):
        batches = []
        for _ in range(rng.randint(1, 6)):
            count = rng.choice([1, 2, 63, 64, 65, 200])
            key = rng.choice([None, b"", b"k" * rng.randint(1, 70)])
            size = rng.choice([0, 1, 62, 63, 64, 150, 8200])
            vary = rng.random() < 0.3
            records = [(T0 + (rng.randint(-63, 63) if rng.random() < 0.9 else 5000), key,
                        bytes(rng.randint(0, 255) for _ in range(1 + size % 7))
                        if vary else b"z" * size, ()) for _ in range(count)]
            batches.append(built(records, compression=rng.choice([0, 0, 0, "lz4"]),
                                 batch_size=1 << 23))
        buf = log_of(batches, first_offset=rng.randint(0, 1 << 40))
        assert parsed(buf) == expected(buf)


# -- RecordColumns ----------------------------------------------------------------------------

def test_columns_to_records_carry_kafka_pythons_fields():
    buf = log_of([built([(T0, b"key", b"value", [("h", b"xy"), ("\u00e9", None)]),
                         (T0 + 1, None, None, ())])], epoch=9)
    (columns,) = parse_batches(buf, list(iter_batches(buf)))
    first, second = columns.to_records("t", 3)
    assert first == ("t", 3, 9, 0, T0, 0, b"key", b"value", [("h", b"xy"), ("\u00e9", None)],
                     None, 3, 5, 1 + 2 + 2)
    assert (second.key, second.value, second.headers, second.serialized_key_size,
            second.serialized_value_size, second.serialized_header_size) == (
        None, None, (), -1, -1, -1)
    assert first._fields[:4] == ("topic", "partition", "leader_epoch", "offset")


def test_columns_deserializers_get_topic_headers_and_bytes():
    buf = log_of([built([(T0, b"1", b"2", [("h", b"x")])] * 3)])
    (columns,) = parse_batches(buf, list(iter_batches(buf)))
    seen = []

    def key(topic, headers, data):
        seen.append((topic, headers))
        return int(data)
    records = columns.to_records("t", 0, key, lambda topic, headers, data: data.decode())
    assert [(r.key, r.value) for r in records] == [(1, "2")] * 3
    assert seen == [("t", [("h", b"x")])] * 3


def test_value_array_and_slices():
    values = np.arange(600, dtype=np.uint8).reshape(200, 3)
    buf = log_of(build_batches(values, timestamps=T0, batch_size=1024))
    (columns,) = parse_batches(buf, list(iter_batches(buf)))
    assert (columns.value_array() == values).all()
    part = columns.slice(10, 20)
    assert part.offsets.tolist() == list(range(10, 20))
    assert part.values() == [bytes(v) for v in values[10:20]]
    listed = RecordColumns.from_records(0, 0, list(iter_records(buf)))
    assert (listed.value_array() == values).all()
    assert listed.slice(5, 7).keys() == [None, None]
    uneven = RecordColumns.from_records(0, 0, list(iter_records(log_of([built(
        [(T0, None, b"a", ()), (T0, None, b"bc", ())])]))))
    with pytest.raises(ValueError, match="not all of one size"):
        uneven.value_array()
    with pytest.raises(ValueError, match="give either buffer"):
        RecordColumns(0, 0, listed.offsets, listed.timestamps, listed.key_lengths,
                      listed.value_lengths)


# -- PartitionRecords -------------------------------------------------------------------------

def test_records_before_the_fetch_offset_are_skipped():
    buf = log_of([built([(T0, None, b"%d" % i, ()) for i in range(10)])] * 3, first_offset=100)
    part = PartitionRecords(TP, 105, buf)
    assert part.end_offset == 130 and part.record_count == 30
    records = part.take(7)
    assert [r.offset for r in records] == list(range(105, 112))
    assert part.next_offset == 112
    assert [r.offset for r in part.take(100)] == list(range(112, 130))
    assert not part and part.next_offset == 130


def test_a_few_records_are_taken_straight_as_the_columns_would_give_them(monkeypatch):
    monkeypatch.setattr("consumer_proc.partition_records.COMPILED_WALK", False)
    control = bytearray(hand_batch([(0, 0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")]))
    attributes = d.INT16.unpack_from(control, d.ATTRIBUTES_OFFSET)[0] | d.CONTROL_MASK
    d.INT16.pack_into(control, d.ATTRIBUTES_OFFSET, attributes)
    d.UINT32.pack_into(control, d.CRC_OFFSET, BatchHeader(control).compute_crc())
    buf = log_of([
        built([(T0, b"k1", b"v1", [("h", b"xy"), ("\u00e9", None)]), (T0 + 5, None, None, ())]),
        control,
        built([(T0 + 1, b"k3", b"v3", ()), (T0 + 2, b"", b"", ())], timestamp_type=1),
        built([(T0 + 3, b"k5", b"v5", ())])], first_offset=40, epoch=7)
    deserializers = (lambda topic, headers, data: (topic, headers, data),
                     lambda topic, headers, data: None if data is None else data.decode())
    for fetch_offset in (40, 41, 44):
        straight = PartitionRecords(TP, fetch_offset, buf)
        columns = PartitionRecords(TP, fetch_offset, buf)
        got = straight.take(100, *deserializers)
        assert got == sum((c.to_records(TP.topic, TP.partition, *deserializers)
                           for c in columns.take_columns(100)), [])
        assert [r.offset for r in got] == [o for o in (40, 41, 43, 44, 45) if o >= fetch_offset]
        assert straight.next_offset == columns.next_offset == 46 and not straight


@pytest.mark.parametrize("compiled_walk", [False, True])
def test_a_few_records_past_max_records_or_compressed_go_through_the_columns(monkeypatch,
                                                                              compiled_walk):
    """Without the compiled walk, a few records are taken straight (no columns); with it,
    only one or two are (``STRAIGHT_MAX_COMPILED``), the columns path being faster past
    that."""
    monkeypatch.setattr("consumer_proc.partition_records.COMPILED_WALK", compiled_walk)
    calls = []
    real = PartitionRecords.take_columns
    monkeypatch.setattr(PartitionRecords, "take_columns",
                        lambda self, n: calls.append(n) or real(self, n))
    buf = log_of([built([(T0, None, b"%d" % i, ()) for i in range(5)])])
    part = PartitionRecords(TP, 0, buf)
    assert [r.value for r in part.take(3)] == [b"0", b"1", b"2"]  # more than max_records
    assert [r.value for r in part.take(3)] == [b"3", b"4"]  # rest of a parsed group
    assert calls == [3, 3]
    lz4 = log_of([built([(T0, None, b"z", ())], compression="lz4")])
    assert [r.value for r in PartitionRecords(TP, 0, lz4).take(10)] == [b"z"]
    assert calls == [3, 3, 10]
    assert [r.value for r in PartitionRecords(TP, 0, buf).take(10)] == [
        b"%d" % i for i in range(5)]
    assert calls == ([3, 3, 10, 10] if compiled_walk else [3, 3, 10])  # else taken straight
    two = log_of([built([(T0, None, b"%d" % i, ()) for i in range(2)])])
    assert [r.value for r in PartitionRecords(TP, 0, two).take(10)] == [b"0", b"1"]
    assert len(calls) == (4 if compiled_walk else 3)  # taken straight either way


def test_take_in_pieces_across_parse_groups(monkeypatch):
    monkeypatch.setattr("consumer_proc.partition_records.PARSE_GROUP_BYTES", 1)
    values = np.arange(5000 * 10, dtype=np.uint8).reshape(5000, 10)
    buf = log_of(build_batches(values, timestamps=T0, batch_size=2048))
    part = PartitionRecords(TP, 0, buf)
    got = []
    while part:
        pieces = part.take_columns(333)
        assert sum(map(len, pieces)) <= 333
        got += [v for c in pieces for v in c.values()]
    assert got == [bytes(v) for v in values]


def test_end_offset_covers_compacted_tails_and_partial_batches():
    compacted = hand_batch([(0, 0, b"a", b"1"), (4, 0, b"b", b"2")])
    whole = log_of([compacted])
    partial = log_of([built([(T0, None, b"x", ())] * 5)], first_offset=5)[:-3]
    part = PartitionRecords(TP, 0, whole + partial)
    assert part.batch_count == 1 and part.end_offset == 5
    assert [r.offset for r in part.take(10)] == [0, 4]
    assert part.next_offset == 5


def test_a_corrupt_batch_raises_naming_the_partition_and_exhausts():
    buf = bytearray(log_of([built([(T0, None, b"v", ())] * 4)] * 2, first_offset=50))
    second = BatchHeader(buf, 0).size_in_bytes
    d.UINT32.pack_into(buf, second + d.CRC_OFFSET, BatchHeader(buf, second).crc ^ 1)
    part = PartitionRecords(TP, 50, bytes(buf))
    assert [r.offset for r in part.take(10)] == [50, 51, 52, 53]
    with pytest.raises(CorruptRecordError, match="t-3: batch at offset 54: .*stored CRC"):
        part.take(10)
    assert not part


@pytest.mark.parametrize("take_columns", [False, True])
@pytest.mark.parametrize("count, shift", [(4, -1), (4, -4), (100, -1), (100, -150)])
def test_a_renumbered_batch_raises_after_the_batches_before_it(take_columns, count, shift):
    """baseOffset is outside the CRC: a batch whose offsets do not follow the previous
    batch's is corrupt, like a CRC failure (small fetches and vectorised runs alike)."""
    buf = bytearray(log_of([built([(T0, None, b"v", ())] * count)] * 3, first_offset=50))
    second = BatchHeader(buf, 0).size_in_bytes
    third = second + BatchHeader(buf, second).size_in_bytes
    renumbered = 50 + 2 * count + shift  # at or below the second batch's last offset
    d.INT64.pack_into(buf, third + d.BASE_OFFSET_OFFSET, renumbered)
    part = PartitionRecords(TP, 50, bytes(buf))
    assert part.end_offset == 50 + 2 * count  # the next fetch asks for the bad batch again
    take = (lambda n: [int(o) for c in part.take_columns(n) for o in c.offsets]) \
        if take_columns else (lambda n: [r.offset for r in part.take(n)])
    assert take(10_000) == list(range(50, 50 + 2 * count))
    with pytest.raises(CorruptRecordError,
                       match=f"t-3: batch at offset {renumbered}: .*previous batch's last "
                             f"offset {50 + 2 * count - 1}"):
        take(10_000)
    assert not part and part.next_offset == 50 + 2 * count


def test_a_header_that_does_not_frame_raises_at_once():
    buf = bytearray(log_of([built([(T0, None, b"v", ())])]))
    buf[d.MAGIC_OFFSET] = 1
    with pytest.raises(CorruptRecordError, match="t-3 fetched at offset 0: .*magic 1"):
        PartitionRecords(TP, 0, bytes(buf))



@pytest.mark.parametrize("take_columns", [False, True])
@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_zip_bomb_is_not_inflated_by_the_consumer(monkeypatch, codec, take_columns):
    """A CRC-valid batch whose one record inflates to 16 MiB: the consumer decompresses at
    most compression.MAX_RECORDS_BYTES (1 MiB here) and raises naming the partition,
    the batch's offset, the codec and the limit."""
    monkeypatch.setattr(compression, "MAX_RECORDS_BYTES", 1 << 20)
    part = PartitionRecords(TP, 3, log_of([bomb_batch(codec)], first_offset=3))
    take = part.take_columns if take_columns else part.take
    peak, raised = peak_memory(lambda: take(10))
    assert isinstance(raised, CorruptRecordError), raised
    assert str(raised).startswith("[Error 2] t-3: batches from offset 3")
    assert f"batch at offset 3: {CODEC_NAMES[codec]}: " in str(raised)
    assert f"inflate past the limit of {1 << 20} bytes" in str(raised)
    assert peak < 8 * 1024 * 1024 < INFLATED
    assert not part


def _walked(monkeypatch, buf, module):
    """``_outcome`` of ``buf`` with ``module`` as the compiled small-run walk (None: the
    Python walk); the runs the compiled walk answered, counted."""
    answered = []
    if module is not None:
        walk = module.walk_batches

        class Spy:
            @staticmethod
            def walk_batches(*args):
                found = walk(*args)
                answered.append(found is not None)
                return found
        module = Spy
    with monkeypatch.context() as patch:
        patch.setattr(columns_parser, "_compiled", module)
        return _outcome(buf), answered


def _compiled_walk():
    try:
        from consumer_proc import _records_accel
    except ImportError as exc:
        pytest.skip(f"consumer_proc._records_accel is not built ({exc})")
    return _records_accel


@pytest.mark.parametrize("records", [
    [(T0 + i, None, b"v%d" % i, ()) for i in range(5)],
    [(T0 + 100_000 * i, b"k" * i, None if i == 2 else b"x" * (200 * i), ()) for i in range(6)],
    [(T0 - i, b"", b"", ()) for i in range(63)],
    [(T0, b"k", b"v", [("h", b"1")] if i == 1 else ()) for i in range(3)],  # headers: Python
])
@pytest.mark.parametrize("compression", [0, 1])
def test_small_runs_walked_compiled_read_as_the_python_walk(monkeypatch, records, compression):
    module = _compiled_walk()
    batch = bytearray(built(records, compression=compression))
    appended = bytearray(built(records[:2]))
    BatchHeader(appended).set_log_append_time(T0 + 77)
    buf = log_of([bytes(batch), bytes(appended), built(records[-1:])])
    found, answered = _walked(monkeypatch, buf, module)
    assert found == _walked(monkeypatch, buf, None)[0] == expected(buf)
    has_headers = any(headers for *_, headers in records)
    assert answered and all(answered) != has_headers


def test_a_damaged_byte_in_a_small_run_reads_as_the_python_walk_reads_it(monkeypatch):
    """Every byte of a small batch's records (and its header) flipped in turn, no CRC check:
    the compiled walk answers only what the Python walk would (same columns), else the
    Python walk decides (same columns or the same CorruptRecordError)."""
    module = _compiled_walk()
    records = [(T0 + i, b"k%d" % i if i % 2 else None, b"value-%d" % i, ()) for i in range(4)]
    buf = log_of([built(records), built(records[:1])])
    first = list(iter_batches(buf))[0]
    answered = 0
    for position in range(first.position, first.position + first.size_in_bytes):
        for flip in (0x01, 0x40, 0x80):
            damaged = bytearray(buf)
            damaged[position] ^= flip
            got, walked = _walked(monkeypatch, bytes(damaged), module)
            answered += any(walked)
            assert got == _walked(monkeypatch, bytes(damaged), None)[0], (position, flip)
    assert answered


def _rows(runs):
    return [(c.leader_epoch, c.timestamp_type, c.offsets.tolist(), c.timestamps.tolist(),
             c.key_lengths.tolist(), c.value_lengths.tolist(), c.keys(), c.values(),
             c.headers) for c in runs]


SMALL_RUNS = {
    "plain": lambda: log_of([built([(T0 + i, None, b"v%d" % i, ()) for i in range(5)])]),
    "several, keys, nulls": lambda: log_of([
        built([(T0 + 9 * i, b"k" * i, None if i == 2 else b"x" * (300 * i), ())
               for i in range(4)]),
        built([(T0, b"", b"", ())]), built([(T0 - 5, None, None, ())] * 2)]),
    "log append time": lambda: log_of([_log_append_time(built([(T0, b"k", b"v", ())] * 3))] * 2),
    "headers": lambda: log_of([built([(T0, b"k", b"v", [("h", b"1")])])]),
    "compressed": lambda: log_of([built([(T0, b"k", b"v", ())] * 3, compression=1)]),
    "control": lambda: log_of([built([(T0, b"k", b"v", ())]), _control_batch()]),
    "two epochs": lambda: log_of([built([(T0, b"k", b"v", ())])], epoch=1)
    + log_of([built([(T0, b"k", b"v", ())])], first_offset=1, epoch=2),
    "mixed timestamp types": lambda: log_of([
        built([(T0, b"k", b"v", ())]), _log_append_time(built([(T0, b"k", b"v", ())]))]),
    "64 records": lambda: log_of([built([(T0, None, b"v", ())] * 64)]),
}


def _log_append_time(batch):
    batch = bytearray(batch)
    BatchHeader(batch).set_log_append_time(T0 + 77)
    return bytes(batch)


def _control_batch():
    return hand_batch([(0, 0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
                      attributes=d.CONTROL_MASK)


@pytest.mark.parametrize("run", SMALL_RUNS)
def test_parse_small_gives_parse_batches_columns_or_declines(run):
    """The small-fetch shortcut answers only plain small runs, with parse_batches' columns
    (field for field); anything else it leaves to parse_batches."""
    buf = SMALL_RUNS[run]()
    headers = list(iter_batches(buf))
    found = columns_parser.parse_small(buf, headers)
    plain = run in ("plain", "several, keys, nulls", "log append time")
    if plain and columns_parser.COMPILED_WALK:
        assert found is not None
    else:
        assert found is None
    if found is not None:
        assert _rows(found) == _rows(parse_batches(buf, headers, check_crcs=False))


def test_parse_small_on_damaged_bytes_answers_as_parse_batches():
    """Every byte of a small plain run's records flipped in turn: parse_small declines or
    gives parse_batches' columns (CRCs are checked before either, by PartitionRecords)."""
    if not columns_parser.COMPILED_WALK:
        pytest.skip("the compiled walk is not loaded: parse_small always declines")
    buf = SMALL_RUNS["several, keys, nulls"]()
    first = list(iter_batches(buf))[0]
    answered = 0
    for position in range(first.position + d.RECORDS_OFFSET,
                          first.position + first.size_in_bytes):
        damaged = bytearray(buf)
        damaged[position] ^= 0x40
        damaged = bytes(damaged)
        headers = list(iter_batches(damaged))
        found = columns_parser.parse_small(damaged, headers)
        if found is None:
            continue
        answered += 1
        assert _rows(found) == _rows(parse_batches(damaged, headers, check_crcs=False))
    assert answered


@pytest.mark.parametrize("run", SMALL_RUNS)
@pytest.mark.parametrize("fetch_offset", [0, 1])
def test_taken_columns_are_the_same_without_parse_small(monkeypatch, run, fetch_offset):
    buf = SMALL_RUNS[run]()
    got = _rows(PartitionRecords(TP, fetch_offset, buf).take_columns(1000))
    monkeypatch.setattr("consumer_proc.partition_records.parse_small", lambda *_: None)
    assert got == _rows(PartitionRecords(TP, fetch_offset, buf).take_columns(1000))
