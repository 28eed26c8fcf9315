"""The records of ``__transaction_state``: Kafka's ``TransactionLogKey`` and
``TransactionLogValue``, byte for byte.

One record per transactional id and change (the topic is compacted: the last record of an
id is its state); a null value is a tombstone (the id expired). Key and value start with
an int16 version (``MessageUtil.toVersionPrefixedBytes``); fields are encoded as
``replica_proc.coordinator_common.record_fields`` says.

=====================  ===========================================================  =======
record                 fields in order                                              written
=====================  ===========================================================  =======
key v0                 TransactionalId str                                          v0
value v0               ProducerId i64, ProducerEpoch i16, TransactionTimeoutMs      v0
                       i32, TransactionStatus i8 (``states.TransactionState``),
                       TransactionPartitions [Topic str, PartitionIds [i32]]?
                       (null when Empty), TransactionLastUpdateTimestampMs i64,
                       TransactionStartTimestampMs i64
value v1 (flexible)    the same fields, compact; then tagged fields: 0                read
                       PreviousProducerId i64 (default -1), 1 NextProducerId i64
                       (default -1), 2 ClientTransactionVersion i16 (default 0),
                       each written only when not its default
=====================  ===========================================================  =======

Which version Kafka writes: v0 while the cluster's ``transaction.version`` feature is 0
(every Kafka 3.x, and Kafka 4.x unless the feature is raised), v1 from
``transaction.version`` 1 (``TransactionVersion.transactionLogValueVersion``). ringlog
speaks transactions V1 (EndTxn below v5: no epoch bump per transaction), so it writes v0,
as Kafka 3.x and a default Kafka 4.0 cluster do, and reads both (v1's tagged fields keep
their values; v0 gives their defaults). ``encode_value(value, version=1)`` exists for the
round-trip tests and for tools.

The partitions are written grouped by topic, topics and partitions in increasing order
(Kafka groups a hash set by topic; the order carries no meaning).

``decode_key`` / ``decode_value`` raise ValueError naming the record, the version and what
was wrong for bytes that do not parse (an unknown version or state id, a truncated field,
trailing bytes); the coordinator's replay skips such a record with an ERROR line.

Pure code: any thread.
"""
from __future__ import annotations

import dataclasses
import itertools
import struct

from replica_proc.coordinator_common.record_fields import FieldReader, FieldWriter
from replica_proc.transaction_coordinator.states import TransactionState

KEY_VERSION = 0
#: The value version written (see the module doc); VALUE_VERSIONS are read.
VALUE_VERSION = 0
VALUE_VERSIONS = (0, 1)
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: TransactionLogValue v1's tags.
TAG_PREVIOUS_PRODUCER_ID, TAG_NEXT_PRODUCER_ID, TAG_CLIENT_TRANSACTION_VERSION = 0, 1, 2

_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")


@dataclasses.dataclass(frozen=True)
class TransactionLogKey:
    transactional_id: str


