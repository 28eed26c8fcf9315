"""Binary layout of a process's stats page: its figures in shared memory, for tools to read.

Name: ``stats_page_name(cluster, pid) = /ringlog.<cluster>.stats.<pid>`` (``shm_ring.naming``).
The process it describes creates it, is its only writer and unlinks it (``cluster.stats.page``,
``publisher``); ``ringlog top`` / ``metrics`` / ``profile`` map it and read it (``reader``).
Every word is little-endian (x86-64 native), 8 bytes, at a multiple of 8.

Header (written once, at creation, before the magic; never changes afterwards)::

      0                   1                   2                   3
      0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
     +---------------------------------------------------------------+
   0 |        Magic (u64): b'RLOGSTA' + 1, written last at creation   |
     +---------------------------------------------------------------+
   8 |                     Layout version (i64)                      |
     +---------------------------------------------------------------+
  16 |                  Page size in bytes (i64)                     |
     +---------------------------------------------------------------+
  24 |            Publishing interval in seconds (f64)               |
     +---------------------------------------------------------------+
  32 |                           pid (i64)                           |
     +---------------------------------------------------------------+
  40 |  Start time: /proc/<pid>/stat starttime, clock ticks (i64)    |
     +---------------------------------------------------------------+
  48 |   Start time: psutil create_time, epoch seconds (f64)         |
     +---------------------------------------------------------------+
  56 |      Current copy (i64): 0 or 1, the copy readers should read  |
     +---------------------------------------------------------------+
  64 |        Role (32 bytes, UTF-8, NUL-padded): "broker", ...       |
     +---------------------------------------------------------------+
  96 |      Name (128 bytes, UTF-8, NUL-padded): "broker-1", ...      |
     +---------------------------------------------------------------+
 224 |                     ... to byte 256 ...                       |
     +---------------------------------------------------------------+
 256 |                    Copy 0 (COPY_LENGTH bytes)                ...
     +---------------------------------------------------------------+
     |                    Copy 1 (COPY_LENGTH bytes)                ...
     +---------------------------------------------------------------+

One data copy (offsets from the start of the copy)::

     +---------------------------------------------------------------+
   0 |      Sequence (i64): odd while the writer is writing this copy  |
     +---------------------------------------------------------------+
   8 |          Updated: epoch seconds of this publish (f64)         |
     +---------------------------------------------------------------+
  16 |          RSS | USS | PSS, bytes (3 x i64; USS/PSS 0: unknown)  |
     +---------------------------------------------------------------+
  40 |          CPU user | CPU system, seconds (2 x f64)             |
     +---------------------------------------------------------------+
  56 |  Context switches voluntary | involuntary | threads (3 x i64)  |
     +---------------------------------------------------------------+
  80 |        Counter count | histogram count in use (2 x i64)       |
     +---------------------------------------------------------------+
  96 |  GC generation 0, 1, 2 (3 x GC_LENGTH): collections,           |
     |  collected, uncollectable (i64), pause total, pause max (f64), |
     |  len(GC_PAUSE_BOUNDS) + 1 pause histogram counts (i64)         |
     +---------------------------------------------------------------+
 512 |  Counters: MAX_COUNTERS slots of COUNTER_LENGTH bytes:         |
     |  name (NAME_LENGTH bytes, UTF-8, NUL-padded) | value (f64)     |
     +---------------------------------------------------------------+
     |  Histograms: MAX_HISTOGRAMS slots of HISTOGRAM_LENGTH bytes:   |
     |  name (NAME_LENGTH bytes) | bound count n (i64) |              |
     |  MAX_BOUNDS bounds (f64; the first n used) |                   |
     |  MAX_BOUNDS + 1 counts (i64; the first n + 1 used) |           |
     |  total (f64) | max (f64)                                      |
     +---------------------------------------------------------------+

Limits (one 64 KiB page): MAX_COUNTERS counters and MAX_HISTOGRAMS histograms per process,
names of at most NAME_LENGTH UTF-8 bytes, histograms of at most MAX_BOUNDS bounds. A source
that registers more than fits is refused when it registers (``publisher.add_source``).

Protocol (two copies, a seqlock on each). The current-copy word names the copy readers
read. To publish, the writer takes the *other* copy: makes its sequence odd, writes every
field, makes the sequence even (one more than the odd value), then stores the other copy's
index in the current-copy word. A reader reads the current-copy word, then that copy's
sequence; if it is odd (or 0: never written) it tries again; otherwise it copies the copy's
bytes and reads the sequence a second time: the bytes are consistent if and only if both
reads returned the same even value (the writer may have come round to this copy again while
the reader copied: two publishes, i.e. two intervals, during one copy). A writer SIGKILLed
halfway leaves the copy it was writing odd, and the current-copy word still names the other,
complete copy: the page stays readable and shows the last complete publish.

Ordering assumption: as in ``shm_ring.ring_descriptor``, x86-64 total store order, with the
sequence and current-copy words each read and written with one aligned native 8-byte access
(memoryview cast to "q"). Stores become visible in program order, so a reader that sees
the new current-copy word sees the even sequence and every field written before it; loads
are not reordered with loads, so the second sequence read happens after the copy. The page
refuses to run where that does not hold (``shm_ring.ring_descriptor.require_store_order``).
"""
from __future__ import annotations

import struct

from cluster.stats.snapshot import GC_PAUSE_BOUNDS

WORD_LENGTH = 8
"""Every field is one or more 8-byte words."""

