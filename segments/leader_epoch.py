"""The leader-epoch cache of one partition: where each leader epoch starts in the log.

Kafka's LeaderEpochFileCache. An entry ``(epoch, start_offset)`` says that the leader of
``epoch`` wrote its first batch at ``start_offset``; entries are kept with both fields
strictly increasing. A leader records ``(its epoch, its log end offset)`` when it first
appends in a new epoch; a follower records ``(partitionLeaderEpoch, baseOffset)`` of each
replicated batch whose epoch is newer than the latest entry. OffsetsForLeaderEpoch
answers from it (``end_offset_for``, Kafka's LeaderEpochFileCache.endOffsetFor) and a follower
compares its own with the leader's answer to find where the two logs diverge
(``replica_proc.truncation``).

Persistence: ``<partition dir>/leader-epoch-checkpoint``, Kafka's layout version 0 (a
version line, a count line, one ``epoch start_offset`` line per entry) plus ringlog's CRC
line (``segments.checkpoint``), rewritten atomically (a temporary file renamed over it)
on every change. Changes are rare (a new epoch, a truncation, a log start move), never per
batch. As Kafka 3.7 does (KAFKA-15046), that write is not fsynced: the owning log's
``flush()`` fsyncs it (``flush``) *before* it moves its recovery point, and a log recovered
after a crash assigns again the epochs of the batches past its recovery point
(``segments.log``), so a change the crash lost is found again in the batches themselves.
So a partition's first leadership, or a new epoch, costs no fsync on the request path.
A write that fails is logged and retried by the next ``flush()``, which raises it; the
entries in memory stay right meanwhile.

A checkpoint that does not parse (wrong version, bad CRC, epochs or offsets that do not
increase ...) is logged with the file and the reason, and the owner rebuilds the cache
from the partitionLeaderEpoch field of the log's batch headers (``rebuild``); nothing is
deleted because of it.

Thread safety: none. Owner: the ``PartitionLog`` of the partition (its single writer
thread); others read it through ``log.leader_epoch_cache`` on that thread.
"""
from __future__ import annotations

import bisect
import logging
import os
from collections import namedtuple

from segments.checkpoint import CheckpointFile
from segments.errors import KafkaStorageError, describe_os_error

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
#: Kafka's layout version of the file.
CHECKPOINT_VERSION = 0
#: No epoch (Kafka's UNDEFINED_EPOCH) and no offset (UNDEFINED_EPOCH_OFFSET).
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

EpochEntry = namedtuple("EpochEntry", "epoch start_offset")


