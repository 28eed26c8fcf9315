"""The log of one partition: a directory of segments, appended to at the end.

``PartitionLog(path, config, clock=...)`` opens (or creates) the partition directory
``path`` — opening *is* recovery — and then serves appends (as leader or follower), reads
by offset or by timestamp, rolling, truncation, retention and flushing. Its files::

    <path>/00000000000000000000.log         segments, named by base offset in 20 digits
    <path>/00000000000000000000.index       sparse offset index
    <path>/00000000000000000000.timeindex   sparse time index
    <path>/00000000000000000000.txnindex    aborted transactions (only once there is one)
    <path>/recovery-point-offset-checkpoint everything below this offset is fsynced
    <path>/log-start-offset-checkpoint      the first offset a reader may ask for
    <path>/leader-epoch-checkpoint          where each leader epoch starts (leader_epoch)
    <path>/.clean-shutdown                  written by close(), renamed by the next open to
    <path>/.clean-shutdown.spent            (which the next close renames back)

Offsets: ``log_start_offset`` <= readable offsets < ``log_end_offset`` (LEO, the offset
the next append gets). The *recovery point* is the offset below which everything has
been fsynced; after an unclean shutdown only batches at or after it are validated.

Recovery (on open): ``.cleaned`` files of an interrupted compaction are deleted and
``.swap`` files completed; then, without a clean-shutdown marker, each segment from the
one holding the recovery point is validated batch by batch (framing, CRC-32C, offsets
that do not go backwards) from the last index entry below the recovery point, its indexes
rebuilt on the way, and the log truncated at the first invalid batch (later segments are
deleted). The bytes dropped are logged and kept in ``log.recovery``. Indexes of the other
segments are only sanity-checked (Kafka's rules over each index file in one numpy pass,
and the last entries against the log) and rebuilt if they fail. Opening a log whose
recovery point is current therefore reads its indexes and a few kilobytes of each
segment, not the segments.

Transaction index: ``append_aborted_txn`` adds an aborted transaction (its ABORT
marker's offset, which must be the last appended) to the active segment's ``.txnindex``
(``segments.txn_index``); ``collect_aborted_transactions(start, upper)`` finds those
overlapping a fetched range, walking the segments from the one holding ``start`` until
an entry's LSO proves the rest cannot overlap (Kafka's collectAbortedTransactions).
Truncation, retention and roll carry the files with their segments; compaction writes
each cleaned segment's own (``segments.cleaner``). Opening checks each segment's index
strictly (``TransactionIndex.sanity_check``) and rebuilds the indexes from the batches
(``txn_index_rebuild``), from the first that fails on — from the first segment an
unclean shutdown recovered, when a recovered part holds a control batch or the segment
has an index (its last entries may be missing or describe dropped batches), and from
the first cleaned segment whose interrupted swap the open completed. An index is
derived data: a bad one costs a rescan, never a record. A flipped byte that keeps the
strict parse's rules (another producer id, first offset or LSO) is caught at the
index's first use in the process instead, as a segment's CRC is at its first read:
``collect_aborted_transactions`` compares each index it has not verified with the ABORT
markers of its segment (``txn_index_rebuild.verify_txn_index``) and rewrites it from
them on a difference (a WARNING names the file and the entry). The transactions open at
a segment's start come from the segments before it, so the first check scans the log's
batch headers from its first segment up to that one, once; the state reached at the
last sealed segment is kept (``_txn_scan``) for the next check, until truncation,
retention or compaction changes the segments. Indexes this process wrote (new segments,
rebuilt ones) count as verified.

Leader epochs: ``leader_epoch_cache`` (``segments.leader_epoch``) records where each
leader epoch starts. A leader append with a ``leader_epoch`` newer than the cache's latest
adds ``(leader_epoch, its first offset)``; a follower append adds ``(partitionLeaderEpoch,
baseOffset)`` of each batch with a newer epoch (header fields only). The check costs one
int comparison per append (per batch as follower) while the epoch stays the same.
Truncation trims the cache's end, a log start move (retention, DeleteRecords) its start,
``truncate_fully_and_start_at`` empties it; opening the log trims it to the recovered
range, and rebuilds it from the batch headers when its checkpoint does not parse (or is
missing while the log holds batches: a log written before the cache existed). A new log
writes an empty checkpoint, so that only such an old log is ever rescanned.

Failed writes (a full disk, EIO; a full disk is also logged, once when it starts failing
the partition's writes and once when an append goes through again: ``disk_full``): every
write of an append — the .log write, a roll's new
files and index write-out, the recovery-point checkpoint — either completes or leaves the
log as it was, in memory and in its files: a partial .log write is truncated away, a roll
that fails halfway removes the new segment and leaves the old one active, a checkpoint
keeps its old value. The append then raises KafkaStorageError (KAFKA_STORAGE_ERROR,
retriable) naming the partition, the file and the OS error, nothing of it is served, and
the next append (once there is space) simply succeeds — redoing the roll if there was
one. An append whose batches are written succeeds even if the flush after it fails.
Two failures cannot be undone: a failed fsync (the kernel may have dropped the pages it
could not write) and a failed write whose partial bytes could not be truncated. Then the
log goes offline (below), ``close`` leaves no clean-shutdown marker, and the next open (a
broker restart) recovers it from the files — Kafka's log-directory failure, for this
partition only. That recovery keeps whatever whole batches of an untruncatable write
reached the file, as Kafka's would: the one case where a failed append can be served later.

Damaged bytes (a byte flipped on disk): bytes below the recovery point were written whole
and fsynced, so a batch there that fails its checks is damage, never a torn write; the log
deletes and truncates nothing for it (that would drop acknowledged records). Recovery
raises CorruptSegmentError for it (the log does not open), and a segment not validated
in this process is CRC-checked, all of it, at its first read (``Segment.verify``: once
per segment per process; offsets are checked against the next segment's base, and a
clean open checks the log end offset against the checkpointed one: baseOffset is outside
the CRC); if that fails the log goes offline, ``close`` still leaves the
clean-shutdown marker (the files are as the log wrote them), and the next process finds
the damage again on its first read.

Producer state (``segments.producer_state``, ``producer_state``): the idempotent and
transactional producers' state, kept per partition as Kafka's ProducerStateManager. A
leader ``append`` collects the batches with producerId >= 0 (one comparison per batch:
plain producers pay nothing more) and checks them before anything is written (sequence,
epoch, transaction rules: OutOfOrderSequenceNumberError, InvalidProducerEpochError,
InvalidTxnStateError, TransactionCoordinatorFencedError); the state changes only once
the write succeeded. A client's retry of one of a producer's last 5 batches appends
nothing and returns ``DuplicateAppend(first, last)``: the original batch's offsets (a
tuple, so it unpacks like any answer of ``append``; ``max_timestamp`` too). A follower
(``append_as_follower``) updates the state without the duplicate and sequence checks.
Snapshots ``<offset>.snapshot`` (``segments.producer_snapshot_descriptor``) are written
(not fsynced) at each roll, at the new segment's base offset, and (fsynced) by a clean
``close`` at the log end (unless the log is empty); opening loads the latest valid one at
or below the recovery point (all of them after a clean shutdown) and replays the batches
after it.
``truncate_to`` drops the snapshots above the new end and rebuilds the state the same
way; retention drops the snapshots below the log start offset except the latest. A
snapshot is derived data: one that is damaged is skipped (a WARNING) and rebuilt.

Offline: ``offline`` holds the reason (logged once as an ERROR; ``on_offline(reason)``,
given by the owner, is called then); every later call raises KafkaStorageError.

Thread safety: none — single writer. The ``PartitionLog`` belongs to the broker thread
that owns the partition; that thread makes every call, reads included, and consumes a
``LogSlice`` before its next call that can delete segments (retention, truncation,
compaction). There are no locks: the only other thread, the process-wide flusher that
fsyncs rolled segments (as Kafka's scheduler does), works on descriptors of its own and
reports back through a future the owner polls.
"""
from __future__ import annotations

import bisect
import concurrent.futures
import dataclasses
import logging
import os
import shutil
import threading
from collections import namedtuple

