"""Binary layout of the two segment indexes, ``.index`` and ``.timeindex`` (Kafka's).

Both are arrays of fixed-size, big-endian entries sorted by their key, with no file
header, no checksum and no count: the number of entries is the valid length of the file
divided by the entry size. An index is never trusted blindly — after a crash it is
rebuilt from the ``.log`` it describes (see ``segment.Segment.recover``).

Offset index (``.index``), one entry every ``index.interval.bytes`` of log::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +---------------------------------------------------------------+
    |              relativeOffset (int32) = offset - baseOffset     |  @0
    +---------------------------------------------------------------+
    |              position (int32): byte of the batch in .log      |  @4
    +---------------------------------------------------------------+

The offset stored is the *last* offset of the batch that starts at ``position`` (as Kafka
does since 2.x), so a lookup for offset ``o`` finds the greatest entry <= ``o`` and scans
forward from that position to the first batch whose last offset is >= ``o``. Entries are
strictly increasing in both fields, which is what lets ``fetch`` search it by position
too.

Time index (``.timeindex``), appended next to the offset index when the largest timestamp
seen so far has grown::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +---------------------------------------------------------------+
    |                      timestamp (int64)                        |  @0
    |                   (largest so far in the segment)             |
    +---------------------------------------------------------------+
    |     relativeOffset (int32) of the batch holding that timestamp|  @8
    +---------------------------------------------------------------+

Timestamps are strictly increasing. A segment that stops being active appends one last
entry carrying its largest timestamp, so the last entry of a sealed segment's time index
is that segment's largest timestamp (retention by time reads only that entry).
"""
from __future__ import annotations

import struct

import numpy as np

# -- offset index entry --------------------------------------------------------------------
OFFSET_ENTRY_RELATIVE_OFFSET_OFFSET = 0
OFFSET_ENTRY_POSITION_OFFSET = OFFSET_ENTRY_RELATIVE_OFFSET_OFFSET + 4
OFFSET_ENTRY_SIZE = OFFSET_ENTRY_POSITION_OFFSET + 4

#: relativeOffset, position.
OFFSET_ENTRY = struct.Struct(">ii")
assert OFFSET_ENTRY.size == OFFSET_ENTRY_SIZE
#: The same entry as a numpy dtype, to check a whole index at once.
OFFSET_ENTRY_DTYPE = np.dtype([("offset", ">i4"), ("position", ">i4")])
assert OFFSET_ENTRY_DTYPE.itemsize == OFFSET_ENTRY_SIZE

# -- time index entry ----------------------------------------------------------------------
TIME_ENTRY_TIMESTAMP_OFFSET = 0
TIME_ENTRY_RELATIVE_OFFSET_OFFSET = TIME_ENTRY_TIMESTAMP_OFFSET + 8
TIME_ENTRY_SIZE = TIME_ENTRY_RELATIVE_OFFSET_OFFSET + 4

#: timestamp, relativeOffset.
TIME_ENTRY = struct.Struct(">qi")
assert TIME_ENTRY.size == TIME_ENTRY_SIZE
#: The same entry as a numpy dtype, to check a whole index at once.
TIME_ENTRY_DTYPE = np.dtype([("timestamp", ">i8"), ("offset", ">i4")])
assert TIME_ENTRY_DTYPE.itemsize == TIME_ENTRY_SIZE

#: Largest relative offset an entry can hold (int32): a segment rolls before exceeding it.
MAX_RELATIVE_OFFSET = 2**31 - 1
