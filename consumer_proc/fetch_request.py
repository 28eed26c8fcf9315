"""The consumer's Fetch request frames, kept encoded between fetches.

A consumer keeping up with its producer sends a Fetch for every few records, and the
request differs from the previous one only in its correlation id and each partition's
fetch offset and current leader epoch: the header, the client id, the fixed fields
(replica id, max wait, min and max bytes, isolation level, the session fields), the topic
names, the partition indexes and ``partition_max_bytes`` stay. So the frame of a set of
partitions is encoded once and kept; each fetch packs the correlation id and one entry per
partition into it and copies it into the request ring — no kio objects, no size arithmetic,
no string encoding per fetch. A fetch of another set of partitions (a partition paused,
another one's responses still buffered, a new assignment) encodes its frame once and keeps
that one instead (one frame kept per broker).

The bytes are those of ``frames.encode_request`` of the equivalent kio FetchRequest
(request header v1; body v4-11: ``batch_bodies.write_fetch_request``'s layouts,
``frame_descriptor``), partitions grouped by topic in the order given, each topic where
its first partition comes (tests/consumer_proc/test_fetch_request.py checks byte for
byte). Fetch sessions (KIP-227) are not used: every fetch is a full one (session id 0,
epoch -1), as before.

Owner: the consumer's fetcher (its thread only).
"""
from __future__ import annotations

from cluster.protocol import frame_descriptor as d
from cluster.protocol.frames import ApiKey

#: Fetch versions this frame writes: v4 (isolation level) to v11 (rack id), request header v1.
VERSIONS = range(4, 12)


class FetchFrame:
    """Fetch request frames of one consumer (module doc).

    ``api_version``: one of VERSIONS; ``client_id``: str or None; ``max_wait_ms``,
    ``min_bytes``, ``max_bytes``, ``isolation_level`` (0 / 1), ``partition_max_bytes``:
    the request's fixed fields.
    """

    __slots__ = ("_version", "_head", "_tail", "_partition", "_max_bytes", "_kept")

    def __init__(self, api_version, client_id, *, max_wait_ms, min_bytes, max_bytes,
                 isolation_level, partition_max_bytes):
        if api_version not in VERSIONS:
            raise ValueError(f"Fetch v{api_version} is not written here (v4-11 are)")
        client = b"" if client_id is None else client_id.encode()
        if len(client) > 0x7FFF:
            raise ValueError(f"client_id of {len(client)} bytes exceeds the 32767 a header "
                             f"can carry")
        head = bytearray(d.REQUEST_PREFIX.pack(
            0, ApiKey.FETCH, api_version, 0,
            d.NULL_LENGTH if client_id is None else len(client)))
        head += client
        fixed = (-1, max_wait_ms, min_bytes, max_bytes, isolation_level)
        if api_version >= 7:
            head += d.FETCH_REQUEST_TOP_V7.pack(*fixed, 0, -1)  # no fetch session
        else:
            head += d.FETCH_REQUEST_TOP_V4.pack(*fixed)
        self._head = bytes(head)
        tail = b""
        if api_version >= 7:
            tail += d.ARRAY_LENGTH.pack(0)  # forgotten_topics_data
        if api_version >= 11:
            tail += d.STRING_LENGTH.pack(0)  # rack_id ""
        self._tail = tail
        self._version = api_version
        self._partition = (d.FETCH_REQUEST_PARTITION_V9 if api_version >= 9
                           else d.FETCH_REQUEST_PARTITION_V5 if api_version >= 5
                           else d.FETCH_REQUEST_PARTITION_V4)
        self._max_bytes = partition_max_bytes
        self._kept = {}  # node -> (partitions key, frame bytearray, entry positions)

    def _encode(self, partitions):
        """``(frame, positions)``: the frame of ``partitions`` (TopicPartitions, in fetch
        order) with every entry zero, and where each partition's entry starts."""
        topics = {}
        for tp in partitions:
            topics.setdefault(tp.topic, []).append(tp)
        frame = bytearray(self._head)
        frame += d.ARRAY_LENGTH.pack(len(topics))
        entry = self._partition.size
        positions = {}
        for name, members in topics.items():
            data = name.encode()
            frame += d.STRING_LENGTH.pack(len(data))
            frame += data
            frame += d.ARRAY_LENGTH.pack(len(members))
            for tp in members:
                positions[tp] = len(frame)
                frame += bytes(entry)
        frame += self._tail
        d.INT32.pack_into(frame, d.SIZE_OFFSET, len(frame) - d.SIZE_PREFIX_LENGTH)
        return frame, [positions[tp] for tp in partitions]

    def frame(self, node, partitions):
        """The frame (a bytearray, correlation id still to write: ``write``) fetching
        ``partitions``, ``{TopicPartition: (fetch offset, current leader epoch)}`` in fetch
        order, from broker ``node``. Valid until the next call for ``node``."""
        key = tuple(partitions)
        kept = self._kept.get(node)
        if kept is None or kept[0] != key:
            kept = self._kept[node] = (key, *self._encode(key))
        _, frame, positions = kept
        pack = self._partition.pack_into
        version = self._version
        limit = self._max_bytes
        for position, tp, (offset, epoch) in zip(positions, key, partitions.values()):
            if version >= 9:
                pack(frame, position, tp.partition, epoch, offset, -1, limit)
            elif version >= 5:
                pack(frame, position, tp.partition, offset, -1, limit)
            else:
                pack(frame, position, tp.partition, offset, limit)
        return frame

    @staticmethod
    def write(frame, view, correlation_id):
        """Copy ``frame`` to the start of the writable memoryview ``view`` with
        ``correlation_id`` in its header (``KafkaClient.send_frame``'s writer, ``frame``
        bound)."""
        view[:len(frame)] = frame
        d.INT32.pack_into(view, d.CORRELATION_ID_OFFSET, correlation_id)
