"""The leader-epoch cache (segments.leader_epoch): Kafka's assign rules, OffsetsForLeaderEpoch's
answers (LeaderEpochFileCache.endOffsetFor), trimming, the checkpoint file, its rebuild from the log
when it does not parse, and how PartitionLog keeps it in step with appends, truncation, log start
moves and recovery."""
from __future__ import annotations

import logging
import os

import pytest

from segments.checkpoint import CheckpointFile
from segments.errors import InvalidRecordError, KafkaStorageError
from segments.leader_epoch import LEADER_EPOCH_CHECKPOINT, EpochEntry, LeaderEpochFileCache
from segments.record.batch_header import BatchHeader
from tests.segments.helpers import crash, open_log, simple_batch


def cache_of(tmp_path, *entries):
    cache = LeaderEpochFileCache(tmp_path)
    for epoch, start in entries:
        assert cache.assign(epoch, start)
    return cache


def follower_batches(*specs):
    """Batches as a leader wrote them: ``(base_offset, partitionLeaderEpoch, count)`` each."""
    out = bytearray()
    for base, epoch, count in specs:
        data = bytearray(simple_batch(count))
        BatchHeader(data).stamp(base, epoch)
        out += data
    return bytes(out)


def file_lines(path):
    with open(os.path.join(path, LEADER_EPOCH_CHECKPOINT)) as f:
        return f.read().splitlines()


# -- end_offset_for (Kafka's endOffsetFor) -----------------------------------------------------

ENTRIES = ((1, 0), (3, 100), (5, 250))
LEO = 300


@pytest.mark.parametrize("requested, expected", [
    (5, (5, LEO)),  # the latest epoch: the log end offset
    (3, (3, 250)),  # a known older epoch: the start of the next one
    (1, (1, 100)),
    (4, (3, 250)),  # an unknown epoch between two: the largest lower epoch, next start
    (2, (1, 100)),
    (0, (0, 0)),  # below every entry: the requested epoch, the first start offset
    (6, (-1, -1)),  # newer than every entry
    (-1, (-1, -1)),  # undefined
])
def test_end_offset_for_answers_as_offsets_for_leader_epoch(tmp_path, requested, expected):
    assert cache_of(tmp_path, *ENTRIES).end_offset_for(requested, LEO) == expected


def test_an_empty_cache_answers_undefined(tmp_path):
    assert LeaderEpochFileCache(tmp_path).end_offset_for(0, 10) == (-1, -1)


def test_below_every_entry_when_the_first_does_not_start_at_zero(tmp_path):
    cache = cache_of(tmp_path, (4, 40), (7, 90))
    assert cache.end_offset_for(2, 120) == (2, 40)
    assert cache.end_offset_for(4, 120) == (4, 90)


# -- assign ------------------------------------------------------------------------------------

def test_assign_keeps_epochs_and_offsets_increasing(tmp_path):
    cache = cache_of(tmp_path, (0, 0), (2, 50))
    assert not cache.assign(2, 80)  # the same epoch further on: nothing new
    assert not cache.assign(1, 90)  # an older epoch
    assert not cache.assign(-1, 95)  # no epoch (an unstamped batch)
    assert cache.entries() == [(0, 0), (2, 50)]
    assert cache.latest_epoch == 2
    assert cache.assign(3, 60)
    assert cache.entries() == [(0, 0), (2, 50), (3, 60)]


def test_a_start_below_the_latest_replaces_what_it_overlaps(tmp_path, caplog):
    cache = cache_of(tmp_path, (0, 0), (2, 50), (3, 70))
    with caplog.at_level(logging.WARNING, logger="segments.leader_epoch"):
        assert cache.assign(4, 60)  # Kafka: entries with start >= 60 go
    assert cache.entries() == [(0, 0), (2, 50), (4, 60)]
    assert "replaces [EpochEntry(epoch=3, start_offset=70)]" in caplog.text
    assert cache.assign(4, 55)  # the same epoch, starting lower
    assert cache.entries() == [(0, 0), (2, 50), (4, 55)]
    assert cache.assign(1, 20)  # an older epoch below the latest start
    assert cache.entries() == [(0, 0), (1, 20)]
    assert cache.latest_epoch == 1


# -- trimming ----------------------------------------------------------------------------------

@pytest.mark.parametrize("end, expected", [
    (300, [(1, 0), (3, 100), (5, 250)]),
    (251, [(1, 0), (3, 100), (5, 250)]),
    (250, [(1, 0), (3, 100)]),
    (101, [(1, 0), (3, 100)]),
    (100, [(1, 0)]),
    (0, []),
])
def test_truncate_from_end_drops_epochs_starting_at_or_after_it(tmp_path, end, expected):
    cache = cache_of(tmp_path, *ENTRIES)
    assert cache.truncate_from_end(end) == (expected != list(ENTRIES))
    assert cache.entries() == expected
    assert cache.latest_epoch == (expected[-1][0] if expected else -1)
    assert _reloaded(tmp_path) == expected


def _reloaded(path):
    cache = LeaderEpochFileCache(path)
    assert cache.load()
    return cache.entries()