class LeaderEpochFileCache:
    """The epoch entries of the partition directory ``directory`` (see the module doc).

    ``latest_epoch`` is a plain attribute (-1 while empty) so that an append checks for a
    new epoch with one comparison.
    """

    __slots__ = ("file", "_epochs", "_starts", "latest_epoch", "stale", "unsynced")

    def __init__(self, directory):
        self.file = CheckpointFile(os.path.join(os.fspath(directory), LEADER_EPOCH_CHECKPOINT),
                                   version=CHECKPOINT_VERSION, fields=2)
        self._epochs = []
        self._starts = []
        self.latest_epoch = UNDEFINED_EPOCH
        #: True while the file lags the entries (its last write failed).
        self.stale = False
        #: True while the file holds the entries but was not fsynced since.
        self.unsynced = False

    @property
    def path(self):
        return self.file.path

    def entries(self):
        """The entries, oldest first, as EpochEntry tuples."""
        return [EpochEntry(e, s) for e, s in zip(self._epochs, self._starts)]

    def __repr__(self):
        return f"LeaderEpochFileCache({self.path!r}, {self.entries()})"

    # -- loading ------------------------------------------------------------------------

    def load(self):
        """Read the checkpoint; True if it was read (a missing file reads as no entries),
        False if it does not parse: then the reason is logged, the cache is empty and
        the owner should ``rebuild`` it from the log."""
        try:
            entries = self._parse(self.file.read())
        except KafkaStorageError as e:
            log.warning("leader epoch checkpoint %s is unreadable (%s); rebuilding it from "
                        "the log's batches", self.path, e)
            self._set([])
            return False
        self._set(entries)
        return True

    def exists(self):
        return os.path.exists(self.path)

    def _parse(self, lines):
        entries = []
        for number, fields in enumerate(lines, start=3):
            try:
                epoch, start = (_non_negative(field) for field in fields)
            except ValueError:
                raise KafkaStorageError(
                    f"checkpoint {self.path} line {number}: {' '.join(fields)!r}, expected "
                    f"two non-negative decimal integers (epoch, start offset)") from None
            if entries and (epoch <= entries[-1][0] or start <= entries[-1][1]):
                raise KafkaStorageError(
                    f"checkpoint {self.path} line {number}: entry ({epoch}, {start}) after "
                    f"({entries[-1][0]}, {entries[-1][1]}); epochs and start offsets must "
                    f"both increase")
            entries.append((epoch, start))
        return entries

    def rebuild(self, batches, log_end_offset):
        """Refill the cache from ``batches`` — ``(partitionLeaderEpoch, baseOffset)`` of
        every batch of the log, in offset order — and write the checkpoint: the first batch
        of each newer epoch starts an entry (batches without an epoch, -1, are skipped)."""
        self._set([])
        for epoch, base_offset in batches:
            if epoch > self.latest_epoch:
                self._epochs.append(epoch)
                self._starts.append(base_offset)
                self.latest_epoch = epoch
        self._truncate_from_end(log_end_offset)
        self.persist()

    def _set(self, entries):
        self._epochs = [e for e, _ in entries]
        self._starts = [s for _, s in entries]
        self.latest_epoch = self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    # -- changes ------------------------------------------------------------------------

    def assign(self, epoch, start_offset):
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed.

        Ignored for a negative epoch or offset (a batch without an epoch), and for an
        epoch not newer than the latest unless ``start_offset`` is below the latest
        entry's start (a log rewritten below it); otherwise, as Kafka's ``assign``, every
        entry whose epoch is >= ``epoch`` or whose start offset is >= ``start_offset`` is
        replaced by the new one, so both fields keep increasing. (Kafka also applies an
        older epoch at or after the latest start, dropping the newer entries; a leader's
        epochs only rise, so such a batch is stale and must not rewind the cache.)"""
        if epoch < 0 or start_offset < 0:
            return False
        if self._epochs and epoch <= self.latest_epoch \
                and start_offset >= self._starts[-1]:
            return False
        removed = []
        while self._epochs and (self._epochs[-1] >= epoch
                                or self._starts[-1] >= start_offset):
            removed.append(EpochEntry(self._epochs.pop(), self._starts.pop()))
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            log.warning("%s: epoch %d at offset %d replaces %s", self.path, epoch,
                        start_offset, removed[::-1])
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        self.latest_epoch = epoch
        self.persist()
        return True

    def truncate_from_end(self, end_offset):
        """The log was truncated to ``end_offset``: drop the entries starting at or after
        it. True if the cache changed."""
        if self._truncate_from_end(end_offset):
            self.persist()
            return True
        return False

    def _truncate_from_end(self, end_offset):
        if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
            return False
        keep = bisect.bisect_left(self._starts, end_offset)
        del self._epochs[keep:], self._starts[keep:]
        self.latest_epoch = self._epochs[-1] if self._epochs else UNDEFINED_EPOCH
        return True

    def truncate_from_start(self, start_offset):
        """The log now starts at ``start_offset``: drop the entries wholly before it and
        move the one covering it to ``start_offset``. True if the cache changed."""
        if start_offset < 0 or not self._starts or self._starts[0] >= start_offset:
            return False
        covering = bisect.bisect_right(self._starts, start_offset) - 1
        del self._epochs[:covering], self._starts[:covering]
        self._starts[0] = start_offset
        self.persist()
        return True

    def clear(self):
        """Drop every entry (the log was emptied: truncate_fully_and_start_at)."""
        if self._epochs:
            self._set([])
            self.persist()

    # -- queries ------------------------------------------------------------------------

    def end_offset_for(self, requested_epoch, log_end_offset):
        """OffsetsForLeaderEpoch (KIP-101, Kafka's LeaderEpochFileCache.endOffsetFor):
        ``(epoch, end_offset)``.

        - ``requested_epoch`` is the latest epoch: ``(it, log_end_offset)``;
        - an older epoch: ``(the largest epoch <= it, the start offset of the first epoch
          after it)``; below every entry: ``(requested_epoch, the first start offset)``;
        - undefined (-1), newer than every entry, or an empty cache: ``(-1, -1)``.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    # -- the file -------------------------------------------------------------------------

    def flush(self, durable=True):
        """Make the checkpoint durable: write it again (fsynced) if a write failed or was
        not fsynced since the last change (raises OSError if that fails). ``durable=False``
        writes it in place without an fsync (``checkpoint.write_in_place``), for a caller
        that syncs the file system after."""
        if self.stale or self.unsynced:
            if durable:
                self.file.write(self.entries())
            else:
                self.file.write(self.entries(), durable=False, in_place=True)
            self.stale = self.unsynced = False

    def persist(self):
        """Write the checkpoint now, without an fsync (``flush`` makes it durable); a
        failure is logged and leaves the cache ``stale`` (the next ``flush`` writes it
        again)."""
        try:
            self.file.write(self.entries(), durable=False)
        except OSError as e:
            self.stale = True
            log.warning("write of %s failed with %s; the next flush writes it again",
                        self.path, describe_os_error(e))
        else:
            self.stale = False
            self.unsynced = True


def _non_negative(text):
    """``int(text)`` of a plain non-negative decimal (no sign, no leading zero)."""
    if not text.isascii() or not text.isdigit() or str(int(text)) != text:
        raise ValueError(text)
    return int(text)
