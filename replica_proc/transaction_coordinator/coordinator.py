"""Kafka's transaction coordinator as a state machine without I/O (transactions V1, the
protocol of EndTxn v0-4: the epoch is bumped by InitProducerId and by fencing, not by
every transaction).

It keeps the transactional ids of the ``__transaction_state`` partitions this broker leads
and answers InitProducerId (with a transactional id), AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn with Kafka's rules and order of checks
(``TransactionCoordinator.scala``, ``TransactionStateManager.scala``,
``TransactionMetadata.scala``); it aborts transactions open longer than their
``transaction.timeout.ms`` and expires ids unused for ``transactional.id.expiration.ms``;
it drives the markers of ending transactions (``TransactionMarkerChannelManager``). Every
operation returns a ``results.Result`` (module doc there): the answer, the records to
write, the markers to send. The broker does the I/O:

- a ``Write`` is appended to its ``__transaction_state`` partition (acks=all) and its
  outcome given to ``write_done(write, error_code)`` (0 once replicated, else the append's
  error code): only then does the state change (a change is *pending* meanwhile, and
  requests for that id get CONCURRENT_TRANSACTIONS); append errors map as Kafka maps them
  (UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS[_AFTER_APPEND], REQUEST_TIMED_OUT ->
  COORDINATOR_NOT_AVAILABLE; NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR ->
  NOT_COORDINATOR; RECORD_TOO_LARGE, RECORD_LIST_TOO_LARGE -> UNKNOWN_SERVER_ERROR);
- a ``TxnMarker`` is sent to its partitions' leaders (``results.route``) and their
  per-partition error codes given to ``markers_done``. When every partition has its
  marker, the coordinator writes CompleteCommit / CompleteAbort. Retriable marker errors
  (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS ...) and a Complete* write that found the
  coordinator unavailable are retried by ``poll`` after ``RETRY_BACKOFF_MS``;
  INVALID_PRODUCER_EPOCH and TRANSACTION_COORDINATOR_FENCED (a newer producer or
  coordinator took over) stop the markers of that transaction; any other error is logged
  and stops them too (Kafka raises there), the transaction completing when its partition
  is next loaded;
- ``allocate_producer_id()`` gives a new producer id (the controller's blocks, KIP-730); it
  may raise a ``BrokerResponseError`` whose code is answered (COORDINATOR_LOAD_IN_PROGRESS
  while a block is fetched);
- ``clock_ms()`` is the wall clock in milliseconds: the timestamps stored and the
  timeouts (Kafka's ``time.milliseconds()``);
- ``begin_load(p, coordinator_epoch)`` / ``load(p, coordinator_epoch, records)`` /
  ``unload(p)`` follow the leadership of ``__transaction_state`` partitions (the
  coordinator epoch is the partition's leader epoch, carried in every marker). While a
  partition loads, its ids answer COORDINATOR_LOAD_IN_PROGRESS; a partition not here
  NOT_COORDINATOR. A write or marker acknowledgement for a partition reloaded at another
  epoch (or unloaded) since changes nothing (its requester gets NOT_COORDINATOR);
- ``poll()`` aborts timed-out transactions (every
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms``), expires ids (every
  ``transaction.remove.expired.transaction.cleanup.interval.ms``) and retries;
  ``next_deadline()`` says when it next has work (clock_ms time).

InitProducerId on an id whose transaction is Ongoing bumps the epoch (fencing the old
producer: its next request gets PRODUCER_FENCED), writes PrepareAbort and answers
CONCURRENT_TRANSACTIONS once written; the client retries and, once the abort completed,
gets the epoch bumped once more (or a new producer id when that exhausts the epochs).
A timed-out transaction is aborted the same way, bumping the epoch so that the zombie
producer is fenced.

Answers carry PRODUCER_FENCED; ``results.client_error`` turns it into the
INVALID_PRODUCER_EPOCH older request versions expect.

Differences from Kafka: a marker or Complete* write failing with an error Kafka does not
expect is logged and its transaction left for the next load of its partition (Kafka
raises in its sender thread, with the same outcome); a partition a leader's answer leaves
out is sent again (Kafka raises); an expired id's tombstone is one write per id (Kafka
batches a partition's tombstones).

Owner: the broker loop thread, the only caller. Not thread-safe.
"""
from __future__ import annotations

