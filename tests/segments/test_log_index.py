"""OffsetIndex and TimeIndex: binary-search lookups, truncation, files, sanity checks;
and the chunked batch reader recovery uses."""
from __future__ import annotations

import os
import random

import pytest

from segments.index import NO_TIMESTAMP, CorruptIndexError, OffsetIndex, TimeIndex
from segments.segment import iter_file_batches
from tests.segments.helpers import file_batches, open_log, simple_batch

BASE = 1000


def filled_offset_index(path, count=200, seed=1):
    rng = random.Random(seed)
    index = OffsetIndex(path, BASE, 1 << 20)
    entries = []
    offset, position = BASE, 0
    for _ in range(count):
        offset += rng.randint(1, 9)
        position += rng.randint(1, 500)
        index.append(offset, position)
        entries.append((offset, position))
    return index, entries


def test_offset_index_lookups_match_a_scan(tmp_path):
    index, entries = filled_offset_index(tmp_path / "a.index")
    for target in range(BASE - 3, entries[-1][0] + 5):
        below = [e for e in entries if e[0] <= target]
        assert index.lookup(target) == (below[-1] if below else (BASE, 0))
    for target in range(0, entries[-1][1] + 5, 7):
        below = [e for e in entries if e[1] <= target]
        n = index.search(1, target)
        assert (n, index.entry(n) if n >= 0 else None) == (
            (len(below) - 1, (below[-1][0] - BASE, below[-1][1])) if below else (-1, None))
    assert index.last_entry() == entries[-1]


def test_offset_index_refuses_entries_that_do_not_grow(tmp_path):
    index = OffsetIndex(tmp_path / "a.index", BASE, 24)
    index.append(BASE + 5, 100)
    with pytest.raises(ValueError, match="does not follow"):
        index.append(BASE + 5, 200)
    with pytest.raises(ValueError, match="outside"):
        index.append(BASE - 1, 300)
    index.append(BASE + 6, 200)
    index.append(BASE + 7, 300)
    assert index.is_full()
    with pytest.raises(ValueError, match="full"):
        index.append(BASE + 8, 400)


def test_flush_truncate_and_reopen(tmp_path):
    path = tmp_path / "a.index"
    index, entries = filled_offset_index(path, count=50)
    assert os.path.getsize(path) == 0  # entries reach the file at flush
    index.flush()
    assert os.path.getsize(path) == 50 * 8
    index.truncate_to(entries[30][0])
    assert index.entries == 30 and os.path.getsize(path) == 30 * 8
    index.make_immutable()
    reopened = OffsetIndex(path, BASE, 1 << 20, mutable=False)
    assert reopened.entries == 30
    assert reopened.lookup(entries[29][0] + 1) == entries[29]
    reopened.sanity_check(log_size=10 ** 9)
    with pytest.raises(CorruptIndexError, match="outside the segment"):
        reopened.sanity_check(log_size=entries[29][1])
    reopened.close()
    index.close()


def test_sanity_check_catches_a_torn_file(tmp_path):
    path = tmp_path / "a.index"
    index, _ = filled_offset_index(path, count=5)
    index.close()
    with open(path, "ab") as f:
        f.write(b"\x00\x01\x02")
    with pytest.raises(CorruptIndexError, match="not a multiple"):
        OffsetIndex(path, BASE, 1 << 20, mutable=False).sanity_check(10 ** 9)
    mutable = OffsetIndex(path, BASE, 1 << 20)  # loading it for appends drops the tail
    assert mutable.entries == 5 and os.path.getsize(path) == 40
    mutable.close()


def test_time_index_keeps_only_growing_timestamps(tmp_path):
    index = TimeIndex(tmp_path / "a.timeindex", BASE, 1 << 20)
    assert index.last_entry() == (NO_TIMESTAMP, BASE)
    index.maybe_append(NO_TIMESTAMP, BASE)
    assert index.entries == 0
    index.maybe_append(50, BASE + 1)
    index.maybe_append(40, BASE + 2)  # not larger: skipped
    index.maybe_append(50, BASE + 3)
    index.maybe_append(70, BASE + 9)
    assert index.entries == 2
    assert index.search(0, 49) == -1
    assert index.search(0, 50) == index.search(0, 69) == 0 and index.entry(0) == (50, 1)
    assert index.search(0, 10 ** 15) == 1 and index.entry(1) == (70, 9)
    index.truncate_to(BASE + 9)
    assert index.last_entry() == (50, BASE + 1)
    with pytest.raises(ValueError, match="below"):
        index.maybe_append(60, BASE)
    index.close()


def test_chunked_batch_reader_handles_batches_larger_than_its_buffer(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    with open(path, "wb") as f:
        for n in range(12):
            f.write(simple_batch(1 + n % 4, value_size=40 + 30 * n))
        f.write(b"\x00\x00\x00")  # a torn tail
    expected = [(p, h.size_in_bytes) for p, h in file_batches(path)]
    fd = os.open(path, os.O_RDONLY)
    try:
        seen = [(p, len(v)) for p, v in iter_file_batches(fd, 0, os.path.getsize(path),
                                                          chunk_size=64)]
    finally:
        os.close(fd)
    assert seen[:-1] == expected
    assert seen[-1] == (expected[-1][0] + expected[-1][1], 3)  # the tail, for the caller


def test_a_lookup_past_the_last_appends_start_reads_from_there(tmp_path):
    """A follower's fetch completed by an append reads from the offset the append
    started at: found from that append's position, not by a scan from an index entry;
    a lookup below it, and one after a truncation, still scan (and find the same)."""
    log = open_log(str(tmp_path / "p-0"), **{"index.interval.bytes": 1 << 20})
    try:
        for _ in range(40):
            log.append(bytearray(simple_batch(1)))
        segment = log.segments[-1]
        starts = []
        headers = segment.headers

        def counted(position, end=None):
            starts.append(position)
            return headers(position, end)
        segment.headers = counted
        last = segment.translate_offset(39)
        assert (last.base_offset, starts) == (39, [last.position])
        starts.clear()
        assert segment.translate_offset(20).base_offset == 20
        assert starts == [0]  # below the last append: the (empty) index, a scan from 0
        log.truncate_to(30)
        starts.clear()
        assert segment.translate_offset(29).base_offset == 29
        assert starts == [0]
        log.append(bytearray(simple_batch(2)))
        starts.clear()
        assert segment.translate_offset(31).base_offset == 30
        assert len(starts) == 1 and starts[0] > 0
    finally:
        log.close()
