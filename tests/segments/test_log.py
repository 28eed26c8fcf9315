"""PartitionLog: append, read by offset and by time, roll, truncate, retention, flush."""
from __future__ import annotations

import os
import random

import pytest
from crc32c import crc32c

from segments import log as segments_log
from segments.checkpoint import OffsetCheckpoint
from segments.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from segments.log import (
    CLEAN_SHUTDOWN_MARKER,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    _flush_executor,
    close_together,
)
from segments.log_config import InvalidLogConfigError, LogConfig
from segments.record import batch_descriptor as d
from segments.record.batch_header import BatchHeader
from segments.record.compression import CODEC_NAMES
from tests.segments.helpers import (
    all_records,
    batches_of,
    crash,
    make_batch,
    open_log,
    records_of,
    simple_batch,
)
from tests.support.clock import T0, FakeClock
from tests.support.zip_bomb import INFLATED, bomb_batch, peak_memory

# -- config -------------------------------------------------------------------------------

def test_config_defaults_are_kafkas():
    config = LogConfig.from_dict({})
    assert config.segment_bytes == 1024 ** 3
    assert config.segment_ms == 7 * 24 * 3600 * 1000
    assert config.segment_index_bytes == 10 * 1024 * 1024
    assert config.index_interval_bytes == 4096
    assert config.retention_ms == 7 * 24 * 3600 * 1000
    assert config.retention_bytes == -1
    assert config.cleanup_policy == {"delete"}
    assert config.delete_retention_ms == 86_400_000
    assert config.flush_messages == 2 ** 63 - 1
    assert config.max_message_bytes == 1024 * 1024 + 12
    assert config.message_timestamp_type == "CreateTime"


def test_config_parses_kafka_names_and_strings():
    config = LogConfig.from_dict({"segment.bytes": "2048", "retention.ms": -1,
                                  "cleanup.policy": "compact,delete",
                                  "message.timestamp.type": "LogAppendTime"})
    assert config.segment_bytes == 2048
    assert config.retention_ms == -1
    assert config.compact and config.delete
    assert config.log_append_time
    assert LogConfig.from_dict(config.to_dict()) == config
    assert config.updated({"segment.bytes": 4096}).segment_bytes == 4096


@pytest.mark.parametrize("key, value, words", [
    ("segment.bytes", "lots", ["segment.bytes", "'lots'", "integer"]),
    ("segment.bytes", 10, ["segment.bytes", "10", "[14,"]),
    ("retention.ms", -2, ["retention.ms", "-2"]),
    ("cleanup.policy", "forever", ["cleanup.policy", "'forever'", "compact"]),
    ("message.timestamp.type", "Now", ["message.timestamp.type", "'Now'", "LogAppendTime"]),
    ("segment.bites", 1, ["unknown", "segment.bites"]),
    ("compression.type", "brotli", ["compression.type", "'brotli'", "producer"]),
    ("message.format.version", "0.10.x", ["message.format.version", "'0.10.x'"]),
    ("message.format.version", "9.9", ["message.format.version", "'9.9'"]),
])
def test_bad_config_names_key_and_value(key, value, words):
    with pytest.raises(InvalidLogConfigError) as e:
        LogConfig.from_dict({key: value})
    for word in words:
        assert word in str(e.value)
    assert e.value.errno == 40


# -- append and read by offset --------------------------------------------------------------

def test_append_assigns_offsets_and_read_returns_the_batch(tmp_path):
    log = open_log(tmp_path / "t-0")
    assert log.append(simple_batch(3)) == (0, 2)
    assert log.append(simple_batch(2)) == (3, 4)
    assert log.log_end_offset == 5
    data = log.read(3, 1 << 20)
    assert [r.offset for r in records_of(data)] == [3, 4]
    # The batch holding offset 1 starts at offset 0: it is returned whole.
    data = log.read(1, 1)
    assert [r.offset for r in records_of(data)] == [0, 1, 2]
    assert log.read(5, 1000) == b""
    with pytest.raises(OffsetOutOfRangeError, match="offset 6"):
        log.read(6, 1000)
    log.close()


