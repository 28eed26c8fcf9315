"""The transactional producer's coordinator requests: how each is built from the
``TransactionManager``'s state and how each answer is read (Kafka's ``TxnRequestHandler``
subclasses in ``TransactionManager``, without the I/O: the sender sends and polls).

Requests, at the versions ``cluster.client.kafka_client.API_VERSIONS`` names:
FindCoordinator (key type 1: the transactional id; 0: a group, for TxnOffsetCommit),
InitProducerId (with the transactional id and ``transaction_timeout_ms``),
AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit (to the group's coordinator; v3
carries the consumer's generation, member id and group instance id, KIP-447) and EndTxn.

``decide(kind, error)`` sorts a failed request's error as Kafka's handlers do:

- NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a lost connection: ``REDISCOVER`` (find
  the coordinator again, then retry);
- COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS and other retriable errors:
  ``RETRY`` after ``retry_backoff_ms`` (``retry_backoff``: a transaction's first
  AddPartitionsToTxn or AddOffsetsToTxn refused with CONCURRENT_TRANSACTIONS — the
  previous transaction is still writing its markers — after at most 20 ms);
- PRODUCER_FENCED, INVALID_PRODUCER_EPOCH (as ProducerFencedError),
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE: ``FATAL``;
- a TxnOffsetCommit's ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID (KIP-447: the consumer
  whose ``group_metadata()`` was sent is no longer that member of the group — a rebalance
  moved its partitions): ``ABORTABLE``, as CommitFailedError (Java's "consumer group
  metadata mismatch"); FENCED_INSTANCE_ID (a static member replaced): ``ABORTABLE`` as
  itself, as Java's ``TxnOffsetCommitHandler``;
- anything else: ``ABORTABLE`` for AddPartitionsToTxn, AddOffsetsToTxn and
  TxnOffsetCommit (the transaction can still be aborted), ``FATAL`` for InitProducerId and
  EndTxn.

Pure functions of their arguments: the sender thread calls them.
"""
from __future__ import annotations

import datetime

from cluster.client.kafka_client import API_VERSIONS
from cluster.errors import (
    CommitFailedError,
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    IllegalGenerationError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaConnectionError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    UnknownMemberIdError,
    for_code,
)
from cluster.producer.transaction_manager import (
    ADD_OFFSETS,
    END_TXN,
    INIT,
    TXN_OFFSET_COMMIT,
)
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey

#: The other kinds of call (besides the TransactionManager's TxnRequest kinds).
FIND_COORDINATOR, ADD_PARTITIONS = "find_coordinator", "add_partitions"

#: decide's answers.
RETRY, REDISCOVER, FATAL, ABORTABLE = "retry", "rediscover", "fatal", "abortable"

#: FindCoordinator's key types.
GROUP_KEY, TRANSACTION_KEY = 0, 1

_API = {FIND_COORDINATOR: ApiKey.FIND_COORDINATOR, INIT: ApiKey.INIT_PRODUCER_ID,
        ADD_PARTITIONS: ApiKey.ADD_PARTITIONS_TO_TXN, ADD_OFFSETS: ApiKey.ADD_OFFSETS_TO_TXN,
        TXN_OFFSET_COMMIT: ApiKey.TXN_OFFSET_COMMIT, END_TXN: ApiKey.END_TXN}


def load_codecs():
    """Load the codecs of the requests a transaction sends (AddPartitionsToTxn,
    AddOffsetsToTxn, TxnOffsetCommit, EndTxn) now — ``init_transactions`` does, before the
    first transaction: kio imports an API's schema modules at its first use, 5-9 ms each,
    which the first transaction would otherwise pay with its records waiting."""
    for kind in (ADD_PARTITIONS, ADD_OFFSETS, TXN_OFFSET_COMMIT, END_TXN):
        protocol.load_codecs(_API[kind])


def _module(kind):
    return protocol.request_module(_API[kind], API_VERSIONS[_API[kind]])


def find_coordinator(key, key_type):
    return _module(FIND_COORDINATOR).FindCoordinatorRequest(key=key, key_type=key_type)


def add_partitions(txn, partitions):
    """AddPartitionsToTxn for ``partitions`` (TopicPartitions)."""
    m = _module(ADD_PARTITIONS)
    by_topic = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return m.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn.transactional_id,
        v3_and_below_producer_id=txn.producer_id, v3_and_below_producer_epoch=txn.epoch,
        v3_and_below_topics=tuple(m.AddPartitionsToTxnTopic(name=topic,
                                                            partitions=tuple(parts))
                                  for topic, parts in by_topic.items()))


