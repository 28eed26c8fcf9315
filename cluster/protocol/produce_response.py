"""A Produce response frame, packed field by field (the Produce hot path's answer).

kio builds three dataclasses per answer and writes them through a BytesIO, which costs as
much as the append itself (measurements: perf/README.md, "Produce response"). The answer's
fields are few and fixed (layout: ``produce_response_descriptor``), so this packs them with
``struct.pack_into`` into one bytearray: the same bytes as
``cluster.protocol.frames.encode_response`` (checked at every version by
``tests/replica_proc/test_responses.py``).

``topics`` is a list of ``(name, [PartitionResult])``. The usual answer — one topic, one
partition, no error message (a producer's request per partition leader) — is packed by one
``Struct`` per version and topic name, made on first use (``_single``): one call instead of
a dozen. Pure (and a cache of those layouts): any thread.
"""
from __future__ import annotations

from collections import namedtuple

from cluster.protocol import frame_descriptor as pd, produce_response_descriptor as d

#: One partition's answer: error code, base offset, log append time in ms (-1: CreateTime),
#: log start offset, error message (None when there is no error).
PartitionResult = namedtuple(
    "PartitionResult", "index error_code base_offset log_append_time log_start_offset message")


#: (version, topic name) -> (Struct of a whole one-partition answer, its size)
_SINGLE = {}


def _single(version, name):
    """The layout of the whole frame answering one partition of ``name`` with no error
    message: size prefix, correlation id, topic count, name, partition count, the
    partition's fields, (v8) empty record errors and null message, throttle time."""
    encoded = name.encode()
    layout = pd.joined(
        pd.RESPONSE_PREFIX, d.ARRAY_LENGTH, d.STRING_LENGTH, f"{len(encoded)}s",
        d.ARRAY_LENGTH, d.PARTITION_V5 if version >= 5 else d.PARTITION_V3,
        *([d.ERRORS_V8] if version >= 8 else []), d.THROTTLE_TIME)
    _SINGLE[version, name] = found = (layout, encoded)
    return found


def produce_response_frame(version, correlation_id, topics):
    """The whole response frame (size prefix and header included): a bytearray, or
    bytes for the usual one-partition answer (module doc)."""
    if len(topics) == 1:
        name, partitions = topics[0]
        if len(partitions) == 1 and partitions[0].message is None:
            r = partitions[0]
            layout, encoded = _SINGLE.get((version, name)) or _single(version, name)
            size = layout.size - pd.SIZE_PREFIX_LENGTH
            if version >= 8:
                return layout.pack(size, correlation_id, 1, len(encoded), encoded, 1, r.index,
                                   r.error_code, r.base_offset, r.log_append_time,
                                   r.log_start_offset, 0, d.NULL_LENGTH, 0)
            if version >= 5:
                return layout.pack(size, correlation_id, 1, len(encoded), encoded, 1, r.index,
                                   r.error_code, r.base_offset, r.log_append_time,
                                   r.log_start_offset, 0)
            return layout.pack(size, correlation_id, 1, len(encoded), encoded, 1, r.index,
                               r.error_code, r.base_offset, r.log_append_time, 0)
    partition_layout = d.PARTITION_V5 if version >= 5 else d.PARTITION_V3
    v5 = version >= 5
    v8 = version >= 8
    names = [name.encode() for name, _ in topics]
    messages = {}
    size = pd.RESPONSE_BODY_OFFSET + d.ARRAY_LENGTH.size + d.THROTTLE_TIME.size
    for encoded, (_, partitions) in zip(names, topics):
        size += d.STRING_LENGTH.size + len(encoded) + d.ARRAY_LENGTH.size
        size += len(partitions) * (partition_layout.size + (d.ERRORS_V8.size if v8 else 0))
        if v8:
            for result in partitions:
                if result.message is not None:
                    message = messages[id(result)] = result.message.encode()
                    size += len(message)
    frame = bytearray(size)
    pd.RESPONSE_PREFIX.pack_into(frame, 0, size - pd.SIZE_PREFIX_LENGTH, correlation_id)
    position = pd.RESPONSE_BODY_OFFSET
    d.ARRAY_LENGTH.pack_into(frame, position, len(topics))
    position += d.ARRAY_LENGTH.size
    for encoded, (_, partitions) in zip(names, topics):
        d.STRING_LENGTH.pack_into(frame, position, len(encoded))
        position += d.STRING_LENGTH.size
        frame[position:position + len(encoded)] = encoded
        position += len(encoded)
        d.ARRAY_LENGTH.pack_into(frame, position, len(partitions))
        position += d.ARRAY_LENGTH.size
        for r in partitions:
            if v5:
                partition_layout.pack_into(frame, position, r.index, r.error_code,
                                           r.base_offset, r.log_append_time,
                                           r.log_start_offset)
            else:
                partition_layout.pack_into(frame, position, r.index, r.error_code,
                                           r.base_offset, r.log_append_time)
            position += partition_layout.size
            if v8:
                message = messages.get(id(r))
                d.ERRORS_V8.pack_into(frame, position, 0,
                                      d.NULL_LENGTH if message is None else len(message))
                position += d.ERRORS_V8.size
                if message is not None:
                    frame[position:position + len(message)] = message
                    position += len(message)
    d.THROTTLE_TIME.pack_into(frame, position, 0)
    return frame
