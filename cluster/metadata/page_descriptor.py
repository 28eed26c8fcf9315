"""Binary layout of the metadata page: the cluster's MetadataImage in shared memory.

Well-known name: ``metadata_page_name(cluster) = /ringlog.<cluster>.metadata``. The
supervisor creates it (and unlinks it when the cluster stops); only the active controller
writes it; brokers and clients map it and read it.

::

      0                   1                   2                   3
      0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
     +---------------------------------------------------------------+
   0 |                     Magic and version (i64)                   |
     +---------------------------------------------------------------+
   8 |                   Capacity of the image area (i64)            |
     +---------------------------------------------------------------+
     |                     ... to byte 128 ...                       |
     +---------------------------------------------------------------+
 128 |        Sequence (i64): odd while the writer is writing        |
     +---------------------------------------------------------------+
 136 |                  Image length in bytes (i64)                  |
     +---------------------------------------------------------------+
     |                     ... to byte 256 ...                       |
     +---------------------------------------------------------------+
 256 |   Image: MetadataImage.to_json(), ASCII, `length` bytes      ...
     +---------------------------------------------------------------+

Protocol (a seqlock). The writer makes the sequence odd, writes the image bytes and then
the length, and makes the sequence even again (one more than the odd value): every publish
moves the sequence on by two. A reader reads the sequence; if it is odd it tries again;
otherwise it reads the length and copies that many image bytes, then reads the sequence a
second time: the copy is a consistent image if and only if both reads returned the same
even value. Sequence 0 means nothing has been published yet.

A writer that dies halfway leaves the sequence odd: readers keep their last image until
the next controller publishes. The next writer skips that odd value (it writes with the
next odd one), because the halfway writer may not be dead but stopped (SIGSTOP, a hung
controller that another broker replaced): if it resumes, it finishes with its own odd
value + 1, a sequence the new writer never uses, so the new controller — which checks the
page's sequence against its own last one at every poll — notices that its image was
overwritten and publishes it again (``replica_proc.controller.controller_lock``). The
sequence is even exactly when no write is in progress.

Ordering assumption: as in ``shm_ring.ring_descriptor``, x86-64 total store order, and the
sequence and length words are each read and written with one aligned native 8-byte access
(memoryview cast to "q"). Stores become visible in program order, so a reader that sees
the even sequence of the end of a write sees every image byte of that write; loads are not
reordered with loads, so the second sequence read happens after the copy. The page refuses
to run where that does not hold (``shm_ring.ring_descriptor.require_store_order``).
"""
from __future__ import annotations

CACHE_LINE_LENGTH = 64
"""Bytes in a cache line on x86-64."""

WORD_LENGTH = 8
"""Every header field is one 8-byte word, read and written atomically."""

MAGIC = 0x524C_4F47_4D44_5001
"""b'RLOGMDP' + version 1, in the first word, so a mapping of something else is refused."""

_offset = 0
MAGIC_OFFSET = _offset
"""Magic and layout version (i64), written once by the creator, after the capacity."""

_offset += WORD_LENGTH
CAPACITY_OFFSET = _offset
"""Bytes of the image area (i64), written once by the creator."""

_offset = CACHE_LINE_LENGTH * 2
SEQUENCE_OFFSET = _offset
"""Seqlock sequence (i64): odd while a write is in progress; +2 per publish."""

_offset += WORD_LENGTH
LENGTH_OFFSET = _offset
"""Bytes of the current image (i64); meaningful only between two equal even sequences."""

_offset = CACHE_LINE_LENGTH * 4
IMAGE_OFFSET = _offset
"""Start of the image bytes (a multiple of 64)."""

HEADER_LENGTH = IMAGE_OFFSET
"""Bytes before the image area."""

DEFAULT_PAGE_SIZE = 4 * 1024 * 1024
"""Total bytes of a page unless the creator says otherwise: room for tens of thousands of
partitions."""


def page_length(capacity: int) -> int:
    """Total bytes of a page whose image area holds ``capacity`` bytes."""
    return HEADER_LENGTH + capacity


def word_index(offset: int) -> int:
    """Index of the i64 word at byte ``offset`` in a memoryview cast to "q"."""
    return offset // WORD_LENGTH
