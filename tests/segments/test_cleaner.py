"""Log compaction: last record per key, tombstones, offsets kept, crash-safe swaps."""
from __future__ import annotations

import os
import random

import pytest
from crc32c import crc32c

from segments.checkpoint import OffsetCheckpoint, fsync_directory
from segments.cleaner import CLEANER_OFFSET_CHECKPOINT, clean
from segments.errors import CorruptRecordError
from segments.log import PartitionLog
from segments.record import batch_descriptor as d
from segments.record.batch_header import BatchHeader
from segments.record.compression import CODEC_NAMES
from segments.record.records import iter_records
from segments.segment import SWAP_SUFFIX
from tests.segments.helpers import all_records, batches_of, crash, make_batch, open_log
from tests.support.clock import T0, FakeClock
from tests.support.zip_bomb import INFLATED, bomb_batch, peak_memory

COMPACT = {"cleanup.policy": "compact", "segment.bytes": 2000,
           "index.interval.bytes": 200, "delete.retention.ms": 60_000}


def fill(log, rng, batches, keys=8, codec=0, tombstone_every=0, clock=None):
    """Append random keyed records; return the expected {key: (offset, value)} of the
    last record per key and the list of all (offset, key, value)."""
    written = []
    for _ in range(batches):
        records = []
        for _ in range(rng.randint(1, 4)):
            key = b"key-%d" % rng.randrange(keys)
            value = None if tombstone_every and rng.randrange(tombstone_every) == 0 else \
                b"value-%d" % rng.randrange(10 ** 6)
            records.append((clock() if clock else T0, key, value))
        first, _ = log.append(make_batch(records, compression=codec))
        written.extend((first + i, key, value) for i, (_, key, value) in enumerate(records))
    last = {}
    for offset, key, value in written:
        last[key] = (offset, value)
    return last, written


def expected_after_cleaning(written, cleaned_below, drop_tombstones):
    """What must remain: below ``cleaned_below`` only the last record per key (minus
    expired tombstones); everything at or above it untouched."""
    last = {}
    for offset, key, _ in written:
        if offset < cleaned_below:
            last[key] = offset
    keep = []
    for offset, key, value in written:
        if offset >= cleaned_below or (
                last[key] == offset and not (value is None and drop_tombstones)):
            keep.append((offset, key, value))
    return keep


@pytest.mark.parametrize("codec", [0, 1, 3, 4])
def test_compaction_keeps_the_last_record_per_key_with_its_offset(tmp_path, codec):
    rng = random.Random(codec)
    log = open_log(tmp_path / "t-0", **COMPACT)
    _, written = fill(log, rng, 120, codec=codec)
    active_base = log.active_segment.base_offset
    active_bytes = open(log.active_segment.log_path, "rb").read()
    segments_before = len(log.segments)

    stats = clean(log, force=True)

    assert stats.end_offset == active_base
    assert stats.records_retained < stats.records_read
    assert len(log.segments) < segments_before
    remaining = [(r.offset, r.key, r.value) for r in all_records(log)]
    assert remaining == expected_after_cleaning(written, active_base, drop_tombstones=False)
    # the active segment is untouched, byte for byte
    assert log.active_segment.base_offset == active_base
    assert open(log.active_segment.log_path, "rb").read() == active_bytes
    # cleaned batches are valid, keep their codec, base and last offsets
    for segment in log.segments[:-1]:
        data = open(segment.log_path, "rb").read()
        for header in batches_of(data):
            header.validate()
            assert header.compression_type == codec
    assert log.log_end_offset == written[-1][0] + 1
    log.close()


def test_cleaned_log_survives_reopen_and_reads_by_offset(tmp_path):
    rng = random.Random(11)
    log = open_log(tmp_path / "t-0", **COMPACT)
    _, written = fill(log, rng, 100)
    cleaned_below = log.active_segment.base_offset
    clean(log, force=True)
    before = [(r.offset, r.key, r.value) for r in all_records(log)]
    log.close()
    log = open_log(tmp_path / "t-0", **COMPACT)
    assert [(r.offset, r.key, r.value) for r in all_records(log)] == before
    # reading at an offset removed by compaction gives the next surviving batch
    survivors = [o for o, _, _ in before]
    gap = next(o for o in range(cleaned_below) if o not in survivors)
    data = log.read(gap, 1)
    assert BatchHeader(data).last_offset >= gap
    assert all(r.offset > gap for r in iter_records(data))
    log.close()