@dataclasses.dataclass(frozen=True)
class TransactionLogValue:
    """A transactional id's state as stored. ``partitions``: ((topic, partition), ...),
    sorted; empty when Empty (written as a null array)."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState
    partitions: tuple = ()
    last_update_timestamp_ms: int = -1
    start_timestamp_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0


def encode_key(key):
    """The key bytes of a TransactionLogKey (v0)."""
    w = FieldWriter()
    w.i16(KEY_VERSION)
    w.string(key.transactional_id)
    return bytes(w.out)


def _by_topic(partitions):
    """[(topic, [partition ids])] of sorted (topic, partition) pairs."""
    return [(topic, [p for _, p in group])
            for topic, group in itertools.groupby(sorted(partitions), key=lambda tp: tp[0])]


def encode_value(value, version=VALUE_VERSION):
    """The value bytes of a TransactionLogValue at ``version`` (0 or 1); None (a tombstone)
    stays None. An Empty value with partitions is refused, as Kafka refuses it."""
    if value is None:
        return None
    if version not in VALUE_VERSIONS:
        raise ValueError(f"TransactionLogValue version {version}; versions 0-1 exist")
    if value.state is TransactionState.EMPTY and value.partitions:
        raise ValueError(f"an Empty transaction has no partitions, found {value.partitions}")
    topics = None if value.state is TransactionState.EMPTY else _by_topic(value.partitions)
    flexible = version >= 1
    w = FieldWriter()
    w.i16(version)
    w.i64(value.producer_id)
    w.i16(value.producer_epoch)
    w.i32(value.transaction_timeout_ms)
    w.i8(int(value.state))
    if flexible:
        w.compact_count(topics)
        for topic, ids in topics or ():
            w.compact_string(topic)
            w.compact_count(ids)
            for partition in ids:
                w.i32(partition)
            w.tagged_fields(())
    else:
        w.count(topics)
        for topic, ids in topics or ():
            w.string(topic)
            w.count(ids)
            for partition in ids:
                w.i32(partition)
    w.i64(value.last_update_timestamp_ms)
    w.i64(value.start_timestamp_ms)
    if flexible:
        tagged = []
        if value.previous_producer_id != NO_PRODUCER_ID:
            tagged.append((TAG_PREVIOUS_PRODUCER_ID, _I64.pack(value.previous_producer_id)))
        if value.next_producer_id != NO_PRODUCER_ID:
            tagged.append((TAG_NEXT_PRODUCER_ID, _I64.pack(value.next_producer_id)))
        if value.client_transaction_version != 0:
            tagged.append((TAG_CLIENT_TRANSACTION_VERSION,
                           _I16.pack(value.client_transaction_version)))
        w.tagged_fields(tagged)
    return bytes(w.out)


def decode_key(data):
    """The TransactionLogKey of key bytes (ValueError if they are not one)."""
    r = FieldReader(data, "TransactionLogKey")
    version = r.i16()
    if version != KEY_VERSION:
        raise ValueError(f"TransactionLogKey of version {version}; version 0 is read")
    r.what = f"TransactionLogKey v{version}"
    key = TransactionLogKey(r.string())
    r.end()
    return key


def decode_value(data):
    """The TransactionLogValue of value bytes; None for a tombstone."""
    if data is None:
        return None
    r = FieldReader(data, "TransactionLogValue")
    version = r.i16()
    if version not in VALUE_VERSIONS:
        raise ValueError(f"TransactionLogValue of version {version}; versions 0-1 are read")
    r.what = f"TransactionLogValue v{version}"
    flexible = version >= 1
    producer_id = r.i64()
    producer_epoch = r.i16()
    timeout_ms = r.i32()
    status = r.i8()
    try:
        state = TransactionState(status)
    except ValueError:
        raise ValueError(f"{r.what}: unknown transaction status {status}") from None
    partitions = []
    count = r.compact_count(nullable=True) if flexible else r.count(nullable=True)
    for _ in range(count or 0):
        topic = r.compact_string() if flexible else r.string()
        ids = r.compact_count() if flexible else r.count()
        partitions.extend((topic, r.i32()) for _ in range(ids))
        if flexible:
            r.tagged_fields()
    last_update = r.i64()
    start = r.i64()
    tagged = r.tagged_fields() if flexible else {}
    r.end()
    previous = _tagged(tagged, TAG_PREVIOUS_PRODUCER_ID, FieldReader.i64, NO_PRODUCER_ID)
    following = _tagged(tagged, TAG_NEXT_PRODUCER_ID, FieldReader.i64, NO_PRODUCER_ID)
    client_version = _tagged(tagged, TAG_CLIENT_TRANSACTION_VERSION, FieldReader.i16, 0)
    if state is TransactionState.EMPTY:
        partitions = []  # Kafka ignores an Empty value's partitions
    return TransactionLogValue(producer_id, producer_epoch, timeout_ms, state,
                               tuple(sorted(set(partitions))), last_update, start, previous,
                               following, client_version)


def _tagged(fields, tag, read, default):
    """The value of tagged field ``tag`` (read by ``read``), or ``default`` if absent; tags
    this version does not define are ignored, as Kafka ignores them."""
    field = fields.get(tag)
    if field is None:
        return default
    value = read(field)
    field.end()
    return value