MAGIC = 0x524C_4F47_5354_4101
"""b'RLOGSTA' + version 1, in the first word, so a mapping of something else is refused."""

LAYOUT_VERSION = 1
"""Version of this layout; a reader refuses a page of another version."""

PAGE_SIZE = 64 * 1024
"""Bytes in a stats page."""

ROLE_LENGTH = 32
"""Bytes for the role (UTF-8, NUL-padded)."""

PROCESS_NAME_LENGTH = 128
"""Bytes for the process name (UTF-8, NUL-padded)."""

# -- header ----------------------------------------------------------------------------------

_offset = 0
MAGIC_OFFSET = _offset
"""Magic (u64, stored as i64), written last by the creator: the page is ready."""

_offset += WORD_LENGTH
LAYOUT_VERSION_OFFSET = _offset
"""Layout version (i64)."""

_offset += WORD_LENGTH
PAGE_SIZE_OFFSET = _offset
"""Page size in bytes (i64)."""

_offset += WORD_LENGTH
INTERVAL_OFFSET = _offset
"""Seconds between publishes (f64)."""

_offset += WORD_LENGTH
PID_OFFSET = _offset
"""pid of the process the page describes (i64)."""

_offset += WORD_LENGTH
START_TICKS_OFFSET = _offset
"""Its start time in clock ticks since boot (``shm_ring.liveness``), to tell a reused pid."""

_offset += WORD_LENGTH
CREATE_TIME_OFFSET = _offset
"""Its start time in epoch seconds (psutil ``create_time``, f64)."""

_offset += WORD_LENGTH
CURRENT_COPY_OFFSET = _offset
"""Index (i64, 0 or 1) of the copy readers read."""

_offset += WORD_LENGTH
ROLE_OFFSET = _offset
"""Role, ROLE_LENGTH bytes."""

_offset += ROLE_LENGTH
PROCESS_NAME_OFFSET = _offset
"""Name, PROCESS_NAME_LENGTH bytes."""

_offset += PROCESS_NAME_LENGTH
HEADER_LENGTH = 256
"""Bytes of the header; the copies follow."""
assert _offset <= HEADER_LENGTH

HEADER = struct.Struct(f"<qqqdqqdq{ROLE_LENGTH}s{PROCESS_NAME_LENGTH}s")
"""The header fields in order (magic .. name)."""

# -- one data copy ---------------------------------------------------------------------------

NAME_LENGTH = 56
"""Bytes for a counter's or histogram's name (UTF-8, NUL-padded)."""

MAX_BOUNDS = 24
"""Most bounds a histogram may have."""

GC_BUCKETS = len(GC_PAUSE_BOUNDS) + 1
"""Counts in a GC pause histogram."""

SEQUENCE_OFFSET = 0
"""A copy's sequence (i64): odd while being written, 0 before the first write."""

FIGURES = struct.Struct("<dqqqddqqqqq")
"""After the sequence: updated, rss, uss, pss, cpu user, cpu system, ctx voluntary,
ctx involuntary, threads, counter count, histogram count."""

FIGURES_OFFSET = WORD_LENGTH

GENERATION = struct.Struct(f"<qqqdd{GC_BUCKETS}q")
"""One GC generation: collections, collected, uncollectable, pause total, pause max, the
pause histogram counts."""

GC_OFFSET = FIGURES_OFFSET + FIGURES.size
"""The three generations, GENERATION.size bytes each."""

COUNTERS_OFFSET = 512
"""The counter slots."""
assert GC_OFFSET + 3 * GENERATION.size <= COUNTERS_OFFSET

COUNTER = struct.Struct(f"<{NAME_LENGTH}sd")
"""One counter slot: name, value."""

HISTOGRAM = struct.Struct(f"<{NAME_LENGTH}sq{MAX_BOUNDS}d{MAX_BOUNDS + 1}qdd")
"""One histogram slot: name, bound count, bounds, counts, total, max."""

MAX_COUNTERS = 128
"""Counter slots in a copy."""

MAX_HISTOGRAMS = 48
"""Histogram slots in a copy."""

HISTOGRAMS_OFFSET = COUNTERS_OFFSET + MAX_COUNTERS * COUNTER.size
"""The histogram slots."""

COPY_LENGTH = (PAGE_SIZE - HEADER_LENGTH) // 2 // WORD_LENGTH * WORD_LENGTH
"""Bytes of one data copy."""
assert HISTOGRAMS_OFFSET + MAX_HISTOGRAMS * HISTOGRAM.size <= COPY_LENGTH


def copy_offset(index: int) -> int:
    """Byte offset of data copy ``index`` (0 or 1) in the page."""
    return HEADER_LENGTH + index * COPY_LENGTH


def word_index(offset: int) -> int:
    """Index of the 8-byte word at byte ``offset`` in a "q" cast of the page."""
    return offset // WORD_LENGTH


def encode_name(text: str, length: int, what: str) -> bytes:
    """``text`` as UTF-8 for a slot of ``length`` bytes; ValueError naming ``what`` if it
    does not fit (or is empty)."""
    data = text.encode()
    if not data or len(data) > length or b"\0" in data:
        raise ValueError(f"{what} {text!r} must be 1 to {length} UTF-8 bytes without NUL")
    return data


def decode_name(data: bytes) -> str:
    """A NUL-padded UTF-8 slot back to text."""
    return data.rstrip(b"\0").decode(errors="replace")
