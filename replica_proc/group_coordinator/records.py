"""The records of ``__consumer_offsets``: Kafka's key and value layouts, byte for byte.

Every record's key starts with an int16 *type* (Kafka's key version: 0 or 1 = an offset
commit, 2 = group metadata) and its value with an int16 *version*; a null value is a
tombstone (the offset or the group is deleted; compaction removes both in time). Fields are
encoded as ``replica_proc.coordinator_common.record_fields`` says (non-flexible: int16-length
strings, -1 = null where nullable; int32-length bytes; int32-count arrays; big-endian integers).
Written as Kafka 3.x writes them; read at every non-flexible version, so ``ringlog dump-log
--offsets-decoder`` prints what Kafka's ``kafka-dump-log --offsets-decoder`` prints for the
same bytes.

=========================  ======================================================  ========
record                     fields in order (version in which a field appears)       written
=========================  ======================================================  ========
OffsetCommit key (type 1)  group str, topic str, partition i32                      type 1
OffsetCommit value         offset i64, leaderEpoch i32 (v3), metadata str,          v3
                           commitTimestamp i64, expireTimestamp i64 (v1 only)
GroupMetadata key (type 2) group str                                                type 2
GroupMetadata value        protocolType str, generation i32, protocol str?,         v3
                           leader str?, currentStateTimestamp i64 (v2+),
                           members [memberId str, groupInstanceId str? (v3+),
                           clientId str, clientHost str, rebalanceTimeout i32
                           (v1+), sessionTimeout i32, subscription bytes,
                           assignment bytes]
=========================  ======================================================  ========

``decode_key`` / ``decode_value`` raise ValueError naming the record kind, the version and
what was wrong for bytes that do not parse (an unknown type or version, a truncated field,
trailing bytes): the coordinator's replay skips such a record with an ERROR line rather
than guessing.

Pure code: any thread.
"""
from __future__ import annotations

import dataclasses

from replica_proc.coordinator_common.record_fields import FieldReader, FieldWriter

OFFSET_COMMIT_KEY_TYPES = (0, 1)
GROUP_METADATA_KEY_TYPE = 2
OFFSET_COMMIT_KEY_WRITTEN = 1
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
#: leaderEpoch / expireTimestamp / currentStateTimestamp when absent (Kafka's defaults).
NO_EPOCH = -1
NO_TIMESTAMP = -1



@dataclasses.dataclass(frozen=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclasses.dataclass(frozen=True)
class GroupMetadataKey:
    group: str


@dataclasses.dataclass(frozen=True)
class OffsetCommitValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = NO_TIMESTAMP
    leader_epoch: int = NO_EPOCH
    expire_timestamp: int = NO_TIMESTAMP


@dataclasses.dataclass(frozen=True)
class MemberMetadata:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    rebalance_timeout: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclasses.dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = NO_TIMESTAMP
    members: tuple = ()


# -- writing ----------------------------------------------------------------------------------

def encode_key(key):
    """The key bytes of an OffsetCommitKey or GroupMetadataKey."""
    w = FieldWriter()
    if isinstance(key, OffsetCommitKey):
        w.i16(OFFSET_COMMIT_KEY_WRITTEN)
        w.string(key.group)
        w.string(key.topic)
        w.i32(key.partition)
    elif isinstance(key, GroupMetadataKey):
        w.i16(GROUP_METADATA_KEY_TYPE)
        w.string(key.group)
    else:
        raise TypeError(f"not an offsets-topic key: {key!r}")
    return bytes(w.out)


def encode_value(value):
    """The value bytes of an OffsetCommitValue (v3) or GroupMetadataValue (v3); None
    (a tombstone) stays None."""
    if value is None:
        return None
    w = FieldWriter()
    if isinstance(value, OffsetCommitValue):
        w.i16(OFFSET_COMMIT_VALUE_VERSION)
        w.i64(value.offset)
        w.i32(value.leader_epoch)
        w.string(value.metadata)
        w.i64(value.commit_timestamp)
    elif isinstance(value, GroupMetadataValue):
        w.i16(GROUP_METADATA_VALUE_VERSION)
        w.string(value.protocol_type)
        w.i32(value.generation)
        w.string(value.protocol, nullable=True)
        w.string(value.leader, nullable=True)
        w.i64(value.current_state_timestamp)
        w.i32(len(value.members))
        for m in value.members:
            w.string(m.member_id)
            w.string(m.group_instance_id, nullable=True)
            w.string(m.client_id)
            w.string(m.client_host)
            w.i32(m.rebalance_timeout)
            w.i32(m.session_timeout)
            w.bytes(m.subscription)
            w.bytes(m.assignment)
    else:
        raise TypeError(f"not an offsets-topic value: {value!r}")
    return bytes(w.out)


# -- reading ----------------------------------------------------------------------------------

def decode_key(data):
    """OffsetCommitKey or GroupMetadataKey of key bytes (ValueError if they are neither)."""
    r = FieldReader(data, "offsets-topic key")
    kind = r.i16()
    if kind in OFFSET_COMMIT_KEY_TYPES:
        r.what = f"OffsetCommit key (type {kind})"
        key = OffsetCommitKey(r.string(), r.string(), r.i32())
    elif kind == GROUP_METADATA_KEY_TYPE:
        r.what = f"GroupMetadata key (type {kind})"
        key = GroupMetadataKey(r.string())
    else:
        raise ValueError(f"offsets-topic key of unknown type {kind} (expected 0, 1 or 2)")
    r.end()
    return key


def decode_value(key, data):
    """The value of the record whose key is ``key`` (decoded); None for a tombstone."""
    if data is None:
        return None
    if isinstance(key, OffsetCommitKey):
        return _offset_commit_value(data)
    return _group_metadata_value(data)


def _offset_commit_value(data):
    r = FieldReader(data, "OffsetCommit value")
    version = r.i16()
    if not 0 <= version <= 3:
        raise ValueError(f"OffsetCommit value of version {version}; versions 0-3 are read")
    r.what = f"OffsetCommit value v{version}"
    offset = r.i64()
    epoch = r.i32() if version >= 3 else NO_EPOCH
    metadata = r.string()
    commit_timestamp = r.i64()
    expire = r.i64() if version == 1 else NO_TIMESTAMP
    r.end()
    return OffsetCommitValue(offset, metadata, commit_timestamp, epoch, expire)


def _group_metadata_value(data):
    r = FieldReader(data, "GroupMetadata value")
    version = r.i16()
    if not 0 <= version <= 3:
        raise ValueError(f"GroupMetadata value of version {version}; versions 0-3 are read")
    r.what = f"GroupMetadata value v{version}"
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.string(nullable=True)
    leader = r.string(nullable=True)
    timestamp = r.i64() if version >= 2 else NO_TIMESTAMP
    members = []
    for _ in range(r.count()):
        member_id = r.string()
        instance = r.string(nullable=True) if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        if version == 0:
            rebalance_timeout = session_timeout  # Kafka's reading of v0
        members.append(MemberMetadata(member_id, client_id, client_host, session_timeout,
                                      rebalance_timeout, r.bytes(), r.bytes(), instance))
    r.end()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp,
                              tuple(members))