def test_append_stamps_in_place_and_leader_epoch(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(simple_batch(2))
    buf = bytearray(simple_batch(1))
    log.append(buf, leader_epoch=7)
    header = BatchHeader(buf)
    assert header.base_offset == 2 and header.partition_leader_epoch == 7
    header.validate()
    stored = BatchHeader(log.read(2, 100))
    assert stored.partition_leader_epoch == 7 and stored.base_offset == 2
    log.close()


def test_a_bad_batch_means_nothing_is_appended(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(simple_batch(2))
    good = simple_batch(2)
    bad = bytearray(simple_batch(2))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append(good + bytes(bad))
    assert log.log_end_offset == 2
    assert log.size_in_bytes == len(simple_batch(2))
    with pytest.raises(CorruptRecordError):
        log.append(good[:-5])  # torn
    assert log.log_end_offset == 2
    log.close()


def test_record_too_large_names_both_sizes(tmp_path):
    log = open_log(tmp_path / "t-0", **{"max.message.bytes": 500})
    batch = simple_batch(20)
    with pytest.raises(RecordTooLargeError) as e:
        log.append(batch)
    assert str(len(batch)) in str(e.value) and "500" in str(e.value)
    assert log.log_end_offset == 0
    log.close()


def test_leader_append_rejects_a_batch_with_offset_gaps(tmp_path):
    log = open_log(tmp_path / "t-0")
    buf = bytearray(simple_batch(3))
    d.INT32.pack_into(buf, d.LAST_OFFSET_DELTA_OFFSET, 5)
    # re-checksum so only the offsets are wrong
    d.UINT32.pack_into(buf, d.CRC_OFFSET, crc32c(bytes(buf[d.ATTRIBUTES_OFFSET:])))
    with pytest.raises(InvalidRecordError, match="lastOffsetDelta"):
        log.append(buf)
    log.close()


def test_log_append_time_sets_max_timestamp_and_keeps_crc_valid(tmp_path):
    clock = FakeClock(T0 + 12345)
    log = open_log(tmp_path / "t-0", clock, **{"message.timestamp.type": "LogAppendTime"})
    log.append(simple_batch(3, timestamp=5))
    header = BatchHeader(log.read(0, 1000))
    header.validate()
    assert header.timestamp_type == 1 and header.max_timestamp == T0 + 12345
    assert {r.timestamp for r in records_of(log.read(0, 1000))} == {T0 + 12345}
    log.close()


def test_kafka_topic_configs_compression_type_and_message_format_version_parse():
    config = LogConfig.from_dict({"compression.type": "lz4",
                                  "message.format.version": "0.10.0.0"})
    assert config.compression_type == "lz4" and config.recompress_to == "lz4"
    assert config.message_format_version == "0.10.0.0"
    assert LogConfig.from_dict(config.to_dict()) == config
    assert LogConfig().recompress_to is None  # producer: each batch as it came
    assert LogConfig.from_dict({"compression.type": "uncompressed"}).recompress_to == "none"
    for version in ("2.8.1", "3.0-IV1", "0.11.0", "1.1"):
        assert LogConfig.from_dict({"message.format.version": version})


@pytest.mark.parametrize("stored, sent", [("gzip", 3), ("uncompressed", 4), ("zstd", 0)])
def test_compression_type_stores_client_batches_in_its_codec(tmp_path, stored, sent):
    log = open_log(tmp_path / "t-0", **{"compression.type": stored})
    records = [(T0 + i, b"k%d" % i, b"value %d" % i * 20) for i in range(30)]
    assert log.append(make_batch(records, compression=sent)) == (0, 29)
    assert log.append(make_batch(records[:3], compression=sent)) == (30, 32)
    data = log.read(0, 1 << 20)
    headers = batches_of(data)
    expected = {"none": 0, **{v: k for k, v in CODEC_NAMES.items()}}[
        "none" if stored == "uncompressed" else stored]
    assert [h.compression_type for h in headers] == [expected, expected]
    for header in headers:
        header.validate()
    got = [(r.offset, r.timestamp, r.key, r.value) for r in records_of(data)]
    assert got == [(i, t, k, v) for i, (t, k, v) in enumerate(records + records[:3])]
    log.close()


def test_compression_type_producer_keeps_each_batch_byte_for_byte(tmp_path):
    log = open_log(tmp_path / "t-0", **{"compression.type": "producer"})
    batch = make_batch([(T0, b"k", b"v" * 100)] * 5, compression=3)
    log.append(batch)
    assert bytes(log.read(0, 1 << 20))[d.PARTITION_LEADER_EPOCH_OFFSET:] == \
        batch[d.PARTITION_LEADER_EPOCH_OFFSET:]
    log.close()


def test_read_whole_batches_up_to_max_bytes_and_max_offset(tmp_path):
    log = open_log(tmp_path / "t-0", **{"index.interval.bytes": 100})
    sizes = []
    for _ in range(20):
        batch = simple_batch(5)
        sizes.append(len(batch))
        log.append(batch)
    size = sizes[0]
    data = log.read(0, 3 * size + size // 2)
    assert len(data) == 3 * size  # whole batches only
    data = log.read(12, 1)  # KIP-74: one whole batch even if larger than max_bytes
    assert [h.base_offset for h in batches_of(data)] == [10]
    assert log.read_slice(0, 1, min_one_batch=False).size == 0
    data = log.read(0, 1 << 20, max_offset=23)  # the high watermark
    assert [h.base_offset for h in batches_of(data)] == [0, 5, 10, 15]
    assert log.read(20, 1 << 20, max_offset=20) == b""
    assert log.read(20, 1 << 20, max_offset=22) == b""  # 20..24 is not wholly committed
    log.close()


def test_read_slice_reads_into_a_memoryview(tmp_path):
    log = open_log(tmp_path / "t-0")
    for _ in range(5):
        log.append(simple_batch(4))
    piece = log.read_slice(4, 1 << 20)
    assert piece.first_offset == 4 and piece.path.endswith("00000000000000000000.log")
    ring = memoryview(bytearray(piece.size + 10))
    assert piece.read_into(ring[10:]) == piece.size
    assert bytes(ring[10:]) == log.read(4, 1 << 20)
    with pytest.raises(ValueError):
        piece.read_into(bytearray(piece.size - 1))
    log.close()


def test_every_offset_is_found_across_segments_and_index_entries(tmp_path):
    rng = random.Random(7)
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 3000, "index.interval.bytes": 200})
    bases = []
    for _ in range(120):
        count = rng.randint(1, 6)
        first, last = log.append(simple_batch(count, value_size=rng.randint(1, 60)))
        bases.append((first, last))
    assert len(log.segments) > 5
    for first, last in bases:
        for offset in range(first, last + 1):
            data = log.read(offset, 1)
            header = BatchHeader(data)
            assert (header.base_offset, header.last_offset) == (first, last)
            assert header.size_in_bytes == len(data)
    log.close()


def test_reads_on_a_reopened_log_match(tmp_path):
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 2000, "index.interval.bytes": 150})
    for n in range(60):
        log.append(simple_batch(1 + n % 4))
    expected = {o: log.read(o, 700) for o in range(0, log.log_end_offset, 3)}
    log.close()
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 2000, "index.interval.bytes": 150})
    assert log.recovery.clean_shutdown and log.recovery.segments_recovered == 0
    assert {o: log.read(o, 700) for o in expected} == expected
    log.close()


