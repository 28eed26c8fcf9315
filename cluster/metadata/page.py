"""The metadata page: the newest MetadataImage, in shared memory, for every process to read.

``MetadataPage.create(namespace)`` makes ``/ringlog.<namespace>.metadata`` (the supervisor
does, at cluster start; it unlinks it at stop); ``MetadataPage.open(namespace)`` maps it
(brokers and clients). The active controller ``publish()``-es every new image; readers
check ``version`` — one 8-byte load — and call ``read()`` when it moved. Layout and the
seqlock protocol: ``page_descriptor``.

Readers never see a torn image: ``read()`` copies the bytes between two reads of the
sequence and parses them only when both reads agree (and are even).
"""
from __future__ import annotations

import os
import time

from cluster.metadata import page_descriptor as md
from cluster.metadata.model import MetadataImage
from shm_ring.naming import SharedRegion, cluster_of, object_name
from shm_ring.ring_descriptor import require_store_order

_SEQUENCE = md.word_index(md.SEQUENCE_OFFSET)
_LENGTH = md.word_index(md.LENGTH_OFFSET)
_MAGIC = md.word_index(md.MAGIC_OFFSET)
_CAPACITY = md.word_index(md.CAPACITY_OFFSET)

SPIN_ATTEMPTS = 64
"""Consistent-copy attempts ``read()`` makes (yielding the CPU between them) before it
starts sleeping between attempts."""

RETRY_SLEEP = 0.0005
"""Seconds ``read()`` sleeps between attempts once spinning has not been enough."""


def metadata_page_name(cluster_id: str) -> str:
    """Well-known name of a cluster's metadata page (shared memory)."""
    return object_name(cluster_id, "metadata")


class MetadataPage:
    """One process's mapping of the metadata page.

    Single writer: the active controller calls ``publish``. Any number of readers, each
    with its own MetadataPage; one MetadataPage belongs to one thread (``read`` caches the
    last image it parsed). ``close()`` drops the mapping; ``unlink()`` (the creator's, at
    cluster stop) removes the name; both are safe to call twice.
    """

    def __init__(self, cluster_id: str, region: SharedRegion) -> None:
        self.cluster_id = cluster_id
        self._region = region
        self._header = region.buf[:md.HEADER_LENGTH]
        self._words = self._header.cast("q")
        self.capacity = self._words[_CAPACITY]
        if region.size != md.page_length(self.capacity):
            raise ValueError(f"metadata page {region.name} is {region.size} bytes, expected "
                             f"{md.page_length(self.capacity)} for an image area of "
                             f"{self.capacity}")
        self._image_area = region.buf[md.IMAGE_OFFSET:]
        self._seen = -1  # sequence of self._image
        self._image: MetadataImage | None = None

    @property
    def name(self) -> str:
        return self._region.name

    # -- lifecycle ----------------------------------------------------------------------------

    @classmethod
    def create(cls, cluster_id: str, size: int = md.DEFAULT_PAGE_SIZE) -> MetadataPage:
        """Create the page (``size`` bytes in all; FileExistsError if it exists), empty."""
        require_store_order()
        if size <= md.HEADER_LENGTH:
            raise ValueError(f"metadata page size {size} must exceed its {md.HEADER_LENGTH}-"
                             f"byte header")
        region = SharedRegion.create(metadata_page_name(cluster_id), size)
        try:
            words = region.buf[:md.HEADER_LENGTH].cast("q")
            words[_CAPACITY] = size - md.HEADER_LENGTH
            words[_MAGIC] = md.MAGIC  # last: the page is ready
            words.release()
            return cls(cluster_id, region)
        except BaseException:
            region.unlink()
            region.close()
            raise

    @classmethod
    def open(cls, cluster_id: str) -> MetadataPage:
        """Map the page of ``cluster_id`` (FileNotFoundError if it does not exist or is not
        ready yet; ValueError if the object is not a metadata page)."""
        require_store_order()
        region = SharedRegion.open(metadata_page_name(cluster_id))
        try:
            with region.buf[:md.HEADER_LENGTH].cast("q") as words:
                magic = words[_MAGIC]
            if magic == 0:
                raise FileNotFoundError(f"metadata page {region.name} is not initialised yet")
            if magic != md.MAGIC:
                raise ValueError(f"{region.name} is not a metadata page: magic {magic:#x}, "
                                 f"expected {md.MAGIC:#x}")
            return cls(cluster_id, region)
        except BaseException:
            region.close()
            raise

    def close(self) -> None:
        """Drop this process's mapping; safe to call twice."""
        for view in (self._words, self._header, self._image_area):
            view.release()
        self._region.close()

    def unlink(self) -> None:
        """Remove the name (existing mappings keep working); safe to call twice."""
        self._region.unlink()

    def __enter__(self) -> MetadataPage:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writer -------------------------------------------------------------------------------

    def publish(self, image: MetadataImage) -> None:
        """Make ``image`` the page's image (the active controller only).

        ValueError, with nothing written, if its JSON does not fit the page.
        """
        data = image.to_json().encode("ascii")
        if len(data) > self.capacity:
            raise ValueError(f"metadata image version {image.version} is {len(data)} bytes, "
                             f"more than the {self.capacity} the page {self.name} holds")
        words = self._words
        sequence = words[_SEQUENCE]
        # odd; past the odd value of a writer that stopped mid-write (page_descriptor)
        writing = sequence + 2 if sequence & 1 else sequence + 1
        words[_SEQUENCE] = writing
        self._image_area[:len(data)] = data
        words[_LENGTH] = len(data)
        words[_SEQUENCE] = writing + 1

    # -- readers ------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """The page's sequence: moves on with every publish (0: nothing published yet; odd:
        a publish is in progress). Compare it with an earlier value to know whether
        ``read()`` has something new; it is not the image's own ``version``."""
        return self._words[_SEQUENCE]

    def read(self, timeout: float = 1.0) -> MetadataImage:
        """The newest image on the page (parsed only when the sequence moved).

        Before anything is published, the empty image of this cluster (version 0, no
        brokers, controller -1). While a publish is in progress ``read`` retries; if no
        consistent copy can be had within ``timeout`` seconds (a writer died mid-write and
        no controller has published since), it returns the last image it read — metadata
        may always lag — or raises TimeoutError if it never read one.
        """
        words = self._words
        sequence = words[_SEQUENCE]
        if sequence == self._seen:
            return self._image
        deadline = None
        attempts = 0
        while True:
            if not sequence & 1:
                length = words[_LENGTH]
                if 0 <= length <= self.capacity:
                    data = bytes(self._image_area[:length])
                    if words[_SEQUENCE] == sequence:
                        break
            attempts += 1
            if attempts > SPIN_ATTEMPTS:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + timeout
                elif now >= deadline:
                    if self._image is not None:
                        return self._image
                    raise TimeoutError(
                        f"metadata page {self.name}: no consistent image within {timeout} s "
                        f"(sequence {sequence}, a write in progress)")
                time.sleep(RETRY_SLEEP)
            else:
                os.sched_yield()
            sequence = words[_SEQUENCE]
        if sequence == 0:
            image = MetadataImage.empty(cluster_of(self.cluster_id))
        else:
            image = MetadataImage.from_json(data)
        self._seen, self._image = sequence, image
        return image

    def __repr__(self) -> str:
        return f"MetadataPage({self.name!r}, capacity={self.capacity}, version={self.version})"
