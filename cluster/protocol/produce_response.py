"""A Produce response frame, packed field by field (the Produce hot path's answer).

kio builds three dataclasses per answer and writes them through a BytesIO, which costs as
much as the append itself (measurements: perf/README.md, "Produce response"). The answer's
fields are few and fixed (layout: ``produce_response_descriptor``), so this packs them with
``struct.pack_into`` into one bytearray: the same bytes as
``cluster.protocol.frames.encode_response`` (checked at every version by
``tests/replica_proc/test_responses.py``).

``topics`` is a list of ``(name, [PartitionResult])``. The producer reads its answers back
with ``decode_produce_response`` (field by field too: kio's reader builds the same three
dataclasses, plus an enum and a timedelta, per answer). Pure: any thread.
"""
from __future__ import annotations

import struct
from collections import namedtuple

from cluster.errors import KafkaProtocolError
from cluster.protocol import frame_descriptor as pd, produce_response_descriptor as d

#: One partition's answer: error code, base offset, log append time in ms (-1: CreateTime),
#: log start offset, error message (None when there is no error).
PartitionResult = namedtuple(
    "PartitionResult", "index error_code base_offset log_append_time log_start_offset message")


def produce_response_frame(version, correlation_id, topics):
    """The whole response frame (size prefix and header included) as a bytearray."""
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


def decode_produce_response(frame, version):
    """``(correlation_id, [(topic, PartitionResult), ...])`` from a whole Produce response
    frame of ``version`` (v3-8), read field by field: what ``frames.decode_response`` reads,
    without kio's objects — the producer's answer per request. ``log_append_time`` is in ms
    (-1: CreateTime); a partition's record errors (v8) are read and left out (the producer
    does not use them); ``message`` is its error message, None if there is none. Raises
    KafkaProtocolError for a frame that does not parse to its end."""
    view = memoryview(frame)
    try:
        size, correlation_id = pd.RESPONSE_PREFIX.unpack_from(view, 0)
        if size != len(view) - pd.SIZE_PREFIX_LENGTH:
            raise ValueError(f"size prefix says {size} bytes follow, the frame has "
                             f"{len(view) - pd.SIZE_PREFIX_LENGTH}")
    except (struct.error, ValueError) as exc:
        raise KafkaProtocolError(f"Produce response frame of {len(view)} bytes: {exc}") from None
    try:
        return correlation_id, _read_results(view, version)
    except (struct.error, ValueError) as exc:
        raise KafkaProtocolError(f"PRODUCE v{version} response (correlation_id "
                                 f"{correlation_id}) does not parse: {exc}") from None


def _read_results(view, version):
    layout = d.PARTITION_V5 if version >= 5 else d.PARTITION_V3
    v5, v8 = version >= 5, version >= 8
    array = d.ARRAY_LENGTH
    position = pd.RESPONSE_BODY_OFFSET
    results = []
    (topics,) = array.unpack_from(view, position)
    position += array.size
    for _ in range(_count(topics)):
        name, position = _read_string(view, position, False)
        (partitions,) = array.unpack_from(view, position)
        position += array.size
        for _ in range(_count(partitions)):
            fields = layout.unpack_from(view, position)
            position += layout.size
            message = None
            if v8:
                (errors,) = array.unpack_from(view, position)
                position += array.size
                for _ in range(_count(errors)):
                    position += array.size  # batch_index
                    _, position = _read_string(view, position, True)
                message, position = _read_string(view, position, True)
            results.append((name, PartitionResult(*fields, message) if v5 else
                            PartitionResult(*fields, -1, message)))
    (_throttle,) = d.THROTTLE_TIME.unpack_from(view, position)
    position += d.THROTTLE_TIME.size
    if position != len(view):
        raise ValueError(f"body ends at position {position}, {len(view) - position} bytes "
                         f"of {len(view)} left over")
    return results


def _count(count):
    if count < 0:
        raise ValueError(f"array length {count}")
    return count


def _read_string(view, position, nullable):
    """``(text, end)``: the (nullable) string at ``position``."""
    (length,) = d.STRING_LENGTH.unpack_from(view, position)
    position += d.STRING_LENGTH.size
    if length < 0:
        if length == d.NULL_LENGTH and nullable:
            return None, position
        raise ValueError(f"string length {length} at position {position - 2}")
    end = position + length
    if end > len(view):
        raise ValueError(f"string of {length} bytes at position {position} runs past the "
                         f"{len(view)}-byte frame")
    return str(view[position:end], "utf-8"), end
