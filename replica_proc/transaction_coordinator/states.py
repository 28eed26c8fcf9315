"""The states of a transactional id (Kafka's ``TransactionState``): their ids in
``__transaction_state`` records, their names (DescribeTransactions, ListTransactions,
``kafka-transactions.sh``) and the transitions allowed into each.

::

    Empty ──AddPartitions──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──▶ CompleteCommit
                             │       ──EndTxn(abort)───▶ PrepareAbort ───▶ CompleteAbort
                             └─ InitProducerId or timeout ─▶ PrepareEpochFence ─▶ PrepareAbort

    Empty, CompleteCommit, CompleteAbort ──InitProducerId (epoch bump)──▶ Empty
    CompleteCommit, CompleteAbort ──AddPartitions (the next transaction)──▶ Ongoing

Empty and Complete* go to Dead when the id expires (``transactional.id.expiration.ms``). Dead and
PrepareEpochFence are never written: a Dead id's record is a tombstone, and the fence is
written as the PrepareAbort it leads to.

Plain values: any thread.
"""
from __future__ import annotations

import enum


class TransactionState(enum.IntEnum):
    """A transactional id's state; the value is Kafka's id (``TransactionStatus``)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self):
        """Kafka's name of the state (``Empty``, ``PrepareCommit`` ...)."""
        return _NAMES[self]

    @classmethod
    def from_kafka_name(cls, name):
        """The state Kafka names ``name`` (``"Ongoing"`` ...), or None for a name it does
        not know (ListTransactions' unknown state filters)."""
        return _BY_NAME.get(name)

    @property
    def expiration_allowed(self):
        """Whether an id in this state may expire (Kafka's ``isExpirationAllowed``)."""
        return self in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT,
                        TransactionState.COMPLETE_ABORT)

    @property
    def valid_previous(self):
        """The states a transition into this one may start from."""
        return _PREVIOUS[self]


_S = TransactionState
_NAMES = {
    _S.EMPTY: "Empty", _S.ONGOING: "Ongoing", _S.PREPARE_COMMIT: "PrepareCommit",
    _S.PREPARE_ABORT: "PrepareAbort", _S.COMPLETE_COMMIT: "CompleteCommit",
    _S.COMPLETE_ABORT: "CompleteAbort", _S.DEAD: "Dead",
    _S.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}
_PREVIOUS = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
