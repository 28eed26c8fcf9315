"""The idempotent and transactional producer's state: its producer id and epoch, per
partition the sequence numbers of its batches (Kafka's ``TransactionManager`` and
``TxnPartitionMap``), and with a ``transactional_id`` the transaction's state machine.

The sender gets a producer id (InitProducerId, ``set_producer_id_and_epoch``) before any
batch is sent. When the accumulator drains a partition's first batch it asks
``may_drain(batch)`` and then ``stamp(batch)``: a fresh batch gets the producer id, the
epoch and the partition's next sequence (which moves on by its record count, wrapping at
INT_MAX as Kafka's ``DefaultRecordBatch.incrementSequence``); a retried batch keeps the
stamp it was first sent with — its bytes are sent again unchanged, CRC included — so the
leader recognises a batch it already wrote (a duplicate of one of its last five batches is
answered with the original offsets).

Order across retries (Kafka's rules for an idempotent producer with up to five requests in
flight per connection): a partition has at most ``MAX_IN_FLIGHT_PER_PARTITION`` batches
in requests at once; a retried batch is sent again only as the partition's lowest
unfinished sequence and alone (nothing else of the partition in a request), and retried
batches go back to the front of the partition's queue in sequence order
(``sequence_order``), so the leader sees them in sequence order. The later batches that
were in flight behind a failed one come back OUT_OF_ORDER_SEQUENCE_NUMBER (a gap, to the
leader) and are retried the same way.

Errors (``retry_decision``), as Kafka's idempotent producer after KIP-360:

- DUPLICATE_SEQUENCE_NUMBER: the batch was written before: a success (the sender's);
- OUT_OF_ORDER_SEQUENCE_NUMBER: retried. If the batch is the partition's next expected
  sequence (the one after the last acknowledged), the leader really has a gap (it lost
  acknowledged batches, e.g. an unclean election): the epoch is bumped and the
  partition's sequences restart at 0 under it;
- UNKNOWN_PRODUCER_ID (the leader has no state for the producer id, e.g. its batches were
  all removed by retention): the epoch is bumped and the partition restarts at 0; retried;
- INVALID_PRODUCER_EPOCH, PRODUCER_FENCED: fatal (``fatal_error``): the batch and every
  later one fail with it;
- anything else retriable: retried with the same sequence.

A batch that fails for good after it was stamped (delivery timeout, a non-retriable error)
leaves a gap in its partition's sequences: the epoch is bumped for it too. An epoch bump
(``maybe_bump_epoch``, at the top of the sender's loop) is local, as Kafka's idempotent
producer does it: epoch + 1 (a new producer id once the epoch would pass 32767). The
partitions that asked for it restart at sequence 0 under the new epoch once none of their
batches is in a request: their unfinished batches are re-stamped (bytes and CRC rewritten)
in sequence order. Other partitions finish their unfinished batches under the old epoch
first, then move to the new one at sequence 0 (the leader takes a new epoch only at
sequence 0).

Transactions (``transactional_id``; Kafka's states, ``TxnState``)::

    UNINITIALIZED -init_transactions-> INITIALIZING -InitProducerId-> READY
    READY -begin_transaction-> IN_TRANSACTION
    IN_TRANSACTION -commit_transaction-> COMMITTING_TRANSACTION -EndTxn-> READY
    IN_TRANSACTION | ABORTABLE_ERROR -abort_transaction-> ABORTING_TRANSACTION -EndTxn-> READY
    IN_TRANSACTION | COMMITTING_TRANSACTION -a batch or a transactional request failed->
        ABORTABLE_ERROR
    any -fenced, unauthorized, unexpected error-> FATAL_ERROR (every later call raises)

The calls of the application thread (``begin_init``, ``begin_transaction``,
``begin_send_offsets``, ``begin_commit``, ``begin_abort``) check and move the state and
queue the coordinator requests they need (``TxnRequest``: InitProducerId, AddOffsetsToTxn
then TxnOffsetCommit, EndTxn), each with a ``TxnResult`` the caller waits on; the sender
sends them one at a time (``cluster.producer.txn_requests``). A partition takes part in a
transaction once AddPartitionsToTxn added it: ``may_drain`` holds back the batches of a
partition not yet added and notes it (``partitions_to_add``); the sender adds the noted
partitions before anything else. EndTxn goes out only when no batch is queued or in a
request (a commit flushes first; an abort fails the batches not yet sent). Transactional
batches carry the transactional attribute bit. A batch that fails in a transaction, or a
transactional request failing with an error that is neither retriable nor fatal, makes the
state ABORTABLE_ERROR: commit raises that error, abort works; such an abort is followed
by InitProducerId when a batch failed after it was stamped (the coordinator bumps the
epoch), so the partitions whose sequences have a gap start again at 0.

Thread safety: the sender thread alone calls the idempotent methods (``may_drain`` and
``stamp`` under the accumulator's lock, while it drains); the transactional state, the
request queue and ``fatal_error`` are guarded by ``_lock`` (the application thread moves
the state, the sender completes requests).
"""
from __future__ import annotations