def build(txn, request):
    """The protocol request for ``request`` (a TxnRequest)."""
    m = _module(request.kind)
    if request.kind == INIT:
        return m.InitProducerIdRequest(
            transactional_id=txn.transactional_id,
            transaction_timeout=datetime.timedelta(milliseconds=txn.transaction_timeout_ms))
    if request.kind == ADD_OFFSETS:
        return m.AddOffsetsToTxnRequest(
            transactional_id=txn.transactional_id, producer_id=txn.producer_id,
            producer_epoch=txn.epoch, group_id=request.group_id)
    if request.kind == TXN_OFFSET_COMMIT:
        by_topic = {}
        for tp, meta in sorted(request.offsets.items()):
            by_topic.setdefault(tp.topic, []).append(m.TxnOffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=meta.offset,
                committed_leader_epoch=getattr(meta, "leader_epoch", -1),
                committed_metadata=meta.metadata))
        group = request.group
        return m.TxnOffsetCommitRequest(
            transactional_id=txn.transactional_id, group_id=group.group_id,
            producer_id=txn.producer_id, producer_epoch=txn.epoch,
            generation_id=group.generation_id, member_id=group.member_id,
            group_instance_id=group.group_instance_id,
            topics=tuple(m.TxnOffsetCommitRequestTopic(name=topic, partitions=tuple(parts))
                         for topic, parts in by_topic.items()))
    return m.EndTxnRequest(transactional_id=txn.transactional_id,
                           producer_id=txn.producer_id, producer_epoch=txn.epoch,
                           committed=request.committed)


def response_error(kind, response):
    """The error a response carries (the first partition's error that is not
    OPERATION_NOT_ATTEMPTED, for the per-partition answers), or None."""
    if kind == ADD_PARTITIONS:
        codes = [(f"{t.name}-{p.partition_index}", p.partition_error_code)
                 for t in response.results_by_topic_v3_and_below
                 for p in t.results_by_partition]
    elif kind == TXN_OFFSET_COMMIT:
        codes = [(f"{t.name}-{p.partition_index}", p.error_code)
                 for t in response.topics for p in t.partitions]
    else:
        codes = [("", response.error_code)]
    found = None
    for where, code in codes:
        if not code:
            continue
        cls = for_code(int(code))
        error = cls(f"{_API[kind].name} {where}: "
                    f"{getattr(response, 'error_message', None) or cls.description}".strip())
        if not isinstance(error, OperationNotAttemptedError):
            return error
        found = found or error
    return found


#: Seconds before the first AddPartitionsToTxn or AddOffsetsToTxn of a transaction is sent
#: again after CONCURRENT_TRANSACTIONS, if ``retry_backoff_ms`` is longer (Java's
#: ``ADD_PARTITIONS_RETRY_BACKOFF_MS``): the previous transaction completes soon.
ADD_PARTITIONS_RETRY_BACKOFF = 0.02


def retry_backoff(kind, error, first_call, backoff):
    """Seconds before a request of ``kind`` refused with the retriable ``error`` is sent
    again: ``backoff`` (``retry_backoff_ms``), or at most ADD_PARTITIONS_RETRY_BACKOFF for
    the transaction's first call (``first_call``: nothing added to it yet) refused with
    CONCURRENT_TRANSACTIONS, AddPartitionsToTxn or AddOffsetsToTxn.

    Java's producer shortens only AddPartitionsToTxn's, but notes a partition at
    ``send()``, so its AddPartitionsToTxn comes first and AddOffsetsToTxn finds the
    previous transaction complete; this one notes partitions as it drains their first
    batch (``may_drain``), so AddOffsetsToTxn often opens the transaction and meets the
    previous one's markers — 100 ms per transaction (``perf.txn_bench``)."""
    if kind in (ADD_PARTITIONS, ADD_OFFSETS) and first_call and isinstance(
            error, ConcurrentTransactionsError):
        return min(backoff, ADD_PARTITIONS_RETRY_BACKOFF)
    return backoff


def decide(kind, error):
    """``(decision, error)``: what to do after ``error`` (module doc); fencing errors come
    back as ProducerFencedError, a TxnOffsetCommit's group metadata mismatch as
    CommitFailedError."""
    if kind == TXN_OFFSET_COMMIT and isinstance(error, (IllegalGenerationError,
                                                        UnknownMemberIdError)):
        failed = CommitFailedError(
            f"Transaction offset commit failed due to consumer group metadata mismatch: "
            f"{error}")
        failed.__cause__ = error
        return ABORTABLE, failed
    if isinstance(error, (InvalidProducerEpochError, ProducerFencedError)):
        fenced = ProducerFencedError(
            f"{_API[kind].name}: there is a newer producer with the same transactional id "
            f"({error})")
        fenced.__cause__ = error
        return FATAL, fenced
    if isinstance(error, (TransactionalIdAuthorizationFailedError, InvalidTxnStateError)):
        return FATAL, error
    if isinstance(error, (NotCoordinatorError, CoordinatorNotAvailableError,
                          KafkaConnectionError)):
        return REDISCOVER, error
    if getattr(error, "retriable", False):
        return RETRY, error
    if kind in (ADD_PARTITIONS, ADD_OFFSETS, TXN_OFFSET_COMMIT):
        return ABORTABLE, error
    return FATAL, error