# -- read by time -----------------------------------------------------------------------------

def test_offset_for_timestamp_matches_a_scan(tmp_path):
    rng = random.Random(3)
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 4000, "index.interval.bytes": 300})
    stamped = []  # (offset, timestamp)
    now = T0
    for _ in range(80):
        count = rng.randint(1, 5)
        records = []
        for _ in range(count):
            now += rng.randint(-20, 60)  # CreateTime need not grow
            records.append((now, b"k", b"v" * 20))
        first, _ = log.append(make_batch(records))
        stamped.extend((first + i, ts) for i, (ts, _, _) in enumerate(records))
    low = min(ts for _, ts in stamped)
    high = max(ts for _, ts in stamped)
    for target in list(range(low - 5, high + 5, 17)) + [high, high + 1]:
        expected = next((o for o, ts in stamped if ts >= target), None)
        assert log.offset_for_timestamp(target) == expected, target
    found = log.lookup_timestamp(low)
    assert found.timestamp == low
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == log.log_end_offset
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == 0
    log.close()


# -- roll --------------------------------------------------------------------------------------

def test_roll_at_segment_bytes(tmp_path):
    batch = simple_batch(10)
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 3 * len(batch)})
    for _ in range(7):
        log.append(batch)
    assert log.segment_base_offsets() == [0, 30, 60]
    assert all(s.size <= 3 * len(batch) for s in log.segments)
    names = sorted(os.listdir(tmp_path / "t-0"))
    assert "00000000000000000030.log" in names
    assert "00000000000000000030.index" in names and "00000000000000000030.timeindex" in names
    log.close()


