"""Control batches: the COMMIT and ABORT markers that end a transaction in a partition.

A transaction coordinator ends a transaction by asking the leader of each partition the
transaction wrote to to append a *control batch* (Kafka's
``MemoryRecords.withEndTransactionMarker``): a RecordBatch v2 with the transactional and
control attribute bits, the transaction's producer id and epoch, no sequence, and one
record whose key is a ControlRecordType (ABORT or COMMIT) and whose value an
EndTransactionMarker (the coordinator's epoch). Layouts: ``control_record_descriptor``.

``build_end_txn_marker`` encodes such a batch (baseOffset 0: the log stamps it);
``read_control_record`` recognises the record of a control batch in a buffer. Both are
pure: bytes in, bytes or values out; no I/O, no lock; any thread.
"""
from __future__ import annotations

from collections import namedtuple

from segments.errors import CorruptRecordError
from segments.record import batch_descriptor as bd, control_record_descriptor as cd
from segments.record.records import RecordBatch, pack_batch
from segments.record.varint import encode_varint

ABORT = cd.ABORT
COMMIT = cd.COMMIT
#: Kafka's ControlRecordType names, by id (kafka-dump-log prints them).
CONTROL_TYPE_NAMES = {ABORT: "ABORT", COMMIT: "COMMIT"}
#: What ``read_control_record`` answers for a key whose type it does not know
#: (Kafka's ControlRecordType.UNKNOWN, id -1).
UNKNOWN = -1

#: A control record as read: ``control_type`` (ABORT, COMMIT, or UNKNOWN) and, for ABORT
#: and COMMIT, ``coordinator_epoch`` (None for other types).
ControlRecord = namedtuple("ControlRecord", "control_type coordinator_epoch")

#: The attributes of a transaction marker batch: transactional, control, no compression,
#: CreateTime.
MARKER_ATTRIBUTES = bd.TRANSACTIONAL_MASK | bd.CONTROL_MASK


def control_key(control_type):
    """The key of a control record of ``control_type`` (4 bytes)."""
    if control_type not in CONTROL_TYPE_NAMES:
        raise ValueError(f"control type {control_type!r} is neither ABORT ({ABORT}) nor "
                         f"COMMIT ({COMMIT})")
    return cd.KEY.pack(cd.CURRENT_KEY_VERSION, control_type)


def end_txn_marker_value(coordinator_epoch):
    """The EndTransactionMarker value carrying ``coordinator_epoch`` (6 bytes)."""
    return cd.END_TXN_MARKER.pack(cd.CURRENT_VALUE_VERSION, coordinator_epoch)


def build_end_txn_marker(control_type, coordinator_epoch, producer_id, producer_epoch,
                         timestamp, partition_leader_epoch=bd.NO_PARTITION_LEADER_EPOCH):
    """A whole control batch ending ``producer_id``'s transaction with ``control_type``
    (ABORT or COMMIT), baseOffset 0, its one record at ``timestamp`` (ms); bytes."""
    if producer_id < 0:
        raise ValueError(f"a transaction marker needs a producer id, found {producer_id}")
    key = control_key(control_type)
    value = end_txn_marker_value(coordinator_epoch)
    # attributes 0, timestampDelta 0, offsetDelta 0, key, value, no headers
    body = (b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(len(key)) + key
            + encode_varint(len(value)) + value + encode_varint(0))
    payload = encode_varint(len(body)) + body
    return pack_batch(payload, 1, timestamp, timestamp, MARKER_ATTRIBUTES,
                      producer_id=producer_id, producer_epoch=producer_epoch,
                      base_sequence=bd.NO_SEQUENCE,
                      partition_leader_epoch=partition_leader_epoch)


def parse_control_key(key):
    """The control type a control record's ``key`` names (UNKNOWN for an id this code does
    not know); CorruptRecordError for a key too short or of a negative version."""
    if key is None or len(key) < cd.KEY_SIZE:
        raise CorruptRecordError(
            f"control record key of {0 if key is None else len(key)} bytes, expected at "
            f"least {cd.KEY_SIZE}")
    version, control_type = cd.KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key version {version} is negative")
    return control_type if control_type in CONTROL_TYPE_NAMES else UNKNOWN


def parse_end_txn_marker(value):
    """The coordinator epoch of an EndTransactionMarker ``value``; CorruptRecordError for
    a value too short or of a negative version."""
    if value is None or len(value) < cd.VALUE_SIZE:
        raise CorruptRecordError(
            f"end transaction marker of {0 if value is None else len(value)} bytes, "
            f"expected at least {cd.VALUE_SIZE}")
    version, coordinator_epoch = cd.END_TXN_MARKER.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"end transaction marker version {version} is negative")
    return coordinator_epoch


def read_control_record(buf, header):
    """The ControlRecord of the control batch ``header`` (a BatchHeader over ``buf``):
    its first record decoded. CorruptRecordError if the batch is not a control batch or
    holds no readable control record."""
    if not header.is_control_batch:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} is not a control batch "
            f"(attributes {header.attributes:#x})")
    for record in RecordBatch(buf, header.position):
        control_type = parse_control_key(record.key)
        if control_type == UNKNOWN:
            return ControlRecord(UNKNOWN, None)
        return ControlRecord(control_type, parse_end_txn_marker(record.value))
    raise CorruptRecordError(f"control batch at offset {header.base_offset} has no record")


def is_abort_marker(buf, header):
    """Whether the batch ``header`` over ``buf`` is a transaction's ABORT marker (Kafka's
    containsAbortMarker: a control batch whose record's key is ABORT)."""
    if not header.is_control_batch:
        return False
    return read_control_record(buf, header).control_type == ABORT
