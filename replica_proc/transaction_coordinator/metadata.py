"""One transactional id's state in the coordinator (Kafka's ``TransactionMetadata``) and
the transitions it may take (``Transit``, Kafka's ``TxnTransitMetadata``).

A change is two steps, as in Kafka: ``prepare_*`` computes the target state as a
``Transit`` and marks the id *pending* (``pending`` = the target state), so that no other
change starts while the record that carries it is being written; ``complete(transit)``
applies it once the record is replicated. A failed write clears ``pending`` (the
coordinator does). ``prepare_*`` raises ``IllegalTransition`` for a transition its state
does not allow (a coordinator bug, never a client's error: the coordinator checks the
state first and answers the client with an error code).

Epochs: an epoch of ``EPOCH_EXHAUSTED`` (32766) or more is exhausted: InitProducerId then
gives a new producer id at epoch 0, so that the coordinator can always fence a producer
by one more bump (up to 32767, never returned to a client).

Owner: the transaction coordinator (the broker loop thread). Not thread-safe.
"""
from __future__ import annotations

import dataclasses

from replica_proc.transaction_coordinator.records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionLogValue,
)
from replica_proc.transaction_coordinator.states import TransactionState

_S = TransactionState
SHORT_MAX = 2**15 - 1
#: The first exhausted epoch (Kafka's ``isEpochExhausted``: epoch >= Short.MaxValue - 1).
EPOCH_EXHAUSTED = SHORT_MAX - 1
NO_TIMESTAMP = -1


class IllegalTransition(RuntimeError):
    """A transition the transactional id's state does not allow (a coordinator bug)."""


@dataclasses.dataclass(frozen=True)
class Transit:
    """The state a transactional id moves to (Kafka's ``TxnTransitMetadata``)."""

    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset
    start_ms: int
    last_update_ms: int

    def record_value(self):
        """The ``__transaction_state`` value that stores this state."""
        partitions = () if self.state is _S.EMPTY else tuple(sorted(self.partitions))
        return TransactionLogValue(self.producer_id, self.producer_epoch, self.timeout_ms,
                                   self.state, partitions, self.last_update_ms, self.start_ms)


