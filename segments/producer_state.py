"""Per-partition producer state: the broker's half of the idempotent and transactional
producer (Kafka's ProducerStateManager, ProducerAppendInfo, ProducerStateEntry).

For every producer id that wrote to the partition, ``ProducerStateManager`` keeps a
``ProducerStateEntry``: its epoch, the metadata of its last 5 batches (``BatchMetadata``:
first/last sequence, first/last offset, max timestamp), the epoch of the last
transaction coordinator that wrote a marker for it, the first offset of its open
transaction (-1: none) and its last timestamp. It also keeps the open transactions
(first offset -> producer id) and the completed ones whose marker is not yet below the
high watermark, which together give the first unstable offset (the last stable offset's
bound).

Who calls what (the ``PartitionLog`` owns one manager, ``log.producer_state``)::

    pending = state.prepare(headers, origin)     # checks; raises; nothing changes yet
    if pending.duplicate is not None: ...        # a retried batch: answer its offsets
    ... write the batches ...
    completed = state.apply(pending)             # -> [CompletedTxn]; state updated

``prepare(headers, origin) -> ProducerAppend`` takes the BatchHeaders of one append (with
their offsets assigned; only those with producerId >= 0 — the log collects them with one
comparison per batch, so plain producers cost nothing else) and checks each batch as
Kafka does for ``origin``:

- ``ORIGIN_CLIENT`` (a produce request): a batch equal in epoch and sequence range to one
  of the producer's last 5 is a duplicate: ``pending.duplicate`` is that batch's
  ``BatchMetadata`` (its original offsets), and the log appends nothing and raises
  nothing (Kafka answers the original base offset and no error). Otherwise an epoch older
  than the producer's raises InvalidProducerEpochError (47); with the same epoch the
  first sequence must follow the last (INT32_MAX is followed by 0), else
  OutOfOrderSequenceNumberError (45) — also for a duplicate older than the last 5; a new
  epoch must start at sequence 0 (OutOfOrderSequenceNumberError) unless the producer is
  unknown here: a producer with no state is accepted at any sequence, as current Kafka
  does (since KIP-360 the broker no longer answers UNKNOWN_PRODUCER_ID; its state may
  have been removed by retention). A control batch, or a negative baseSequence, is
  INVALID_RECORD (clients may not write markers). A non-transactional batch from a
  producer with an open transaction is InvalidTxnStateError (48).
- ``ORIGIN_COORDINATOR`` (transaction markers, WriteTxnMarkers): as a client but without
  the duplicate and sequence checks. A control batch (attribute bit 5) holding an
  EndTransactionMarker (key: version int16, type int16 — 0 ABORT, 1 COMMIT; value:
  version int16, coordinatorEpoch int32) ends the producer's transaction: an epoch older
  than the producer's raises InvalidProducerEpochError (Kafka replaced PRODUCER_FENCED
  by INVALID_PRODUCER_EPOCH here in 2.7), a coordinator epoch older than the last one
  seen for the producer TransactionCoordinatorFencedError (52).
- ``ORIGIN_REPLICATION`` (a follower, and the log's own replay at open): no duplicate or
  sequence checks, old epochs accepted (logged), so a follower's state equals its
  leader's.

``apply(pending) -> [CompletedTxn]`` commits a prepared append after its batches are
written: a transactional batch (attribute bit 4) opens its producer's transaction at its
base offset, a marker closes it — ``CompletedTxn(producer_id, first_offset, last_offset,
is_aborted)`` (last_offset: the marker's offset), returned for the transaction index, and
kept as *unreplicated* until ``on_high_watermark_updated(hw)`` passes its marker. A marker
for a producer without an open transaction completes nothing (an empty transaction).

``complete_txn(producer_id, epoch, is_commit, marker_offset, coordinator_epoch,
timestamp=-1) -> CompletedTxn | None`` is the same marker rule for one marker whose
control batch the caller appends itself (checked as ``ORIGIN_COORDINATOR`` and applied at
once: call it after the marker is written). ``first_unstable_offset()`` is the lowest
first offset of an open or unreplicated transaction (None: none), ``ongoing_transactions()``
the open ones, ``last_stable_offset(completed)`` Kafka's LSO for the transaction index
entry of ``completed`` (call before ``apply`` moved it).
``on_high_watermark_updated(hw)`` lets the first unstable offset pass completed
transactions whose markers are below ``hw``; ``remove_expired_producers(now_ms,
expiration_ms)`` forgets idle producers without an open transaction
(producer.id.expiration.ms: the broker's log manager calls it).

Snapshots (``producer_snapshot_descriptor``): ``take_snapshot(offset)`` writes the state
of every batch below ``offset`` (the log end) as ``<offset>.snapshot``;
``load(log_start_offset, max_offset)`` reads the latest valid one at or below
``max_offset`` — one that fails its CRC or parse is logged (WARNING, naming the file) and
deleted, and the next older one tried — and returns the offset from which the log must
replay its batches (``replay``); ``truncate_and_reload``, ``truncate_fully_and_start_at``
and ``delete_snapshots_before`` follow the log's truncation and retention. A snapshot
keeps each producer's last batch only, so after a load the duplicate window of a producer
is that batch until it appends again (as in Kafka).

Thread safety: none. The partition's owning thread (the log's single writer) makes every
call.
"""
from __future__ import annotations