from segments import durability, index_descriptor as xd
from segments.checkpoint import OffsetCheckpoint, fsync_directory, sync_filesystem
from segments.clock import wall_clock_ms
from segments.disk_full import DiskFullWatch
from segments.errors import (
    CorruptSegmentError,
    InvalidRecordError,
    KafkaStorageError,
    LogDirFailureError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    describe_os_error,
)
from segments.index import CorruptIndexError
from segments.leader_epoch import LeaderEpochFileCache
from segments.log_config import LogConfig
from segments.producer_state import ORIGIN_CLIENT, ORIGIN_REPLICATION, ProducerStateManager
from segments.record import batch_descriptor as bd
from segments.record.batch_header import BatchHeader
from segments.record.compression import codec_id, recompress_batch
from segments.record.records import RecordBatch
from segments.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    Segment,
    base_offset_from_name,
    iter_file_batches,
    read_into,
    segment_paths,
)
from segments.txn_index import TXN_INDEX_SUFFIX, AbortedTxn
from segments.txn_index_rebuild import rebuild_txn_indexes, scan_aborted, verify_txn_index

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".clean-shutdown"
#: The marker after an open: renamed, not deleted, so that the next clean close renames it
#: back instead of creating a file (on ext4 a rename costs a tenth of a creation, and
#: closing 10,000 logs together, ``close_together``, is mostly these).
SPENT_MARKER = ".clean-shutdown.spent"

#: Read-only batches of at least this many bytes are appended without a copy of them (the
#: header of each is copied and stamped, ``PartitionLog.append``); smaller ones are copied,
#: which costs less than writing them in pieces.
STAMP_HEADS_FROM = 64 * 1024

#: ListOffsets' special timestamps (Kafka's ListOffsetsRequest).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2

TimestampOffset = namedtuple("TimestampOffset", "timestamp offset")


class DuplicateAppend(tuple):
    """What ``PartitionLog.append`` returns for a producer's retry of a batch it already
    appended: ``(first_offset, last_offset)`` of the original batch, whose maxTimestamp is
    ``max_timestamp``. Nothing was appended."""

    def __new__(cls, first_offset, last_offset, max_timestamp):
        self = tuple.__new__(cls, (first_offset, last_offset))
        self.max_timestamp = max_timestamp
        return self

    def __repr__(self):
        return f"DuplicateAppend({self[0]}, {self[1]}, max_timestamp={self.max_timestamp})"


@dataclasses.dataclass
class RecoveryResult:
    """What opening the log found and did."""

    clean_shutdown: bool
    #: The recovery point read from the checkpoint (before recovery moved it).
    recovery_point: int
    #: Segments whose batches were validated.
    segments_recovered: int = 0
    #: Segments (before the recovery point) whose indexes failed the sanity check.
    indexes_rebuilt: int = 0
    #: Bytes truncated from the log or deleted with the segments after a bad batch.
    bytes_dropped: int = 0
    #: Offset the log ended at after recovery.
    log_end_offset: int = 0
    #: Segments whose transaction indexes were rebuilt from their batches.
    txn_indexes_rebuilt: int = 0
    #: Where the log ended before recovery dropped anything, as far as the batch headers
    #: of what it dropped tell (unchecked); the log end offset when nothing was dropped.
    log_end_before: int = 0


class LogSlice:
    """Where the bytes of a read are: ``size`` bytes at ``position`` of one segment's .log.

    ``read_into(buf)`` copies them straight from the file into any writable buffer (a
    shared-memory ring's memoryview, say) with ``os.preadv``: no intermediate bytes
    object. A slice holds whole batches; ``first_offset`` is the base offset of the first
    one (it may be below the offset asked for: a batch is never split). Valid until the
    owner's next call that can delete segments; a slice of a deleted segment raises
    KafkaStorageError instead of reading whatever file reused its descriptor.

    The process's file cache (``segments.file_cache``) may release the segment's files
    between ``read_slice`` and the read (a fetch gathers slices of many partitions before
    it copies them): ``read_into`` and ``tobytes`` ask the segment for its descriptor when
    they read, which reopens the file. ``fd`` is therefore valid only until this process
    next opens a segment file.
    """

    __slots__ = ("segment", "position", "size", "first_offset")

    def __init__(self, segment, position, size, first_offset):
        self.segment = segment
        self.position = position
        self.size = size
        self.first_offset = first_offset

    @property
    def path(self):
        return self.segment.log_path if self.segment is not None else None

    @property
    def fd(self):
        return self.segment.fd if self.segment is not None else None

    def read_into(self, buf):
        """Copy the slice into ``buf`` (at least ``size`` bytes); return ``size``."""
        if not self.size:
            return 0
        view = buf if isinstance(buf, memoryview) else memoryview(buf)
        if len(view) < self.size:
            raise ValueError(f"buffer of {len(view)} bytes for a slice of {self.size}")
        return read_into(self.segment.fd, view[:self.size], self.position)

    def read_range_into(self, buf, offset):
        """Copy ``len(buf)`` bytes of the slice from ``offset`` on into ``buf``; return how
        many (a slice read piecewise, e.g. into the fragments of a ring message)."""
        view = buf if isinstance(buf, memoryview) else memoryview(buf)
        if not 0 <= offset <= offset + len(view) <= self.size:
            raise ValueError(f"bytes {offset}..{offset + len(view)} of a slice of {self.size}")
        if not len(view):
            return 0
        return read_into(self.segment.fd, view, self.position + offset)

    def tobytes(self):
        """The slice's bytes (one pread; ``read_into`` avoids even that copy)."""
        if not self.size:
            return b""
        data = os.pread(self.segment.fd, self.size, self.position)
        if len(data) == self.size:
            return data
        out = bytearray(self.size)  # a short read: loop until complete
        self.read_into(out)
        return bytes(out)

    def __repr__(self):
        return (f"LogSlice(path={self.path!r}, position={self.position}, size={self.size}, "
                f"first_offset={self.first_offset})")