def test_rolled_segments_are_flushed_in_the_background(tmp_path):
    batch = simple_batch(10)
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 2 * len(batch)})
    for _ in range(5):
        log.append(batch)
    assert log.segment_base_offsets() == [0, 20, 40]
    _flush_executor().submit(lambda: None).result()  # the flusher thread is idle again
    log.append(batch)  # an append notices the finished fsyncs (no flush() needed)
    assert log.recovery_point == 40
    assert not log.segments[0].unflushed and not log.segments[1].unflushed
    assert checkpointed_recovery_point(tmp_path / "t-0") == 40
    log.close()


def test_roll_at_segment_ms_by_record_timestamps(tmp_path):
    log = open_log(tmp_path / "t-0", **{"segment.ms": 1000})
    log.append(simple_batch(1, timestamp=T0))
    log.append(simple_batch(1, timestamp=T0 + 1000))
    assert log.segment_base_offsets() == [0]
    log.append(simple_batch(1, timestamp=T0 + 1001))
    assert log.segment_base_offsets() == [0, 2]
    log.close()


def test_update_config_applies_to_the_next_appends(tmp_path):
    batch = simple_batch(2)
    log = open_log(tmp_path / "t-0")
    log.append(batch)
    log.update_config(log.config.updated({"segment.bytes": len(batch)}))
    log.append(batch)
    assert log.segment_base_offsets() == [0, 2]
    log.close()


def test_roll_when_the_index_is_full(tmp_path):
    log = open_log(tmp_path / "t-0", **{"segment.index.bytes": 24, "index.interval.bytes": 0})
    for _ in range(6):
        log.append(simple_batch(1))
    # at most 2 time index entries (12 bytes each) per segment
    assert len(log.segments) >= 2
    for segment in log.segments[:-1]:
        assert segment.offset_index.entries <= 3
    assert [r.offset for r in all_records(log)] == list(range(6))
    log.close()


# -- truncation --------------------------------------------------------------------------------

def test_truncate_to_drops_the_tail_and_appends_continue(tmp_path):
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 1500, "index.interval.bytes": 100})
    for _ in range(30):
        log.append(simple_batch(3))
    assert len(log.segments) > 3
    dropped = log.truncate_to(31)  # inside the batch 30..32: it goes whole
    assert dropped > 0
    assert log.log_end_offset == 30
    assert log.segments[-1].base_offset <= 30
    assert [r.offset for r in all_records(log)] == list(range(30))
    assert log.append(simple_batch(2)) == (30, 31)
    assert log.recovery_point <= 30
    log.close()
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 1500, "index.interval.bytes": 100})
    assert [r.offset for r in all_records(log)] == list(range(32))
    log.close()