@pytest.mark.parametrize("start, expected", [
    (0, [(1, 0), (3, 100), (5, 250)]),
    (40, [(1, 40), (3, 100), (5, 250)]),
    (100, [(3, 100), (5, 250)]),
    (180, [(3, 180), (5, 250)]),
    (260, [(5, 260)]),
])
def test_truncate_from_start_keeps_the_epoch_covering_the_new_start(tmp_path, start, expected):
    cache = cache_of(tmp_path, *ENTRIES)
    cache.truncate_from_start(start)
    assert cache.entries() == expected
    assert _reloaded(tmp_path) == expected
    assert cache.latest_epoch == 5


# -- the file ----------------------------------------------------------------------------------

def test_the_checkpoint_is_kafkas_layout_with_the_crc_line(tmp_path):
    cache_of(tmp_path, (0, 0), (1, 100))
    lines = file_lines(tmp_path)
    assert lines[:4] == ["0", "2", "0 0", "1 100"]
    assert len(lines) == 5 and lines[4].startswith("crc32c 0x")
    assert _reloaded(tmp_path) == [EpochEntry(0, 0), EpochEntry(1, 100)]


@pytest.mark.parametrize("body", [
    "1\n1\n0 0\n",  # another version
    "0\n2\n0 0\n",  # the count does not match
    "0\n2\n1 0\n1 5\n",  # epochs do not increase
    "0\n2\n0 5\n1 5\n",  # offsets do not increase
    "0\n1\n-1 0\n",  # a sign
    "0\n1\n0 007\n",  # a leading zero
    "0\n1\n0\n",  # one field
])
def test_a_checkpoint_that_does_not_parse_loads_as_unreadable(tmp_path, body, caplog):
    with open(tmp_path / LEADER_EPOCH_CHECKPOINT, "w") as f:
        f.write(body)
    cache = LeaderEpochFileCache(tmp_path)
    with caplog.at_level(logging.WARNING, logger="segments.leader_epoch"):
        assert not cache.load()
    assert cache.entries() == [] and cache.latest_epoch == -1
    assert LEADER_EPOCH_CHECKPOINT in caplog.text


def test_a_failed_write_is_retried_by_flush(tmp_path, monkeypatch):
    cache = cache_of(tmp_path, (0, 0))

    def fail(self, entries, *args, **kwargs):
        raise OSError(28, "No space left on device")
    with monkeypatch.context() as m:
        m.setattr(CheckpointFile, "write", fail)
        assert cache.assign(1, 10)  # the entry is kept in memory
        assert cache.stale
        with pytest.raises(OSError):
            cache.flush()
    assert _reloaded(tmp_path) == [(0, 0)]
    cache.flush()
    assert not cache.stale and not cache.unsynced
    assert _reloaded(tmp_path) == [(0, 0), (1, 10)]


def test_changes_are_written_at_once_and_made_durable_by_flush(tmp_path, monkeypatch):
    cache = cache_of(tmp_path, (0, 0))
    writes = []
    original = CheckpointFile.write

    def recording(self, entries, durable=True):
        writes.append(durable)
        original(self, entries, durable)
    monkeypatch.setattr(CheckpointFile, "write", recording)
    assert cache.assign(1, 10) and cache.unsynced
    assert writes == [False] and _reloaded(tmp_path) == [(0, 0), (1, 10)]
    cache.flush()
    assert writes == [False, True] and not cache.unsynced
    cache.flush()  # nothing to make durable
    assert writes == [False, True]


def test_recovery_assigns_the_epochs_a_crash_lost_from_the_checkpoint(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path)
    log.append(simple_batch(5), leader_epoch=0)
    log.flush()  # the recovery point (5) and epoch 0 made durable
    log.append(simple_batch(5), leader_epoch=3)
    crash(log)
    cache = LeaderEpochFileCache(path)  # as if the unsynced write of epoch 3 was lost
    cache.load()
    cache._set([(0, 0)])
    cache.persist()
    reopened = open_log(path)
    assert reopened.log_end_offset == 10
    assert reopened.leader_epoch_cache.entries() == [(0, 0), (3, 5)]
    reopened.close()


# -- PartitionLog ------------------------------------------------------------------------------

def test_leader_appends_record_each_new_epoch_once(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0")
    writes = []
    original = CheckpointFile.write
    monkeypatch.setattr(CheckpointFile, "write", lambda self, entries, *args, **kwargs: (
        writes.append(os.path.basename(self.path)), original(self, entries, *args, **kwargs))[1])
    log.append(simple_batch(3), leader_epoch=0)
    log.append(simple_batch(2), leader_epoch=0)
    log.append(simple_batch(4), leader_epoch=2)
    log.append(simple_batch(1), leader_epoch=2)
    log.append(simple_batch(1), leader_epoch=1)  # older: ignored
    log.append(simple_batch(1))  # no epoch
    assert log.leader_epoch_cache.entries() == [(0, 0), (2, 5)]
    assert writes.count(LEADER_EPOCH_CHECKPOINT) == 2  # one write per new epoch, none per batch
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert reopened.leader_epoch_cache.entries() == [(0, 0), (2, 5)]
    reopened.close()


def test_follower_appends_record_the_first_batch_of_each_newer_epoch(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_follower(follower_batches((0, 0, 5), (5, 0, 5), (10, 1, 5)))
    log.append_as_follower(follower_batches((15, 1, 5), (20, 3, 2), (22, 3, 1)))
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 10), (3, 20)]
    log.close()


