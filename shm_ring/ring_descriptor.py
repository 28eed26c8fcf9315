"""Binary layout of a single-producer/single-consumer frame ring (Agrona's habits).

A ring buffer is one contiguous block: a header of control lines, then the data area, whose
length (the *capacity*) is a power of two.

Ring header (byte offsets; every hot word sits alone on a pair of 64-byte cache lines, because
the adjacent-line prefetcher pulls lines in pairs and would otherwise couple the two ends)::

      0                   1                   2                   3
      0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
     +---------------------------------------------------------------+
   0 |                     Magic and version (i64)                   |
     +---------------------------------------------------------------+
   8 |                         Capacity (i64)                        |
     +---------------------------------------------------------------+
     |                     ... to byte 128 ...                       |
     +---------------------------------------------------------------+
 128 |            Tail position (i64, written by the writer)         |
     +---------------------------------------------------------------+
 256 |            Head position (i64, written by the reader)         |
     +---------------------------------------------------------------+
 384 |   Reader parked flag (i64: set by the reader before it blocks) |
     +---------------------------------------------------------------+
 512 |   Writer parked flag (i64: set by the writer before it blocks) |
     +---------------------------------------------------------------+
 640 |  Writer end: pid (i64) | start time (i64) | closed flag (i64)   |
     |  | wake doorbell (i64) | pending slot (i64: 1 + slot, 0 = none) |
     +---------------------------------------------------------------+
 768 |  Reader end: pid (i64) | start time (i64) | closed flag (i64)   |
     |              | wake doorbell (i64: 1 + broker id, 0 = none)   |
     +---------------------------------------------------------------+
 896 |                   Data area (capacity bytes)                 ...
     +---------------------------------------------------------------+

Frame (every frame starts at an index that is a multiple of FRAME_ALIGNMENT)::

      0                   1                   2                   3
      0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
     +---------------------------------------------------------------+
     |              Length (i32: header + payload bytes)             |
     +---------------------------------------------------------------+
     |                          Type (i32)                           |
     +---------------------------------------------------------------+
     |                          Payload                             ...
    ...                 (padded up to FRAME_ALIGNMENT)                |
     +---------------------------------------------------------------+

Words: a *position* is the ever-growing byte counter (tail = bytes ever written, head = bytes
ever released); an *index* is a position masked by capacity - 1, a byte in the data area.

Protocol. The writer copies the payload, zeroes the header of the *next* frame, and then
publishes the frame by writing its header word (length | type << 32) in one aligned 8-byte
store: writing a non-zero length signals the frame is complete (it is the commit). The length
counts the header, so an empty payload still has length 8 and zero always means "not yet".
A frame never ends at the very end of the data area: the writer always reserves room for the
next header, which it zeroes before the commit, so the reader never mistakes bytes of an older
lap for a length. When a frame does not fit before the end, the writer zeroes the header at
index 0, then commits a padding frame (type PADDING_TYPE) covering the rest of the area and
writes the frame at index 0. The reader reads the header word at its head; zero means empty;
after consuming frames it publishes its new head position (the release), which is the only
thing the writer needs from it. Each end caches the other's position and re-reads it only
when its cached value says the ring is full (writer) — the reader never reads the tail.

Messages longer than a frame. A frame holds at most max_frame_length(capacity) bytes (about
half the data area), but the ring carries a message of any length up to MAX_MESSAGE_LENGTH:
the writer cuts a longer one into fragments of fragment_length(capacity) bytes (the last may
be shorter), each an ordinary frame of type FIRST_FRAGMENT_TYPE, then NEXT_FRAGMENT_TYPE.
The first fragment's payload starts with one word (FRAGMENT_PREFIX_LENGTH bytes): the
message's length in the low half and its own type in the high half. A message is written
whole before any other frame (nothing is interleaved with its fragments), so the reader
copies the fragments, in order, into one buffer of that length, and hands the message out
once the last arrived, as if it had been one frame. It frees the fragments as it copies them
(the head passes them) unless frames it handed out before them are still held, so a message
many times the capacity streams through. Fragment types are negative, like padding, so the
reader's one sign test on the header word sends both to its slow path and costs an ordinary
frame nothing. A writer that dies in the middle of a message leaves a message that never
completes, like a frame it never committed.
Why fragments rather than a side buffer or rings sized for the largest message: the limits
that bound a message (a topic's max.message.bytes, a Metadata response's partition count)
are not known when a connection's rings are made and can grow afterwards; a side buffer
would add named objects to create, clean up and leak; fragments keep one object per
direction and leave the ring's common path (frames that fit) exactly as it was.

Ordering assumption. The Python code has no fences on the data path. It relies
on x86-64's total store order (TSO): stores by one core become visible to other cores in
program order, and loads are not reordered with other loads, so a reader that sees the
header word also sees the payload stores and the next-header zeroing made before it. Every
8-byte word is read and written with one aligned native load/store (memoryview cast to "q"),
which x86-64 performs atomically. The one reordering TSO allows, a later load passing an
earlier store, matters only to the park/notify handshake, and there a locked instruction
(a lock acquire/release, i.e. LOCK CMPXCHG) serves as the full fence; a semaphore post is
also a full barrier, so a woken reader sees everything written before the post.
On a weakly ordered machine (ARM, POWER) none of this holds, so the ring refuses to run there
(see require_store_order()). The compiled twin of the per-frame paths and of the notifier's
check (_ring_accel.pyx) states the same orders explicitly: release stores for the words that
publish (the next header's zeroing, the header word, the tail, the head), acquire loads of
header words, and a sequentially consistent fence where the Python takes a lock.
"""
from __future__ import annotations

