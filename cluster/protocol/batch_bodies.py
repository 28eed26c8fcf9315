"""Hand encoders for the request bodies on the hot paths: ProduceRequest v3-8, which carries
the producer's batches to the leader, and FetchRequest v4-11, which a consumer sends for
every response it gets. (The FetchResponse, which carries segment bytes back, has one
encoder too: the broker's ``cluster.protocol.fetch_response``, written from log slices.)

kio encodes field by field
through a ``BytesIO`` (one copy of the records into it, another out of it); this module
computes the body size arithmetically and writes the fields with ``struct.pack_into``
straight into the caller's buffer, so the records are copied once, into the frame — a ring
slot when the caller uses ``protocol.encode_*_into``. The records are never parsed. It takes
the same kio objects and writes the same bytes as kio (the protocol tests check byte for
byte at every version).

Decoding stays with kio's native reader: it parses a Produce request, copy of the batch
included, faster than a Python reader returning memoryview slices builds the same
dataclasses (measurements: perf/README.md, "Protocol decoding stays with kio") — except
for large requests, where the copy costs more than the Python: ``read_produce_request``
reads those with the records as views of the frame (``frames.decode_request``).

Writers take a memoryview, not a bytearray: slice assignment of a large block into a fresh
bytearray is far slower than through a memoryview of it (measurements: perf/README.md,
"Protocol encoders").

Layouts: ``frame_descriptor``. Bodies only: ``frames`` adds the frame header. Pure
functions: no state, any thread.
"""
from __future__ import annotations

import datetime
import struct

from cluster.protocol import frame_descriptor as d
from segments.record.batch_parts import BatchParts


def _milliseconds(value):
    """kio's ``timedelta_i32`` encoding: rounded milliseconds."""
    return round(value.total_seconds() * 1000)


# -- ProduceRequest v3-8 --------------------------------------------------------------------

def produce_request_size(request):
    """Bytes ``write_produce_request`` writes for ``request``."""
    txn = request.transactional_id
    size = 2 + (len(txn.encode()) if txn is not None else 0) + d.PRODUCE_FIXED.size
    for topic in request.topic_data:
        size += 2 + len(topic.name.encode()) + 4
        for partition in topic.partition_data:
            records = partition.records
            size += d.PRODUCE_PARTITION.size + (len(records) if records is not None else 0)
    return size


def write_produce_request(buf, position, request):
    """Write ``request``'s body at ``position`` in ``buf`` (a writable memoryview of bytes,
    ``produce_request_size(request)`` long from ``position``); returns the end position."""
    txn = request.transactional_id
    if txn is None:
        d.STRING_LENGTH.pack_into(buf, position, d.NULL_LENGTH)
        position += 2
    else:
        position = _write_string(buf, position, txn)
    topics = request.topic_data
    d.PRODUCE_FIXED.pack_into(buf, position, request.acks, _milliseconds(request.timeout),
                              len(topics))
    position += d.PRODUCE_FIXED.size
    for topic in topics:
        position = _write_string(buf, position, topic.name)
        partitions = topic.partition_data
        d.ARRAY_LENGTH.pack_into(buf, position, len(partitions))
        position += 4
        for partition in partitions:
            position = _write_records(buf, position, d.PRODUCE_PARTITION, partition.records,
                                      partition.index)
    return position


