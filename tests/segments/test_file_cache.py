"""Segment files opened on use through the process's bounded LRU (``segments.file_cache``):
more logs than the open-file limit allows, slices and scans of released segments, pins."""
from __future__ import annotations

import errno
import functools
import random
import resource
import threading

import psutil
import pytest

from segments import cleaner, log as partition_log
from segments.errors import KafkaStorageError
from segments.file_cache import FILES, FILES_PER_SEGMENT
from segments.segment import Segment, iter_file_batches
from tests.segments.helpers import all_records, open_log, records_of, simple_batch
from tests.segments.test_cleaner import COMPACT, expected_after_cleaning, fill
from tests.support.bounds import BOUND


def open_fds():
    return psutil.Process().num_fds()


@pytest.fixture
def cache_of():
    """``cache_of(n)`` bounds the process's cache to ``n`` files for the test."""
    before = FILES.max_open_files

    def resize(n):
        FILES.max_open_files = n
        return FILES
    yield resize
    FILES.max_open_files = before


@pytest.fixture
def file_limit():
    """``file_limit(headroom)`` lowers RLIMIT_NOFILE to the descriptors open now plus
    ``headroom`` for the test (the soft limit only; restored after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    def lower(headroom):
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds() + headroom, hard))
    yield lower
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_more_logs_than_the_file_limit_allows_serve_writes_reads_and_reopen(
        tmp_path, cache_of, file_limit):
    # 100 logs of three files each need 300 descriptors if every file stays open; the
    # process may open only 80 more, the cache keeps at most 30.
    cache_of(30)
    baseline = open_fds()
    file_limit(80)
    logs = [open_log(tmp_path / f"t-{n}") for n in range(100)]
    for n, log in enumerate(logs):
        log.append(simple_batch(3, key_prefix=b"%d-" % n))
    assert open_fds() <= baseline + 30
    for n, log in enumerate(logs):  # every read reopens a released file
        assert [r.key for r in records_of(log.read(0, 1 << 20))] == [
            b"%d-%d" % (n, i) for i in range(3)]
    for log in logs:
        log.close()
    assert open_fds() <= baseline
    logs = [open_log(tmp_path / f"t-{n}") for n in range(100)]  # recovery opens them all
    for log in logs:
        assert log.append(simple_batch(1, key_prefix=b"again-"))[0] == 3
        assert [r.offset for r in all_records(log)] == [0, 1, 2, 3]
    assert open_fds() <= baseline + 30
    for log in logs:
        log.close()


def test_slices_gathered_before_reading_survive_their_segments_being_released(
        tmp_path, cache_of):
    # A fetch takes slices of many segments and copies them afterwards: by then the cache
    # has released most of them, and each read reopens its file.
    cache = cache_of(2 * FILES_PER_SEGMENT)
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 700})
    for n in range(12):
        log.append(simple_batch(5, key_prefix=b"%d-" % n))
    assert len(log.segments) >= 6
    slices = [log.read_slice(offset, 1) for offset in range(0, 60, 5)]
    assert len(cache) <= 2
    released = [s for s in slices if s.segment not in cache]
    assert released
    for n, piece in enumerate(slices):
        buf = bytearray(piece.size)
        assert piece.read_into(buf) == piece.size
        assert [r.key for r in records_of(buf)] == [b"%d-%d" % (n, i) for i in range(5)]
        assert [r.key for r in records_of(piece.tobytes())] == [r.key for r in records_of(buf)]
    log.close()


def test_a_slice_of_a_deleted_released_segment_raises_instead_of_reopening(tmp_path, cache_of):
    cache_of(FILES_PER_SEGMENT)
    log = open_log(tmp_path / "t-0")
    log.append(simple_batch(2))
    piece = log.read_slice(0, 1 << 20)
    other = open_log(tmp_path / "t-1")  # releases t-0's files
    other.append(simple_batch(2))
    assert piece.segment not in FILES
    log.delete()
    with pytest.raises(KafkaStorageError, match="is closed"):
        piece.read_into(bytearray(piece.size))
    other.close()


def test_a_pinned_segment_keeps_its_files_past_the_bound(tmp_path, cache_of):
    cache = cache_of(FILES_PER_SEGMENT)
    first = open_log(tmp_path / "t-0")
    segment = first.active_segment
    with segment.pinned():
        fd = segment.fd
        second = open_log(tmp_path / "t-1")
        assert segment in cache and segment.fd == fd and len(cache) == 2
    third = open_log(tmp_path / "t-2")  # unpinned now: the next open releases it
    assert segment not in cache and len(cache) == 1
    for log in (first, second, third):
        log.close()
    assert len(cache) == 0


def test_compaction_scans_old_segments_while_writing_new_ones_under_a_one_segment_bound(
        tmp_path, cache_of, monkeypatch):
    # Small reads, so that the scan of an old segment holds its descriptor across the
    # writes to the cleaned one (which reopen the cleaned files): the pin keeps it open.
    monkeypatch.setattr(cleaner, "iter_file_batches",
                        functools.partial(iter_file_batches, chunk_size=256))
    cache_of(FILES_PER_SEGMENT)
    log = open_log(tmp_path / "t-0", **COMPACT)
    _, written = fill(log, random.Random(5), 120)
    cleaned_below = log.active_segment.base_offset
    cleaner.clean(log, force=True)
    assert [(r.offset, r.key, r.value) for r in all_records(log)] == expected_after_cleaning(
        written, cleaned_below, drop_tombstones=False)
    log.close()


def test_rolls_while_the_flusher_is_busy_hold_a_bounded_number_of_descriptors(
        tmp_path, cache_of):
    # Each background fsync of a rolled segment holds three descriptors until it runs: a
    # burst of rolls (thousands of partitions reaching segment.ms together) queued one
    # set per roll. Past MAX_BACKGROUND_SYNCS waiting, a roll fsyncs its segment itself.
    cache_of(30)
    gate = threading.Event()
    busy = partition_log._flush_executor().submit(gate.wait, BOUND)
    baseline = open_fds()
    try:
        log = open_log(tmp_path / "t-0", **{"segment.bytes": 700})
        for n in range(300):  # 150 rolls
            log.append(simple_batch(5, key_prefix=b"%d-" % n))
        assert len(log.segments) > 3 * partition_log.MAX_BACKGROUND_SYNCS
        assert open_fds() <= baseline + 30 + 3 * partition_log.MAX_BACKGROUND_SYNCS
    finally:
        gate.set()
        busy.result()
    log.flush()
    assert log.recovery_point == log.log_end_offset == 1500
    assert [r.key for r in all_records(log)] == [
        b"%d-%d" % (n, i) for n in range(300) for i in range(5)]
    log.close()


def test_a_rolled_segment_without_descriptors_for_the_flusher_holds_the_recovery_point(
        tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 700})
    real = Segment.sync_files

    def no_descriptors(segment):
        raise OSError(errno.EMFILE, "Too many open files")
    log.append(simple_batch(5))
    monkeypatch.setattr(Segment, "sync_files", no_descriptors)
    log.append(simple_batch(5))  # rolls: no descriptors for the flusher
    monkeypatch.setattr(Segment, "sync_files", real)
    log.append(simple_batch(5))  # rolls: fsynced in the background
    partition_log._flush_executor().submit(lambda: None).result()  # that fsync is done
    log.append(simple_batch(5))
    assert log.recovery_point == 0  # the first rolled segment is not fsynced yet
    log.flush()
    assert log.recovery_point == log.log_end_offset == 20
    log.close()