import logging

from cluster.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaStorageError,
    LeaderNotAvailableError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    ProducerFencedError,
    RecordListTooLargeError,
    RecordTooLargeError,
    RequestTimedOutError,
    TransactionalIdNotFoundError,
    TransactionCoordinatorFencedError,
    UnknownError,
    UnknownTopicOrPartitionError,
    UnsupportedForMessageFormatError,
    UnsupportedVersionError,
    error_code,
)
from cluster.metadata.model import GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC
from replica_proc.coordinator_common.partitioning import partition_for
from replica_proc.transaction_coordinator import records
from replica_proc.transaction_coordinator.metadata import (
    EPOCH_EXHAUSTED,
    TransactionMetadata,
)
from replica_proc.transaction_coordinator.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from replica_proc.transaction_coordinator.results import (
    NOTHING,
    Answer,
    Result,
    TxnMarker,
    Write,
)
from replica_proc.transaction_coordinator.states import TransactionState

log = logging.getLogger(__name__)

NONE = 0
#: How long a retriable marker or Complete* write waits before it is tried again.
RETRY_BACKOFF_MS = 100

_S = TransactionState

#: An append error -> the coordinator's error (``appendTransactionToLog``).
_APPEND_ERRORS = {
    UnknownTopicOrPartitionError.errno: CoordinatorNotAvailableError.errno,
    NotEnoughReplicasError.errno: CoordinatorNotAvailableError.errno,
    NotEnoughReplicasAfterAppendError.errno: CoordinatorNotAvailableError.errno,
    RequestTimedOutError.errno: CoordinatorNotAvailableError.errno,
    NotLeaderForPartitionError.errno: NotCoordinatorError.errno,
    KafkaStorageError.errno: NotCoordinatorError.errno,
    RecordTooLargeError.errno: UnknownError.errno,
    RecordListTooLargeError.errno: UnknownError.errno,
}
#: Marker errors that send the marker again (to the partition's leader of the time).
_MARKER_RETRIABLE = frozenset({
    UnknownTopicOrPartitionError.errno, NotLeaderForPartitionError.errno,
    NotEnoughReplicasError.errno, NotEnoughReplicasAfterAppendError.errno,
    RequestTimedOutError.errno, KafkaStorageError.errno, LeaderNotAvailableError.errno,
})
#: Marker errors after which the partition needs no marker (the producer could not have
#: written to it).
_MARKER_NOT_NEEDED = frozenset({UnsupportedForMessageFormatError.errno,
                                UnsupportedVersionError.errno})
#: Marker errors that end the markers of the transaction: someone newer took over.
_MARKER_SUPERSEDED = frozenset({InvalidProducerEpochError.errno,
                                TransactionCoordinatorFencedError.errno})


def _answer(code, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH):
    return Result(Answer(code, producer_id, producer_epoch))


class _Partition:
    """The ids of one loaded ``__transaction_state`` partition."""

    __slots__ = ("coordinator_epoch", "ids")

    def __init__(self, coordinator_epoch, ids):
        self.coordinator_epoch = coordinator_epoch
        self.ids = ids  # transactional id -> TransactionMetadata


class _Completion:
    """A transaction whose markers are being written: ``transit`` (Complete*) is written
    once ``metadata.partitions`` is empty."""

    __slots__ = ("coordinator_epoch", "metadata", "transit")

    def __init__(self, coordinator_epoch, metadata, transit):
        self.coordinator_epoch = coordinator_epoch
        self.metadata = metadata
        self.transit = transit