class ProduceFrame:
    """A producer's Produce request frames (request header v1 and body v3-8) written
    without kio objects: the fields every request of one producer shares — api key and
    version, client id, transactional id, acks, timeout — are encoded once, into a prefix
    copied per request; per request only the size, the correlation id and the topic and
    partition arrays around the built batches are written. The same bytes as
    ``frames.encode_request`` of the equivalent ProduceRequest (tests check byte for byte).

    ``topics``: a sequence of ``(topic name, [(partition index, records), ...])``, records
    as ``write_produce_request`` takes them (bytes-like, BatchParts or None). One owner
    thread.
    """

    __slots__ = ("prefix", "_names")

    def __init__(self, api_key, api_version, client_id, transactional_id, acks, timeout_ms):
        client = b"" if client_id is None else client_id.encode()
        if len(client) > 0x7FFF:
            raise ValueError(f"client_id of {len(client)} bytes exceeds the 32767 a header "
                             f"can carry")
        txn = b"" if transactional_id is None else transactional_id.encode()
        prefix = bytearray(d.REQUEST_PREFIX.pack(
            0, api_key, api_version, 0, d.NULL_LENGTH if client_id is None else len(client)))
        prefix += client
        prefix += d.STRING_LENGTH.pack(d.NULL_LENGTH if transactional_id is None else len(txn))
        prefix += txn
        prefix += d.PRODUCE_FIXED.pack(acks, timeout_ms, 0)[:-d.ARRAY_LENGTH.size]
        self.prefix = bytes(prefix)
        self._names = {}  # topic -> its encoded name with the int16 length before it

    def _name(self, topic):
        name = self._names.get(topic)
        if name is None:
            data = topic.encode()
            self._names[topic] = name = d.STRING_LENGTH.pack(len(data)) + data
        return name

    def size(self, topics):
        """Bytes of the frame carrying ``topics``, size prefix included."""
        size = len(self.prefix) + d.ARRAY_LENGTH.size
        partition = d.PRODUCE_PARTITION.size
        for topic, partitions in topics:
            size += len(self._name(topic)) + d.ARRAY_LENGTH.size
            for _, records in partitions:
                size += partition if records is None else partition + len(records)
        return size

    def write_into(self, view, size, correlation_id, topics):
        """Write the frame (``size`` bytes: ``size(topics)``) at the start of the writable
        memoryview ``view``; returns its end."""
        prefix = self.prefix
        position = len(prefix)
        view[:position] = prefix
        d.INT32.pack_into(view, d.SIZE_OFFSET, size - d.SIZE_PREFIX_LENGTH)
        d.INT32.pack_into(view, d.CORRELATION_ID_OFFSET, correlation_id)
        array, layout = d.ARRAY_LENGTH, d.PRODUCE_PARTITION
        array.pack_into(view, position, len(topics))
        position += array.size
        for topic, partitions in topics:
            name = self._name(topic)
            end = position + len(name)
            view[position:end] = name
            array.pack_into(view, end, len(partitions))
            position = end + array.size
            for index, records in partitions:
                position = _write_records(view, position, layout, records, index)
        return position

    def encode(self, size, correlation_id, topics):
        """The frame as a new bytearray (a request longer than a ring frame, sent as
        fragments)."""
        data = bytearray(size)
        with memoryview(data) as view:
            self.write_into(view, size, correlation_id, topics)
        return data


def read_produce_request(view, position, module):
    """``(request, end)``: the ProduceRequest body at ``position`` of ``view`` (a read-only
    memoryview of bytes) as ``module``'s kio classes, each partition's ``records`` a slice
    of ``view`` instead of a copy. For large requests only (``frames.VIEW_RECORDS_FROM``):
    the records are views of the caller's buffer, valid as long as it is. Raises
    ValueError on bytes that do not parse, as kio's reader does."""
    try:
        txn, position = _read_string(view, position, nullable=True)
        acks, timeout, count = d.PRODUCE_FIXED.unpack_from(view, position)
        position += d.PRODUCE_FIXED.size
        topics = []
        topic_data, partition_data = module.TopicProduceData, module.PartitionProduceData
        for _ in range(_count(count, "topic_data")):
            name, position = _read_string(view, position, nullable=False)
            (partitions,) = d.ARRAY_LENGTH.unpack_from(view, position)
            position += d.ARRAY_LENGTH.size
            parts = []
            for _ in range(_count(partitions, "partition_data")):
                index, size = d.PRODUCE_PARTITION.unpack_from(view, position)
                position += d.PRODUCE_PARTITION.size
                records = None
                if size != d.NULL_LENGTH:
                    end = position + size
                    if size < 0 or end > len(view):
                        raise ValueError(f"records of {size} bytes at position {position} "
                                         f"of a {len(view)}-byte frame")
                    records = view[position:end]
                    position = end
                parts.append(partition_data(index=index, records=records))
            topics.append(topic_data(name=name, partition_data=tuple(parts)))
    except struct.error as exc:
        raise ValueError(f"produce request ends early: {exc}") from None
    request = module.ProduceRequest(transactional_id=txn, acks=acks,
                                    timeout=datetime.timedelta(milliseconds=timeout),
                                    topic_data=tuple(topics))
    return request, position


def _count(count, what):
    if count < 0:
        raise ValueError(f"{what}: array length {count}")
    return count