import collections
import enum
import logging
import threading

from cluster.errors import (
    DuplicateSequenceNumberError,
    IllegalStateError,
    InvalidProducerEpochError,
    KafkaError,
    KafkaTimeoutError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    UnknownProducerIdError,
)
from segments.log_config import INT_MAX
from segments.record.batch_header import BatchHeader
from segments.record.batch_parts import BatchParts

log = logging.getLogger(__name__)

#: Most batches of one partition in requests at once (the broker remembers five per
#: producer; Kafka's ``MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION_FOR_IDEMPOTENCE``).
MAX_IN_FLIGHT_PER_PARTITION = 5

#: Largest producer epoch (a short).
MAX_EPOCH = 32767

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

#: retry_decision's answers.
RETRY, FAIL, DUPLICATE = "retry", "fail", "duplicate"

_FATAL = (InvalidProducerEpochError, ProducerFencedError)


def increment_sequence(sequence, increment):
    """``sequence + increment``, wrapping past INT_MAX to 0 (Kafka's rule)."""
    if sequence > INT_MAX - increment:
        return increment - (INT_MAX - sequence) - 1
    return sequence + increment


class PartitionSequences:
    """One partition's sequence state (Kafka's ``TxnPartitionEntry``)."""

    __slots__ = ("producer_id", "epoch", "next_sequence", "last_acked", "unfinished",
                 "in_requests")

    def __init__(self, producer_id, epoch):
        self.producer_id = producer_id
        self.epoch = epoch
        self.next_sequence = 0
        self.last_acked = NO_SEQUENCE  # base sequence after which the next one is expected
        self.unfinished = []  # stamped batches not done, in sequence order
        self.in_requests = 0  # of those, how many are in a request in flight now

    def restart(self, producer_id, epoch, transactional=False):
        """Sequences from 0 under ``producer_id`` / ``epoch``; the unfinished batches are
        re-stamped from 0 in order (see the module doc)."""
        self.producer_id, self.epoch = producer_id, epoch
        self.next_sequence = 0
        self.last_acked = NO_SEQUENCE
        for batch in self.unfinished:
            _restamp(batch, producer_id, epoch, self.next_sequence, transactional)
            self.next_sequence = increment_sequence(self.next_sequence, batch.record_count)


class TxnState(enum.Enum):
    """Kafka's ``TransactionManager.State``."""

    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


class TxnResult:
    """The outcome of a transactional call, set by the sender; the caller waits."""

    def __init__(self):
        self._done = threading.Event()
        self.error = None

    def set(self, error=None):
        self.error = error
        self._done.set()

    @property
    def is_done(self):
        return self._done.is_set()

    def wait(self, timeout, what):
        """Raise the call's error; KafkaTimeoutError after ``timeout`` seconds."""
        if not self._done.wait(timeout):
            raise KafkaTimeoutError(f"{what}: not done after {timeout} s")
        if self.error is not None:
            raise self.error


class TxnRequest:
    """One coordinator request to send: ``kind`` (INIT, ADD_OFFSETS, TXN_OFFSET_COMMIT,
    END_TXN), its arguments, and the result it completes. ``group``: the consumer's
    ConsumerGroupMetadata of ADD_OFFSETS and TXN_OFFSET_COMMIT (generation -1 and no
    member for a bare group id)."""

    __slots__ = ("kind", "result", "group", "offsets", "committed")

    def __init__(self, kind, result, group=None, offsets=None, committed=None):
        self.kind, self.result = kind, result
        self.group, self.offsets, self.committed = group, offsets, committed

    @property
    def group_id(self):
        return self.group.group_id


