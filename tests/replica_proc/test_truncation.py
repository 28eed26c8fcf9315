"""The follower's truncation decisions (replica_proc.truncation): the epoch rule (KIP-101/KIP-279)
and OFFSET_OUT_OF_RANGE (fetchOffsetAndTruncate) as tables, the KIP-279 rounds, and the
divergence scenario played on two real logs whose epoch
caches answer for leader and follower."""
from __future__ import annotations

import pytest

from replica_proc.truncation import (
    AskAgain,
    Truncate,
    TruncateFully,
    after_epoch_answer,
    after_out_of_range,
    first_step,
)
from segments.leader_epoch import LeaderEpochFileCache
from segments.log import PartitionLog
from segments.record.batch_header import BatchHeader
from tests.support.broker import batch


def cache_of(tmp_path, *entries):
    cache = LeaderEpochFileCache(tmp_path)
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


# -- by epochs (KIP-101/KIP-279) ---------------------------------------------------------------

FOLLOWER = ((0, 0), (2, 100), (4, 200))  # follower's cache; its LEO 250, HW 90


@pytest.mark.parametrize("leader_answer, expected", [
    # the leader knows no such epoch / has no cache: the high watermark
    ((-1, -1), Truncate(90)),
    # an epoch the follower has: min(leader's end, own end of that epoch)
    ((4, 230), Truncate(230)),  # the follower's own end is its LEO, 250
    ((4, 260), Truncate(250)),  # never past the follower's LEO
    ((2, 150), Truncate(150)),
    ((2, 180), Truncate(180)),
    ((2, 210), Truncate(200)),  # own end of epoch 2 is where epoch 4 starts
    ((0, 100), Truncate(100)),
    ((0, 40), Truncate(40)),
    # an epoch the follower lacks: own end of the largest lower epoch, then ask again
    ((3, 240), AskAgain(200, 2)),
    ((1, 70), AskAgain(100, 0)),
])
def test_after_epoch_answer(tmp_path, leader_answer, expected):
    cache = cache_of(tmp_path, *FOLLOWER)
    assert after_epoch_answer(cache, 250, 90, *leader_answer) == expected


def test_without_a_cache_the_leaders_end_offset_wins(tmp_path):
    empty = LeaderEpochFileCache(tmp_path / "empty")  # a log from before epochs were kept
    assert after_epoch_answer(empty, 120, 10, 1, 70) == Truncate(70)
    assert after_epoch_answer(empty, 120, 10, 1, 170) == Truncate(120)


def test_an_epoch_below_every_entry_ends_where_the_first_starts(tmp_path):
    cache = cache_of(tmp_path, (3, 50))  # epochs 0-2 never reached this replica
    assert after_epoch_answer(cache, 120, 10, 1, 70) == Truncate(50)
    assert after_epoch_answer(cache, 120, 10, 1, 30) == Truncate(30)


def test_first_step_asks_for_the_latest_epoch_or_truncates_to_the_hw(tmp_path):
    assert first_step(cache_of(tmp_path, *FOLLOWER), 250, 90) == AskAgain(250, 4)
    empty = LeaderEpochFileCache(tmp_path / "empty")
    assert first_step(empty, 250, 90) == Truncate(90)
    assert first_step(empty, 50, 90) == Truncate(50)


def test_kip_279_rounds_converge_on_the_common_prefix(tmp_path):
    """The follower led epoch 2 briefly (offsets 100-149 never replicated); the leader's
    history is epochs 0, 1 (from 80) and 3 (from 120)."""
    leader = cache_of(tmp_path / "leader", (0, 0), (1, 80), (3, 120))
    follower = cache_of(tmp_path / "follower", (0, 0), (2, 100))
    leo = 150
    step = first_step(follower, leo, 60)
    rounds = [step]
    while isinstance(step, AskAgain):
        follower.truncate_from_end(step.offset)  # what truncate_to does to the cache
        leo = min(leo, step.offset)
        step = after_epoch_answer(follower, leo, 60, *leader.end_offset_for(step.epoch, 200))
        rounds.append(step)
    assert rounds == [AskAgain(150, 2), AskAgain(100, 0), Truncate(80)]


# -- OFFSET_OUT_OF_RANGE (fetchOffsetAndTruncate) ----------------------------------------------

@pytest.mark.parametrize("follower_leo, leader_leo, leader_start, expected", [
    (150, 120, 0, Truncate(120)),  # the leader's log is shorter: truncate to its end
    (150, 120, 130, Truncate(120)),
    (50, 300, 100, TruncateFully(100)),  # the follower is below the leader's log start
    (100, 300, 100, Truncate(100)),  # in range again: fetch on from the LEO
    (150, 150, 0, Truncate(150)),
])
def test_after_out_of_range(follower_leo, leader_leo, leader_start, expected):
    assert after_out_of_range(follower_leo, leader_leo, leader_start) == expected


# -- divergence --------------------------------------------------------------------------------

def copy(source, target, start):
    """Replicate ``source``'s batches from ``start`` into ``target`` as a follower."""
    while start < source.log_end_offset:
        data = source.read(start, 1 << 20)
        target.append_as_follower(data)
        start = target.log_end_offset


def batch_headers(log):
    data = log.read(log.log_start_offset, 1 << 30)
    out, position = [], 0
    while position < len(data):
        header = BatchHeader(data, position)
        out.append((header.base_offset, header.partition_leader_epoch, header.crc))
        position += header.size_in_bytes
    return out


def test_s4_divergence_leaves_a_with_bs_batches_and_epochs(tmp_path):
    """Offsets 0-99 replicated in epoch 0; A (leader) takes 50 acks=1 records and dies; B
    leads in epoch 1 and takes 50; A returns as a follower of B."""
    a = PartitionLog(tmp_path / "a" / "t-0")
    b = PartitionLog(tmp_path / "b" / "t-0")
    try:
        for n in range(10):
            a.append(batch([b"common-%d-%d" % (n, i) for i in range(10)]), leader_epoch=0)
        copy(a, b, 0)
        high_watermark = 100
        for n in range(5):
            a.append(batch([b"a-only-%d-%d" % (n, i) for i in range(10)]), leader_epoch=0)
        for n in range(5):
            b.append(batch([b"b-%d-%d" % (n, i) for i in range(10)]), leader_epoch=1)
        assert a.log_end_offset == b.log_end_offset == 150

        step = first_step(a.leader_epoch_cache, a.log_end_offset, high_watermark)
        assert step == AskAgain(150, 0)
        answer = b.leader_epoch_cache.end_offset_for(step.epoch, b.log_end_offset)
        assert answer == (0, 100)
        step = after_epoch_answer(a.leader_epoch_cache, a.log_end_offset, high_watermark,
                                  *answer)
        assert step == Truncate(100)
        a.truncate_to(step.offset)
        copy(b, a, a.log_end_offset)

        assert batch_headers(a) == batch_headers(b)
        assert a.read(0, 1 << 30) == b.read(0, 1 << 30)
        assert a.leader_epoch_cache.entries() == [(0, 0), (1, 100)]
    finally:
        a.close()
        b.close()
    reopened = PartitionLog(tmp_path / "a" / "t-0")
    assert reopened.leader_epoch_cache.entries() == [(0, 0), (1, 100)]  # the checkpoint
    reopened.close()