class PartitionLog:
    """The segments of one partition directory (see the module doc for the rules).

    Single writer: the broker thread that owns the partition makes every call.
    ``clock`` returns milliseconds since the epoch; tests pass a fake one.
    """

    def __init__(self, path, config=None, clock=None, on_offline=None, durable_open=True):
        self.path = os.fspath(path)
        self.name = os.path.basename(os.path.normpath(self.path))
        self._disk = DiskFullWatch(self.name, self.path)  # logs a full disk and its end
        self.config = config if config is not None else LogConfig()
        self.clock = clock or wall_clock_ms
        self.segments = []  # sorted by base offset; the last one is active
        self._bases = []
        self._closed = False
        #: Index of the first segment the open's recovery validated (None: a clean open).
        self._first_recovered = None
        #: ``(n, open transactions)``: the transactions open (``{producer id: first
        #: offset}``) after the first ``n`` segments, all sealed, for the next check of a
        #: transaction index (None: scan from the first segment).
        self._txn_scan = None
        #: Whether ``scrub`` found every segment checked.
        self._scrubbed = False
        #: Base offsets of the cleaned segments whose swap the open completed (their
        #: transaction indexes are rebuilt: the crash may have left an old one).
        self._swapped = set()
        #: Why the log is offline (None: it is not); see "Offline" in the module doc.
        self.offline = None
        #: Whether the files may disagree with what the log knew when it went offline
        #: (a disk failure): then ``close`` leaves no clean-shutdown marker.
        self._needs_recovery = False
        #: Called with the reason when the log goes offline (its owner's bookkeeping).
        self.on_offline = on_offline
        # (future, segment, base offset of the next segment) per rolled segment whose
        # fsync runs in the background; the recovery point passes it when it is done.
        self._pending_flushes = []
        self._recovery_checkpoint = OffsetCheckpoint(
            os.path.join(self.path, RECOVERY_POINT_CHECKPOINT))
        self._start_checkpoint = OffsetCheckpoint(
            os.path.join(self.path, LOG_START_OFFSET_CHECKPOINT))
        os.makedirs(self.path, exist_ok=True)
        #: False: the open's removal of the clean-shutdown marker is not fsynced; the
        #: owner syncs the file system before the log takes its first write (a marker
        #: back after a crash before that is harmless: the files are as it says).
        self._durable_open = durable_open
        try:
            self.recovery = self._load()
        except BaseException:
            self._close_segments()
            raise

    # -- state ----------------------------------------------------------------------------

    @property
    def active_segment(self):
        return self.segments[-1]

    @property
    def offline_for_damage(self):
        """Whether the log is offline for damaged bytes (not for a failed write or fsync):
        ``segments.damaged.set_aside_damage`` can then heal it."""
        return self.offline is not None and not self._needs_recovery

    @property
    def size_in_bytes(self):
        return sum(segment.size for segment in self.segments)

    @property
    def unflushed_messages(self):
        return self.log_end_offset - self.recovery_point

    def segment_base_offsets(self):
        return list(self._bases)

    def __repr__(self):
        return (f"PartitionLog({self.path!r}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self.segments)})")

    # -- opening = recovery ---------------------------------------------------------------

    def _load(self):
        now = self.clock()
        self._remove_leftovers()
        self._complete_swaps(now)
        bases = sorted(base_offset_from_name(n) for n in os.listdir(self.path)
                       if n.endswith(LOG_SUFFIX) and is_segment_name(n, LOG_SUFFIX))
        marker = os.path.join(self.path, CLEAN_SHUTDOWN_MARKER)
        clean = os.path.exists(marker)
        recovery_point = self._read_checkpoint(self._recovery_checkpoint, None)
        start_offset = self._read_checkpoint(self._start_checkpoint, None)
        self._start_written = start_offset  # what the file says (None: unreadable)
        if recovery_point is None:
            clean = False  # no trustworthy recovery point: validate everything
        result = RecoveryResult(clean_shutdown=clean,
                                recovery_point=recovery_point if recovery_point is not None
                                else -1)
        if not bases:
            base = max(start_offset or 0, recovery_point or 0)
            self._set_segments([Segment.create(self.path, base, self.config, now)])
            self.log_end_offset = base
        else:
            segments = []
            for n, base in enumerate(bases):
                segments.append(Segment.open(self.path, base, self.config, now,
                                             active=n == len(bases) - 1))
            self._set_segments(segments)
            try:
                self._recover_segments(clean, recovery_point or 0, result, now)
            except KafkaStorageError as e:
                if not clean:
                    raise
                log.warning("log %s: %s despite a clean shutdown; recovering", self.path, e)
                result.clean_shutdown = False
                self._recover_segments(False, recovery_point or 0, result, now)
            self.log_end_offset = self.active_segment.next_offset
            self._load_txn_indexes(result)
            if result.clean_shutdown and self.log_end_offset != recovery_point:
                # a clean close checkpoints its log end offset: the last batch's
                # baseOffset or lastOffsetDelta changed since (baseOffset is outside
                # the CRC, which the open of a clean log does not check)
                raise CorruptSegmentError(
                    f"segment {self.active_segment.log_path}: its batches end at offset "
                    f"{self.log_end_offset}, but the log was closed cleanly at "
                    f"{recovery_point} ({self._recovery_checkpoint.path})")
        first = self.segments[0].base_offset
        if start_offset is not None and start_offset > self.log_end_offset:
            log.warning("log %s: ignoring %s: log start offset %d is past the log end offset "
                        "%d", self.path, self._start_checkpoint.path, start_offset,
                        self.log_end_offset)  # Kafka would delete every segment here
            start_offset = None
        self.log_start_offset = min(max(start_offset or first, first), self.log_end_offset)
        self.leader_epoch_cache = self._load_leader_epoch_cache(
            None if result.clean_shutdown else recovery_point or 0)
        # Recovered bytes are on disk now; make the recovery point current.
        for segment in self.segments:
            segment.flush()
        self.recovery_point = self.log_end_offset
        self._last_flush_ms = now
        if recovery_point != self.recovery_point:
            self._write_recovery_checkpoint()
        if start_offset != self.log_start_offset:
            self._write_start_checkpoint()
        self.producer_state = ProducerStateManager(self.path)
        self._replay_producer_state(self.producer_state.load(
            self.log_start_offset, self.log_end_offset if result.clean_shutdown
            else min(recovery_point or 0, self.log_end_offset)))
        if os.path.exists(marker):
            os.replace(marker, os.path.join(self.path, SPENT_MARKER))
            if self._durable_open:
                fsync_directory(self.path)
        result.log_end_offset = self.log_end_offset
        result.log_end_before = max(result.log_end_before, self.log_end_offset)
        if result.bytes_dropped:
            log.warning("log %s: recovery dropped %d bytes; log end offset %d", self.path,
                        result.bytes_dropped, self.log_end_offset)
        return result

    def _replay_producer_state(self, from_offset):
        """Bring the producer state up to the log end: apply the idempotent and
        transactional batches from ``from_offset`` (Kafka's loadProducersFromRecords)."""
        state = self.producer_state
        for segment in self.segments:
            if segment.next_offset <= from_offset:
                continue
            with segment.pinned():
                start = 0
                if from_offset > segment.base_offset:
                    found = segment.translate_offset(from_offset)
                    if found is None:
                        continue
                    start = found.position
                for _, view in iter_file_batches(segment.fd, start, segment.size):
                    header = BatchHeader(view)
                    if header.producer_id >= 0 and header.last_offset >= from_offset:
                        header.validate(check_crc=False)
                        state.replay(header)

    def _recover_segments(self, clean, recovery_point, result, now):
        """Sanity-check indexes below the recovery point; validate from it on."""
        if clean:
            first_unflushed = len(self.segments)
        else:
            first_unflushed = max(0, bisect.bisect_right(self._bases, recovery_point) - 1)
        self._first_recovered = None if clean else first_unflushed
        for segment in self.segments[:first_unflushed]:
            try:
                segment.sanity_check()
            except CorruptIndexError as e:
                log.warning("log %s: %s; rebuilding the indexes of %s", self.path, e,
                            segment.log_path)
                result.indexes_rebuilt += 1
                result.bytes_dropped += segment.recover(flushed_offset=recovery_point)
        for n in range(first_unflushed, len(self.segments)):
            segment = self.segments[n]
            following = self.segments[n + 1].base_offset if n + 1 < len(self.segments) \
                else None
            dropped = segment.recover(from_offset=recovery_point if n == first_unflushed
                                      else None, next_base_offset=following,
                                      flushed_offset=recovery_point)
            result.segments_recovered += 1
            if dropped:
                result.bytes_dropped += dropped
                result.log_end_before = segment.dropped_end_offset
                for later in self.segments[n + 1:]:
                    try:
                        result.log_end_before = max(result.log_end_before, later.next_offset)
                    except KafkaStorageError:
                        result.log_end_before = max(result.log_end_before, later.base_offset)
                    result.bytes_dropped += later.size
                    if segment.damaged:  # whole batches after damage: kept, never deleted
                        log.warning("log %s: %s follows the damaged batch: kept as %s",
                                    self.path, later.log_path, later.set_aside())
                    else:
                        log.warning("log %s: deleting %s after the invalid batch",
                                    self.path, later.log_path)
                        later.delete()
                self._set_segments(self.segments[:n + 1])
                break
        for segment in self.segments[:-1]:
            if segment.offset_index.mutable:
                segment.seal()
        if not self.active_segment.offset_index.mutable:
            self.active_segment.make_active()
        elif not self.active_segment.tail_state_loaded:
            self.active_segment.load_tail_state()

    def _load_txn_indexes(self, result):
        """Sanity-check the transaction indexes and rebuild them from the batches where
        they fail or where recovery may have left them wrong (module doc)."""
        first_bad = None
        for n, segment in enumerate(self.segments):
            index = segment.txn_index
            if segment.recovered_control_batch or segment.base_offset in self._swapped or (
                    self._first_recovered is not None and n >= self._first_recovered
                    and index.file_exists):
                first_bad = n
                break
            try:
                index.sanity_check(segment.next_base_offset)
            except CorruptIndexError as e:
                log.warning("log %s: %s; rebuilding the transaction indexes from segment "
                            "%d", self.path, e, segment.base_offset)
                first_bad = n
                break
        if first_bad is not None:
            count = rebuild_txn_indexes(self.segments, first_bad)
            result.txn_indexes_rebuilt = len(self.segments) - first_bad
            log.info("log %s: transaction indexes rebuilt from segment %d: %d aborted "
                     "transaction(s)", self.path, self.segments[first_bad].base_offset, count)
        for segment in self.segments:
            segment.recovered_control_batch = False

    def _remove_leftovers(self):
        """Delete an interrupted compaction's output and indexes without a .log."""
        for name in os.listdir(self.path):
            if name.endswith(CLEANED_SUFFIX):
                os.unlink(os.path.join(self.path, name))
        names = set(os.listdir(self.path))
        for name in names:
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                for tail in ("", SWAP_SUFFIX):
                    if name.endswith(suffix + tail) and is_segment_name(name, suffix + tail):
                        log_name = name[:-len(suffix + tail)] + LOG_SUFFIX + tail
                        if log_name not in names:
                            os.unlink(os.path.join(self.path, name))

    def _complete_swaps(self, now):
        """Finish a compaction that crashed after its output became a ``.swap`` segment:
        delete the segments it covers and rename it into place (Kafka's rule); its
        transaction index is then rebuilt (``_load_txn_indexes``)."""
        swaps = sorted(base_offset_from_name(n) for n in os.listdir(self.path)
                       if n.endswith(LOG_SUFFIX + SWAP_SUFFIX))
        for base in swaps:
            swap = Segment.open(self.path, base, self.config, now, suffix=SWAP_SUFFIX)
            try:
                swap.sanity_check()
                next_offset = swap.next_offset
            except CorruptIndexError:
                swap.recover()
                next_offset = swap.next_offset
            for name in os.listdir(self.path):
                if is_segment_name(name, LOG_SUFFIX):
                    covered = base_offset_from_name(name)
                    if base < covered < next_offset:
                        Segment.open(self.path, covered, self.config, now).delete()
            swap.close()
            swap.rename_suffix("")
            fsync_directory(self.path)
            self._swapped.add(base)
            log.info("log %s: completed the swap of cleaned segment %d", self.path, base)

    def _load_leader_epoch_cache(self, recovered_from=None):
        """The leader-epoch cache, read (or rebuilt from the batch headers when the file
        does not parse, or is missing while the log holds batches) and trimmed to
        [log start, log end); after an unclean shutdown (``recovered_from``: the recovery
        point) the epochs of the batches past the recovery point are assigned again (the
        checkpoint's last writes were not fsynced: ``segments.leader_epoch``)."""
        cache = LeaderEpochFileCache(self.path)
        existed = cache.exists()
        empty = self.log_end_offset == self.log_start_offset
        if not cache.load() or (not existed and not empty):
            cache.rebuild(((info.partition_leader_epoch, info.base_offset)
                           for segment in self.segments for info in segment.headers(0)),
                          self.log_end_offset)
            log.info("log %s: leader epoch cache rebuilt from the log: %s", self.path,
                     cache.entries())
        elif not existed:
            cache.persist()  # a new log: the file says "no epochs yet", not "a lost file"
        if recovered_from is not None:
            cache.truncate_from_end(self.log_end_offset)
            for segment in self.segments:
                if segment.next_offset > recovered_from:
                    for info in segment.headers(0):
                        cache.assign(info.partition_leader_epoch, info.base_offset)
        cache.truncate_from_end(self.log_end_offset)
        cache.truncate_from_start(self.log_start_offset)
        return cache

    def _read_checkpoint(self, checkpoint, default):
        try:
            return checkpoint.read().get(self.name, default)
        except KafkaStorageError as e:
            log.warning("log %s: ignoring unreadable checkpoint: %s", self.path, e)
            return default

    def _set_segments(self, segments, appended=False):
        """Install ``segments``; ``appended``: the same list with a new last one (a
        roll), which keeps what the transaction-index check learned."""
        if not appended:
            self._txn_scan = None
        self.segments = segments
        self._bases = [segment.base_offset for segment in segments]
        for segment, following in zip(segments, self._bases[1:] + [None]):
            segment.next_base_offset = following

    # -- appending ------------------------------------------------------------------------

    def append(self, batches, leader_epoch=None, origin=ORIGIN_CLIENT):
        """Append producer batches as the leader; return ``(first_offset, last_offset)``,
        or a ``DuplicateAppend`` (the original offsets; nothing appended) for a producer's
        retry of a batch it already appended.

        ``batches`` holds one or more whole RecordBatch v2 batches. Each is validated
        (framing, CRC-32C, size against max.message.bytes); if any fails nothing is
        appended (CorruptRecordError, RecordTooLargeError, InvalidRecordError). Offsets are
        assigned by stamping baseOffset (and partitionLeaderEpoch when ``leader_epoch`` is
        given) — in place when ``batches`` is writable, so the caller's buffer changes as
        in Kafka. Read-only ``batches`` (a request's bytes, a view of a ring) of
        STAMP_HEADS_FROM bytes or more are not copied: each batch's 61-byte header is,
        stamped there, and the file gets the stamped headers and the rest of the batches
        from ``batches`` itself in one ``pwritev``; smaller ones are stamped on a copy
        (cheaper than a write of many pieces). With message.timestamp.type=LogAppendTime the
        batch's maxTimestamp becomes the clock's time (and its CRC is recomputed). With a
        compression.type other than producer, a client's data batch in another codec is
        stored re-encoded in the topic's (on a copy; the records unchanged).
        Batches with a producer id are checked against the producer state as ``origin``
        (``producer_state.ORIGIN_CLIENT``, or ``ORIGIN_COORDINATOR`` for transaction
        markers) before anything is written; see "Producer state" in the module doc.
        """
        self._check_open()
        writable = batches.__class__ is not bytes and _writable(batches)
        if not writable and (self.config.log_append_time
                             or len(batches) < STAMP_HEADS_FROM):
            batches, writable = bytearray(batches), True
        view = memoryview(batches)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        headers = self._validate(view)
        if self.config.recompress_to is not None and origin == ORIGIN_CLIENT:
            recompressed, headers = self._recompressed(view, headers)
            writable = writable or recompressed is not view
            view = recompressed
        for header in headers:
            if header.record_count < 1 or header.last_offset_delta != header.record_count - 1:
                raise InvalidRecordError(
                    f"batch at position {header.position}: recordCount "
                    f"{header.record_count} with lastOffsetDelta "
                    f"{header.last_offset_delta}; a producer batch has "
                    f"lastOffsetDelta = recordCount - 1 >= 0")
        if self.config.compact:
            _require_keys(view, headers, self.config.max_message_bytes)
        data = view
        if not writable:
            data, headers = _stamped_heads(view, headers)
        now = self.clock()
        log_append_time = self.config.log_append_time
        offset = self.log_end_offset
        entries = []
        producers = None
        for header in headers:
            header.stamp(offset, leader_epoch)
            if log_append_time:
                header.set_log_append_time(now)
            offset += header.last_offset_delta + 1
            entries.append((offset - 1, header.max_timestamp,
                            bd.LOG_OVERHEAD + header.batch_length))
            if header.producer_id >= 0:
                if producers is None:
                    producers = []
                producers.append(header)
        first = self.log_end_offset
        if producers is None:
            self._append_validated(data, entries, first, now)
        else:
            pending = self.producer_state.prepare(producers, origin)
            duplicate = pending.duplicate
            if duplicate is not None:
                return DuplicateAppend(duplicate.first_offset, duplicate.last_offset,
                                       duplicate.max_timestamp)
            self._append_validated(data, entries, first, now)
            self._index_aborted(self.producer_state.apply(pending))
        if leader_epoch is not None and leader_epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(leader_epoch, first)
        return first, offset - 1

    def append_as_follower(self, batches):
        """Append batches that carry the leader's offsets; return ``(first, last)``.

        Each batch is validated as in ``append``; base offsets must be >= the log end
        offset and grow from batch to batch (InvalidRecordError otherwise). A trailing
        partial batch (a fetch response may end in one) is ignored, as Kafka does. Each
        batch whose partitionLeaderEpoch is newer than the cache's latest starts an epoch
        there (once the append succeeded).
        """
        self._check_open()
        view = memoryview(batches)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        headers = self._validate(view, allow_partial_tail=True)
        if not headers:
            return self.log_end_offset, self.log_end_offset - 1
        expected = self.log_end_offset
        entries = []
        latest = self.leader_epoch_cache.latest_epoch
        new_epochs = None
        producers = None
        for header in headers:
            if header.producer_id >= 0:
                if producers is None:
                    producers = []
                producers.append(header)
            if header.partition_leader_epoch > latest:
                latest = header.partition_leader_epoch
                if new_epochs is None:
                    new_epochs = []
                new_epochs.append((latest, header.base_offset))
            if header.base_offset < expected:
                raise InvalidRecordError(
                    f"batch at position {header.position}: baseOffset "
                    f"{header.base_offset}, expected at least {expected} (the log end "
                    f"offset, or the previous batch's next offset)")
            expected = header.next_offset
            entries.append((header.last_offset, header.max_timestamp, header.size_in_bytes))
        end = headers[-1].position + headers[-1].size_in_bytes
        first = headers[0].base_offset
        if producers is None:
            self._append_validated(view[:end], entries, first, self.clock())
        else:
            pending = self.producer_state.prepare(producers, ORIGIN_REPLICATION)
            self._append_validated(view[:end], entries, first, self.clock())
            self._index_aborted(self.producer_state.apply(pending))
        if new_epochs is not None:
            for epoch, base_offset in new_epochs:
                self.leader_epoch_cache.assign(epoch, base_offset)
        return first, expected - 1

    def _recompressed(self, view, headers):
        """``view`` with each data batch in the codec of compression.type (Kafka's
        recompression on append), validated again; as it was if every batch has it."""
        codec = codec_id(self.config.recompress_to)
        if all(h.compression_type == codec or h.is_control_batch for h in headers):
            return view, headers
        out = bytearray()
        for header in headers:
            if header.compression_type == codec or header.is_control_batch:
                out += view[header.position:header.position + header.size_in_bytes]
            else:
                out += recompress_batch(header, codec, self.config.max_message_bytes)
        view = memoryview(out)
        return view, self._validate(view)

    def _validate(self, view, allow_partial_tail=False):
        """Validate every batch of ``view``; return their BatchHeaders (nothing written)."""
        total = len(view)
        if total > self.config.segment_bytes:
            raise RecordTooLargeError(
                f"append of {total} bytes is larger than segment.bytes "
                f"{self.config.segment_bytes}")
        max_bytes = self.config.max_message_bytes
        headers = []
        position = 0
        while position < total:
            if allow_partial_tail and (total - position < bd.LOG_OVERHEAD or (
                    position + bd.LOG_OVERHEAD
                    + bd.INT32.unpack_from(view, position + bd.BATCH_LENGTH_OFFSET)[0]
                    > total)):
                break
            header = BatchHeader(view, position)
            size = bd.LOG_OVERHEAD + header.batch_length
            if size > max_bytes:
                raise RecordTooLargeError(
                    f"batch at position {position} is {size} bytes, larger than "
                    f"max.message.bytes {max_bytes}")
            header.validate()
            headers.append(header)
            position += size
        return headers

    def _append_validated(self, view, entries, first_offset, now):
        """Roll if needed, write the batches, move the log end offset, maybe flush.
        ``view``: the batches, or a list of buffers that are the batches back to back.

        Everything that can fail runs before the log end offset moves, and undoes itself
        (see "Failed writes" in the module doc); the flush after it cannot fail the
        append, whose batches are in the log by then."""
        last_offset = entries[-1][0]
        if self._pending_flushes:
            self._complete_pending_flushes(wait=False)
        segment = self.active_segment
        max_timestamp = entries[0][1] if len(entries) == 1 else max(e[1] for e in entries)
        size = len(view) if view.__class__ is not list else sum(map(len, view))
        if segment.should_roll(size, max_timestamp, last_offset, now):
            base = self.log_end_offset
            if last_offset - base > xd.MAX_RELATIVE_OFFSET:
                base = first_offset  # a follower's jump past what one segment can index
            if last_offset - base > xd.MAX_RELATIVE_OFFSET:
                raise InvalidRecordError(
                    f"offsets {first_offset}..{last_offset} of one append do not fit one "
                    f"segment ({xd.MAX_RELATIVE_OFFSET} offsets)")
            segment = self.roll(base)
        try:
            segment.append(view, entries, first_offset)
        except (OSError, LogDirFailureError) as e:
            raise self._storage_error(
                f"append of offsets {first_offset}..{last_offset}", e) from e
        self.log_end_offset = last_offset + 1
        if self._disk.full:
            self._disk.succeeded()
        if (self.log_end_offset - self.recovery_point >= self.config.flush_messages
                or now - self._last_flush_ms >= self.config.flush_ms):
            try:
                self.flush()
            except KafkaStorageError as e:
                log.warning("log %s: offsets %d..%d are appended, but the flush after "
                            "them failed: %s", self.path, first_offset, last_offset, e)

    def _index_aborted(self, completed):
        """Add the aborted ones of ``completed`` (the CompletedTxns of an append's
        markers, in order) to the transaction index, each with the LSO once it was done
        (Kafka's updateTxnIndex). The batches are appended by then: a failed index write
        takes the log offline for a restart to rebuild the index, rather than leave it
        short of an abort a reader must know about."""
        for n, txn in enumerate(completed):
            if txn.is_aborted:
                # Kafka completes an append's transactions one by one: those completed
                # after this one in the same append were still open when it was done
                lso = self.producer_state.last_stable_offset(txn)
                for later in completed[n + 1:]:
                    if later.producer_id != txn.producer_id and later.first_offset < lso:
                        lso = later.first_offset
                entry = AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso)
                try:
                    self.append_aborted_txn(entry)
                except KafkaStorageError as e:
                    self._go_offline(f"transaction index write failed after the append of "
                                     f"offset {txn.last_offset}: {e}", needs_recovery=True)
                    raise

    def append_aborted_txn(self, txn):
        """Record ``txn`` (a ``txn_index.AbortedTxn``), whose ABORT marker is the last
        batch appended, in the active segment's transaction index (``flush`` makes it
        durable with the segment). ValueError if its marker is not in the active
        segment or not after the index's last entry; KafkaStorageError if the write
        fails (the index is then as before)."""
        self._check_open()
        segment = self.active_segment
        if not segment.base_offset <= txn.last_offset < self.log_end_offset:
            raise ValueError(f"log {self.path}: aborted transaction {txn} does not end in "
                             f"the active segment [{segment.base_offset}, "
                             f"{self.log_end_offset})")
        try:
            segment.txn_index.append(txn)
        except OSError as e:
            raise self._storage_error(
                f"write of transaction index {segment.txn_index.path}", e) from e

    def _storage_error(self, what, error):
        """The KafkaStorageError to raise for the failed disk operation ``what``:
        ``error`` is an OSError (the operation undid itself; the log is as before it) or
        a LogDirFailureError (it could not: the log goes offline first). A full disk is
        logged once per episode (``disk_full``)."""
        self._disk.failed(what, error, offline=isinstance(error, LogDirFailureError))
        if isinstance(error, LogDirFailureError):
            self._go_offline(f"{what} failed: {error.args[0]}", needs_recovery=True)
            return KafkaStorageError(f"partition {self.name} is offline: {self.offline}")
        return KafkaStorageError(f"partition {self.name}: {what} failed with "
                                 f"{describe_os_error(error)}")

    def _go_offline(self, reason, needs_recovery):
        self._needs_recovery = self._needs_recovery or needs_recovery
        if self.offline is None:
            self.offline = reason
            log.error("log %s is offline: %s. Nothing more is read from or written to it "
                      "until the broker restarts and %s", self.path, reason,
                      "recovers it from its files" if needs_recovery else
                      "checks it again (nothing is deleted)")
            if self.on_offline is not None:
                self.on_offline(reason)

    def _corrupt(self, error):
        """The KafkaStorageError to raise for the CorruptSegmentError ``error`` (bytes
        written whole and flushed fail their checks): the log goes offline first."""
        self._go_offline(error.args[0], needs_recovery=False)
        return KafkaStorageError(f"partition {self.name} is offline: {self.offline}")

    # -- rolling and flushing -------------------------------------------------------------

    def roll(self, base_offset=None):
        """Seal the active segment and start a new one at ``base_offset`` (default: LEO).

        The sealed segment is fsynced by a background thread, as Kafka does, so the
        caller does not wait for the disk; the recovery point moves to the new segment's
        base offset once that is done (noticed by the next append or flush). Each
        background fsync holds three descriptors until it runs, so at most
        ``MAX_BACKGROUND_SYNCS`` wait in the process: beyond (thousands of partitions
        rolling at once) the roll fsyncs the sealed segment itself; without descriptors
        for it at all, the next ``flush()`` does.
        """
        self._check_open()
        base = self.log_end_offset if base_offset is None else base_offset
        old = self.active_segment
        if old.base_offset == base and old.size == 0:
            return old
        if base < self.log_end_offset:
            raise ValueError(f"cannot roll at offset {base}, below the log end offset "
                             f"{self.log_end_offset}")
        try:
            segment = Segment.create(self.path, base, self.config, self.clock())
            try:
                old.seal(durable=False)
            except OSError:
                segment.discard()  # the roll never happened: redone by the next append
                raise
        except (OSError, LogDirFailureError) as e:
            raise self._storage_error(f"roll to a new segment at offset {base}", e) from e
        self._sync_rolled(old, base)
        self._set_segments(self.segments + [segment], appended=True)
        self.log_end_offset = base
        self._take_producer_snapshot(base, sync=False)
        log.debug("log %s: rolled to segment %d", self.path, base)
        return segment

    def _take_producer_snapshot(self, offset, sync):
        """Snapshot the producer state at ``offset`` (the log end). A failure only costs a
        longer replay at the next open, so it is logged, not raised."""
        try:
            self.producer_state.take_snapshot(offset, sync=sync)
        except OSError as e:
            log.warning("log %s: producer state snapshot at offset %d not written: %s; the "
                        "next open replays the log instead", self.path, offset,
                        describe_os_error(e))

    def _sync_rolled(self, old, base):
        """Queue the fsync of the sealed segment ``old`` (see ``roll``): run by the flusher,
        or now, or (future None) by the next flush(); the recovery point passes ``base``
        once it is done."""
        try:
            sync = old.sync_files()
        except OSError as e:
            log.warning("log %s: cannot fsync segment %d in the background (%s); the next "
                        "flush will", self.path, old.base_offset, describe_os_error(e))
            future = None
        else:
            if _background_syncs.acquire(blocking=False):
                future = _flush_executor().submit(sync)
                future.add_done_callback(lambda _: _background_syncs.release())
            else:
                future = concurrent.futures.Future()
                try:
                    sync()
                except (OSError, LogDirFailureError) as e:
                    future.set_exception(e)
                else:
                    future.set_result(None)
        self._pending_flushes.append((future, old, base))

    def _complete_pending_flushes(self, wait):
        """Move the recovery point past rolled segments whose background fsync is done
        (all of them when ``wait``), in roll order."""
        while self._pending_flushes:
            future, segment, base = self._pending_flushes[0]
            if not wait and (future is None or not future.done()):
                return
            try:
                if future is not None:
                    future.result()
                elif not segment.closed:  # a deleted segment needs no fsync
                    segment.flush()  # the .log; indexes are checked at open, rebuilt if bad
            except (OSError, LogDirFailureError) as e:
                raise self._storage_error(
                    f"background fsync of rolled segment {segment.log_path}", e) from e
            self._pending_flushes.pop(0)
            segment.unflushed = False
            base = min(base, self.log_end_offset)
            if base > self.recovery_point:
                self._checkpoint_recovery_point(base)

    def flush(self):
        """fsync every segment written since the last flush, then checkpoint the recovery
        point (= the log end offset)."""
        self._check_open()
        self._flush_files()

    def _flush_files(self, durable=True):
        """``durable=False``: write the same files without an fsync (``close_together``
        syncs them all at once)."""
        self._complete_pending_flushes(wait=True)
        for segment in self.segments:
            if segment.unflushed or segment.offset_index.mutable:
                try:
                    if durable:
                        segment.flush()
                    else:
                        segment.write_indexes()
                except (OSError, LogDirFailureError) as e:
                    raise self._storage_error(f"flush of segment {segment.log_path}",
                                              e) from e
        self._last_flush_ms = self.clock()
        try:  # before the recovery point moves past the batches whose epochs it records
            self.leader_epoch_cache.flush(durable)
        except OSError as e:
            raise self._storage_error(
                f"write of checkpoint {self.leader_epoch_cache.path}", e) from e
        if self.recovery_point != self.log_end_offset:
            self._checkpoint_recovery_point(self.log_end_offset, durable)

    def flush_if_due(self):
        """Flush when flush.messages or flush.ms says so (for a periodic flusher)."""
        if (self.log_end_offset - self.recovery_point >= self.config.flush_messages
                or self.clock() - self._last_flush_ms >= self.config.flush_ms):
            self.flush()
            return True
        return False

    def _write_recovery_checkpoint(self):
        self._recovery_checkpoint.write({self.name: self.recovery_point})

    def _checkpoint_recovery_point(self, offset, durable=True):
        """Write ``offset`` to the recovery-point checkpoint, then make it the recovery
        point: if the write fails the old one stays (the file keeps it too), and the
        next flush tries again."""
        path = self._recovery_checkpoint.path
        try:
            self._recovery_checkpoint.write({self.name: offset}, durable, in_place=not durable)
        except OSError as e:
            e.filename = e.filename or path
            raise self._storage_error(f"write of checkpoint {path}", e) from e
        self.recovery_point = offset

    def _write_start_checkpoint(self, durable=True):
        """Write the log start offset; ``durable=False`` (``close_together``): in place,
        without an fsync, and only if it changed since the open or the last write."""
        if not durable and self._start_written == self.log_start_offset:
            return
        self._start_checkpoint.write({self.name: self.log_start_offset}, durable,
                                     in_place=not durable)
        self._start_written = self.log_start_offset

    # -- reading --------------------------------------------------------------------------

    def read_slice(self, offset, max_bytes, max_offset=None, min_one_batch=True):
        """Locate the batches to serve a read from ``offset``: a LogSlice.

        The slice starts at the batch holding ``offset`` (or the next batch, past a
        compaction gap), holds whole batches only — at most ``max_bytes`` of them, but at
        least one even when it is larger (KIP-74) unless ``min_one_batch`` is False — and
        no batch holding an offset >= ``max_offset`` (the high watermark). Unlike Kafka,
        a slice never ends in a partial batch, so a ring never carries bytes a reader
        must discard. Empty at the log end. OffsetOutOfRangeError below the log start
        offset or above the log end offset.
        """
        self._check_open()
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside the log's range [{self.log_start_offset}, "
                f"{self.log_end_offset}] ({self.path})")
        if max_bytes < 0:
            raise ValueError(f"max_bytes {max_bytes} < 0")
        if offset == self.log_end_offset or (max_offset is not None and offset >= max_offset):
            return LogSlice(None, 0, 0, offset)
        segments = self.segments
        for n in range(max(bisect.bisect_right(self._bases, offset) - 1, 0), len(segments)):
            segment = segments[n]
            try:
                found = segment.read(offset, max_bytes, max_offset, min_one_batch)
            except CorruptSegmentError as e:  # only from the first read of the segment
                raise self._corrupt(e) from e
            if found is not None:
                first, size = found
                return LogSlice(segment, first.position, size, first.base_offset)
        return LogSlice(None, 0, 0, offset)

    def scrub(self):
        """CRC-check the next segment this process has not checked yet, as its first read
        would (``Segment.verify``), so that damage in a replica nobody reads (a
        follower's) is found too; True if a segment was checked, False once all are.
        Damage takes the log offline (KafkaStorageError), as a read finding it does."""
        self._check_open()
        if self._scrubbed:
            return False
        for segment in self.segments:
            if segment.unverified_end:
                try:
                    segment.verify()
                except CorruptSegmentError as e:
                    raise self._corrupt(e) from e
                return True
        self._scrubbed = True  # new segments are checked as they are written
        return False

    def collect_aborted_transactions(self, start_offset, upper_bound_offset):
        """The AbortedTxns overlapping [start_offset, upper_bound_offset): their ABORT
        marker at or after ``start_offset`` and their first offset before
        ``upper_bound_offset``, in marker order. Walks the transaction indexes from the
        segment holding ``start_offset`` on and stops at the first entry whose last
        stable offset reaches ``upper_bound_offset`` (no later abort can have begun
        before it: Kafka's collectAbortedTransactions)."""
        self._check_open()
        aborted = []
        n = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        for k in range(n, len(self.segments)):
            index = self.segments[k].txn_index
            if not index.verified:
                self._verify_txn_indexes(k)
            try:
                found, complete = index.collect(start_offset, upper_bound_offset)
            except CorruptIndexError as e:  # changed on disk since this process wrote it
                raise self._corrupt(CorruptSegmentError(e.args[0])) from e
            aborted += found
            if complete:
                break
        return aborted

    def _verify_txn_indexes(self, n):
        """Check the transaction indexes not yet verified of the segments up to ``n``
        against their batches (module doc), rewriting those that differ."""
        done, ongoing = self._txn_scan or (0, {})
        if done > n:
            done, ongoing = 0, {}
        ongoing = dict(ongoing)
        last = len(self.segments) - 1
        for k in range(done, n + 1):
            segment = self.segments[k]
            if segment.txn_index.verified:
                scan_aborted(segment, ongoing)
                continue
            try:
                problem = verify_txn_index(segment, ongoing)
            except OSError as e:
                raise self._storage_error(
                    f"rewrite of transaction index {segment.txn_index.path}", e) from e
            if problem is not None:
                log.warning("log %s: %s; rewritten from the segment's batches", self.path,
                            problem)
        if n < last:  # the active segment still grows: what follows it is not kept
            self._txn_scan = (n + 1, ongoing)

    def fetch_upper_bound(self, log_slice, max_offset=None):
        """An offset past every record of ``log_slice`` (a ``read_slice`` answer), at
        most ``max_offset``: the next segment's base or the log end (a slice never
        crosses segments) — what a read_committed fetch collects aborted transactions
        up to, as Kafka's fetchUpperBoundOffset falls back to."""
        segment = log_slice.segment
        upper = self.log_end_offset
        if segment is not None and segment.next_base_offset is not None:
            upper = segment.next_base_offset
        return upper if max_offset is None else min(upper, max_offset)

    def read(self, offset, max_bytes, max_offset=None, min_one_batch=True):
        """The bytes of ``read_slice(...)`` (see there)."""
        return self.read_slice(offset, max_bytes, max_offset, min_one_batch).tobytes()

    def lookup_timestamp(self, timestamp):
        """``TimestampOffset`` of the first record whose timestamp is >= ``timestamp``, or
        None when there is none. ``LATEST_TIMESTAMP`` (-1) gives the log end offset and
        ``EARLIEST_TIMESTAMP`` (-2) the log start offset (timestamp -1), as ListOffsets.
        """
        self._check_open()
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(-1, self.log_end_offset)
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampOffset(-1, self.log_start_offset)
        start = self.log_start_offset
        for segment in self.segments[max(0, bisect.bisect_right(self._bases, start) - 1):]:
            if segment.largest_timestamp < timestamp:
                continue
            try:
                info = segment.find_timestamp(timestamp, start)
            except CorruptSegmentError as e:
                raise self._corrupt(e) from e
            if info is not None:
                return self._record_at_or_after(segment, info, timestamp, start)
        return None

    def offset_for_timestamp(self, timestamp):
        """The first offset whose record timestamp is >= ``timestamp`` (None if none)."""
        found = self.lookup_timestamp(timestamp)
        return None if found is None else found.offset

    def _record_at_or_after(self, segment, info, timestamp, start):
        """Within the batch ``info``: the first record at or after ``start`` whose
        timestamp is >= ``timestamp`` (decoding the records)."""
        data = segment.read_bytes(info.position, info.size)
        header = BatchHeader(data)
        if header.timestamp_type == 1:  # LogAppendTime: every record has maxTimestamp
            return TimestampOffset(header.max_timestamp, max(info.base_offset, start))
        for record in RecordBatch(data, 0, self.config.max_message_bytes):
            if record.offset >= start and record.timestamp >= timestamp:
                return TimestampOffset(record.timestamp, record.offset)
        raise KafkaStorageError(
            f"log {self.path}: batch at offset {info.base_offset} has maxTimestamp "
            f"{info.max_timestamp} but no record with a timestamp >= {timestamp}")

    # -- truncation -----------------------------------------------------------------------

    def truncate_to(self, offset):
        """Drop every record at or after ``offset`` (a follower matching its leader);
        return the bytes dropped. A batch holding ``offset`` is dropped whole, so the log
        end offset becomes ``offset`` or that batch's base offset."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset {offset} < 0")
        if offset >= self.log_end_offset:
            return 0
        self._complete_pending_flushes(wait=True)
        if offset < self.segments[0].base_offset:
            return self.truncate_fully_and_start_at(offset)
        dropped = 0
        keep = bisect.bisect_left(self._bases, offset)
        if keep == 0:
            keep = 1  # offset == base of the first segment: truncate it to empty
        for segment in self.segments[keep:]:
            dropped += segment.size
            segment.delete()
        self._set_segments(self.segments[:keep])
        segment = self.active_segment
        truncated, first_dropped = segment.truncate_to(offset)
        segment.flush()  # make the shorter file durable: the dropped batches must not return
        fsync_directory(self.path)
        dropped += truncated
        self.log_end_offset = min(offset, first_dropped.base_offset) if first_dropped \
            else offset
        if segment.size == 0:
            segment.created_ms = self.clock()
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self._write_recovery_checkpoint()
        if self.log_start_offset > self.log_end_offset:
            self.log_start_offset = self.log_end_offset
            self._write_start_checkpoint()
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self._replay_producer_state(self.producer_state.truncate_and_reload(
            self.log_start_offset, self.log_end_offset))
        return dropped

    def truncate_fully_and_start_at(self, offset):
        """Delete every segment and restart the log, empty, at ``offset``; return the
        bytes dropped (Kafka's truncateFullyAndStartAt)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset {offset} < 0")
        self._complete_pending_flushes(wait=True)
        dropped = self.size_in_bytes
        for segment in self.segments:
            segment.delete()
        self._set_segments([Segment.create(self.path, offset, self.config, self.clock())])
        self.log_end_offset = self.log_start_offset = self.recovery_point = offset
        self._write_recovery_checkpoint()
        self._write_start_checkpoint()
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(offset)
        fsync_directory(self.path)
        return dropped

    # -- retention ------------------------------------------------------------------------

    def delete_old_segments(self, high_watermark=None):
        """Apply retention: delete whole non-active segments that are past retention.ms,
        over retention.bytes, or below the log start offset; return how many.

        Only with cleanup.policy containing ``delete`` are retention.ms and
        retention.bytes applied (as Kafka). A segment is deleted only if every offset in
        it is below ``high_watermark`` (when given). The log start offset moves to the
        new first segment's base offset.
        """
        self._check_open()
        now = self.clock()
        config = self.config
        excess = self.size_in_bytes - config.retention_bytes
        count = 0
        for segment, following in zip(self.segments, self.segments[1:]):
            if high_watermark is not None and following.base_offset > high_watermark:
                break
            below_start = following.base_offset <= self.log_start_offset
            expired = (config.delete and config.retention_ms >= 0
                       and now - segment.largest_timestamp > config.retention_ms)
            oversized = (config.delete and config.retention_bytes >= 0
                         and excess - segment.size >= 0)
            if not (below_start or expired or oversized):
                break
            excess -= segment.size
            count += 1
        if count:
            self._delete_first_segments(count)
        return count

    def delete_records_before(self, offset):
        """Move the log start offset up to ``offset`` (Kafka's DeleteRecords) and delete
        the segments wholly below it; return the new log start offset."""
        self._check_open()
        if offset > self.log_end_offset or offset < 0:
            raise OffsetOutOfRangeError(
                f"cannot delete records before offset {offset}: the log ends at "
                f"{self.log_end_offset}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._write_start_checkpoint()
            self.leader_epoch_cache.truncate_from_start(offset)
            self.delete_old_segments()
        return self.log_start_offset

    def _delete_first_segments(self, count):
        for segment in self.segments[:count]:
            log.info("log %s: deleting segment %d (%d bytes)", self.path,
                     segment.base_offset, segment.size)
            segment.delete()
        self._set_segments(self.segments[count:])
        first = self.segments[0].base_offset
        if first > self.log_start_offset:
            self.log_start_offset = first
            self._write_start_checkpoint()
            self.leader_epoch_cache.truncate_from_start(first)
        self.producer_state.delete_snapshots_before(self.log_start_offset)
        self.recovery_point = max(self.recovery_point, first)

    # -- compaction support (segments.cleaner) --------------------------------------------

    def replace_segments(self, cleaned, old_segments):
        """Swap ``cleaned`` (a flushed Segment with suffix ``.cleaned`` and the base offset
        of ``old_segments[0]``, its transaction index written by the cleaner) in for
        ``old_segments``, surviving a crash at any step.

        The rename of the cleaned .log to ``.swap`` is the commit point: before it, the
        next open deletes the ``.cleaned`` files; after it, the next open completes the
        swap (``_complete_swaps``). Then the old segments are deleted and the ``.swap``
        files renamed into place.
        """
        self._check_open()
        if cleaned.base_offset != old_segments[0].base_offset:
            raise ValueError(f"cleaned segment {cleaned.base_offset} does not start where "
                             f"{old_segments[0].base_offset} does")
        cleaned.seal()
        cleaned.rename_suffix(SWAP_SUFFIX)
        fsync_directory(self.path)
        old_ids = {id(s) for s in old_segments}
        for segment in old_segments[1:]:
            segment.delete()
        # the cleaned .txnindex, if any, takes the old one's name; without one, the old
        # one must not outlive its segment (a crash before the rename below is covered
        # by the rebuild _complete_swaps asks for)
        old_segments[0].txn_index.delete()
        old_segments[0].close()
        cleaned.rename_suffix("")
        fsync_directory(self.path)
        segments = []
        for segment in self.segments:
            if segment is old_segments[0]:
                segments.append(cleaned)
            elif id(segment) not in old_ids:
                segments.append(segment)
        self._set_segments(segments)

    def update_config(self, config):
        """Use ``config`` from now on (new segments get its index size)."""
        self.config = config
        for segment in self.segments:
            segment.config = config

    # -- closing --------------------------------------------------------------------------

    def close(self):
        """Flush, checkpoint, close the files and leave the clean-shutdown marker (so the
        next open skips validation). Safe to call twice."""
        if self._close_files(durable=True):
            self._mark_clean(durable=True)

    def _close_files(self, durable):
        """``close`` up to its clean-shutdown marker; return whether the marker is owed.
        ``durable=False`` fsyncs nothing (``close_together``)."""
        if self._closed:
            return False
        if self._needs_recovery:  # no flush and no marker: the next open recovers
            self._closed = True
            self._close_segments()
            return False
        if self.offline is None:
            self._check_open()
            self._flush_files(durable)
            if self.log_end_offset > self.log_start_offset:  # else nothing to replay
                self._take_producer_snapshot(self.log_end_offset, sync=durable)
        else:  # corrupt bytes found: the files are as the log wrote them, so close
            # cleanly (recovery would cut the log at the damage); the next open finds
            # the damage again on its first read
            self._flush_files(durable)
        self._write_start_checkpoint(durable)
        self._close_segments()
        self._closed = True
        return True

    def _mark_clean(self, durable):
        marker = os.path.join(self.path, CLEAN_SHUTDOWN_MARKER)
        try:
            os.rename(os.path.join(self.path, SPENT_MARKER), marker)
        except FileNotFoundError:  # a new log, or one the last process did not close
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                if durable:
                    durability.fsync(fd)
            finally:
                os.close(fd)
        if durable:
            fsync_directory(self.path)

    def abandon(self):
        """Close the files without a flush, a checkpoint or the clean-shutdown marker:
        another process now writes this log's directory (a deposed controller's metadata
        log), so nothing more of this one's may reach it. Safe to call twice."""
        for segment in self.segments:
            segment.abandon()
        self._closed = True

    def delete(self):
        """Close the files and remove the partition directory. Safe to call twice."""
        self._close_segments()
        self._closed = True
        shutil.rmtree(self.path, ignore_errors=True)

    def _close_segments(self):
        for segment in self.segments:
            segment.close()

    def _check_open(self):
        if self._closed:
            raise KafkaStorageError(f"log {self.path} is closed")
        if self.offline is not None:
            raise KafkaStorageError(f"partition {self.name} is offline: {self.offline}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def close_together(logs, path):
    """Close ``logs`` (all on the file system holding ``path``) as ``close`` does each, with
    two syncfs in all instead of about ten fsyncs per log (a broker's clean shutdown): every
    log's files are written without an fsync, one ``checkpoint.sync_filesystem`` makes them
    durable, then every owed clean-shutdown marker is created and a second syncfs makes
    the markers durable. A marker never reaches the disk before its log's files: a crash
    (or a failed syncfs, which raises OSError) before the second sync leaves logs without
    their marker, which the next open recovers, as after any crash.

    Returns ``[(log, exception)]`` for the logs whose files could not be written
    (KafkaStorageError, OSError): they are closed without a marker; the others are closed.
    """
    owed, failed = [], []
    for partition_log in logs:
        try:
            if partition_log._close_files(durable=False):
                owed.append(partition_log)
        except (KafkaStorageError, OSError) as exc:
            partition_log._close_segments()
            partition_log._closed = True
            failed.append((partition_log, exc))
    if owed:
        sync_filesystem(path)
        for partition_log in owed:
            partition_log._mark_clean(durable=False)
        sync_filesystem(path)
    return failed


def stage_empty_log(path):
    """Create the directory ``path`` holding an empty log at offset 0 as a clean ``close``
    leaves it (an empty segment, both checkpoints at 0, the clean-shutdown marker), and
    fsync nothing.

    For creating many logs at once: their creator syncs them all with one
    ``checkpoint.sync_filesystem``, renames each directory into place and fsyncs the
    parent once. A directory staged under a name no reader looks at until that sync is
    never seen half-made. Opening it writes nothing but the marker's removal (see
    ``durable_open``).
    """
    os.mkdir(path)
    for file in segment_paths(path, 0):
        os.close(os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    name = os.path.basename(os.path.normpath(path))
    for checkpoint in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT):
        OffsetCheckpoint(os.path.join(path, checkpoint)).write({name: 0}, durable=False)
    os.close(os.open(os.path.join(path, CLEAN_SHUTDOWN_MARKER),
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))


_executor = None
#: Background fsyncs of rolled segments that may wait at once in the process (each holds
#: three descriptors of its own until it runs).
MAX_BACKGROUND_SYNCS = 32
_background_syncs = threading.BoundedSemaphore(MAX_BACKGROUND_SYNCS)


def _flush_executor():
    """The process's one thread that fsyncs rolled segments (Kafka's flush scheduler)."""
    global _executor
    if _executor is None:
        _executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="ringlog-segment-flush")
    return _executor


def is_segment_name(name, suffix):
    stem = name[:-len(suffix)] if name.endswith(suffix) else None
    return stem is not None and len(stem) == 20 and stem.isdigit()


def _stamped_heads(view, headers):
    """``(pieces, headers)`` for appending the validated batches of the read-only ``view``
    without copying them: each batch's header copied into a bytearray of its own, where
    ``stamp`` can write (its new BatchHeader over it), then the rest of the batch as a
    slice of ``view``. The CRC covers neither field the leader stamps, so it stays valid."""
    pieces = []
    stamped = []
    head = bd.HEADER_SIZE
    for header in headers:
        position = header.position
        own = BatchHeader(bytearray(view[position:position + head]))
        pieces.append(own.buf)
        pieces.append(view[position + head:position + header.size_in_bytes])
        stamped.append(own)
    return pieces, stamped


def _writable(buf):
    if isinstance(buf, bytearray):
        return True
    if isinstance(buf, bytes):
        return False
    with memoryview(buf) as view:
        return not view.readonly


def _require_keys(view, headers, max_record_bytes):
    """A compacted log keeps the last record per key, so every record needs one (Kafka
    refuses keyless records on append to a compacted topic). Decodes the records, each
    batch's decompressed to at most what its records may hold (``max_record_bytes``:
    max.message.bytes)."""
    for header in headers:
        if header.is_control_batch:
            continue
        for record in RecordBatch(view, header.position, max_record_bytes):
            if record.key is None:
                raise InvalidRecordError(
                    f"batch at position {header.position}: record at offset delta "
                    f"{record.offset - header.base_offset} has no key; a compacted log "
                    f"(cleanup.policy=compact) needs one on every record")
