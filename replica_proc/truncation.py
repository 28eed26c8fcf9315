"""Where a follower truncates its log before fetching from a leader: pure decisions.

Without Fetch v12's diverging-epoch field a follower finds where its log departs from the
leader's with OffsetsForLeaderEpoch (KIP-101, KIP-279): it asks for the end offset of its
own latest epoch and compares the answer with its own leader-epoch cache. The rules
(KIP-101/KIP-279, as Kafka's AbstractFetcherThread.getOffsetTruncationState):

- the leader answers (-1, -1) (it knows no such epoch, or has no cache): truncate to the
  high watermark;
- the leader answers an epoch the follower also has: truncate to the smaller of the
  leader's end offset and the follower's own end for that epoch;
- the leader answers an epoch the follower lacks: truncate to the follower's own end of
  the largest epoch below it and ask again for that epoch (one round per divergent epoch);
- the follower has no epoch at or below the leader's answer (no cache: a log from before
  epochs were kept): truncate to the leader's end offset.

Every truncation offset is also capped by the follower's log end offset (LEO).

A Fetch answered OFFSET_OUT_OF_RANGE (Kafka's AbstractFetcherThread.fetchOffsetAndTruncate): when
the leader's LEO is below the follower's, truncate to it; when the follower's LEO is below the
leader's log start offset, restart the log empty at that start
(``truncate_fully_and_start_at``); otherwise fetch on from the follower's LEO.

The decisions are values (``Truncate``, ``AskAgain``, ``TruncateFully``); applying them to
the log (``PartitionLog.truncate_to`` / ``truncate_fully_and_start_at``, which trim the
epoch cache) and sending the requests is the replica fetcher's job. Pure functions over a
``LeaderEpochFileCache`` they only read: any thread that may read the cache (its log's
owner).
"""
from __future__ import annotations

from typing import NamedTuple

from segments.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET


class Truncate(NamedTuple):
    """Truncate the log to ``offset`` (no-op at or past the LEO), then fetch from it."""

    offset: int


class AskAgain(NamedTuple):
    """Truncate the log to ``offset``, then send OffsetsForLeaderEpoch for ``epoch``."""

    offset: int
    epoch: int


class TruncateFully(NamedTuple):
    """Delete the log and restart it, empty, at ``offset``; fetch from there."""

    offset: int


def first_step(cache, log_end_offset, high_watermark):
    """What a follower does on becoming one: ask for the end of its latest epoch
    (``AskAgain(LEO, latest)``: nothing to truncate yet), or, with no epoch in its cache,
    truncate to its high watermark."""
    if cache.latest_epoch == UNDEFINED_EPOCH:
        return Truncate(min(high_watermark, log_end_offset))
    return AskAgain(log_end_offset, cache.latest_epoch)


def after_epoch_answer(cache, log_end_offset, high_watermark, leader_epoch, leader_end_offset):
    """The step after the leader answered OffsetsForLeaderEpoch with ``(leader_epoch,
    leader_end_offset)`` (see the module doc): ``Truncate`` or ``AskAgain``."""
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return Truncate(min(high_watermark, log_end_offset))
    own_epoch, own_end = cache.end_offset_for(leader_epoch, log_end_offset)
    if own_epoch == UNDEFINED_EPOCH:
        return Truncate(min(leader_end_offset, log_end_offset))
    if own_epoch != leader_epoch:
        return AskAgain(min(own_end, log_end_offset), own_epoch)
    return Truncate(min(own_end, leader_end_offset, log_end_offset))


def after_out_of_range(log_end_offset, leader_end_offset, leader_start_offset):
    """The step after a Fetch answered OFFSET_OUT_OF_RANGE, given the leader's LEO and
    log start offset (ListOffsets latest and earliest): ``Truncate`` (to the leader's LEO,
    or a no-op at the follower's) or ``TruncateFully``."""
    if leader_end_offset < log_end_offset:
        return Truncate(leader_end_offset)
    if log_end_offset < leader_start_offset:
        return TruncateFully(leader_start_offset)
    return Truncate(log_end_offset)


class EpochTruncation:
    """These rules as the replica fetcher asks for them, over a follower ``Partition``
    (``replica_fetcher.ReplicaFetcherManager``'s ``epoch_truncation``)."""

    @staticmethod
    def epoch_to_ask(partition):
        """The epoch to send in OffsetsForLeaderEpoch on becoming a follower; None when
        the log has no epoch (the fetcher then truncates to the high watermark)."""
        log = partition.log
        step = first_step(log.leader_epoch_cache, log.log_end_offset,
                          partition.high_watermark)
        return step.epoch if isinstance(step, AskAgain) else None

    @staticmethod
    def decide(partition, leader_epoch, end_offset):
        """``(offset to truncate to, epoch to ask about next or None)`` after the leader's
        answer ``(leader_epoch, end_offset)``."""
        log = partition.log
        step = after_epoch_answer(log.leader_epoch_cache, log.log_end_offset,
                                  partition.high_watermark, leader_epoch, end_offset)
        return step.offset, (step.epoch if isinstance(step, AskAgain) else None)