def test_reads_at_recent_appends_match_a_reopened_log_and_survive_truncation(tmp_path):
    """A read at the first offset of one of this process's last appends takes that batch's
    place from the append (Segment._recent), not from the index: the same slices as a
    log reopened without that knowledge; after truncate_to cuts into them and other
    batches are appended at the same offsets, reads find the new batches."""
    props = {"index.interval.bytes": 100}
    log = open_log(tmp_path / "t-0", **props)
    firsts = [log.append(simple_batch(1 + n % 4, value_size=20 + 7 * n))[0] for n in range(12)]

    def slices(log):
        return [(s.first_offset, s.position, s.size, bytes(s.tobytes()))
                for s in (log.read_slice(offset, 1 << 20, log.log_end_offset)
                          for offset in firsts)]
    recent = slices(log)
    log.close()
    reopened = open_log(tmp_path / "t-0", **props)
    assert slices(reopened) == recent
    reopened.close()

    log = open_log(tmp_path / "t-1", **props)  # appended by this process: known places
    assert [log.append(simple_batch(1 + n % 4, value_size=20 + 7 * n))[0]
            for n in range(12)] == firsts
    log.truncate_to(firsts[6])
    replaced = [log.append(simple_batch(5, value_size=90))[0] for _ in range(3)]
    assert replaced[0] == firsts[6]
    for offset in replaced:
        found = log.read_slice(offset, 1, log.log_end_offset)
        assert found.first_offset == offset
        assert [r.value for r in records_of(found.tobytes())][:1] == [b"v" * 90]
    for offset in firsts[7:]:  # old batch starts now inside the new batches
        found = log.read_slice(offset, 1, log.log_end_offset)
        assert found.first_offset == max(r for r in replaced if r <= offset)
    log.close()


def test_truncate_at_a_segment_base(tmp_path):
    batch = simple_batch(5)
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 2 * len(batch)})
    for _ in range(6):
        log.append(batch)
    assert log.segment_base_offsets() == [0, 10, 20]
    log.truncate_to(10)
    assert log.segment_base_offsets() == [0]
    assert log.log_end_offset == 10
    log.truncate_to(0)
    assert log.log_end_offset == 0 and log.size_in_bytes == 0
    assert log.append(batch) == (0, 4)
    log.close()


def test_truncate_fully_and_start_at(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(simple_batch(5))
    assert log.truncate_fully_and_start_at(100) > 0
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.segment_base_offsets() == [100]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert log.append(simple_batch(1)) == (100, 100)
    log.close()
    log = open_log(tmp_path / "t-0")
    assert (log.log_start_offset, log.log_end_offset) == (100, 101)
    log.close()


# -- follower appends -------------------------------------------------------------------------

def stamped(batch, base_offset):
    buf = bytearray(batch)
    BatchHeader(buf).stamp(base_offset, 3)
    return bytes(buf)


def test_append_as_follower_keeps_the_leaders_offsets(tmp_path):
    log = open_log(tmp_path / "t-0")
    assert log.append_as_follower(stamped(simple_batch(3), 0) + stamped(simple_batch(2), 3)) \
        == (0, 4)
    assert log.append_as_follower(stamped(simple_batch(1), 9)) == (9, 9)  # a gap is fine
    assert log.log_end_offset == 10
    with pytest.raises(InvalidRecordError, match="expected at least 10"):
        log.append_as_follower(stamped(simple_batch(1), 8))
    partial = stamped(simple_batch(2), 10) + stamped(simple_batch(2), 12)[:-7]
    assert log.append_as_follower(partial) == (10, 11)  # the torn tail is ignored
    assert [r.offset for r in all_records(log)] == [0, 1, 2, 3, 4, 9, 10, 11]
    log.close()


# -- retention ---------------------------------------------------------------------------------

def test_retention_by_time_deletes_old_segments_only(tmp_path):
    clock = FakeClock(T0)
    batch_size = len(simple_batch(2))
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": 2 * batch_size,
                                               "retention.ms": 10_000})
    for n in range(8):  # batch n carries timestamps T0 + n * 1000
        log.append(simple_batch(2, timestamp=T0 + n * 1000))
    assert log.segment_base_offsets() == [0, 4, 8, 12]
    clock.now = T0 + 11_500  # segment 0 holds T0 .. T0+1001: older than 10 s
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == 4
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    clock.now = T0 + 1_000_000
    assert log.delete_old_segments() == 2  # everything but the active segment
    assert log.segment_base_offsets() == [12]
    assert [r.offset for r in all_records(log)] == [12, 13, 14, 15]
    assert OffsetCheckpoint(tmp_path / "t-0" / LOG_START_OFFSET_CHECKPOINT).read() == \
        {"t-0": 12}
    log.close()


