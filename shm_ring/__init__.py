"""ringlog's shared-memory transport: frames of bytes between processes on one host.

Layers, bottom up: ring_descriptor (binary layout and ordering rules), ring (the
single-producer/single-consumer ring), wakeup (spin, then park on a semaphore), shared_ring (a
named ring), doorbell + connection (client/broker connections), naming (names, lifecycle,
cleanup of stale objects), liveness (is the peer process still there), errors.
It knows nothing of Kafka (the producer's BufferPool lives with the producer:
``cluster.producer.buffer_pool``).
"""
from __future__ import annotations

from shm_ring.connection import ClientConnection, Connection, Listener, connect
from shm_ring.errors import PeerClosedError, PeerDiedError
from shm_ring.naming import SquattedNameError, cleanup_stale, list_objects
from shm_ring.ring import Ring, format_ring
from shm_ring.ring_descriptor import DATA_TYPE, max_frame_length
from shm_ring.shared_ring import SharedRing
from shm_ring.wakeup import RingReader, RingWriter, WaitPolicy

__all__ = [
    "ClientConnection", "Connection", "DATA_TYPE", "Listener", "PeerClosedError",
    "PeerDiedError", "Ring", "RingReader", "RingWriter", "SharedRing", "SquattedNameError",
    "WaitPolicy",
    "cleanup_stale", "connect", "format_ring", "list_objects", "max_frame_length",
]
