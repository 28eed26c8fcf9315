"""The consumer protocol's bytes: a member's Subscription (JoinGroup ``metadata``) and its
Assignment (SyncGroup ``assignment``), Kafka's ConsumerProtocolSubscription and
ConsumerProtocolAssignment.

Each is an int16 version followed by the struct at that version (kio's schemas, non-
flexible). Written at version 3 (v1 added owned partitions, v2 the generation, v3 the
rack), as Kafka's consumer writes them; read at any version 0-3, and a higher version is
read as 3 (Kafka's rule: newer versions only append fields), so a Java consumer and a
ringlog one can share a group. Bytes that do not parse raise ValueError naming what was
wrong; the group leader treats such a member as subscribing to nothing.

Pure code: any thread.
"""
from __future__ import annotations

import importlib
import io
import struct

from kio.schema.consumer_protocol_assignment.v3 import data as assignment_v3
from kio.schema.consumer_protocol_subscription.v3 import data as subscription_v3
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.primitive import i32

#: The generation of a member that reported none (Kafka's DEFAULT_GENERATION).
NO_GENERATION = -1

VERSION = 3
_VERSION = struct.Struct(">h")


def _loaders(kind):
    out = {}
    for version in range(VERSION + 1):
        module = importlib.import_module(f"kio.schema.consumer_protocol_{kind}.v{version}.data")
        out[version] = entity_reader(getattr(module, f"ConsumerProtocol{kind.title()}"))
    return out


_SUBSCRIPTION_READERS = _loaders("subscription")
_ASSIGNMENT_READERS = _loaders("assignment")
_write_subscription = entity_writer(subscription_v3.ConsumerProtocolSubscription)
_write_assignment = entity_writer(assignment_v3.ConsumerProtocolAssignment)


def _encode(write, body):
    out = io.BytesIO()
    out.write(_VERSION.pack(VERSION))
    write(out, body)
    return out.getvalue()


def _decode(readers, data, what):
    if data is None or len(data) < _VERSION.size:
        raise ValueError(f"{what}: {len(data or b'')} bytes, too short for a version")
    (version,) = _VERSION.unpack_from(data)
    if version < 0:
        raise ValueError(f"{what}: version {version} is negative")
    read = readers[min(version, VERSION)]
    try:
        body, _ = read(memoryview(bytes(data)), _VERSION.size)
    except (SerialError, ValueError, EOFError, struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"{what} of version {version} does not parse: {exc}") from None
    return version, body


def _pairs(topic_partitions):
    return tuple((tp.topic, int(p)) for tp in topic_partitions for p in tp.partitions)


def _grouped(cls, pairs):
    by_topic = {}
    for topic, partition in pairs:
        by_topic.setdefault(topic, []).append(i32(partition))
    return tuple(cls(topic=topic, partitions=tuple(sorted(parts)))
                 for topic, parts in sorted(by_topic.items()))


def encode_subscription(topics, owned=(), generation=NO_GENERATION, user_data=None,
                        rack=None):
    """The JoinGroup metadata of a member subscribing to ``topics``."""
    return _encode(_write_subscription, subscription_v3.ConsumerProtocolSubscription(
        topics=tuple(sorted(topics)), user_data=user_data,
        owned_partitions=_grouped(subscription_v3.TopicPartition, owned),
        generation_id=i32(generation), rack_id=rack))


def decode_subscription(data):
    """``(topics, owned pairs, generation, user_data)`` of a member's JoinGroup metadata."""
    version, body = _decode(_SUBSCRIPTION_READERS, data, "consumer subscription")
    owned = _pairs(body.owned_partitions) if version >= 1 else ()
    generation = int(body.generation_id) if version >= 2 else NO_GENERATION
    return tuple(body.topics), owned, generation, body.user_data


def encode_assignment(partitions, user_data=None):
    """The SyncGroup assignment bytes of ``{topic: [partitions]}``."""
    pairs = [(topic, p) for topic, parts in partitions.items() for p in parts]
    return _encode(_write_assignment, assignment_v3.ConsumerProtocolAssignment(
        assigned_partitions=_grouped(assignment_v3.TopicPartition, pairs),
        user_data=user_data))


def decode_assignment(data):
    """``({topic: [partitions]}, user_data)``; empty bytes (a member the leader gave
    nothing, as Kafka sends it) decode as no partitions."""
    if not data:
        return {}, None
    _, body = _decode(_ASSIGNMENT_READERS, data, "consumer assignment")
    partitions = {}
    for topic, partition in _pairs(body.assigned_partitions):
        partitions.setdefault(topic, []).append(partition)
    return {t: sorted(p) for t, p in partitions.items()}, body.user_data