def test_retention_by_bytes_and_the_high_watermark(tmp_path):
    batch = simple_batch(2)
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 2 * len(batch),
                                        "retention.bytes": 3 * len(batch),
                                        "retention.ms": -1})
    for _ in range(8):
        log.append(batch)
    assert log.segment_base_offsets() == [0, 4, 8, 12]
    assert log.delete_old_segments(high_watermark=5) == 1  # segment 4..7 is above the HW
    assert log.delete_old_segments() == 1
    assert log.segment_base_offsets() == [8, 12]
    assert log.size_in_bytes <= 4 * len(batch)
    log.close()


def test_compact_only_logs_keep_expired_segments(tmp_path):
    clock = FakeClock(T0)
    batch = simple_batch(2)
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": 2 * len(batch),
                                               "retention.ms": 1, "cleanup.policy": "compact"})
    for _ in range(4):
        log.append(batch)
    clock.advance(10_000_000)
    assert log.delete_old_segments() == 0
    log.close()


def test_delete_records_before_moves_the_log_start_offset(tmp_path):
    batch = simple_batch(2)
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 2 * len(batch)})
    for _ in range(6):
        log.append(batch)
    assert log.delete_records_before(5) == 5
    assert log.segment_base_offsets() == [4, 8]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100)
    assert [r.offset for r in all_records(log)] == [5, 6, 7, 8, 9, 10, 11]
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(13)
    log.close()
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 2 * len(batch)})
    assert log.log_start_offset == 5
    log.close()


# -- flushing ----------------------------------------------------------------------------------

def checkpointed_recovery_point(path):
    return OffsetCheckpoint(path / RECOVERY_POINT_CHECKPOINT).read()["t-0"]


def test_flush_messages_moves_the_recovery_point(tmp_path):
    log = open_log(tmp_path / "t-0", **{"flush.messages": 5})
    log.append(simple_batch(3))
    assert log.unflushed_messages == 3
    assert checkpointed_recovery_point(tmp_path / "t-0") == 0
    log.append(simple_batch(3))
    assert log.unflushed_messages == 0
    assert checkpointed_recovery_point(tmp_path / "t-0") == 6
    log.close()


def test_flush_ms_with_a_fake_clock(tmp_path):
    clock = FakeClock(T0)
    log = open_log(tmp_path / "t-0", clock, **{"flush.ms": 1000})
    log.append(simple_batch(2))
    assert log.recovery_point == 0
    assert not log.flush_if_due()
    clock.advance(1000)
    assert log.flush_if_due()
    assert checkpointed_recovery_point(tmp_path / "t-0") == 2
    log.append(simple_batch(1))
    clock.advance(1000)
    log.append(simple_batch(1))  # the append itself notices flush.ms has passed
    assert checkpointed_recovery_point(tmp_path / "t-0") == 4
    log.close()


def test_explicit_flush_and_default_policy_never_flushes_on_append(tmp_path):
    clock = FakeClock(T0)
    log = open_log(tmp_path / "t-0", clock)
    for _ in range(10):
        log.append(simple_batch(2))
        clock.advance(60_000)
    assert log.recovery_point == 0 and log.unflushed_messages == 20
    log.flush()
    assert checkpointed_recovery_point(tmp_path / "t-0") == 20
    log.close()


# -- open / close --------------------------------------------------------------------------------