import logging
import os
from collections import namedtuple

from segments import durability, producer_snapshot_descriptor as sd
from segments.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from segments.record import batch_descriptor as bd, control_record_descriptor as cd
from segments.record.records import RecordBatch

log = logging.getLogger(__name__)

INT32_MAX = 0x7FFFFFFF
#: Batches per producer whose retries are recognised as duplicates (Kafka's
#: NUM_BATCHES_TO_RETAIN; the producer keeps at most 5 in flight).
NUM_BATCHES_TO_RETAIN = 5

#: Kafka's AppendOrigin.
ORIGIN_CLIENT = "client"
ORIGIN_COORDINATOR = "coordinator"
ORIGIN_REPLICATION = "replication"

BatchMetadata = namedtuple("BatchMetadata",
                           "first_seq last_seq first_offset last_offset max_timestamp")
CompletedTxn = namedtuple("CompletedTxn", "producer_id first_offset last_offset is_aborted")


def increment_sequence(sequence, increment):
    """``sequence + increment`` wrapping past INT32_MAX to 0 (DefaultRecordBatch)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence, decrement):
    """``sequence - decrement`` wrapping below 0 to INT32_MAX."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq, next_seq):
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateEntry:
    """What the partition knows of one producer (see the module doc)."""

    __slots__ = ("producer_id", "producer_epoch", "coordinator_epoch", "last_timestamp",
                 "current_txn_first_offset", "batches")

    def __init__(self, producer_id, producer_epoch=bd.NO_PRODUCER_EPOCH, coordinator_epoch=-1,
                 last_timestamp=bd.NO_TIMESTAMP, current_txn_first_offset=-1, batches=()):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batches = list(batches)

    @property
    def last_seq(self):
        return self.batches[-1].last_seq if self.batches else bd.NO_SEQUENCE

    @property
    def last_data_offset(self):
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self):
        last = self.batches[-1] if self.batches else None
        return last.last_offset - last.first_offset if last else 0

    def without_batches(self):
        """A copy with no batch metadata (what an append starts from: Kafka's
        ``withProducerIdAndBatchMetadata``)."""
        return ProducerStateEntry(self.producer_id, self.producer_epoch,
                                  self.coordinator_epoch, self.last_timestamp,
                                  self.current_txn_first_offset)

    def maybe_update_epoch(self, epoch):
        if self.producer_epoch != epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(self, epoch, metadata):
        self.maybe_update_epoch(epoch)
        if len(self.batches) == NUM_BATCHES_TO_RETAIN:
            del self.batches[0]
        self.batches.append(metadata)
        self.last_timestamp = metadata.max_timestamp

    def update(self, newer):
        """Take over ``newer`` (an append's entry for this producer)."""
        self.maybe_update_epoch(newer.producer_epoch)
        for metadata in newer.batches:
            self.add_batch(newer.producer_epoch, metadata)
        self.coordinator_epoch = newer.coordinator_epoch
        self.current_txn_first_offset = newer.current_txn_first_offset
        self.last_timestamp = newer.last_timestamp

    def find_duplicate(self, epoch, first_seq, last_seq):
        """The retained batch with exactly this epoch and sequence range, or None."""
        if epoch != self.producer_epoch:
            return None
        for metadata in self.batches:
            if metadata.first_seq == first_seq and metadata.last_seq == last_seq:
                return metadata
        return None

    def __eq__(self, other):
        return isinstance(other, ProducerStateEntry) and all(
            getattr(self, name) == getattr(other, name) for name in self.__slots__)

    def __repr__(self):
        return (f"ProducerStateEntry(producer_id={self.producer_id}, "
                f"epoch={self.producer_epoch}, coordinator_epoch={self.coordinator_epoch}, "
                f"last_timestamp={self.last_timestamp}, "
                f"txn_first_offset={self.current_txn_first_offset}, batches={self.batches})")