import platform

CACHE_LINE_LENGTH = 64
"""Bytes in a cache line on x86-64."""

WORD_LENGTH = 8
"""Every header field is one 8-byte word, read and written atomically."""

MAGIC = 0x524C_4F47_5249_4E01
"""b'RLOGRIN' + version 1, in the first word, so a mapping of something else is refused."""

_offset = 0
MAGIC_OFFSET = _offset
"""Magic and layout version (i64), written once by the creator."""

_offset += WORD_LENGTH
CAPACITY_OFFSET = _offset
"""Capacity of the data area in bytes (i64, a power of two), written once by the creator."""

_offset = CACHE_LINE_LENGTH * 2
TAIL_POSITION_OFFSET = _offset
"""Tail position (i64): bytes ever written; written only by the writer, after each commit."""

_offset += CACHE_LINE_LENGTH * 2
HEAD_POSITION_OFFSET = _offset
"""Head position (i64): bytes ever released; written only by the reader."""

_offset += CACHE_LINE_LENGTH * 2
READER_PARKED_OFFSET = _offset
"""Non-zero while the reader is (about to be) blocked waiting for a frame."""

_offset += CACHE_LINE_LENGTH * 2
WRITER_PARKED_OFFSET = _offset
"""Non-zero while the writer is (about to be) blocked waiting for space."""

_offset += CACHE_LINE_LENGTH * 2
WRITER_END_OFFSET = _offset
"""The writer end: pid, start time and closed flag of the process that writes."""

_offset += CACHE_LINE_LENGTH * 2
READER_END_OFFSET = _offset
"""The reader end: pid, start time and closed flag of the process that reads."""

_offset += CACHE_LINE_LENGTH * 2
HEADER_LENGTH = _offset
"""Bytes before the data area; the data area starts here (a multiple of 64)."""

END_PID_OFFSET = 0
"""Within an end: pid of the process at that end (i64; 0 while nobody has attached)."""

END_START_TIME_OFFSET = END_PID_OFFSET + WORD_LENGTH
"""Within an end: that process's start time (clock ticks since boot), to survive pid reuse."""

END_CLOSED_OFFSET = END_START_TIME_OFFSET + WORD_LENGTH
"""Within an end: non-zero once that end closed (writer closed = end of stream)."""

END_DOORBELL_OFFSET = END_CLOSED_OFFSET + WORD_LENGTH
"""Within an end: 1 + the id of the broker whose doorbell wakes the process at this end,
instead of the ring's own semaphore; 0 (the default) = the ring's own. Used in the reader
end of a connection's response ring by a client that is itself a broker waiting on its
Listener (see connection: "Outbound connections of a broker"); written before the
connection is announced, read once by the peer when it accepts."""

END_PENDING_SLOT_OFFSET = END_DOORBELL_OFFSET + WORD_LENGTH
"""Within an end: 1 + the index of the connection's byte in its broker's table of
requests pending flags (listener_descriptor.PENDING_SLOTS_OFFSET), 0 = none. Written in
the writer end of a connection's response ring by the accepting broker, before its pid
(the "accepted" signal); read once by the client when it sees the accept."""

