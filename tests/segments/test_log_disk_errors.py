"""A disk that fills up or fails under the partition log (tests/support/disk_faults.py).

Every write of an append and of a roll is failed in turn, with ENOSPC and with EIO; after
each failure the log must serve exactly the acknowledged records, agree with what recovery
makes of its files, and take the same append again once the disk works, without
duplicates. Failures that cannot be undone (an fsync, a partial write that cannot be
truncated) take that one log offline until it is reopened.
"""
from __future__ import annotations

import errno
import logging
import os
import re
import shutil

import pytest

from segments.errors import KafkaStorageError
from segments.log import (
    CLEAN_SHUTDOWN_MARKER,
    RECOVERY_POINT_CHECKPOINT,
    PartitionLog,
    _flush_executor,
)
from segments.record.records import iter_records
from segments.segment import Segment
from tests.segments.helpers import all_records, make_batch, open_log
from tests.support.clock import T0
from tests.support.disk_faults import DiskFaults

ERRORS = [errno.ENOSPC, errno.EIO]

LOG_0, LOG_2 = "00000000000000000000.log", "00000000000000000002.log"
CHECKPOINT_TMP = RECOVERY_POINT_CHECKPOINT + ".tmp"


def two_batches(tag):
    """One append of two batches of two records each (so the second batch is indexed)."""
    return b"".join(make_batch([(T0 + 4 * tag + 2 * n + i, b"k", b"%d-%d-%d" % (tag, n, i))
                                for i in range(2)]) for n in range(2))


def setup_append(path):
    """A log that flushes after every append (flush.messages=1): the faulty append writes
    the .log, then its flush writes both indexes and the recovery-point checkpoint."""
    log = open_log(path, **{"flush.messages": 1, "index.interval.bytes": 0})
    log.append(two_batches(0))
    return log, [two_batches(0)]


def setup_roll(path):
    """A log whose every second append rolls, with a rolled segment whose background fsync
    is done but not yet noticed: the faulty append writes the recovery-point checkpoint,
    creates the new segment's three files, writes out the old one's indexes and the
    producer state snapshot at the new base offset (its failure is only logged), then
    writes its batches into the new segment."""
    size = len(two_batches(0))
    log = open_log(path, **{"segment.bytes": size + 10, "index.interval.bytes": 0})
    log.append(two_batches(0))
    log.append(two_batches(1))  # rolls to segment 4
    _flush_executor().submit(lambda: None).result()  # segment 0's fsync is done
    return log, [two_batches(0), two_batches(1)]


#: Every write the faulty append makes, in order: (kind, call, file).
SCENARIOS = {
    "append": (setup_append, [
        ("write", "pwrite", LOG_0),
        ("write", "pwrite", "00000000000000000000.index"),
        ("write", "pwrite", "00000000000000000000.timeindex"),
        ("create", "open", CHECKPOINT_TMP),
        ("write", "write", CHECKPOINT_TMP),
    ]),
    "roll": (setup_roll, [
        ("create", "open", CHECKPOINT_TMP),
        ("write", "write", CHECKPOINT_TMP),
        ("create", "open", "00000000000000000008.log"),
        ("create", "open", "00000000000000000008.index"),
        ("create", "open", "00000000000000000008.timeindex"),
        ("write", "pwrite", "00000000000000000004.index"),
        ("write", "pwrite", "00000000000000000004.timeindex"),
        ("create", "open", "00000000000000000008.snapshot"),
        ("write", "write", "00000000000000000008.snapshot"),
        ("write", "pwrite", "00000000000000000008.log"),
    ]),
}
FAULT_POINTS = [(scenario, at) for scenario, (_, writes) in SCENARIOS.items()
                for at in range(len(writes))]


def served(log):
    return [r.value for r in all_records(log)]


def expected_values(appends):
    return [r.value for data in appends for r in iter_records(data)]


def layout(log):
    """What the log holds in memory per segment: base, size, index entries."""
    return [(s.base_offset, s.size, s.offset_index.entries, s.time_index.entries)
            for s in log.segments]


def recovered_copy(log, tmp_path):
    """Open a copy of the log's files as a crash would leave them (no recovery point,
    no marker: every batch validated and every index rebuilt)."""
    copy = tmp_path / "copy" / os.path.basename(log.path)
    shutil.copytree(log.path, copy)
    for name in (RECOVERY_POINT_CHECKPOINT, CLEAN_SHUTDOWN_MARKER):
        if os.path.exists(copy / name):
            os.unlink(copy / name)
    return PartitionLog(copy, log.config, clock=log.clock)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_fault_points_are_every_write_of_the_append(tmp_path, monkeypatch, scenario):
    setup, writes = SCENARIOS[scenario]
    disk = DiskFaults(monkeypatch, tmp_path / "t-0")
    log, _ = setup(tmp_path / "t-0")
    disk.arm(None)
    log.append(two_batches(9))
    assert disk.seen == writes
    log.close()