def test_a_failed_append_records_no_epoch(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_follower(follower_batches((0, 0, 5)))
    with pytest.raises(InvalidRecordError):
        log.append_as_follower(follower_batches((3, 1, 5)))  # below the log end offset
    assert log.leader_epoch_cache.entries() == [(0, 0)]
    log.close()


def test_truncation_and_log_start_moves_trim_the_cache(tmp_path):
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 2000})
    for n in range(16):  # epochs 0, 1, 2, 3 of four 5-record batches each
        log.append_as_follower(follower_batches((n * 5, n // 4, 5)))
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 20), (2, 40), (3, 60)]
    log.truncate_to(47)  # inside the batch at 45: the log ends at 45
    assert log.log_end_offset == 45
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 20), (2, 40)]
    log.truncate_to(40)
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 20)]
    log.delete_records_before(25)
    assert log.leader_epoch_cache.entries() == [(1, 25)]
    log.truncate_fully_and_start_at(100)
    assert log.leader_epoch_cache.entries() == []
    log.close()
    assert _reloaded(tmp_path / "t-0") == []


def test_retention_moves_the_first_entry_to_the_new_log_start(tmp_path):
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 1000, "retention.bytes": 1500})
    log.append(simple_batch(5), leader_epoch=0)
    for _ in range(10):
        log.append(simple_batch(5), leader_epoch=1)
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 5)]
    assert log.delete_old_segments() > 0
    start = log.log_start_offset
    assert start > 5
    assert log.leader_epoch_cache.entries() == [(1, start)]
    log.close()


def test_recovery_trims_the_cache_to_the_recovered_log_end(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path)
    log.append(simple_batch(5), leader_epoch=0)
    log.flush()  # the recovery point: 5
    log.append(simple_batch(5), leader_epoch=1)
    segment = log.active_segment.log_path
    position = log.read_slice(5, 1).position
    crash(log)
    with open(segment, "r+b") as f:  # the epoch-1 batch, past it, torn by the crash
        f.truncate(position + 20)
    reopened = open_log(path)
    assert reopened.log_end_offset == 5
    assert reopened.leader_epoch_cache.entries() == [(0, 0)]
    assert _reloaded(path) == [(0, 0)]
    reopened.close()


@pytest.mark.parametrize("damage", ["garbage", "missing"])
def test_an_unreadable_or_missing_checkpoint_is_rebuilt_from_the_batches(tmp_path, damage,
                                                                         caplog):
    path = tmp_path / "t-0"
    log = open_log(path, **{"segment.bytes": 2000})
    for n in range(16):  # epochs 0, 1, 2, 3 of four 5-record batches each
        log.append_as_follower(follower_batches((n * 5, n // 4, 5)))
    log.delete_records_before(12)
    expected = [(0, 12), (1, 20), (2, 40), (3, 60)]
    assert log.leader_epoch_cache.entries() == expected
    log.close()
    target = path / LEADER_EPOCH_CHECKPOINT
    if damage == "garbage":
        target.write_bytes(b"0\n4\n0 12\n1 20\n2 41\n3 60\ncrc32c 0x00000000\n")
    else:
        target.unlink()
    with caplog.at_level(logging.INFO):
        reopened = open_log(path)
    assert reopened.leader_epoch_cache.entries() == expected
    assert reopened.log_end_offset == 80 and reopened.log_start_offset == 12  # no data lost
    assert _reloaded(path) == expected
    assert "rebuilt from the log" in caplog.text
    reopened.close()


def test_a_new_log_writes_an_empty_checkpoint_and_never_rescans(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0")
    assert file_lines(tmp_path / "t-0")[:2] == ["0", "0"]
    log.append(simple_batch(3))  # no epoch: the cache stays empty
    log.close()

    def rebuild(*args):
        raise AssertionError("rebuilt a cache whose checkpoint is fine")
    monkeypatch.setattr(LeaderEpochFileCache, "rebuild", rebuild)
    reopened = open_log(tmp_path / "t-0")
    assert reopened.leader_epoch_cache.entries() == []
    reopened.close()


def test_a_log_flush_writes_a_checkpoint_whose_write_failed(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0")
    original = CheckpointFile.write

    def full_disk(self, entries, *args, **kwargs):
        if self.path.endswith(LEADER_EPOCH_CHECKPOINT):
            raise OSError(28, "No space left on device")
        original(self, entries, *args, **kwargs)
    with monkeypatch.context() as m:
        m.setattr(CheckpointFile, "write", full_disk)
        assert log.append(simple_batch(2), leader_epoch=3) == (0, 1)  # the append stands
        assert log.leader_epoch_cache.stale
        with pytest.raises(KafkaStorageError, match="No space left"):
            log.flush()
    log.flush()
    assert _reloaded(tmp_path / "t-0") == [(3, 0)]
    log.close()