FRAME_LENGTH_OFFSET = 0
"""Within a frame: length of header + payload (i32); zero means not committed yet."""

FRAME_TYPE_OFFSET = FRAME_LENGTH_OFFSET + 4
"""Within a frame: the frame type (i32), high half of the header word."""

FRAME_HEADER_LENGTH = FRAME_TYPE_OFFSET + 4
"""Bytes of frame header before the payload."""

FRAME_ALIGNMENT = 8
"""Every frame starts on a multiple of this; frame lengths are rounded up to it."""

PADDING_TYPE = -1
"""Type of the filler frame that covers the end of the data area at wrap-around."""

FIRST_FRAGMENT_TYPE = -2
"""Type of the first fragment of a message longer than the ring's largest frame."""

NEXT_FRAGMENT_TYPE = -3
"""Type of every later fragment of such a message."""

FRAGMENT_PREFIX_LENGTH = 8
"""Bytes at the start of a first fragment's payload: the message's length (i32) in the low
half, its type (i32) in the high half of one little-endian i64, like a frame header word."""

MAX_MESSAGE_LENGTH = 2**31 - 1
"""Longest message the ring carries (fragmented or not): its length must fit an i32."""

DATA_TYPE = 1
"""Default type of a frame carrying bytes."""

MAX_TYPE = 2**31 - 1
"""Frame types available to users are 1..MAX_TYPE."""

MIN_CAPACITY = 64
"""Smallest data area accepted (a power of two)."""

MAX_CAPACITY = 2**30
"""Largest data area accepted: frame lengths must fit the i32 length field."""

STORE_ORDER_MACHINES = frozenset({"x86_64", "AMD64", "amd64"})
"""platform.machine() values whose memory model is TSO (see the ordering assumption)."""


def align(length: int) -> int:
    """Round length up to FRAME_ALIGNMENT."""
    return (length + FRAME_ALIGNMENT - 1) & -FRAME_ALIGNMENT


def header_word(length: int, frame_type: int) -> int:
    """The frame header as one little-endian i64: length in the low half, type in the high."""
    return length | (frame_type << 32)


def max_frame_length(capacity: int) -> int:
    """Largest payload a ring of this capacity can always accept eventually.

    A frame needs align(payload + header) bytes plus one header's worth for zeroing the next
    header. When the ring is empty its head and tail index sit at the same point, and the
    longest contiguous free run on one side of it is at least capacity / 2; a bigger frame
    could wait forever, so it is refused up front.
    """
    return capacity // 2 - 2 * FRAME_HEADER_LENGTH


def fragment_length(capacity: int) -> int:
    """Payload bytes of each fragment (the last may be shorter) of a message longer than
    max_frame_length(capacity): half the largest frame, so the writer fills one fragment
    while the reader copies out the one before; at least two prefixes, so a first
    fragment carries data."""
    return max(max_frame_length(capacity) // 2 & -FRAME_ALIGNMENT,
               min(max_frame_length(capacity), 2 * FRAGMENT_PREFIX_LENGTH))


def ring_length(capacity: int) -> int:
    """Total bytes of a ring (header + data area) for a data area of this capacity."""
    check_capacity(capacity)
    return HEADER_LENGTH + capacity


def check_capacity(capacity: int) -> None:
    """Raise ValueError unless capacity is a power of two in [MIN_CAPACITY, MAX_CAPACITY]."""
    if not (MIN_CAPACITY <= capacity <= MAX_CAPACITY) or capacity & (capacity - 1):
        raise ValueError(
            f"ring capacity must be a power of two in [{MIN_CAPACITY}, {MAX_CAPACITY}],"
            f" found {capacity}")


def require_store_order(machine: str | None = None) -> None:
    """Refuse to run the ring on a machine whose stores may become visible out of order.

    machine defaults to platform.machine(); the argument exists for tests.
    """
    machine = platform.machine() if machine is None else machine
    if machine not in STORE_ORDER_MACHINES:
        raise RuntimeError(
            f"shm_ring relies on x86-64 total store order (the frame length store must be seen"
            f" after the payload stores without fences); this machine is {machine!r}, expected"
            f" one of {sorted(STORE_ORDER_MACHINES)}")