class TransactionMetadata:
    """A transactional id's producer id, epoch, state and partitions (module doc).

    ``partitions``: {(topic, partition)} of the transaction; while its markers are being
    written (PrepareCommit / PrepareAbort), those whose marker is written are removed.
    """

    def __init__(self, transactional_id, producer_id, producer_epoch, timeout_ms, state,
                 last_update_ms, partitions=(), start_ms=NO_TIMESTAMP,
                 last_producer_epoch=NO_PRODUCER_EPOCH,
                 previous_producer_id=NO_PRODUCER_ID):
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.previous_producer_id = previous_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.timeout_ms = timeout_ms
        self.state = state
        self.partitions = set(partitions)
        self.start_ms = start_ms
        self.last_update_ms = last_update_ms
        #: The state a write in flight moves the id to, or None.
        self.pending = None
        #: A fence's bumped epoch was not stored: the next fence does not bump again.
        self.failed_epoch_fence = False

    @classmethod
    def from_record(cls, transactional_id, value):
        """The metadata a ``__transaction_state`` value stores (Kafka's reading: the last
        epoch is unknown)."""
        return cls(transactional_id, value.producer_id, value.producer_epoch,
                   value.transaction_timeout_ms, value.state, value.last_update_timestamp_ms,
                   value.partitions, value.start_timestamp_ms,
                   previous_producer_id=value.previous_producer_id)

    def __repr__(self):
        return (f"TransactionMetadata({self.transactional_id!r}, producer_id="
                f"{self.producer_id}, epoch={self.producer_epoch}, state="
                f"{self.state.kafka_name}, pending={self.pending}, partitions="
                f"{sorted(self.partitions)})")

    @property
    def epoch_exhausted(self):
        return self.producer_epoch >= EPOCH_EXHAUSTED

    # -- prepare ----------------------------------------------------------------------------

    def prepare_fence_epoch(self):
        """Ongoing -> PrepareEpochFence with the epoch bumped (unless a previous fence's
        bump was never stored), to abort the transaction and fence its producer."""
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTransition(f"{self}: cannot fence an epoch of {SHORT_MAX}")
        epoch = self.producer_epoch if self.failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(_S.PREPARE_EPOCH_FENCE, self.producer_id, epoch,
                             NO_PRODUCER_EPOCH, self.timeout_ms, self.partitions,
                             self.start_ms, self.last_update_ms)

    def prepare_increment_epoch(self, timeout_ms, expected_epoch, now_ms):
        """InitProducerId's bump to Empty: the Transit, or None (the producer is fenced)
        when ``expected_epoch`` (None: not given) is neither the current epoch (a producer
        resuming) nor the last one (a retry of a bump that succeeded)."""
        if self.epoch_exhausted:
            raise IllegalTransition(f"{self}: no epoch left to bump to")
        if expected_epoch is None:
            epoch, last = self.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = self.producer_epoch + 1, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare(_S.EMPTY, self.producer_id, epoch, last, timeout_ms, (),
                             NO_TIMESTAMP, now_ms)

    def prepare_rotation(self, producer_id, timeout_ms, now_ms, record_last_epoch):
        """InitProducerId with the epoch exhausted: a new producer id at epoch 0."""
        if self.state in (_S.ONGOING, _S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            raise IllegalTransition(f"{self}: cannot rotate the producer id of a pending "
                                    "transaction")
        last = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare(_S.EMPTY, producer_id, 0, last, timeout_ms, (), NO_TIMESTAMP,
                             now_ms)

    def prepare_add_partitions(self, partitions, now_ms):
        """-> Ongoing with ``partitions`` added (a new transaction starts now)."""
        start = now_ms if self.state in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT) \
            else self.start_ms
        return self._prepare(_S.ONGOING, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.timeout_ms,
                             self.partitions | set(partitions), start, now_ms)

    def prepare_end(self, state, now_ms):
        """Ongoing -> PrepareCommit or PrepareAbort (EndTxn; transactions V1: no bump)."""
        return self._prepare(state, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.timeout_ms, self.partitions,
                             self.start_ms, now_ms)

    def prepare_complete(self, now_ms):
        """PrepareCommit -> CompleteCommit, PrepareAbort -> CompleteAbort (every marker
        written): the partitions are cleared."""
        self.failed_epoch_fence = False
        state = _S.COMPLETE_COMMIT if self.state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        return self._prepare(state, self.producer_id, self.producer_epoch,
                             self.producer_epoch, self.timeout_ms, (), self.start_ms, now_ms)

    def prepare_dead(self):
        """-> Dead (the id expires: its record becomes a tombstone)."""
        return self._prepare(_S.DEAD, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.timeout_ms, (), self.start_ms,
                             self.last_update_ms)

    def _prepare(self, state, producer_id, epoch, last_epoch, timeout_ms, partitions, start_ms,
                 now_ms):
        if self.pending is not None:
            raise IllegalTransition(f"{self}: preparing {state.kafka_name} while "
                                    f"{self.pending.kafka_name} is pending")
        if producer_id < 0:
            raise IllegalTransition(f"{self}: illegal producer id {producer_id}")
        if state is not _S.DEAD and epoch < 0:
            raise IllegalTransition(f"{self}: illegal producer epoch {epoch}")
        if self.state not in state.valid_previous:
            raise IllegalTransition(f"{self}: {state.kafka_name} cannot follow "
                                    f"{self.state.kafka_name}")
        self.pending = state
        return Transit(producer_id, self.producer_id, epoch, last_epoch, timeout_ms, state,
                       frozenset(partitions), start_ms, now_ms)

    # -- complete ---------------------------------------------------------------------------

    def complete(self, transit):
        """Apply ``transit`` (its record is stored), checking it as Kafka's
        ``completeTransitionTo`` does."""
        state = transit.state
        if self.pending is not state:
            pending = "nothing" if self.pending is None else self.pending.kafka_name
            raise IllegalTransition(f"{self}: completing {state.kafka_name} while {pending} "
                                    "is pending")
        same_epoch = (transit.producer_id, transit.producer_epoch) == (self.producer_id,
                                                                       self.producer_epoch)
        if state is _S.EMPTY:
            bump = transit.producer_epoch == self.producer_epoch + 1 or (
                transit.producer_epoch == 0 and transit.producer_id != self.producer_id)
            self._check(transit, (self.producer_epoch == transit.producer_epoch or bump)
                        and not transit.partitions and transit.start_ms == NO_TIMESTAMP)
            self.timeout_ms = transit.timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.previous_producer_id = transit.previous_producer_id
        elif state is _S.ONGOING:
            self._check(transit, same_epoch and self.partitions <= transit.partitions
                        and self.timeout_ms == transit.timeout_ms)
            self.start_ms = transit.start_ms
            self.partitions |= transit.partitions
        elif state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            self._check(transit, same_epoch and self.partitions == transit.partitions
                        and self.timeout_ms == transit.timeout_ms
                        and self.start_ms == transit.start_ms)
        elif state in (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
            self._check(transit, same_epoch and self.timeout_ms == transit.timeout_ms
                        and transit.start_ms != NO_TIMESTAMP)
            self.start_ms = transit.start_ms
            self.partitions.clear()
        else:  # PrepareEpochFence becomes PrepareAbort; Dead is removed, never completed
            raise IllegalTransition(f"{self}: {state.kafka_name} is never completed")
        self.last_update_ms = transit.last_update_ms
        self.pending = None
        self.state = state

    def _check(self, transit, valid):
        if not valid:
            raise IllegalTransition(f"{self}: unexpected transition to {transit}")