INIT, ADD_OFFSETS, TXN_OFFSET_COMMIT, END_TXN = "init", "add_offsets", "txn_offset_commit", \
    "end_txn"

S = TxnState

#: States in which a transaction is open or ending (Java's ``hasOngoingTransaction``).
_ONGOING = (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION,
            S.ABORTABLE_ERROR)


class TransactionManager:
    """The producer id, epoch and sequences of one idempotent producer, and the transaction
    state of a transactional one (module doc)."""

    def __init__(self, transactional_id=None, transaction_timeout_ms=60000):
        self.producer_id = NO_PRODUCER_ID
        self.epoch = -1
        self.fatal_error = None
        self._partitions = {}  # TopicPartition -> PartitionSequences
        self._bump_required = False
        self._to_restart = set()  # TopicPartitions to restart at 0 under the next epoch
        self._order = 0  # stamps given so far (sequence_order of the next one)
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self._lock = threading.Lock()
        self.state = S.UNINITIALIZED if transactional_id is not None else S.READY
        self.last_error = None  # what made the state ABORTABLE_ERROR or FATAL_ERROR
        self.partitions_in_txn = set()
        self.partitions_to_add = set()  # noted by may_drain; the sender adds them
        self._requests = collections.deque()  # TxnRequests, in order
        self._reinit_after_abort = False
        self._offsets_added = False
        self.coordinator = None  # the transaction coordinator's broker id, once found
        self.group_coordinators = {}  # group id -> broker id

    @property
    def transactional(self):
        return self.transactional_id is not None

    @property
    def has_producer_id(self):
        return self.producer_id != NO_PRODUCER_ID

    def set_producer_id_and_epoch(self, producer_id, epoch):
        log.info("producer id %d, epoch %d", producer_id, epoch)
        self.producer_id, self.epoch = producer_id, epoch

    def set_fatal(self, error):
        requests = ()
        with self._lock:
            if self.fatal_error is None:
                log.error("the producer failed for good: %s", error)
                self.fatal_error = self.last_error = error
                if self.transactional_id is not None:
                    self.state = S.FATAL_ERROR
                requests, self._requests = self._requests, collections.deque()
        for request in requests:
            request.result.set(error)

    def close(self, error):
        """The producer closed: fail the transactional calls still queued."""
        with self._lock:
            requests, self._requests = self._requests, collections.deque()
        for request in requests:
            request.result.set(error)

    def set_abortable(self, error):
        """A batch or request of the transaction failed: commit raises ``error``."""
        with self._lock:
            if self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
                log.warning("transaction %s must be aborted: %s", self.transactional_id, error)
                self.last_error = error
                self.state = S.ABORTABLE_ERROR
                requests = [r for r in self._requests if r.kind != INIT]
                self._requests = collections.deque(r for r in self._requests
                                                   if r.kind == INIT)
            else:
                requests = []
        for request in requests:
            request.result.set(error)

    # -- the application thread's calls -------------------------------------------------------

    def _check(self, what, *allowed):
        """Raise unless the state is one of ``allowed``; caller holds the lock."""
        if self.transactional_id is None:
            raise IllegalStateError(f"{what}: the producer has no transactional_id")
        if self.state is S.FATAL_ERROR:
            raise _after_fatal(what, self.last_error)
        if self.state not in allowed:
            raise IllegalStateError(
                f"TransactionalId {self.transactional_id}: {what} is not allowed in state "
                f"{self.state.name}"
                + (f" (after {self.last_error!r})" if self.last_error is not None else ""))

    def _queue(self, request):
        self._requests.append(request)
        return request.result

    def begin_init(self):
        """Queue InitProducerId; a call after one that timed out waits for the same
        request (as Java's ``initTransactions`` resumes)."""
        with self._lock:
            pending = [r for r in self._requests if r.kind == INIT]
            if self.state is S.INITIALIZING and pending:
                return pending[0].result
            self._check("init_transactions", S.UNINITIALIZED)
            self.state = S.INITIALIZING
            return self._queue(TxnRequest(INIT, TxnResult()))

    def begin_transaction(self):
        with self._lock:
            self._check("begin_transaction", S.READY)
            self.state = S.IN_TRANSACTION

    def begin_send_offsets(self, offsets, group):
        """``group``: the consumer's ConsumerGroupMetadata."""
        with self._lock:
            self._check("send_offsets_to_transaction", S.IN_TRANSACTION)
            return self._queue(TxnRequest(ADD_OFFSETS, TxnResult(), group=group,
                                          offsets=dict(offsets)))

    def begin_commit(self):
        with self._lock:
            if self.state is S.ABORTABLE_ERROR:
                raise KafkaError(f"TransactionalId {self.transactional_id}: cannot commit: "
                                 f"the transaction must be aborted after "
                                 f"{self.last_error!r}") from self.last_error
            self._check("commit_transaction", S.IN_TRANSACTION)
            self.state = S.COMMITTING_TRANSACTION
            return self._queue(TxnRequest(END_TXN, TxnResult(), committed=True))

    def begin_abort(self):
        with self._lock:
            self._check("abort_transaction", S.IN_TRANSACTION, S.ABORTABLE_ERROR)
            self.state = S.ABORTING_TRANSACTION
            return self._queue(TxnRequest(END_TXN, TxnResult(), committed=False))

    def begin_abort_at_close(self):
        """The producer is closing gracefully (the sender, once nothing is queued or in
        flight): abort the transaction still open, as Java's ``Sender`` does ("Aborting
        incomplete transaction due to shutdown"). True while the sender must keep running
        for it: an open transaction (now being aborted), or a commit or an abort whose
        EndTxn is queued or in flight. False once none is left, or after a fatal error."""
        with self._lock:
            state = self.state
            if self.transactional_id is None or state not in _ONGOING:
                return False
            ending = any(r.kind == END_TXN for r in self._requests)  # queued or in flight
            if not ending:
                log.info("TransactionalId %s: aborting incomplete transaction due to "
                         "shutdown", self.transactional_id)
                self.state = S.ABORTING_TRANSACTION
                self._queue(TxnRequest(END_TXN, TxnResult(), committed=False))
            return True

    def prepared(self):
        """``(producer_id, epoch)`` of the open transaction once everything sent in it is
        acknowledged (the caller flushed): what another process needs to end it
        (``KafkaAdminClient.end_transaction``; a two-phase commit's prepare step). Raises
        the error that makes the transaction abortable, or IllegalStateError outside a
        transaction or before anything was added to it."""
        with self._lock:
            if self.state is S.ABORTABLE_ERROR:
                raise KafkaError(f"TransactionalId {self.transactional_id}: cannot prepare: "
                                 f"the transaction must be aborted after "
                                 f"{self.last_error!r}") from self.last_error
            self._check("prepare_transaction", S.IN_TRANSACTION)
            if not self.partitions_in_txn or self.partitions_to_add:
                raise IllegalStateError(f"TransactionalId {self.transactional_id}: "
                                        f"prepare_transaction: nothing was written in the "
                                        f"transaction (or not yet flushed)")
            return self.producer_id, self.epoch

    def check_sendable(self):
        """Raise unless records may be sent now (a transactional producer: in a
        transaction)."""
        if self.fatal_error is not None:
            raise _after_fatal("send", self.fatal_error)
        if self.transactional_id is not None and self.state is not S.IN_TRANSACTION:
            if not self.has_producer_id:
                raise IllegalStateError("Cannot perform a 'send' before completing a call to "
                                        "init_transactions when transactions are enabled.")
            raise IllegalStateError(f"Cannot call send in state {self.state.name}"
                                    + (f" (after {self.last_error!r})"
                                       if self.state is S.ABORTABLE_ERROR else ""))

    # -- the sender's transactional requests ----------------------------------------------------

    @property
    def aborting(self):
        """Whether the batches not yet sent are to be failed (an abort, or an abortable
        error)."""
        return self.state in (S.ABORTING_TRANSACTION, S.ABORTABLE_ERROR)

    def next_request(self, idle):
        """The TxnRequest to send next (None: nothing now). ``idle``: no batch is queued
        or in a request (EndTxn waits for it)."""
        with self._lock:
            if not self._requests:
                return None
            request = self._requests[0]
            if request.kind == END_TXN and (not idle or (request.committed
                                                         and self.partitions_to_add)):
                return None
            return request

    def call_done(self, request, error=None):
        """The sender finished ``request``: success (``error`` None) or an abortable
        error; fatal errors go to ``set_fatal``."""
        if error is not None:
            self.set_abortable(error)
            with self._lock:
                if request in self._requests:
                    self._requests.remove(request)
            request.result.set(error)
            return
        follow = None
        with self._lock:
            if request in self._requests:
                self._requests.remove(request)
            if request.kind == INIT:
                self.state = S.READY
            elif request.kind == ADD_OFFSETS:
                self._offsets_added = True
                follow = TxnRequest(TXN_OFFSET_COMMIT, request.result,
                                    group=request.group, offsets=request.offsets)
                self._requests.appendleft(follow)
            elif request.kind == END_TXN:
                self.partitions_in_txn.clear()
                self.partitions_to_add.clear()
                self._offsets_added = False
                self.last_error = None
                if self._reinit_after_abort:  # sequences have gaps: a new epoch
                    self._reinit_after_abort = False
                    self.state = S.INITIALIZING
                    self.producer_id, self.epoch = NO_PRODUCER_ID, -1
                    follow = TxnRequest(INIT, request.result)
                    self._requests.appendleft(follow)
                else:
                    self.state = S.READY
        if follow is None:
            request.result.set()

    @property
    def transaction_started(self):
        """Whether the coordinator knows of the transaction (a partition or a group was
        added): else EndTxn is not sent, as in Kafka."""
        with self._lock:
            return bool(self.partitions_in_txn) or self._offsets_added

    def take_partitions_to_add(self):
        """The partitions to add to the transaction now (they stay noted until added)."""
        with self._lock:
            if self.state not in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
                return ()
            return tuple(self.partitions_to_add)

    @property
    def partitions_waiting(self):
        """Whether ``take_partitions_to_add`` has partitions now (the sender, after a drain
        noted some: it sends AddPartitionsToTxn at once instead of waiting)."""
        return bool(self.partitions_to_add) and self.state in (S.IN_TRANSACTION,
                                                               S.COMMITTING_TRANSACTION)

    def partitions_added(self, partitions):
        with self._lock:
            self.partitions_to_add.difference_update(partitions)
            self.partitions_in_txn.update(partitions)

    # -- draining (the sender thread, under the accumulator's lock) --------------------------

    def may_drain(self, batch):
        """Whether the first batch of its partition's queue may be sent now."""
        if self.producer_id == NO_PRODUCER_ID or self.fatal_error is not None:
            return False
        tp = batch.topic_partition
        if self.transactional_id is not None and tp not in self.partitions_in_txn:
            with self._lock:
                if self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
                    self.partitions_to_add.add(tp)
            return False
        entry = self._partitions.get(tp)
        if entry is None:
            entry = self._partitions[tp] = PartitionSequences(self.producer_id, self.epoch)
        current = entry.producer_id == self.producer_id and entry.epoch == self.epoch
        if not current:
            if entry.in_requests:
                return False
            if tp in self._to_restart or not entry.unfinished:
                self._to_restart.discard(tp)
                entry.restart(self.producer_id, self.epoch, self.transactional)
                current = True
        if batch.base_sequence != NO_SEQUENCE:  # a retry: its partition's lowest, alone
            return not entry.in_requests and entry.unfinished[0] is batch
        return current and entry.in_requests < MAX_IN_FLIGHT_PER_PARTITION

    def stamp(self, batch):
        """Stamp a batch ``may_drain`` let through (a retry keeps its stamp); it is now in
        a request."""
        entry = self._partitions[batch.topic_partition]
        entry.in_requests += 1
        if batch.base_sequence != NO_SEQUENCE:
            return
        count = batch.record_count or batch.builder.record_count
        sequence = entry.next_sequence
        batch.producer_id, batch.producer_epoch = entry.producer_id, entry.epoch
        batch.base_sequence = sequence
        batch.sequence_order = self._order
        self._order += 1
        if batch.builder is not None and batch.built is None:
            batch.builder.set_producer_state(entry.producer_id, entry.epoch, sequence,
                                             self.transactional)
        else:
            _restamp(batch, entry.producer_id, entry.epoch, sequence, self.transactional)
        entry.next_sequence = increment_sequence(sequence, count)
        entry.unfinished.append(batch)

    # -- outcomes (the sender thread) --------------------------------------------------------

    def request_done(self, batch):
        """The request carrying ``batch`` completed (answered or failed)."""
        entry = self._partitions.get(batch.topic_partition)
        if entry is not None and batch.base_sequence != NO_SEQUENCE and entry.in_requests:
            entry.in_requests -= 1

    def acknowledged(self, batch):
        """The leader wrote ``batch`` (or had written it: a duplicate)."""
        entry = self._partitions.get(batch.topic_partition)
        if entry is None or batch not in entry.unfinished:
            return
        entry.unfinished.remove(batch)
        if batch.producer_id == entry.producer_id and batch.producer_epoch == entry.epoch:
            entry.last_acked = batch.base_sequence

    def failed(self, batch, error=None):
        """``batch`` failed for good: if it was stamped, its partition has a gap; in a
        transaction, the transaction must be aborted."""
        if self.transactional_id is not None and self.fatal_error is None:
            self.set_abortable(error or KafkaError(
                f"a batch of {batch.topic}-{batch.partition} failed"))
        entry = self._partitions.get(batch.topic_partition)
        if entry is None or batch not in entry.unfinished:
            return
        entry.unfinished.remove(batch)
        if self.transactional_id is not None:
            with self._lock:
                self._reinit_after_abort = True  # its sequences have a gap
        elif self.fatal_error is None:
            self._request_epoch_bump(batch.topic_partition)

    def retry_decision(self, batch, error):
        """RETRY, FAIL or DUPLICATE for a batch its leader answered ``error`` (module
        doc); FAIL also for an error that is not retriable. Fatal errors set
        ``fatal_error``."""
        if isinstance(error, DuplicateSequenceNumberError):
            return DUPLICATE
        if isinstance(error, _FATAL):
            self.set_fatal(error)
            return FAIL
        entry = self._partitions.get(batch.topic_partition)
        stale = (entry is None or batch.producer_id != entry.producer_id
                 or batch.producer_epoch != entry.epoch)
        if self.transactional_id is not None and isinstance(
                error, (OutOfOrderSequenceNumberError, UnknownProducerIdError)):
            return FAIL  # abortable: the abort's InitProducerId restarts the sequences
        if isinstance(error, OutOfOrderSequenceNumberError):
            if not stale and batch.base_sequence == increment_sequence(entry.last_acked, 1):
                self._request_epoch_bump(batch.topic_partition)
            return RETRY
        if isinstance(error, UnknownProducerIdError):
            if not stale:
                self._request_epoch_bump(batch.topic_partition)
            return RETRY
        return RETRY if getattr(error, "retriable", False) else FAIL

    def _request_epoch_bump(self, tp):
        log.info("%s-%d: the producer epoch is bumped and the partition's sequences start "
                 "again at 0", tp.topic, tp.partition)
        self._bump_required = True
        self._to_restart.add(tp)

    def maybe_bump_epoch(self):
        """Bump the epoch if a partition asked for it; True if the producer now needs a new
        producer id (the epoch is used up)."""
        if not self._bump_required or self.producer_id == NO_PRODUCER_ID:
            return False
        self._bump_required = False
        if self.epoch >= MAX_EPOCH:
            self.producer_id, self.epoch = NO_PRODUCER_ID, -1
            return True
        self.epoch += 1
        log.info("producer id %d bumped to epoch %d", self.producer_id, self.epoch)
        return False


def _after_fatal(what, error):
    """The error a call after a fatal ``error`` raises: a fenced producer stays fenced
    (ProducerFencedError, as Java's), anything else is IllegalStateError; both chained to
    ``error``."""
    if isinstance(error, ProducerFencedError):
        raised = ProducerFencedError(f"{what}: the producer was fenced by a newer one with "
                                     f"the same transactional id")
    else:
        raised = IllegalStateError(f"{what}: the producer failed for good: {error!r}")
    raised.__cause__ = error
    return raised


def _restamp(batch, producer_id, epoch, sequence, transactional=False):
    """Write the producer fields into a batch built earlier (its CRC rewritten)."""
    batch.producer_id, batch.producer_epoch, batch.base_sequence = producer_id, epoch, sequence
    if batch.built is None:
        if batch.builder is not None:
            batch.builder.set_producer_state(producer_id, epoch, sequence, transactional)
        return
    built = batch.built
    if isinstance(built, bytes):
        batch.built = built = bytearray(built)
    elif isinstance(built, BatchParts):  # a large value held as parts: joined, once
        batch.built = built = built.joined()
    BatchHeader(built).set_producer_state(producer_id, epoch, sequence)