def test_tombstones_go_after_delete_retention_ms(tmp_path):
    clock = FakeClock(T0)
    log = open_log(tmp_path / "t-0", clock, **COMPACT)
    log.append(make_batch([(T0, b"a", b"1"), (T0, b"b", b"1")]))
    log.append(make_batch([(T0 + 10, b"a", None)]))  # delete a
    log.roll()
    log.append(make_batch([(T0 + 20, b"c", b"1")]))
    log.roll()
    log.append(make_batch([(T0 + 30, b"z", b"1")]))  # active segment

    clock.now = T0 + 30_000  # within delete.retention.ms: the tombstone stays
    clean(log, force=True)
    assert [(r.offset, r.key, r.value) for r in all_records(log)] == \
        [(1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1"), (4, b"z", b"1")]

    # The first pass merged segments 0 and 1; the tombstone goes once that segment's
    # newest record (T0 + 20) is older than delete.retention.ms. Offsets stay.
    clock.now = T0 + 20 + 60_000
    assert clean(log, force=True).tombstones_removed == 0
    clock.now = T0 + 20 + 60_001
    stats = clean(log, force=True)
    assert stats.tombstones_removed == 1
    assert [(r.offset, r.key, r.value) for r in all_records(log)] == \
        [(1, b"b", b"1"), (3, b"c", b"1"), (4, b"z", b"1")]
    log.close()


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path):
    clock = FakeClock(T0 + 5500)
    log = open_log(tmp_path / "t-0", clock, **dict(COMPACT, **{"min.compaction.lag.ms": 5000}))
    log.append(make_batch([(T0, b"a", b"1")]))
    log.roll()
    log.append(make_batch([(T0 + 4000, b"a", b"2")]))
    log.roll()
    log.append(make_batch([(T0 + 4000, b"z", b"1")]))
    stats = clean(log, force=True)  # only segment 0 is older than the lag
    assert stats.end_offset == 1 and stats.records_read == 0  # it had nothing to drop
    assert [r.value for r in all_records(log)] == [b"1", b"2", b"1"]
    clock.now = T0 + 10_000
    clean(log, force=True)
    assert [(r.offset, r.value) for r in all_records(log)] == [(1, b"2"), (2, b"1")]
    log.close()


def test_dirty_ratio_checkpoint_and_policy(tmp_path):
    rng = random.Random(2)
    log = open_log(tmp_path / "t-0", **COMPACT)
    fill(log, rng, 80)
    assert clean(log) is not None  # everything is dirty the first time
    end = OffsetCheckpoint(tmp_path / "t-0" / CLEANER_OFFSET_CHECKPOINT).read()["t-0"]
    assert end == log.active_segment.base_offset
    assert clean(log) is None  # nothing new is dirty
    log.close()
    plain = open_log(tmp_path / "t-1", **{"segment.bytes": 2000})
    fill(plain, rng, 30)
    assert clean(plain, force=True) is None  # cleanup.policy=delete: no compaction
    plain.close()


def test_the_last_stable_offset_bounds_the_cleanable_range(tmp_path):
    log = open_log(tmp_path / "t-0", **COMPACT)
    for n in range(3):
        log.append(make_batch([(T0, b"a", b"%d" % n)]))
        log.roll()
    stats = clean(log, last_stable_offset=1, force=True)
    assert stats.end_offset == 1
    assert [r.value for r in all_records(log)] == [b"0", b"1", b"2"]
    log.close()


# -- crash safety of the swap --------------------------------------------------------------

def compacted_log(path):
    rng = random.Random(4)
    log = open_log(path, **COMPACT)
    _, written = fill(log, rng, 80)
    return log, written, log.active_segment.base_offset


def test_crash_before_the_swap_keeps_the_old_segments(tmp_path, monkeypatch):
    path = tmp_path / "t-0"
    log, written, active_base = compacted_log(path)
    before = [(r.offset, r.key, r.value) for r in all_records(log)]

    def crash_at_commit(self, cleaned, old_segments):
        cleaned.seal()
        raise SystemExit("simulated crash before .cleaned becomes .swap")

    monkeypatch.setattr(PartitionLog, "replace_segments", crash_at_commit)
    with pytest.raises(SystemExit):
        clean(log, force=True)
    monkeypatch.undo()
    crash(log)
    (path / "00000000000000000000.log.cleaned").write_bytes(b"partial")
    log = open_log(path, **COMPACT)
    assert not [n for n in os.listdir(path) if n.endswith(".cleaned")]
    assert [(r.offset, r.key, r.value) for r in all_records(log)] == before
    log.close()


@pytest.mark.parametrize("step", ["after-swap-rename", "after-deleting-old"])
def test_crash_after_the_swap_is_completed_on_open(tmp_path, monkeypatch, step):
    path = tmp_path / "t-0"
    log, written, active_base = compacted_log(path)
    original = PartitionLog.replace_segments

    def crash_midway(self, cleaned, old_segments):
        cleaned.seal()
        cleaned.rename_suffix(SWAP_SUFFIX)
        fsync_directory(self.path)
        if step == "after-deleting-old":
            for segment in old_segments[1:]:
                segment.delete()
        raise SystemExit("simulated crash")

    monkeypatch.setattr(PartitionLog, "replace_segments", crash_midway)
    with pytest.raises(SystemExit):
        clean(log, force=True)
    monkeypatch.setattr(PartitionLog, "replace_segments", original)
    crash(log)
    assert [n for n in os.listdir(path) if n.endswith(".swap")]
    log = open_log(path, **COMPACT)
    assert not [n for n in os.listdir(path) if n.endswith(".swap")]
    remaining = [(r.offset, r.key, r.value) for r in all_records(log)]
    offsets = [o for o, _, _ in remaining]
    assert offsets == sorted(set(offsets))  # no duplicate offsets
    # The first group is compacted; whatever the crash left of the others is intact.
    expected = expected_after_cleaning(written, active_base, drop_tombstones=False)
    assert set(expected) <= set(remaining) <= set(written)
    log.close()


def test_empty_batches_disappear_and_control_batches_stay(tmp_path):
    log = open_log(tmp_path / "t-0", **COMPACT)
    log.append(make_batch([(T0, b"a", b"1"), (T0, b"a", b"2")]))
    control = bytearray(make_batch([(T0, b"\x00\x00\x00\x00", b"marker")]))
    attributes = d.INT16.unpack_from(control, d.ATTRIBUTES_OFFSET)[0] | d.CONTROL_MASK
    d.INT16.pack_into(control, d.ATTRIBUTES_OFFSET, attributes)
    d.UINT32.pack_into(control, d.CRC_OFFSET, crc32c(bytes(control[d.ATTRIBUTES_OFFSET:])))
    log.append(control)
    log.append(make_batch([(T0, b"a", b"3")]))
    log.roll()
    log.append(make_batch([(T0, b"z", b"1")]))
    clean(log, force=True)
    data = open(log.segments[0].log_path, "rb").read()
    headers = list(batches_of(data))
    assert [(h.base_offset, h.last_offset, h.record_count, h.is_control_batch)
            for h in headers] == [(2, 2, 1, True), (3, 3, 1, False)]
    log.close()


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_zip_bomb_in_the_log_stops_the_pass_without_inflating(tmp_path, codec):
    """A CRC-valid batch whose one record inflates to 16 MiB (written while the topic was
    not compacted): the cleaner decompresses at most max.message.bytes of it, raises
    CorruptRecordError naming offset, codec and limit, and leaves the log as it was."""
    path = tmp_path / "t-0"
    log = open_log(path)
    log.append(bomb_batch(codec))
    for n in range(20):
        if n % 10 == 0:
            log.roll()
        log.append(make_batch([(T0 + n, b"k%d" % (n % 3), b"v" * 50)]))
    end, segments = log.log_end_offset, log.segment_base_offsets()
    assert len(segments) > 2
    log.close()
    log = open_log(path, **COMPACT)
    peak, raised = peak_memory(lambda: clean(log, force=True))
    assert isinstance(raised, CorruptRecordError), raised
    limit = log.config.max_message_bytes
    assert f"batch at offset 0: {CODEC_NAMES[codec]}: " in str(raised)
    assert f"inflate past the limit of {limit} bytes" in str(raised)
    assert peak < 8 * 1024 * 1024 < INFLATED
    assert (log.log_end_offset, log.segment_base_offsets()) == (end, segments)
    log.close()
