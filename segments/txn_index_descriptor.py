"""Binary layout of the transaction index, ``<base offset>.txnindex`` (Kafka's AbortedTxn).

The file is an array of fixed-size, big-endian entries, one per transaction aborted by
an ABORT marker in the segment, in the order the markers were appended (so
``lastOffset`` strictly increases), with no file header, no checksum and no count: the
number of entries is the file's length divided by the entry size. Like the other
indexes it is derived from the log, and rebuilt from it when it does not parse. Unlike
them it is not preallocated, and it exists only once a segment holds an aborted
transaction's marker. ::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-------------------------------+-------------------------------+
    |      version (int16) = 0      |  producerId (int64) ...       |  @0, @2
    +-------------------------------+                               +
    |                                                               |
    +-------------------------------+-------------------------------+
    |  ... producerId               |  firstOffset (int64) ...      |  @10: the
    +-------------------------------+                               +  transaction's
    |                                                               |  first offset
    +-------------------------------+-------------------------------+
    |  ... firstOffset              |  lastOffset (int64) ...       |  @18: its ABORT
    +-------------------------------+                               +  marker's offset
    |                                                               |
    +-------------------------------+-------------------------------+
    |  ... lastOffset               |  lastStableOffset (int64) ... |  @26: the LSO
    +-------------------------------+                               +  once the marker
    |                                                               |  was appended
    +-------------------------------+-------------------------------+
    |  ... lastStableOffset         |                                  @34: next entry
    +-------------------------------+

``lastStableOffset`` lets a search stop early: an entry whose LSO is at or past the end
of a fetched range proves that no transaction aborted later can have started inside it
(Kafka's TransactionIndex.collectAbortedTxns).
"""
from __future__ import annotations

import struct

VERSION_OFFSET = 0
PRODUCER_ID_OFFSET = VERSION_OFFSET + 2
FIRST_OFFSET_OFFSET = PRODUCER_ID_OFFSET + 8
LAST_OFFSET_OFFSET = FIRST_OFFSET_OFFSET + 8
LAST_STABLE_OFFSET_OFFSET = LAST_OFFSET_OFFSET + 8
ENTRY_SIZE = LAST_STABLE_OFFSET_OFFSET + 8

#: version, producerId, firstOffset, lastOffset, lastStableOffset.
ENTRY = struct.Struct(">hqqqq")
assert ENTRY.size == ENTRY_SIZE == 34

#: The entry version written and the newest read (Kafka's AbortedTxn.CURRENT_VERSION).
CURRENT_VERSION = 0