def _read_string(view, position, nullable):
    (size,) = d.STRING_LENGTH.unpack_from(view, position)
    position += d.STRING_LENGTH.size
    if size == d.NULL_LENGTH and nullable:
        return None, position
    end = position + size
    if size < 0 or end > len(view):
        raise ValueError(f"string of {size} bytes at position {position}")
    return str(view[position:end], "utf-8"), end


# -- FetchRequest v4-11 ----------------------------------------------------------------------
# Encoded here, not by kio: a consumer that keeps up with a producer sends a Fetch for every
# few records, so encoding one is on its per-record path (kio's cost: perf/README.md,
# "Protocol encoders").

def _fetch_request_layouts(version):
    top = d.FETCH_REQUEST_TOP_V7 if version >= 7 else d.FETCH_REQUEST_TOP_V4
    if version >= 9:
        return top, d.FETCH_REQUEST_PARTITION_V9
    return top, d.FETCH_REQUEST_PARTITION_V5 if version >= 5 else d.FETCH_REQUEST_PARTITION_V4


def fetch_request_size(request):
    """Bytes ``write_fetch_request`` writes for ``request``."""
    version = request.__version__
    top, layout = _fetch_request_layouts(version)
    size = top.size + 4
    for topic in request.topics:
        size += 2 + len(topic.topic.encode()) + 4 + layout.size * len(topic.partitions)
    if version >= 7:
        size += 4
        for topic in request.forgotten_topics_data:
            size += 2 + len(topic.topic.encode()) + 4 + 4 * len(topic.partitions)
    if version >= 11:
        size += 2 + len(request.rack_id.encode())
    return size


def write_fetch_request(buf, position, request):
    """Write ``request``'s body at ``position`` in ``buf`` (a writable memoryview,
    ``fetch_request_size(request)`` long from ``position``); returns the end position."""
    version = request.__version__
    top, layout = _fetch_request_layouts(version)
    topics = request.topics
    fixed = (request.replica_id, _milliseconds(request.max_wait), request.min_bytes,
             request.max_bytes, request.isolation_level)
    if version >= 7:
        fixed += (request.session_id, request.session_epoch)
    top.pack_into(buf, position, *fixed)
    position += top.size
    d.ARRAY_LENGTH.pack_into(buf, position, len(topics))
    position += 4
    pack = layout.pack_into
    step = layout.size
    for topic in topics:
        position = _write_string(buf, position, topic.topic)
        partitions = topic.partitions
        d.ARRAY_LENGTH.pack_into(buf, position, len(partitions))
        position += 4
        for p in partitions:
            if version >= 9:
                pack(buf, position, p.partition, p.current_leader_epoch, p.fetch_offset,
                     p.log_start_offset, p.partition_max_bytes)
            elif version >= 5:
                pack(buf, position, p.partition, p.fetch_offset, p.log_start_offset,
                     p.partition_max_bytes)
            else:
                pack(buf, position, p.partition, p.fetch_offset, p.partition_max_bytes)
            position += step
    if version >= 7:
        forgotten = request.forgotten_topics_data
        d.ARRAY_LENGTH.pack_into(buf, position, len(forgotten))
        position += 4
        for topic in forgotten:
            position = _write_string(buf, position, topic.topic)
            d.ARRAY_LENGTH.pack_into(buf, position, len(topic.partitions))
            position += 4
            for partition in topic.partitions:
                d.INT32.pack_into(buf, position, partition)
                position += 4
    if version >= 11:
        position = _write_string(buf, position, request.rack_id)
    return position


# -- writing primitives -----------------------------------------------------------------------

def _write_string(buf, position, text):
    data = text.encode()
    d.STRING_LENGTH.pack_into(buf, position, len(data))
    position += 2
    end = position + len(data)
    buf[position:end] = data
    return end


def _write_records(buf, position, layout, records, *leading):
    """Pack ``leading`` fields and the records length with ``layout``, then the records."""
    if records is None:
        layout.pack_into(buf, position, *leading, d.NULL_LENGTH)
        return position + layout.size
    layout.pack_into(buf, position, *leading, len(records))
    position += layout.size
    if records.__class__ is BatchParts:  # a producer's large value, copied here once
        return records.write_into(buf, position)
    end = position + len(records)
    buf[position:end] = records
    return end