class _ProducerAppendInfo:
    """One producer's part of an append: the entry it started from and the one it builds."""

    __slots__ = ("current", "updated", "started")

    def __init__(self, current):
        self.current = current
        self.updated = current.without_batches()
        self.started = []  # first offsets of the transactions this append opens


class ProducerAppend:
    """A prepared append (``ProducerStateManager.prepare``): per producer the state it will
    leave, the transactions its markers complete, and ``duplicate`` (the original
    BatchMetadata when a client's batch is a retry; then nothing may be appended)."""

    __slots__ = ("infos", "completed", "duplicate")

    def __init__(self):
        self.infos = {}
        self.completed = []
        self.duplicate = None


class ProducerStateManager:
    """The producer state of the partition log in directory ``path`` (module doc)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.name = os.path.basename(os.path.normpath(self.path))
        #: producer id -> ProducerStateEntry
        self.producers = {}
        self._ongoing = {}       # first offset -> producer id: open transactions
        self._unreplicated = {}  # first offset -> CompletedTxn: marker not below the HW yet
        self._snapshots = sorted(
            offset for offset in map(sd.offset_of, os.listdir(self.path)) if offset is not None)

    # -- appends --------------------------------------------------------------------------

    def prepare(self, headers, origin):
        """Check the batches ``headers`` (producerId >= 0, offsets assigned) of one append
        from ``origin``; return the ProducerAppend to ``apply`` once they are written.
        Raises the errors of the module doc; changes nothing."""
        pending = ProducerAppend()
        infos = pending.infos
        producers = self.producers
        for header in headers:
            producer_id = header.producer_id
            if origin == ORIGIN_CLIENT:
                self._check_client_batch(header)
                current = producers.get(producer_id)
                if current is not None:
                    duplicate = current.find_duplicate(
                        header.producer_epoch, header.base_sequence,
                        increment_sequence(header.base_sequence, header.last_offset_delta))
                    if duplicate is not None:
                        pending.duplicate = duplicate
                        return pending
            info = infos.get(producer_id)
            if info is None:
                current = producers.get(producer_id)
                info = infos[producer_id] = _ProducerAppendInfo(
                    current if current is not None else ProducerStateEntry(producer_id))
            if header.is_control_batch:
                completed = self._append_marker(info, header, origin)
                if completed is not None:
                    pending.completed.append(completed)
            else:
                self._append_data(info, header, origin)
        return pending

    def apply(self, pending):
        """Make the prepared append ``pending`` the state (its batches are written);
        return the transactions its markers completed."""
        producers = self.producers
        for producer_id, info in pending.infos.items():
            current = producers.get(producer_id)
            if current is None:
                producers[producer_id] = info.updated
            else:
                current.update(info.updated)
            for first_offset in info.started:
                self._ongoing[first_offset] = producer_id
        for completed in pending.completed:
            self._complete(completed)
        return pending.completed

    def replay(self, header):
        """Apply one batch read back from the log (a follower's or recovery's view)."""
        self.apply(self.prepare((header,), ORIGIN_REPLICATION))

    def complete_txn(self, producer_id, epoch, is_commit, marker_offset, coordinator_epoch,
                     timestamp=bd.NO_TIMESTAMP):
        """End ``producer_id``'s transaction with a marker at ``marker_offset`` that the
        caller has written; return its CompletedTxn, or None when it had none open.
        InvalidProducerEpochError / TransactionCoordinatorFencedError as a coordinator's
        marker append (and then nothing changes)."""
        current = self.producers.get(producer_id)
        info = _ProducerAppendInfo(current if current is not None
                                   else ProducerStateEntry(producer_id))
        pending = ProducerAppend()
        pending.infos[producer_id] = info
        completed = self._end_txn(info, epoch, coordinator_epoch, not is_commit,
                                  marker_offset, timestamp, ORIGIN_COORDINATOR)
        if completed is not None:
            pending.completed.append(completed)
        self.apply(pending)
        return completed

    def _check_client_batch(self, header):
        if header.is_control_batch:
            raise InvalidRecordError(
                f"batch at offset {header.base_offset} of producer {header.producer_id} is "
                f"a control batch; clients are not allowed to write control records "
                f"(partition {self.name})")
        if header.base_sequence < 0:
            raise InvalidRecordError(
                f"batch at offset {header.base_offset} of producer {header.producer_id} has "
                f"sequence number {header.base_sequence}; an idempotent batch needs one "
                f">= 0 (partition {self.name})")

    def _check_epoch(self, info, epoch, offset, origin):
        if epoch < info.updated.producer_epoch:
            message = (f"epoch of producer {info.updated.producer_id} at offset {offset} in "
                       f"partition {self.name} is {epoch}, which is smaller than the last "
                       f"seen epoch {info.updated.producer_epoch}")
            if origin == ORIGIN_REPLICATION:
                log.warning("%s", message)
            else:
                raise InvalidProducerEpochError(message)

    def _check_sequence(self, info, epoch, first_seq, offset):
        updated = info.updated
        if epoch != updated.producer_epoch:
            if first_seq != 0 and updated.producer_epoch != bd.NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceNumberError(
                    f"invalid sequence number for new epoch of producer "
                    f"{updated.producer_id} at offset {offset} in partition {self.name}: "
                    f"{epoch} (request epoch), {first_seq} (seq. number), "
                    f"{updated.producer_epoch} (current producer epoch); a new epoch starts "
                    f"at sequence 0")
            return
        current = info.current
        if updated.batches:
            last_seq = updated.last_seq
        elif epoch == current.producer_epoch:
            last_seq = current.last_seq
        else:
            last_seq = bd.NO_SEQUENCE
        if current.producer_epoch != bd.NO_PRODUCER_EPOCH and not in_sequence(last_seq,
                                                                              first_seq):
            raise OutOfOrderSequenceNumberError(
                f"out of order sequence number for producer {updated.producer_id} at offset "
                f"{offset} in partition {self.name}: {first_seq} (incoming seq. number), "
                f"{last_seq} (current end sequence number)")

    def _append_data(self, info, header, origin):
        epoch = header.producer_epoch
        first_offset = header.base_offset
        self._check_epoch(info, epoch, first_offset, origin)
        if origin == ORIGIN_CLIENT:
            self._check_sequence(info, epoch, header.base_sequence, first_offset)
        first_seq = header.base_sequence
        updated = info.updated
        updated.add_batch(epoch, BatchMetadata(
            first_seq, increment_sequence(first_seq, header.last_offset_delta), first_offset,
            first_offset + header.last_offset_delta, header.max_timestamp))
        if updated.current_txn_first_offset >= 0:
            if not header.is_transactional:
                raise InvalidTxnStateError(
                    f"expected a transactional write from producer {updated.producer_id} at "
                    f"offset {first_offset} in partition {self.name}: its transaction from "
                    f"offset {updated.current_txn_first_offset} is open")
        elif header.is_transactional:
            updated.current_txn_first_offset = first_offset
            info.started.append(first_offset)

    def _append_marker(self, info, header, origin):
        record = next(iter(RecordBatch(header.buf, header.position)), None)
        if record is None:
            return None  # the cleaner emptied it: its transaction is gone from the log
        key, value = record.key, record.value
        if key is None or len(key) != cd.KEY_SIZE:
            raise InvalidRecordError(
                f"control batch at offset {header.base_offset}: record key of "
                f"{0 if key is None else len(key)} bytes, expected {cd.KEY_SIZE}")
        _, control_type = cd.KEY.unpack(key)
        if control_type not in (cd.ABORT, cd.COMMIT):
            raise InvalidRecordError(
                f"control batch at offset {header.base_offset}: control type "
                f"{control_type}, expected {cd.ABORT} (ABORT) or {cd.COMMIT} "
                f"(COMMIT)")
        if value is None or len(value) < cd.VALUE_SIZE:
            raise InvalidRecordError(
                f"control batch at offset {header.base_offset}: EndTransactionMarker value "
                f"of {0 if value is None else len(value)} bytes, expected at least "
                f"{cd.VALUE_SIZE}")
        _, coordinator_epoch = cd.END_TXN_MARKER.unpack_from(value)
        return self._end_txn(info, header.producer_epoch, coordinator_epoch,
                             control_type == cd.ABORT, header.base_offset,
                             record.timestamp, origin)

    def _end_txn(self, info, epoch, coordinator_epoch, is_aborted, offset, timestamp, origin):
        """Kafka's appendEndTxnMarker on ``info``: the CompletedTxn, or None."""
        self._check_epoch(info, epoch, offset, origin)
        updated = info.updated
        if updated.coordinator_epoch > coordinator_epoch:
            if origin == ORIGIN_REPLICATION:
                log.info("partition %s: marker of producer %d at offset %d has coordinator "
                         "epoch %d, older than the last seen %d", self.name,
                         updated.producer_id, offset, coordinator_epoch,
                         updated.coordinator_epoch)
            else:
                raise TransactionCoordinatorFencedError(
                    f"invalid coordinator epoch for producer {updated.producer_id} at offset "
                    f"{offset} in partition {self.name}: {coordinator_epoch} (zombie), "
                    f"{updated.coordinator_epoch} (current)")
        first_offset = updated.current_txn_first_offset
        completed = None
        if first_offset >= 0:
            completed = CompletedTxn(updated.producer_id, first_offset, offset, is_aborted)
        updated.maybe_update_epoch(epoch)
        updated.coordinator_epoch = coordinator_epoch
        updated.current_txn_first_offset = -1
        updated.last_timestamp = timestamp
        return completed

    def _complete(self, completed):
        producer_id = self._ongoing.pop(completed.first_offset, None)
        if producer_id != completed.producer_id:
            raise ValueError(f"partition {self.name}: {completed} completes a transaction "
                             f"that was not started")
        self._unreplicated[completed.first_offset] = completed

    # -- transactions ---------------------------------------------------------------------

    def ongoing_transactions(self):
        """``{producer id: first offset}`` of the open transactions."""
        return {producer_id: first for first, producer_id in sorted(self._ongoing.items())}

    def first_undecided_offset(self):
        """The first offset of the oldest open transaction (None: none)."""
        return min(self._ongoing) if self._ongoing else None

    def first_unstable_offset(self):
        """The lowest first offset of a transaction that is open, or completed by a marker
        not yet below the high watermark (None: none). The LSO is min(it, the HW)."""
        first = None
        if self._ongoing:
            first = min(self._ongoing)
        if self._unreplicated:
            unreplicated = min(self._unreplicated)
            first = unreplicated if first is None else min(first, unreplicated)
        return first

    def last_stable_offset(self, completed):
        """The LSO once ``completed`` is done (for its transaction index entry): the first
        offset of the oldest other open transaction, else the offset after its marker."""
        for first, producer_id in sorted(self._ongoing.items()):
            if producer_id != completed.producer_id:
                return first
        return completed.last_offset + 1

    def on_high_watermark_updated(self, high_watermark):
        """Forget the completed transactions whose markers are below ``high_watermark``."""
        if self._unreplicated:
            for first, completed in list(self._unreplicated.items()):
                if completed.last_offset < high_watermark:
                    del self._unreplicated[first]

    # -- the log's life -------------------------------------------------------------------

    def remove_expired_producers(self, now_ms, expiration_ms):
        """Forget the producers without an open transaction whose last timestamp is
        ``expiration_ms`` or more before ``now_ms`` (Kafka's producer.id.expiration.ms);
        return how many. A forgotten producer that comes back is accepted at any
        sequence (an unknown producer)."""
        expired = [producer_id for producer_id, entry in self.producers.items()
                   if entry.current_txn_first_offset < 0
                   and now_ms - entry.last_timestamp >= expiration_ms]
        for producer_id in expired:
            del self.producers[producer_id]
        return len(expired)

    def last_entry(self, producer_id):
        return self.producers.get(producer_id)

    def last_data_offsets(self):
        """``{producer id: last offset of its last batch}`` (what compaction keeps)."""
        return {producer_id: entry.last_data_offset
                for producer_id, entry in self.producers.items() if entry.batches}

    def snapshot_offsets(self):
        return list(self._snapshots)

    def snapshot_path(self, offset):
        return os.path.join(self.path, sd.file_name(offset))

    def take_snapshot(self, offset, sync=True):
        """Write the state (of every batch below ``offset``, the log end) to
        ``<offset>.snapshot`` unless that snapshot exists; fsync it when ``sync``."""
        if self._snapshots and self._snapshots[-1] >= offset:
            if self._snapshots[-1] == offset:
                return None
            raise ValueError(f"partition {self.name}: snapshot at {offset} below the latest "
                             f"one {self._snapshots[-1]}")
        data = sd.encode([
            (entry.producer_id, entry.producer_epoch, entry.last_seq, entry.last_data_offset,
             entry.last_offset_delta, entry.last_timestamp, entry.coordinator_epoch,
             entry.current_txn_first_offset)
            for _, entry in sorted(self.producers.items())])
        path = self.snapshot_path(offset)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if sync:
                durability.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        self._snapshots.append(offset)
        return path

    def load(self, log_start_offset, max_offset):
        """Drop the snapshots above ``max_offset`` and load the latest valid one (skipping,
        with a WARNING, and deleting those that do not parse); return the offset the log
        must replay its batches from to be current (``log_start_offset`` without one)."""
        self._clear()
        self._delete_snapshots(lambda offset: offset > max_offset)
        while self._snapshots:
            offset = self._snapshots[-1]
            path = self.snapshot_path(offset)
            try:
                with open(path, "rb") as f:
                    entries = sd.decode(f.read())
            except (OSError, sd.CorruptSnapshotError) as e:
                log.warning("partition %s: skipping producer snapshot %s: %s; the producer "
                            "state is rebuilt from an older snapshot or the log", self.name,
                            path, e)
                self._delete_snapshots(offset.__eq__)
                continue
            for entry in entries:
                self._load_entry(*entry)
            return max(offset, log_start_offset)
        return log_start_offset

    def _load_entry(self, producer_id, epoch, last_seq, last_offset, offset_delta, timestamp,
                    coordinator_epoch, txn_first_offset):
        batches = ()
        if last_offset >= 0:
            batches = (BatchMetadata(decrement_sequence(last_seq, offset_delta), last_seq,
                                     last_offset - offset_delta, last_offset, timestamp),)
        self.producers[producer_id] = ProducerStateEntry(
            producer_id, epoch, coordinator_epoch, timestamp, txn_first_offset, batches)
        if txn_first_offset >= 0:
            self._ongoing[txn_first_offset] = producer_id

    def truncate_and_reload(self, log_start_offset, log_end_offset):
        """The log was truncated to ``log_end_offset``: reload the latest snapshot at or
        below it; return the offset to replay the log's batches from."""
        return self.load(log_start_offset, log_end_offset)

    def truncate_fully_and_start_at(self, offset):
        """The log restarts empty at ``offset``: no state, no snapshots."""
        self._clear()
        self._delete_snapshots(lambda _: True)

    def delete_snapshots_before(self, offset):
        """Delete the snapshots below ``offset`` (the log start), keeping the latest."""
        latest = self._snapshots[-1] if self._snapshots else None
        self._delete_snapshots(lambda o: o < offset and o != latest)

    def _delete_snapshots(self, doomed):
        keep = []
        for offset in self._snapshots:
            if doomed(offset):
                try:
                    os.unlink(self.snapshot_path(offset))
                except FileNotFoundError:
                    pass
            else:
                keep.append(offset)
        self._snapshots = keep

    def _clear(self):
        self.producers = {}
        self._ongoing = {}
        self._unreplicated = {}