@pytest.mark.parametrize("error", ERRORS, ids=errno.errorcode.get)
@pytest.mark.parametrize("scenario, at", FAULT_POINTS)
def test_a_failed_write_leaves_what_the_files_hold_and_a_retry_succeeds(
        tmp_path, monkeypatch, scenario, at, error):
    setup, writes = SCENARIOS[scenario]
    path = tmp_path / "t-0"
    disk = DiskFaults(monkeypatch, path)
    log, acked = setup(path)
    faulty = two_batches(9)
    disk.arm(at, error)
    try:
        log.append(faulty)
    except KafkaStorageError as e:
        failed = e
    else:
        failed = None
        acked.append(faulty)
    assert disk.seen[at] == writes[at] and disk.failing

    if failed is not None:
        assert (failed.errno, failed.retriable, failed.invalid_metadata) == (56, True, True)
        text = str(failed)
        assert "partition t-0" in text and errno.errorcode[error] in text
        assert str(path) in text, f"{text!r} names no file"
    else:  # only the flush after the append may fail without failing it
        assert scenario == "append" and at > 0
    assert log.offline is None
    assert served(log) == expected_values(acked)
    copy = recovered_copy(log, tmp_path)
    assert copy.log_end_offset == log.log_end_offset
    assert layout(copy) == layout(log)
    assert served(copy) == expected_values(acked)
    copy.close()

    disk.clear()
    if failed is not None:
        log.append(faulty)
        acked.append(faulty)
    log.append(two_batches(10))
    acked.append(two_batches(10))
    assert served(log) == expected_values(acked)
    assert [r.offset for r in all_records(log)] == list(range(log.log_end_offset))
    log.close()
    reopened = open_log(path)
    assert served(reopened) == expected_values(acked)
    reopened.close()


def test_a_failed_fsync_takes_only_that_log_offline(tmp_path, monkeypatch, caplog):
    disk = DiskFaults(monkeypatch, tmp_path / "t-0")
    failing = open_log(tmp_path / "t-0", **{"flush.messages": 1})
    other = open_log(tmp_path / "t-1", **{"flush.messages": 1})
    disk.arm(0, errno.EIO, kinds=("sync",))
    with caplog.at_level(logging.ERROR, logger="segments.log"):
        # the batches are in the log when its flush fails: the append stands
        assert failing.append(two_batches(0)) == (0, 3)
    assert failing.offline is not None and "EIO" in failing.offline
    assert any("is offline" in r.getMessage() and "00000000000000000000.log" in r.getMessage()
               for r in caplog.records if r.levelno == logging.ERROR)
    for call in (lambda: failing.append(two_batches(1)), lambda: failing.read(0, 1 << 20),
                 failing.flush):
        with pytest.raises(KafkaStorageError, match="partition t-0 is offline"):
            call()
    assert other.append(two_batches(1)) == (0, 3)  # the other log goes on
    failing.close()
    assert not os.path.exists(tmp_path / "t-0" / CLEAN_SHUTDOWN_MARKER)
    other.close()
    disk.clear()
    reopened = open_log(tmp_path / "t-0")  # a restart recovers it from the files
    assert not reopened.recovery.clean_shutdown
    assert served(reopened) == expected_values([two_batches(0)])
    reopened.close()


def test_a_failed_background_fsync_fails_the_next_append_before_it_writes(tmp_path,
                                                                           monkeypatch):
    size = len(two_batches(0))
    disk = DiskFaults(monkeypatch, tmp_path / "t-0")
    log = open_log(tmp_path / "t-0", **{"segment.bytes": size + 10})
    log.append(two_batches(0))
    disk.arm(0, errno.EIO, kinds=("sync",))
    log.append(two_batches(1))  # rolls; the flusher thread's fsync of segment 0 fails
    _flush_executor().submit(lambda: None).result()
    disk.clear()
    with pytest.raises(KafkaStorageError, match="partition t-0 is offline.*background fsync "
                                                "of rolled segment .*0000.log.*EIO"):
        log.append(two_batches(2))
    assert log.log_end_offset == 8
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert served(reopened) == expected_values([two_batches(0), two_batches(1)])
    reopened.close()


