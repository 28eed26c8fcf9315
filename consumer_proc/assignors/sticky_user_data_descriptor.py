"""The eager sticky assignor's subscription user data: Kafka's ``StickyAssignorUserData``.

What a member owned after its last SyncGroup and that generation, sent in the ``user_data``
of its JoinGroup subscription, because an eager member revokes everything before it
rejoins and so reports no owned partitions (KIP-54, KIP-341). Big-endian, no version
prefix (Kafka's Java StickyAssignor writes the struct bare and reads it by trying version
1, then version 0)::

    previous_assignment  int32 count, then per topic:
        topic            int16 length + UTF-8 bytes
        partitions       int32 count + int32 each
    generation           int32            (version 1 only; version 0 ends before it)

Written at version 1. Bytes that are neither version raise ValueError naming what was
wrong; the leader then treats the member as owning nothing.

Pure code: any thread.
"""
from __future__ import annotations

import struct

from cluster.protocol.consumer_protocol import NO_GENERATION

#: The array counts, partitions and the generation.
INT32 = struct.Struct(">i")
#: A topic name's length.
INT16 = struct.Struct(">h")

VERSION = 1


def encode_user_data(owned, generation):
    """StickyAssignorUserData v1 of ``owned`` ((topic, partition) pairs) and
    ``generation``."""
    by_topic = {}
    for topic, partition in owned:
        by_topic.setdefault(topic, []).append(partition)
    out = [INT32.pack(len(by_topic))]
    for topic, partitions in sorted(by_topic.items()):
        name = topic.encode("utf-8")
        out.append(INT16.pack(len(name)))
        out.append(name)
        out.append(INT32.pack(len(partitions)))
        out.extend(INT32.pack(p) for p in sorted(partitions))
    out.append(INT32.pack(generation))
    return b"".join(out)


def decode_user_data(data):
    """``(owned pairs, generation)`` of StickyAssignorUserData bytes, version 1 or 0 (then
    the generation is NO_GENERATION); ValueError if neither parses."""
    data = bytes(data)
    owned, position = _previous_assignment(data)
    if position + INT32.size == len(data):
        (generation,) = INT32.unpack_from(data, position)
        return owned, generation
    if position == len(data):
        return owned, NO_GENERATION
    raise ValueError(f"sticky assignor user data: {len(data) - position} bytes after the "
                     f"previous assignment, expected {INT32.size} (version 1) or 0 "
                     f"(version 0)")


def _previous_assignment(data):
    position = 0

    def take(layout, what):
        nonlocal position
        if position + layout.size > len(data):
            raise ValueError(f"sticky assignor user data: {len(data)} bytes end inside "
                             f"{what} at byte {position}")
        (value,) = layout.unpack_from(data, position)
        position += layout.size
        if value < 0:
            raise ValueError(f"sticky assignor user data: {what} {value} is negative")
        return value

    owned = []
    for _ in range(take(INT32, "the topic count")):
        length = take(INT16, "a topic name's length")
        if position + length > len(data):
            raise ValueError(f"sticky assignor user data: a topic name of {length} bytes "
                             f"runs past the end ({len(data)} bytes)")
        try:
            topic = data[position:position + length].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"sticky assignor user data: topic name is not UTF-8: "
                             f"{exc}") from None
        position += length
        for _ in range(take(INT32, f"topic {topic!r}'s partition count")):
            owned.append((topic, take(INT32, f"a partition of {topic!r}")))
    return tuple(owned), position