class TransactionCoordinator:
    """The transactional ids of the ``__transaction_state`` partitions this broker leads
    (module doc)."""

    def __init__(self, config, allocate_producer_id, clock_ms, partitions_count=None):
        self._max_timeout_ms = config["transaction.max.timeout.ms"]
        self._expiration_ms = config["transactional.id.expiration.ms"]
        self._abort_interval_ms = config[
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"]
        self._expire_interval_ms = config[
            "transaction.remove.expired.transaction.cleanup.interval.ms"]
        #: The partition count of ``__transaction_state`` (the topic's, once it exists).
        self.partitions_count = partitions_count or config[
            "transaction.state.log.num.partitions"]
        #: The partition count of ``__consumer_offsets`` (AddOffsetsToTxn's partition).
        self.offsets_partitions_count = config["offsets.topic.num.partitions"]
        self._allocate = allocate_producer_id
        self._clock_ms = clock_ms
        self._partitions = {}  # partition -> _Partition, loaded
        self._loading = {}  # partition -> coordinator epoch being loaded
        self._completions = {}  # transactional id -> _Completion
        self._retry_writes = []  # Complete* writes to try again
        self._retry_markers = []  # TxnMarkers to send again
        self._retry_at = None
        now = clock_ms()
        self._next_abort_scan = now + self._abort_interval_ms
        self._next_expire_scan = now + self._expire_interval_ms

    # -- partitions -------------------------------------------------------------------------

    def partition_of(self, transactional_id):
        return partition_for(transactional_id, self.partitions_count)

    def error_for(self, transactional_id):
        """None if this coordinator holds ``transactional_id``'s partition, else
        COORDINATOR_LOAD_IN_PROGRESS (loading) or NOT_COORDINATOR."""
        partition = self.partition_of(transactional_id)
        if partition in self._loading:
            return CoordinatorLoadInProgressError.errno
        if partition not in self._partitions:
            return NotCoordinatorError.errno
        return None

    def metadata(self, transactional_id):
        """The TransactionMetadata of ``transactional_id`` if it is here, else None."""
        loaded = self._partitions.get(self.partition_of(transactional_id))
        return None if loaded is None else loaded.ids.get(transactional_id)

    def begin_load(self, partition, coordinator_epoch):
        """This broker became leader of ``partition`` at ``coordinator_epoch``: its ids
        answer COORDINATOR_LOAD_IN_PROGRESS until ``load``."""
        self._drop(partition)
        self._loading[partition] = coordinator_epoch

    def load(self, partition, coordinator_epoch, stored):
        """Rebuild ``partition``'s ids from its records ``stored`` ([(key bytes, value bytes
        or None)], log order: the last record of an id wins, a tombstone deletes, a record
        that does not decode is skipped with an ERROR line) and complete the transactions
        found in PrepareCommit / PrepareAbort: the Result carries their markers. Ignored
        (NOTHING) unless ``begin_load(partition, coordinator_epoch)`` is the latest call
        for the partition."""
        if self._loading.get(partition) != coordinator_epoch:
            log.info("%s-%d: load at coordinator epoch %d skipped: no longer loading at it",
                     TRANSACTION_STATE_TOPIC, partition, coordinator_epoch)
            return NOTHING
        values = {}
        for position, (key_bytes, value_bytes) in enumerate(stored):
            try:
                key = records.decode_key(key_bytes)
                value = records.decode_value(value_bytes)
            except ValueError as exc:
                log.error("%s-%d: record %d skipped: %s", TRANSACTION_STATE_TOPIC, partition,
                          position, exc)
                continue
            if value is None:
                values.pop(key.transactional_id, None)
            else:
                values[key.transactional_id] = value
        ids = {txn_id: TransactionMetadata.from_record(txn_id, value)
               for txn_id, value in values.items()}
        del self._loading[partition]
        self._partitions[partition] = _Partition(coordinator_epoch, ids)
        log.info("%s-%d loaded at coordinator epoch %d: %d transactional id(s)",
                 TRANSACTION_STATE_TOPIC, partition, coordinator_epoch, len(ids))
        result = NOTHING
        now = self._clock_ms()
        for metadata in ids.values():
            if metadata.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
                result += self._complete(metadata, coordinator_epoch, now)
        return result

    def unload(self, partition):
        """This broker no longer leads ``partition``: its ids, their markers and retries
        are dropped (writes still in flight answer NOT_COORDINATOR when done)."""
        self._drop(partition)

    def _drop(self, partition):
        self._loading.pop(partition, None)
        loaded = self._partitions.pop(partition, None)
        if loaded is None:
            return
        for txn_id in loaded.ids:
            self._completions.pop(txn_id, None)
        self._retry_writes = [w for w in self._retry_writes if w.partition != partition]
        self._retry_markers = [m for m in self._retry_markers
                               if self.partition_of(m.transactional_id) != partition]
        log.info("%s-%d unloaded (%d transactional id(s))", TRANSACTION_STATE_TOPIC,
                 partition, len(loaded.ids))

    def completing(self, transactional_id):
        """Whether ``transactional_id``'s transaction is completing here: its markers or
        its CompleteCommit / CompleteAbort record are being written (its calls are
        answered CONCURRENT_TRANSACTIONS meanwhile)."""
        metadata = self.metadata(transactional_id)
        return metadata is not None and metadata.pending in (_S.COMPLETE_COMMIT,
                                                             _S.COMPLETE_ABORT)

    def _current(self, partition, coordinator_epoch):
        """The loaded partition if it is still loaded at ``coordinator_epoch``, else None."""
        loaded = self._partitions.get(partition)
        if loaded is None or loaded.coordinator_epoch != coordinator_epoch:
            return None
        return loaded

    # -- writes -----------------------------------------------------------------------------

    def _write(self, metadata, coordinator_epoch, transit, then):
        """A Result writing ``transit`` of ``metadata`` (its change is pending); ``then``
        (code) -> Result once the write is done (the state changed if code is 0)."""
        txn_id = metadata.transactional_id
        key = records.encode_key(records.TransactionLogKey(txn_id))
        value = None if transit.state is _S.DEAD else records.encode_value(
            transit.record_value())
        return Result(writes=(Write(self.partition_of(txn_id), key, value, txn_id,
                                    coordinator_epoch, transit, then),))

    def write_done(self, write, error):
        """``write`` was appended and replicated (``error`` 0) or failed with ``error`` (the
        append's code): apply or drop its change and go on (module doc)."""
        code = _APPEND_ERRORS.get(error, error)
        loaded = self._current(write.partition, write.coordinator_epoch)
        metadata = None if loaded is None else loaded.ids.get(write.transactional_id)
        transit = write.transit
        if code == NONE:
            if metadata is None:
                log.info("%s: %s stored, but %s-%d moved on (coordinator epoch %d was "
                         "replaced or unloaded)", write.transactional_id,
                         transit.state.kafka_name, TRANSACTION_STATE_TOPIC, write.partition,
                         write.coordinator_epoch)
                code = NotCoordinatorError.errno
            elif transit.state is _S.DEAD:
                if metadata.pending is _S.DEAD and \
                        metadata.producer_epoch == transit.producer_epoch:
                    del loaded.ids[write.transactional_id]
                    log.info("transactional id %s expired", write.transactional_id)
                else:
                    metadata.pending = None
            else:
                metadata.complete(transit)
        elif metadata is not None and not (code == CoordinatorNotAvailableError.errno and
                                           transit.state in (_S.COMPLETE_COMMIT,
                                                             _S.COMPLETE_ABORT)):
            log.info("%s: writing %s failed with error %d; the change is dropped",
                     write.transactional_id, transit.state.kafka_name, code)
            metadata.pending = None
        return write.then(code)

    # -- InitProducerId ---------------------------------------------------------------------

    def init_producer_id(self, transactional_id, timeout_ms, producer_id=NO_PRODUCER_ID,
                         producer_epoch=NO_PRODUCER_EPOCH):
        """InitProducerId with a transactional id (``None`` is not this coordinator's: the
        broker answers it from the producer id allocator). ``producer_id`` /
        ``producer_epoch``: the producer's current ones (v3+), or -1."""
        if transactional_id is None:
            raise ValueError("InitProducerId without a transactional id is not the "
                             "transaction coordinator's")
        if transactional_id == "" or \
                (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return _answer(InvalidRequestError.errno)
        if not 0 < timeout_ms <= self._max_timeout_ms:
            return _answer(InvalidTransactionTimeoutError.errno)
        error = self.error_for(transactional_id)
        if error is not None:
            return _answer(error)
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        now = self._clock_ms()
        loaded = self._partitions[self.partition_of(transactional_id)]
        metadata = loaded.ids.get(transactional_id)
        if metadata is None:
            new_id, error = self._new_producer_id()
            if error is not None:
                return _answer(error)
            metadata = TransactionMetadata(transactional_id, new_id, NO_PRODUCER_EPOCH,
                                           timeout_ms, _S.EMPTY, now)
            loaded.ids[transactional_id] = metadata
        if metadata.pending is not None:
            return _answer(ConcurrentTransactionsError.errno)
        if expected is not None and not self._expected_producer(metadata, *expected):
            return _answer(ProducerFencedError.errno)
        state = metadata.state
        if state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            return _answer(ConcurrentTransactionsError.errno)
        epoch = loaded.coordinator_epoch
        if state is _S.ONGOING:
            # Abort first (the bumped epoch fences the current producer); the client
            # retries on CONCURRENT_TRANSACTIONS and gets a second bump.
            fence = metadata.prepare_fence_epoch()
            return self._end(transactional_id, fence.producer_id, fence.producer_epoch,
                             False, False, _init_after_fence)
        if metadata.epoch_exhausted and (expected is None or
                                         expected[1] == metadata.producer_epoch):
            new_id, error = self._new_producer_id()
            if error is not None:
                return _answer(error)
            transit = metadata.prepare_rotation(new_id, timeout_ms, now, expected is not None)
        else:
            transit = metadata.prepare_increment_epoch(
                timeout_ms, None if expected is None else expected[1], now)
            if transit is None:
                log.info("InitProducerId of %s: epoch %d is neither the current (%d) nor "
                         "the last (%d): fenced", transactional_id, expected[1],
                         metadata.producer_epoch, metadata.last_producer_epoch)
                return _answer(ProducerFencedError.errno)

        def initialized(code):
            if code != NONE:
                log.info("InitProducerId of %s answers error %d", transactional_id, code)
                return _answer(code)
            log.info("transactional id %s initialized: producer id %d, epoch %d (%s-%d)",
                     transactional_id, transit.producer_id, transit.producer_epoch,
                     TRANSACTION_STATE_TOPIC, self.partition_of(transactional_id))
            return _answer(NONE, transit.producer_id, transit.producer_epoch)

        return self._write(metadata, epoch, transit, initialized)

    @staticmethod
    def _expected_producer(metadata, producer_id, producer_epoch):
        """Kafka's ``isValidProducerId``: the producer resuming is still this id's (or the
        id was just created, or it retries a bump that rotated the producer id)."""
        return (metadata.producer_epoch == NO_PRODUCER_EPOCH
                or producer_id == metadata.producer_id
                or (producer_id == metadata.previous_producer_id
                    and producer_epoch >= EPOCH_EXHAUSTED))

    def _new_producer_id(self):
        """(a new producer id, None), or (None, the error code the allocator raised)."""
        try:
            return self._allocate(), None
        except Exception as exc:  # the allocator's error is the answer
            code = error_code(exc)
            if code == UnknownError.errno:
                log.error("allocating a producer id failed", exc_info=exc)
            return None, code

    # -- AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------

    def add_partitions(self, transactional_id, producer_id, producer_epoch, partitions):
        """AddPartitionsToTxn (v0-3): add ``partitions`` ({(topic, partition)}, which the
        broker checked exist) to the transaction. One error for all of them."""
        if not transactional_id:
            return _answer(InvalidRequestError.errno)
        error = self.error_for(transactional_id)
        if error is not None:
            return _answer(error)
        loaded = self._partitions[self.partition_of(transactional_id)]
        metadata = loaded.ids.get(transactional_id)
        partitions = frozenset(partitions)
        if metadata is None or metadata.producer_id != producer_id:
            return _answer(InvalidProducerIdMappingError.errno)
        if metadata.producer_epoch != producer_epoch:
            return _answer(ProducerFencedError.errno)
        if metadata.pending is not None or \
                metadata.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            return _answer(ConcurrentTransactionsError.errno)
        if metadata.state is _S.ONGOING and partitions <= metadata.partitions:
            return _answer(NONE)
        transit = metadata.prepare_add_partitions(partitions, self._clock_ms())
        return self._write(metadata, loaded.coordinator_epoch, transit, _answer)

    def add_offsets(self, transactional_id, producer_id, producer_epoch, group_id):
        """AddOffsetsToTxn: add the group's ``__consumer_offsets`` partition (of
        ``offsets_partitions_count``) to the transaction."""
        partition = partition_for(group_id, self.offsets_partitions_count)
        return self.add_partitions(transactional_id, producer_id, producer_epoch,
                                   {(GROUP_METADATA_TOPIC, partition)})

    # -- EndTxn -----------------------------------------------------------------------------

    def end_txn(self, transactional_id, producer_id, producer_epoch, committed):
        """EndTxn (v0-4): commit (``committed``) or abort the transaction. Answered once
        PrepareCommit / PrepareAbort is written; the markers follow."""
        return self._end(transactional_id, producer_id, producer_epoch, committed, True,
                         _answer)

    def _end(self, transactional_id, producer_id, producer_epoch, committed, from_client,
             reply):
        """Kafka's ``endTransaction``; ``reply(code, producer id, epoch)`` -> the Result
        that answers (its requester's answer, or none for a timeout's abort)."""
        if not transactional_id:
            return reply(InvalidRequestError.errno)
        error = self.error_for(transactional_id)
        if error is not None:
            return reply(error)
        loaded = self._partitions[self.partition_of(transactional_id)]
        metadata = loaded.ids.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return reply(InvalidProducerIdMappingError.errno)
        current_id, current_epoch = metadata.producer_id, metadata.producer_epoch
        fencing = metadata.pending is _S.PREPARE_EPOCH_FENCE
        if (from_client and producer_epoch != current_epoch) or producer_epoch < current_epoch:
            return reply(ProducerFencedError.errno)
        if metadata.pending is not None and not fencing:
            return reply(ConcurrentTransactionsError.errno)
        state = metadata.state
        asked = _S.PREPARE_COMMIT if committed else _S.PREPARE_ABORT
        done = _S.COMPLETE_COMMIT if committed else _S.COMPLETE_ABORT
        if state is not _S.ONGOING:
            if state is done:
                return reply(NONE, current_id, current_epoch)
            if state is asked:
                return reply(ConcurrentTransactionsError.errno)
            log.debug("EndTxn(%s) of %s in state %s", "commit" if committed else "abort",
                      transactional_id, state.kafka_name)
            return reply(InvalidTxnStateError.errno)
        if fencing:
            # The fence's bumped epoch goes into the PrepareAbort written now.
            metadata.pending = None
            metadata.producer_epoch = producer_epoch
            metadata.last_producer_epoch = NO_PRODUCER_EPOCH
        transit = metadata.prepare_end(asked, self._clock_ms())
        coordinator_epoch = loaded.coordinator_epoch

        def prepared(code):
            if code != NONE:
                if fencing and (m := self._metadata_at(transactional_id,
                                                       coordinator_epoch)) is not None:
                    m.failed_epoch_fence = True
                    log.warning("%s: the epoch fence (epoch %d) was not stored (error %d)",
                                transactional_id, producer_epoch, code)
                return reply(code)
            m = self._metadata_at(transactional_id, coordinator_epoch)
            if m is None:
                return reply(NotCoordinatorError.errno)
            # Kafka checks again: nothing else may have changed the id in between.
            if m.producer_id != producer_id:
                return reply(InvalidProducerIdMappingError.errno)
            if m.producer_epoch != producer_epoch:
                return reply(ProducerFencedError.errno)
            if m.pending is not None:
                return reply(ConcurrentTransactionsError.errno)
            if m.state is not asked:
                return reply(InvalidTxnStateError.errno)
            return reply(NONE, m.producer_id, m.producer_epoch) + self._complete(
                m, coordinator_epoch, self._clock_ms())

        return self._write(metadata, coordinator_epoch, transit, prepared)

    def _metadata_at(self, transactional_id, coordinator_epoch):
        loaded = self._current(self.partition_of(transactional_id), coordinator_epoch)
        return None if loaded is None else loaded.ids.get(transactional_id)

    # -- markers ----------------------------------------------------------------------------

    def _complete(self, metadata, coordinator_epoch, now):
        """``metadata`` is PrepareCommit / PrepareAbort: its markers (and, once they are
        all written, the Complete* record)."""
        transit = metadata.prepare_complete(now)
        txn_id = metadata.transactional_id
        self._completions[txn_id] = _Completion(coordinator_epoch, metadata, transit)
        if not metadata.partitions:
            return self._write_completion(txn_id)
        return Result(markers=(TxnMarker(
            txn_id, metadata.producer_id, metadata.producer_epoch, coordinator_epoch,
            metadata.state is _S.PREPARE_COMMIT, tuple(sorted(metadata.partitions))),))

    def markers_done(self, marker, errors, gone=()):
        """The leaders answered ``marker`` (or part of it): ``errors`` {(topic,
        partition): error code}; ``gone``: its partitions that no longer exist (no marker
        needed). Partitions of ``marker`` in neither are sent again later (as after a
        lost request). Returns the retries' and the completion's Result (module doc)."""
        txn_id = marker.transactional_id
        completion = self._completions.get(txn_id)
        metadata = self._metadata_at(txn_id, marker.coordinator_epoch)
        if completion is None or metadata is None or metadata is not completion.metadata \
                or completion.coordinator_epoch != marker.coordinator_epoch \
                or (metadata.producer_id, metadata.producer_epoch) != (marker.producer_id,
                                                                        marker.producer_epoch):
            log.info("markers of %s (producer %d, epoch %d, coordinator epoch %d) answered, "
                     "but its completion moved on: ignored", txn_id, marker.producer_id,
                     marker.producer_epoch, marker.coordinator_epoch)
            return NOTHING
        retry = []
        for tp in marker.partitions:
            code = NONE if tp in gone else errors.get(tp)
            if code is None or code in _MARKER_RETRIABLE:
                retry.append(tp)
            elif code == NONE or code in _MARKER_NOT_NEEDED:
                metadata.partitions.discard(tp)
            else:
                if code in _MARKER_SUPERSEDED:
                    log.info("marker of %s for %s-%d: error %d, a newer producer or "
                             "coordinator took over; its markers stop", txn_id, *tp, code)
                else:
                    log.error("marker of %s for %s-%d: unexpected error %d; its markers "
                              "stop until %s-%d is loaded again", txn_id, *tp, code,
                              TRANSACTION_STATE_TOPIC, self.partition_of(txn_id))
                del self._completions[txn_id]
                return NOTHING
        if retry:
            self._retry_later(markers=[marker.only(retry)])
            return NOTHING
        if metadata.partitions:
            return NOTHING  # other leaders' answers are still to come
        return self._write_completion(txn_id)

    def _write_completion(self, txn_id):
        completion = self._completions.pop(txn_id)

        def completed(code):
            if code == NONE:
                log.debug("transaction of %s completed: %s", txn_id,
                          completion.transit.state.kafka_name)
            elif code == CoordinatorNotAvailableError.errno:
                self._retry_later(writes=[write])
            elif code not in (NotCoordinatorError.errno, CoordinatorLoadInProgressError.errno):
                log.error("writing %s of %s failed with error %d; it completes when %s-%d is "
                          "loaded again", completion.transit.state.kafka_name, txn_id, code,
                          TRANSACTION_STATE_TOPIC, self.partition_of(txn_id))
            return NOTHING

        result = self._write(completion.metadata, completion.coordinator_epoch,
                             completion.transit, completed)
        write = result.writes[0]
        return result

    def _retry_later(self, writes=(), markers=()):
        self._retry_writes.extend(writes)
        self._retry_markers.extend(markers)
        if self._retry_at is None:
            self._retry_at = self._clock_ms() + RETRY_BACKOFF_MS

    # -- timers -----------------------------------------------------------------------------

    def poll(self):
        """Run what is due by now: retries, the abort of timed-out transactions, the
        expiry of unused transactional ids."""
        now = self._clock_ms()
        result = NOTHING
        if self._retry_at is not None and now >= self._retry_at:
            writes, markers = self._retry_writes, self._retry_markers
            self._retry_writes, self._retry_markers, self._retry_at = [], [], None
            result += Result(writes=tuple(writes), markers=tuple(markers))
        if now >= self._next_abort_scan:
            self._next_abort_scan = now + self._abort_interval_ms
            result += self._abort_timed_out(now)
        if now >= self._next_expire_scan:
            self._next_expire_scan = now + self._expire_interval_ms
            result += self._expire_ids(now)
        return result

    def next_deadline(self):
        """The clock_ms time ``poll`` next has work at."""
        deadlines = [self._next_abort_scan, self._next_expire_scan]
        if self._retry_at is not None:
            deadlines.append(self._retry_at)
        return min(deadlines)

    def _abort_timed_out(self, now):
        """Abort every Ongoing transaction older than its timeout, bumping its epoch."""
        result = NOTHING
        for loaded in list(self._partitions.values()):
            for metadata in list(loaded.ids.values()):
                if metadata.pending is not None or metadata.state is not _S.ONGOING or \
                        metadata.start_ms + metadata.timeout_ms >= now:
                    continue
                log.info("transaction of %s (producer %d, epoch %d) timed out after %d ms: "
                         "aborting it", metadata.transactional_id, metadata.producer_id,
                         metadata.producer_epoch, metadata.timeout_ms)
                fence = metadata.prepare_fence_epoch()
                result += self._end(metadata.transactional_id, fence.producer_id,
                                    fence.producer_epoch, False, False, _timeout_abort_done)
        return result

    def _expire_ids(self, now):
        """Tombstone every id idle (Empty, Complete*) for transactional.id.expiration.ms."""
        result = NOTHING
        for loaded in self._partitions.values():
            for metadata in loaded.ids.values():
                if metadata.pending is None and metadata.state.expiration_allowed and \
                        metadata.last_update_ms <= now - self._expiration_ms:
                    result += self._write(metadata, loaded.coordinator_epoch,
                                          metadata.prepare_dead(), _expired)
        return result

    # -- administration ---------------------------------------------------------------------

    def describe(self, transactional_id):
        """DescribeTransactions' view of ``transactional_id``: (error code, its
        TransactionMetadata or None): INVALID_REQUEST for an empty id, NOT_COORDINATOR /
        COORDINATOR_LOAD_IN_PROGRESS, TRANSACTIONAL_ID_NOT_FOUND for an id not here (or
        expiring)."""
        if not transactional_id:
            return InvalidRequestError.errno, None
        error = self.error_for(transactional_id)
        if error is not None:
            return error, None
        metadata = self.metadata(transactional_id)
        if metadata is None or metadata.pending is _S.DEAD:
            return TransactionalIdNotFoundError.errno, None
        return NONE, metadata

    def transactions(self, states=None, producer_ids=None, min_duration_ms=-1):
        """ListTransactions' view: (0, the TransactionMetadata of every loaded id but those
        expiring, filtered), or (COORDINATOR_LOAD_IN_PROGRESS, []) while a partition loads.
        Filters, as Kafka's ``listTransactionStates``: ``states`` (a set of
        TransactionState; None: any — an empty set matches nothing), ``producer_ids`` (a
        set; None or empty: any), ``min_duration_ms`` (>= 0: only transactions started more
        than that long ago by ``clock_ms``)."""
        if self._loading:
            return CoordinatorLoadInProgressError.errno, []
        now = self._clock_ms()
        return NONE, [
            m for loaded in self._partitions.values() for m in loaded.ids.values()
            if m.pending is not _S.DEAD and m.state is not _S.DEAD
            and (states is None or m.state in states)
            and (not producer_ids or m.producer_id in producer_ids)
            and (min_duration_ms < 0 or now - m.start_ms > min_duration_ms)]


def _init_after_fence(code, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH):
    """InitProducerId's answer once the abort of the transaction it fenced is written:
    CONCURRENT_TRANSACTIONS (retry), or the error."""
    return _answer(ConcurrentTransactionsError.errno if code == NONE else code)


def _timeout_abort_done(code, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH):
    if code == NONE:
        log.info("timed-out transaction aborted (producer %d, epoch %d)", producer_id,
                 producer_epoch)
    elif code in (InvalidProducerIdMappingError.errno, ProducerFencedError.errno,
                  ConcurrentTransactionsError.errno):
        log.debug("abort of a timed-out transaction cancelled: error %d", code)
    else:
        log.warning("abort of a timed-out transaction failed: error %d", code)
    return NOTHING


def _expired(code):
    if code != NONE:
        log.warning("the tombstone of an expired transactional id was not written: error %d",
                    code)
    return NOTHING