def test_a_partial_write_that_cannot_be_truncated_takes_the_log_offline(tmp_path,
                                                                          monkeypatch):
    disk = DiskFaults(monkeypatch, tmp_path / "t-0")
    log = open_log(tmp_path / "t-0")
    log.append(two_batches(0))
    size = log.active_segment.size
    disk.arm(0, errno.EIO, kinds=("write", "truncate"))
    torn = make_batch([(T0, b"k", b"torn-%d" % i) for i in range(4)])
    with pytest.raises(KafkaStorageError, match="partition t-0 is offline.*append of offsets "
                                                "4..7.*truncating them failed"):
        log.append(torn)  # half of the batch reaches the file
    assert [call for _, call, _ in disk.seen] == ["pwrite", "pwrite", "ftruncate"]
    assert os.path.getsize(log.active_segment.log_path) > size  # the torn bytes stayed
    assert log.log_end_offset == 4
    disk.clear()
    log.close()
    reopened = open_log(tmp_path / "t-0")  # recovery drops the torn batch
    assert reopened.recovery.bytes_dropped > 0
    assert served(reopened) == expected_values([two_batches(0)])
    reopened.close()


def test_a_roll_without_a_descriptor_for_the_flusher_fsyncs_at_the_next_flush(
        tmp_path, monkeypatch):
    def no_descriptors(segment):
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
    size = len(two_batches(0))
    log = open_log(tmp_path / "t-0", **{"segment.bytes": size + 10})
    log.append(two_batches(0))
    monkeypatch.setattr(Segment, "sync_files", no_descriptors)
    log.append(two_batches(1))  # the roll stands; segment 0 is not fsynced yet
    assert log.segment_base_offsets() == [0, 4] and log.segments[0].unflushed
    log.flush()
    assert not log.segments[0].unflushed and log.recovery_point == 8
    log.close()


def test_after_a_failed_roll_a_smaller_append_that_needs_none_is_not_lost(tmp_path,
                                                                           monkeypatch):
    # The case: the roll sealed the old segment, then creating the new one failed;
    # the next, smaller append fitted the old segment, wrote its records and then died on
    # the sealed index (TypeError), so the producer was told "failed" for stored records.
    small = make_batch([(T0, b"k", b"small")])
    big = two_batches(0)
    disk = DiskFaults(monkeypatch, tmp_path / "t-0")
    log = open_log(tmp_path / "t-0", **{"segment.bytes": len(big) + len(small) + 10,
                                        "index.interval.bytes": 0})
    log.append(big)
    disk.arm(0, kinds=("create",))
    with pytest.raises(KafkaStorageError, match="roll to a new segment at offset 4.*ENOSPC"):
        log.append(big)
    disk.clear()
    assert log.append(small) == (4, 4)
    assert log.segment_base_offsets() == [0]
    assert served(log) == expected_values([big, small])
    log.close()


def full_disk_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "segments.disk_full"]


def test_a_full_disk_is_logged_once_with_partition_path_and_free_bytes_and_so_is_its_end(
        tmp_path, monkeypatch, caplog):
    path = tmp_path / "t-0"
    disk = DiskFaults(monkeypatch, path)
    log = open_log(path, **{"flush.messages": 1})
    log.append(two_batches(0))
    disk.arm(0, errno.ENOSPC)
    with caplog.at_level(logging.WARNING, logger="segments.disk_full"):
        for tag in (1, 2, 3):  # a producer retrying against the full disk
            with pytest.raises(KafkaStorageError, match="ENOSPC"):
                log.append(two_batches(tag))
        [full] = full_disk_lines(caplog)
        assert re.fullmatch(
            rf"partition t-0: disk full under {re.escape(str(path))} \(\d+ bytes free\): "
            rf"append of offsets 4\.\.7 failed; appends fail with KAFKA_STORAGE_ERROR until "
            rf"there is space", full), full
        disk.clear()
        assert log.append(two_batches(4)) == (4, 7)
        assert log.append(two_batches(5)) == (8, 11)
        assert re.fullmatch(rf"partition t-0: disk has space again under "
                            rf"{re.escape(str(path))} \(\d+ bytes free\); appends go through",
                            full_disk_lines(caplog)[-1])
        assert len(full_disk_lines(caplog)) == 2
        disk.arm(0, errno.ENOSPC, kinds=("sync",))  # an fsync cannot be undone: offline
        log.append(two_batches(6))
    assert log.offline is not None
    assert full_disk_lines(caplog)[-1].endswith("failed; the log goes offline until the "
                                                "broker restarts")
    assert "partition t-0: disk full under" in full_disk_lines(caplog)[-1]
    log.close()
