"""Appends of large read-only batches (a request's bytes, a view of a ring): only each
batch's header is copied and stamped, the rest goes to the file from the caller's buffer
(``PartitionLog.append``, ``STAMP_HEADS_FROM``). The file must hold what an append of a
stamped copy would have written, the caller's bytes stay as they were, and a failed write
leaves nothing behind."""
from __future__ import annotations

import errno

import pytest

from segments.errors import KafkaStorageError
from segments.log import STAMP_HEADS_FROM, DuplicateAppend
from segments.record.batch_header import BatchHeader
from segments.record.records import RecordBatchBuilder
from tests.segments.helpers import all_records, batches_of, open_log
from tests.support.clock import T0
from tests.support.disk_faults import DiskFaults

VALUE = STAMP_HEADS_FROM // 2 + 1  # two such records make an append above the threshold


def big_batch(tag, count=2, producer_id=-1, sequence=-1):
    builder = RecordBatchBuilder(0, 1 << 20, producer_id=producer_id, producer_epoch=0,
                                 base_sequence=sequence)
    for i in range(count):
        assert builder.append(T0 + i, b"k%d" % i, bytes([65 + tag]) * VALUE) is not None
    return bytes(builder.build())


def stored_headers(log):
    """The BatchHeaders of every batch in the log's file, CRCs checked."""
    headers = []
    offset = 0
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 30)
        for header in batches_of(data):
            header.validate()
            headers.append(header)
            offset = header.next_offset
    return headers


@pytest.mark.parametrize("view", [False, True], ids=["bytes", "readonly-view"])
def test_large_read_only_batches_are_stamped_in_the_file_not_in_the_callers_buffer(
        tmp_path, view):
    log = open_log(tmp_path / "t-0")
    assert log.append(big_batch(0, count=1)) == (0, 0)  # one record: below the threshold
    two = big_batch(1) + big_batch(2, count=3)  # two batches in one append, above it
    assert len(two) >= STAMP_HEADS_FROM
    sent = memoryview(bytearray(two)).toreadonly() if view else two
    assert log.append(sent, leader_epoch=5) == (1, 5)
    assert bytes(sent) == two  # untouched: baseOffset 0, no leader epoch
    assert [(h.base_offset, h.partition_leader_epoch, h.record_count)
            for h in stored_headers(log)] == [(0, -1, 1), (1, 5, 2), (3, 5, 3)]
    assert [(r.offset, r.value[:1]) for r in all_records(log)] == [
        (0, b"A"), (1, b"B"), (2, b"B"), (3, b"C"), (4, b"C"), (5, b"C")]
    assert log.active_segment.size == len(big_batch(0, count=1)) + len(two)
    log.close()
    reopened = open_log(tmp_path / "t-0")  # the index and recovery agree with the file
    assert [r.offset for r in all_records(reopened)] == [0, 1, 2, 3, 4, 5]
    reopened.close()


def test_an_idempotent_large_batch_is_stamped_and_its_retry_is_a_duplicate(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(big_batch(0, count=1))
    batch = big_batch(1, producer_id=42, sequence=0)
    assert log.append(batch) == (1, 2)
    retry = log.append(batch)
    assert retry.__class__ is DuplicateAppend and tuple(retry) == (1, 2)
    assert log.log_end_offset == 3
    [_, stored] = stored_headers(log)
    assert (stored.base_offset, stored.producer_id, stored.base_sequence) == (1, 42, 0)
    assert BatchHeader(batch).base_offset == 0
    log.close()


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO])
def test_a_failed_large_write_appends_nothing_and_the_same_append_succeeds_later(
        tmp_path, monkeypatch, error):
    disk = DiskFaults(monkeypatch, tmp_path / "t-0")
    log = open_log(tmp_path / "t-0")
    log.append(big_batch(0, count=1))
    size = log.active_segment.size
    batch = big_batch(1)
    disk.arm(0, error, kinds=("write",))
    with pytest.raises(KafkaStorageError):
        log.append(batch)  # half of it reaches the file, then it is truncated away
    assert disk.seen[0][1] == "pwritev"
    assert log.log_end_offset == 1 and log.active_segment.size == size
    disk.clear()
    assert log.append(batch) == (1, 2)
    assert [r.offset for r in all_records(log)] == [0, 1, 2]
    log.close()