def test_close_twice_and_use_after_close(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(simple_batch(1))
    log.close()
    log.close()
    with pytest.raises(Exception, match="closed"):
        log.append(simple_batch(1))


def test_abandon_writes_nothing_and_the_next_open_recovers(tmp_path):
    log = open_log(tmp_path / "t-0", **{"index.interval.bytes": 1})
    for n in range(5):
        log.append(simple_batch(1 + n))
    expected = log.read(0, 1 << 20)
    files = {name: (tmp_path / "t-0" / name).read_bytes()
             for name in os.listdir(tmp_path / "t-0")}
    log.abandon()
    log.abandon()
    with pytest.raises(Exception, match="closed"):
        log.append(simple_batch(1))
    # no flush of the index entries, no checkpoint, no clean-shutdown marker
    assert {name: (tmp_path / "t-0" / name).read_bytes()
            for name in os.listdir(tmp_path / "t-0")} == files
    log = open_log(tmp_path / "t-0")
    assert not log.recovery.clean_shutdown
    assert log.log_end_offset == 15 and log.read(0, 1 << 20) == expected
    log.close()


def test_delete_removes_the_directory(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(simple_batch(1))
    log.delete()
    log.delete()
    assert not (tmp_path / "t-0").exists()


def test_compacted_log_refuses_records_without_a_key(tmp_path):
    log = open_log(tmp_path / "t-0", **{"cleanup.policy": "compact"})
    with pytest.raises(InvalidRecordError, match="no key"):
        log.append(make_batch([(T0, b"k", b"v"), (T0, None, b"v")]))
    assert log.append(make_batch([(T0, b"k", b"v")])) == (0, 0)
    log.close()


# -- random operations against a model ---------------------------------------------------------

# RANDOM_OPS_SEEDS=200 runs a longer search.
@pytest.mark.parametrize("seed", range(int(os.environ.get("RANDOM_OPS_SEEDS", 4))))
def test_random_operations_match_a_model(tmp_path, seed):
    """Appends, reads, rolls, truncations, DeleteRecords, flushes, clean reopens and
    crashes in a random order; after each step the log must agree with a list of batches."""
    rng = random.Random(seed)
    config = {"segment.bytes": 1500, "index.interval.bytes": rng.choice([0, 90, 400])}
    path = tmp_path / "t-0"
    log = open_log(path, **config)
    model = []  # [(base_offset, [(offset, timestamp), ...])]
    start = 0
    now = T0
    for step in range(300):
        op = rng.random()
        if op < 0.45:
            count = rng.randint(1, 5)
            records = []
            for _ in range(count):
                now += rng.randint(-5, 30)
                records.append((now, b"k%d" % rng.randrange(5), b"v" * rng.randint(0, 40)))
            before = log.log_end_offset
            if model:
                assert before == model[-1][1][-1][0] + 1
            assert log.append(make_batch(records)) == (before, before + count - 1)
            first = before
            model.append((first, [(first + i, ts) for i, (ts, _, _) in enumerate(records)]))
        elif op < 0.6 and log.log_end_offset > start:
            offset = rng.randrange(start, log.log_end_offset)
            data = log.read(offset, rng.choice([1, 300, 5000]))
            header = BatchHeader(data)
            base, records = next(b for b in model if b[1][-1][0] >= offset)
            assert (header.base_offset, header.last_offset) == (base, records[-1][0])
        elif op < 0.67 and model:
            target = rng.randrange(start, log.log_end_offset + 1)
            log.truncate_to(target)
            kept = [b for b in model if b[1][-1][0] < target]
            cut = next((b for b in model if b[1][-1][0] >= target), None)
            model = kept
            expected_end = target if cut is None else min(target, cut[0])
            assert log.log_end_offset == expected_end
            start = min(start, log.log_end_offset)
        elif op < 0.72:
            log.roll()
        elif op < 0.77 and log.log_end_offset > start:
            start = log.delete_records_before(rng.randrange(start, log.log_end_offset + 1))
        elif op < 0.82:
            log.flush()
        elif op < 0.9:
            log.close()
            log = open_log(path, **config)
        elif op < 0.95:
            crash(log)
            log = open_log(path, **config)
            assert log.recovery.bytes_dropped == 0
        else:
            target = rng.randint(T0 - 10, now + 10)
            candidates = [o for _, records in model for o, ts in records
                          if ts >= target and o >= start]
            assert log.offset_for_timestamp(target) == (candidates[0] if candidates else None)
        assert log.log_start_offset == start
        expected = [o for _, records in model for o, _ in records if o >= start]
        if step % 25 == 0 or op >= 0.82:
            assert [r.offset for r in all_records(log)] == expected
    log.close()


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_zip_bomb_is_refused_on_append_to_a_compacted_log_without_inflating(tmp_path, codec):
    """Appending to a compacted log decodes the records (every one needs a key): a
    CRC-valid one-record batch inflating to 16 MiB is decompressed to at most
    max.message.bytes, and refused, naming offset, codec and limit; nothing is appended."""
    log = open_log(tmp_path / "t-0", **{"cleanup.policy": "compact"})
    bomb = bomb_batch(codec)
    assert len(bomb) < log.config.max_message_bytes
    peak, raised = peak_memory(lambda: log.append(bomb))
    assert isinstance(raised, CorruptRecordError), raised
    assert f"batch at offset 0: {CODEC_NAMES[codec]}: " in str(raised)
    assert f"inflate past the limit of {log.config.max_message_bytes} bytes" in str(raised)
    assert peak < 8 * 1024 * 1024 < INFLATED
    assert (log.log_end_offset, log.size_in_bytes) == (0, 0)
    log.close()


@pytest.mark.parametrize("codec", [1, 4])
def test_a_zip_bomb_met_by_a_timestamp_lookup_is_not_inflated(tmp_path, codec):
    log = open_log(tmp_path / "t-0")
    log.append(bomb_batch(codec))  # a log that is not compacted does not decode records
    peak, raised = peak_memory(lambda: log.offset_for_timestamp(T0))
    assert isinstance(raised, CorruptRecordError), raised
    assert f"inflate past the limit of {log.config.max_message_bytes} bytes" in str(raised)
    assert peak < 8 * 1024 * 1024 < INFLATED
    log.close()


# -- closing many logs together -----------------------------------------------------------------

def _written_logs(tmp_path, count):
    logs = []
    for n in range(count):
        log = open_log(tmp_path / f"t-{n}", **{"segment.bytes": 2000,
                                               "index.interval.bytes": 150})
        for _ in range(12):
            log.append(simple_batch(3), leader_epoch=n % 3)
        log._complete_pending_flushes(wait=True)  # the rolls' background fsyncs are done
        logs.append(log)
    return logs


def test_close_together_leaves_every_log_clean_with_its_checkpoints(tmp_path, monkeypatch):
    logs = _written_logs(tmp_path, 5)
    expected = [(log.log_end_offset, all_records(log)) for log in logs]
    syncs = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda fd, real=real: syncs.append(fd) or real(fd))
    assert close_together(logs, tmp_path) == []
    monkeypatch.undo()
    assert syncs == []  # two syncfs stand for every fsync of the five closes
    for log, (end, records) in zip(logs, expected):
        assert (OffsetCheckpoint(os.path.join(log.path, RECOVERY_POINT_CHECKPOINT)).read()
                == {os.path.basename(log.path): end})
        again = open_log(log.path, **{"segment.bytes": 2000, "index.interval.bytes": 150})
        assert again.recovery.clean_shutdown and again.recovery.segments_recovered == 0
        assert again.log_end_offset == end and all_records(again) == records
        assert again.leader_epoch_cache.latest_epoch == logs.index(log) % 3
        again.close()


def test_close_together_marks_nothing_when_the_sync_fails(tmp_path, monkeypatch):
    logs = _written_logs(tmp_path, 3)
    expected = [all_records(log) for log in logs]

    def failing(path):
        raise OSError(5, "syncfs: Input/output error", os.fspath(path))
    monkeypatch.setattr(segments_log, "sync_filesystem", failing)
    with pytest.raises(OSError, match="Input/output error"):
        close_together(logs, tmp_path)
    for log, records in zip(logs, expected):
        assert not os.path.exists(os.path.join(log.path, CLEAN_SHUTDOWN_MARKER))
        again = open_log(log.path, **{"segment.bytes": 2000, "index.interval.bytes": 150})
        assert not again.recovery.clean_shutdown  # recovered, as after a crash
        assert all_records(again) == records
        again.close()
