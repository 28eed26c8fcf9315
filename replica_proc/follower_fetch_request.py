"""A follower's Fetch request, encoded once and patched for each send.

A follower sends its leader one Fetch per replication round trip (``replica_fetcher``), and
between two of them only three things change: the correlation id and, per partition, the
``fetch_offset`` (its log end offset) and the ``log_start_offset``. So the fetcher encodes
the whole frame once (``FollowerFetchRequest``, through ``frames.encode_request`` from the
kio request: the bytes are the protocol's, not a second encoder's) for a set of partitions
and their leader epochs, and each send writes those fields into the same buffer
(``frame``) instead of building the request's objects and encoding them again. A change
of the partitions sent or of an epoch builds a new one (``matches``).

Where the fields sit comes from the Fetch v9-11 layout (``frame_descriptor``:
``FETCH_REQUEST_TOP_V7``, ``FETCH_REQUEST_PARTITION_V9``) walked over the encoded frame;
each partition's index read back there is checked against the one asked for.

Owner: the broker's loop thread (its ReplicaFetcher), the only caller.
"""
from __future__ import annotations

import struct

from cluster.protocol import frame_descriptor as d, frames as protocol
from cluster.protocol.frames import ApiKey

VERSION = 11
"""Fetch's highest non-flexible version (no fetch sessions used: session_epoch -1)."""

_OFFSETS = struct.Struct(">qq")  # fetch_offset, log_start_offset
_PARTITION = d.FETCH_REQUEST_PARTITION_V9
_OFFSETS_AT = 8  # after partition (int32) and current_leader_epoch (int32)


class FollowerFetchRequest:
    """The Fetch v11 of follower ``replica_id`` for ``partitions`` — ``((topic, index),
    leader_epoch)`` pairs in the order sent — with the fetch settings of ``settings``
    (``FetchSettings``: max_wait, min_bytes, max_bytes, partition_max_bytes) and the
    requests' ``client_id``."""

    __slots__ = ("partitions", "_frame", "_positions")

    api_key = ApiKey.FETCH
    version = VERSION

    def __init__(self, replica_id, partitions, settings, client_id):
        self.partitions = tuple(partitions)
        module = protocol.request_module(ApiKey.FETCH, VERSION)
        topics = {}
        for (topic, index), epoch in self.partitions:
            topics.setdefault(topic, []).append(module.FetchPartition(
                partition=index, current_leader_epoch=epoch, fetch_offset=0,
                log_start_offset=0, partition_max_bytes=settings.partition_max_bytes))
        request = module.FetchRequest(
            replica_id=replica_id, max_wait=settings.max_wait,
            min_bytes=settings.min_bytes, max_bytes=settings.max_bytes, isolation_level=0,
            session_id=0, session_epoch=-1,
            topics=tuple(module.FetchTopic(topic=name, partitions=tuple(parts))
                         for name, parts in topics.items()),
            forgotten_topics_data=(), rack_id="")
        self._frame = protocol.encode_request(request, 0, client_id)
        self._positions = self._locate(request, len(client_id.encode()))

    def _locate(self, request, client_id_length):
        """The frame position of each partition's ``fetch_offset``, in ``partitions``'
        order (the encoder writes the topics and partitions in the request's order)."""
        frame = self._frame
        position = d.CLIENT_ID_OFFSET + client_id_length + d.FETCH_REQUEST_TOP_V7.size + 4
        at = {}
        for topic in request.topics:
            position += 2 + len(topic.topic.encode()) + 4
            for p in topic.partitions:
                index, = d.INT32.unpack_from(frame, position)
                if index != p.partition:
                    raise AssertionError(f"Fetch template: partition {p.partition} expected "
                                         f"at {position}, found {index}")
                at[(topic.topic, index)] = position + _OFFSETS_AT
                position += _PARTITION.size
        return tuple(at[key] for key, _ in self.partitions)

    def matches(self, partitions):
        """Whether this request sends exactly ``partitions`` (same keys, epochs, order)."""
        return self.partitions == partitions

    def frame(self, correlation_id, offsets):
        """The frame with ``correlation_id`` and each partition's ``(fetch_offset,
        log_start_offset)`` from ``offsets`` (in ``partitions``' order). The same buffer
        every time: valid until the next call."""
        frame = self._frame
        d.INT32.pack_into(frame, d.CORRELATION_ID_OFFSET, correlation_id)
        pack = _OFFSETS.pack_into
        for position, (fetch_offset, log_start) in zip(self._positions, offsets):
            pack(frame, position, fetch_offset, log_start)
        return frame
