"""Fetch request frames kept encoded between fetches: the consumer's and the follower's.

A reader keeping up with its writer sends a Fetch for every few records, and the request
differs from the previous one only in its correlation id and, per partition, the fetch
offset, the current leader epoch and the log start offset: the header, the client id, the
fixed fields (replica id, max wait, min and max bytes, isolation level, the session
fields), the topic names, the partition indexes and ``partition_max_bytes`` stay. So the
frame of a set of partitions is encoded once and kept; each fetch packs the correlation
id and one entry per partition into it — no kio objects, no size arithmetic, no string
encoding per fetch. A fetch of another set of partitions (a partition paused, another
one's responses still buffered, a new assignment, a partition that left the follower's
set) encodes its frame once and keeps that one instead (one frame kept per broker).

The bytes are those of ``frames.encode_request`` of the equivalent kio FetchRequest
(request header v1; body v4-11: ``batch_bodies.write_fetch_request``'s layouts,
``frame_descriptor``), partitions grouped by topic in the order given, each topic where
its first partition comes (tests/cluster/protocol/test_fetch_frame.py checks byte for
byte). Fetch sessions (KIP-227) are not used: every fetch is a full one (session id 0,
epoch -1).

Owners: each consumer's fetcher (``consumer_proc.fetcher``, its thread) and each
follower's replica fetcher (``replica_proc.replica_fetcher``, the broker's loop thread)
keep their own FetchFrame.
"""
from __future__ import annotations

from cluster.protocol import frame_descriptor as d
from cluster.protocol.frames import ApiKey

#: Fetch versions this frame writes: v4 (isolation level) to v11 (rack id), request header v1.
VERSIONS = range(4, 12)


class FetchFrame:
    """Fetch request frames of one consumer or follower (module doc).

    ``api_version``: one of VERSIONS; ``client_id``: str or None; ``max_wait_ms``,
    ``min_bytes``, ``max_bytes``, ``isolation_level`` (0 / 1), ``partition_max_bytes``,
    ``replica_id`` (-1 for a consumer, the follower's broker id for a follower): the
    request's fixed fields.
    """

    __slots__ = ("_version", "_head", "_tail", "_partition", "_max_bytes", "_kept")

    def __init__(self, api_version, client_id, *, max_wait_ms, min_bytes, max_bytes,
                 isolation_level, partition_max_bytes, replica_id=-1):
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
        fixed = (replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level)
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
        """``(frame, positions)``: the frame of ``partitions`` (``(topic, index)`` pairs
        such as TopicPartitions, in fetch order) with every entry zero, and where each
        partition's entry starts."""
        topics = {}
        for tp in partitions:
            topics.setdefault(tp[0], []).append(tp)
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
        """The frame (a bytearray, correlation id still to write: ``write`` or
        ``with_correlation_id``) fetching ``partitions``, ``{(topic, index): (fetch offset,
        current leader epoch, log start offset)}`` in fetch order (the log start offset is
        -1 from a consumer), from broker ``node``. Valid until the next call for
        ``node``."""
        key = tuple(partitions)
        kept = self._kept.get(node)
        if kept is None or kept[0] != key:
            kept = self._kept[node] = (key, *self._encode(key))
        _, frame, positions = kept
        pack = self._partition.pack_into
        version = self._version
        limit = self._max_bytes
        for position, tp, (offset, epoch, log_start) in zip(positions, key,
                                                            partitions.values()):
            if version >= 9:
                pack(frame, position, tp[1], epoch, offset, log_start, limit)
            elif version >= 5:
                pack(frame, position, tp[1], offset, log_start, limit)
            else:
                pack(frame, position, tp[1], offset, limit)
        return frame

    @staticmethod
    def write(frame, view, correlation_id):
        """Copy ``frame`` to the start of the writable memoryview ``view`` with
        ``correlation_id`` in its header (``KafkaClient.send_frame``'s writer, ``frame``
        bound)."""
        view[:len(frame)] = frame
        d.INT32.pack_into(view, d.CORRELATION_ID_OFFSET, correlation_id)

    @staticmethod
    def with_correlation_id(frame, correlation_id):
        """``frame`` itself, with ``correlation_id`` written into its header (a sender
        that copies the frame as it is: ``InterBrokerChannel.send_frame``'s encoder)."""
        d.INT32.pack_into(frame, d.CORRELATION_ID_OFFSET, correlation_id)
        return frame
