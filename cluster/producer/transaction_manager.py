"""The idempotent producer's state: its producer id and epoch, and per partition the
sequence numbers of its batches (Kafka's ``TransactionManager`` and ``TxnPartitionMap``,
the idempotent part: no transactions yet).

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

Thread safety: the sender thread alone calls every method (``may_drain`` and ``stamp``
under the accumulator's lock, while it drains); ``fatal_error`` may be read by anyone.
"""
from __future__ import annotations

import logging

from cluster.errors import (
    DuplicateSequenceNumberError,
    InvalidProducerEpochError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    UnknownProducerIdError,
)
from segments.batch_header import BatchHeader
from segments.log_config import INT_MAX

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

    def restart(self, producer_id, epoch):
        """Sequences from 0 under ``producer_id`` / ``epoch``; the unfinished batches are
        re-stamped from 0 in order (see the module doc)."""
        self.producer_id, self.epoch = producer_id, epoch
        self.next_sequence = 0
        self.last_acked = NO_SEQUENCE
        for batch in self.unfinished:
            _restamp(batch, producer_id, epoch, self.next_sequence)
            self.next_sequence = increment_sequence(self.next_sequence, batch.record_count)


class TransactionManager:
    """The producer id, epoch and sequences of one idempotent producer (module doc)."""

    def __init__(self):
        self.producer_id = NO_PRODUCER_ID
        self.epoch = -1
        self.fatal_error = None
        self._partitions = {}  # TopicPartition -> PartitionSequences
        self._bump_required = False
        self._to_restart = set()  # TopicPartitions to restart at 0 under the next epoch
        self._order = 0  # stamps given so far (sequence_order of the next one)

    @property
    def has_producer_id(self):
        return self.producer_id != NO_PRODUCER_ID

    def set_producer_id_and_epoch(self, producer_id, epoch):
        log.info("producer id %d, epoch %d", producer_id, epoch)
        self.producer_id, self.epoch = producer_id, epoch

    def set_fatal(self, error):
        if self.fatal_error is None:
            log.error("the idempotent producer failed for good: %s", error)
            self.fatal_error = error

    # -- draining (the sender thread, under the accumulator's lock) --------------------------

    def may_drain(self, batch):
        """Whether the first batch of its partition's queue may be sent now."""
        if self.producer_id == NO_PRODUCER_ID or self.fatal_error is not None:
            return False
        tp = batch.topic_partition
        entry = self._partitions.get(tp)
        if entry is None:
            entry = self._partitions[tp] = PartitionSequences(self.producer_id, self.epoch)
        current = entry.producer_id == self.producer_id and entry.epoch == self.epoch
        if not current:
            if entry.in_requests:
                return False
            if tp in self._to_restart or not entry.unfinished:
                self._to_restart.discard(tp)
                entry.restart(self.producer_id, self.epoch)
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
            batch.builder.set_producer_state(entry.producer_id, entry.epoch, sequence)
        else:
            _restamp(batch, entry.producer_id, entry.epoch, sequence)
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

    def failed(self, batch):
        """``batch`` failed for good: if it was stamped, its partition has a gap."""
        entry = self._partitions.get(batch.topic_partition)
        if entry is None or batch not in entry.unfinished:
            return
        entry.unfinished.remove(batch)
        if self.fatal_error is None:
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


def _restamp(batch, producer_id, epoch, sequence):
    """Write the producer fields into a batch built earlier (its CRC rewritten)."""
    batch.producer_id, batch.producer_epoch, batch.base_sequence = producer_id, epoch, sequence
    if batch.built is None:
        if batch.builder is not None:
            batch.builder.set_producer_state(producer_id, epoch, sequence)
        return
    built = batch.built
    if isinstance(built, bytes):
        batch.built = built = bytearray(built)
    BatchHeader(built).set_producer_state(producer_id, epoch, sequence)
