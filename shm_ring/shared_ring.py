"""A standalone ring in its own named shared memory, with the semaphores its two ends park on.

Names: ``/ringlog.<cluster>.<stem>`` (the ring), ``<that>.data`` (the reader parks there when the
ring is empty) and ``<that>.space`` (the writer parks there when the ring is full). Connections
(connection.py) build their rings from the same parts but route some wake-ups to the broker's
doorbell instead.
"""
from __future__ import annotations

from shm_ring import ring_descriptor as rd
from shm_ring.liveness import current_process
from shm_ring.naming import NamedSemaphore, SharedRegion, object_name
from shm_ring.ring import READER_END, WRITER_END, Ring, format_ring
from shm_ring.wakeup import (
    DEFAULT_POLICY,
    READER_PARKED_WORD,
    WRITER_PARKED_WORD,
    RingReader,
    RingWriter,
    WaitPolicy,
    WakeSlot,
)


class SharedRing:
    """A named single-producer/single-consumer ring.

    Ownership: the process that create()s it unlinks it (unlink()); any process may open() it.
    One process holds the writer end (writer()), one the reader end (reader()); they may be the
    same process. close() drops this process's mapping and handles; views still held from
    read() or claim() keep the mapping alive until they are dropped.
    """

    def __init__(self, region: SharedRegion, data: NamedSemaphore,
                 space: NamedSemaphore) -> None:
        self.name = region.name
        self._region = region
        self._data = data
        self._space = space
        self._rings: list[Ring] = []

    @classmethod
    def create(cls, cluster_id: str, stem: str, capacity: int) -> SharedRing:
        """Create the ring and its semaphores (FileExistsError if the name is taken)."""
        name = object_name(cluster_id, stem)
        region = SharedRegion.create(name, rd.ring_length(capacity))
        created: list = [region]
        try:
            format_ring(region.buf, capacity)
            data = NamedSemaphore.create(name + ".data")
            created.append(data)
            space = NamedSemaphore.create(name + ".space")
        except BaseException:
            for thing in created:
                thing.unlink()
                thing.close()
            raise
        return cls(region, data, space)

    @classmethod
    def open(cls, cluster_id: str, stem: str) -> SharedRing:
        """Open an existing ring (FileNotFoundError if any part is missing)."""
        name = object_name(cluster_id, stem)
        region = SharedRegion.open(name)
        opened: list = [region]
        try:
            data = NamedSemaphore.open(name + ".data")
            opened.append(data)
            space = NamedSemaphore.open(name + ".space")
        except BaseException:
            for thing in opened:
                thing.close()
            raise
        return cls(region, data, space)

    def _ring(self) -> Ring:
        ring = Ring(self._region.buf, self.name)
        self._rings.append(ring)
        return ring

    def writer(self, policy: WaitPolicy = DEFAULT_POLICY) -> RingWriter:
        """Become the writer end: record this process in the ring and return its RingWriter."""
        ring = self._ring()
        ring.set_end(WRITER_END, *current_process())
        words = ring.header_words
        return RingWriter(ring, WakeSlot(words, READER_PARKED_WORD, self._data.semaphore),
                          WakeSlot(words, WRITER_PARKED_WORD, self._space.semaphore),
                          f"reader of {self.name}", policy)

    def reader(self, policy: WaitPolicy = DEFAULT_POLICY) -> RingReader:
        """Become the reader end: record this process in the ring and return its RingReader."""
        ring = self._ring()
        ring.set_end(READER_END, *current_process())
        words = ring.header_words
        return RingReader(ring, WakeSlot(words, READER_PARKED_WORD, self._data.semaphore),
                          WakeSlot(words, WRITER_PARKED_WORD, self._space.semaphore),
                          f"writer of {self.name}", policy)

    def close(self) -> None:
        """Drop this process's mapping and semaphore handles; safe to call twice."""
        for ring in self._rings:
            ring.release_views()
        self._rings.clear()
        self._region.close()
        self._data.close()
        self._space.close()

    def unlink(self) -> None:
        """Remove the three names (the owner does this); safe to call twice."""
        self._region.unlink()
        self._data.unlink()
        self._space.unlink()

    def __enter__(self) -> SharedRing:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
