"""Binary layout of a producer-state snapshot, ``<offset in 20 digits>.snapshot`` (Kafka's
ProducerSnapshot v1, ``storage/src/main/resources/message/ProducerSnapshot.json`` written
by ``ProducerStateManager.writeSnapshot``).

The file name is the offset the snapshot reflects: the state of every batch below it.
Everything is big-endian; a version-prefixed, non-flexible Kafka message::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-------------------------------+-------------------------------+
    |        version (int16) = 1    |        crc (uint32) ...       |  @0, @2
    +-------------------------------+-------------------------------+
    |        ... crc                |  entry count (int32) ...      |  @6
    +-------------------------------+-------------------------------+
    |  ... entry count              |  entries, 46 bytes each ...   |  @10
    +-------------------------------+-------------------------------+

    entry:  ProducerId            int64   @0
            Epoch                 int16   @8
            LastSequence          int32   @10
            LastOffset            int64   @14   last offset of the producer's last batch
            OffsetDelta           int32   @22   lastOffset - firstOffset of that batch
            Timestamp             int64   @26   the producer's last timestamp
            CoordinatorEpoch      int32   @34
            CurrentTxnFirstOffset int64   @38   -1: no transaction open

The CRC-32C covers the bytes from ``ENTRIES_OFFSET`` (the entry count) to the end of the
file. Only the producer's last batch is kept (Kafka's layout): after a load, a producer's
duplicate window is that one batch until it appends again.

Pure codec: bytes in, bytes or tuples out; no I/O.
"""
from __future__ import annotations

import struct

from crc32c import crc32c

from segments.errors import StorageError

VERSION = 1

VERSION_OFFSET = 0
CRC_OFFSET = VERSION_OFFSET + 2
ENTRIES_OFFSET = CRC_OFFSET + 4
FIRST_ENTRY_OFFSET = ENTRIES_OFFSET + 4

#: version, crc.
HEADER = struct.Struct(">hI")
COUNT = struct.Struct(">i")
#: ProducerId, Epoch, LastSequence, LastOffset, OffsetDelta, Timestamp, CoordinatorEpoch,
#: CurrentTxnFirstOffset.
ENTRY = struct.Struct(">qhiqiqiq")
assert HEADER.size == ENTRIES_OFFSET and ENTRY.size == 46

SUFFIX = ".snapshot"


class CorruptSnapshotError(StorageError):
    """A snapshot file that fails its strict parse or its CRC (Kafka:
    CorruptSnapshotException); the message says what was expected and what was found. A
    storage error, as ``CorruptIndexError``: the producer state is rebuilt from an older
    snapshot or the log."""


def encode(entries):
    """The bytes of a snapshot holding ``entries`` (tuples in ENTRY's field order)."""
    out = bytearray(FIRST_ENTRY_OFFSET + ENTRY.size * len(entries))
    COUNT.pack_into(out, ENTRIES_OFFSET, len(entries))
    position = FIRST_ENTRY_OFFSET
    for entry in entries:
        ENTRY.pack_into(out, position, *entry)
        position += ENTRY.size
    HEADER.pack_into(out, 0, VERSION, crc32c(memoryview(out)[ENTRIES_OFFSET:]))
    return bytes(out)


def decode(data):
    """The entries (tuples in ENTRY's field order) of the snapshot ``data``;
    CorruptSnapshotError unless version, length and CRC all check out."""
    if len(data) < FIRST_ENTRY_OFFSET:
        raise CorruptSnapshotError(f"{len(data)} bytes, shorter than the {FIRST_ENTRY_OFFSET}"
                                   f"-byte header")
    version, crc = HEADER.unpack_from(data, 0)
    if version != VERSION:
        raise CorruptSnapshotError(f"version {version}, expected {VERSION}")
    (count,) = COUNT.unpack_from(data, ENTRIES_OFFSET)
    expected = FIRST_ENTRY_OFFSET + ENTRY.size * count if count >= 0 else None
    if expected != len(data):
        raise CorruptSnapshotError(f"{count} entries need {expected} bytes, found {len(data)}")
    computed = crc32c(memoryview(data)[ENTRIES_OFFSET:])
    if computed != crc:
        raise CorruptSnapshotError(f"stored CRC {crc:#010x}, computed CRC {computed:#010x}")
    return [ENTRY.unpack_from(data, FIRST_ENTRY_OFFSET + n * ENTRY.size)
            for n in range(count)]


def file_name(offset):
    """``00000000000000000042.snapshot`` for offset 42."""
    return f"{offset:020d}{SUFFIX}"


def offset_of(name):
    """The offset of a snapshot file name, or None if ``name`` is not one."""
    if not name.endswith(SUFFIX):
        return None
    stem = name[:-len(SUFFIX)]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None
