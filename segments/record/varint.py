"""Zigzag varints, the integer encoding inside RecordBatch v2 records.

A record's length, timestamp delta, offset delta, key/value lengths and header fields are
zigzag-encoded (``(n << 1) ^ (n >> 63)``, so small negative numbers stay short: -1 is one
byte) and then written seven bits at a time, least significant group first, with the high
bit set on every byte but the last (protobuf's ``sint64``). A length of -1 means null.

Besides the scalar functions, this module holds lookup tables that let the record builder
turn the common small numbers into sizes and bytes with one C-level index operation
(``map(VARINT.__getitem__, lengths)``) instead of a Python loop per record; numbers
outside the tables go through the scalar functions. The tables cost about 0.6 MB per
process (and ``records`` adds 0.5 MB of its own). Pure functions and read-only tables: any
thread may call them.
"""
from __future__ import annotations

from segments.errors import CorruptRecordError

#: Non-negative numbers below this are looked up in the list tables below (lengths, offset
#: deltas, record sizes).
TABLE_SIZE = 1 << 12
#: Signed numbers in ``(-SIGNED_TABLE_SIZE, SIGNED_TABLE_SIZE)`` are looked up in the dict
#: tables (timestamp deltas: a second either way).
SIGNED_TABLE_SIZE = 1 << 10
#: Longest encoding of a 64-bit number.
MAX_VARLONG_SIZE = 10


def zigzag(value):
    """Map a signed 64-bit integer onto an unsigned one: 0, -1, 1, -2 ... -> 0, 1, 2, 3 ..."""
    return (value << 1) ^ (value >> 63)


def size_of_varint(value):
    """Bytes the zigzag varint encoding of ``value`` takes (1 to 10)."""
    unsigned = (value << 1) ^ (value >> 63)
    size = 1
    while unsigned > 0x7F:
        unsigned >>= 7
        size += 1
    return size


def encode_varint(value):
    """The zigzag varint encoding of ``value`` as bytes."""
    unsigned = (value << 1) ^ (value >> 63)
    out = bytearray()
    while unsigned > 0x7F:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


def decode_varint(buf, pos):
    """Read a zigzag varint at ``buf[pos]``; return ``(value, position after it)``.

    Raises CorruptRecordError when the buffer ends inside the number or when it runs
    past ``MAX_VARLONG_SIZE`` bytes.
    """
    unsigned = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise CorruptRecordError(f"varint runs past the end of the data at position {pos}")
        byte = buf[pos]
        pos += 1
        unsigned |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (unsigned >> 1) ^ -(unsigned & 1), pos
        shift += 7
        if shift >= 7 * MAX_VARLONG_SIZE:
            raise CorruptRecordError(
                f"varint longer than {MAX_VARLONG_SIZE} bytes ending at position {pos}")


# -- lookup tables (index = the number; all entries for 0 <= n < TABLE_SIZE) -----------------

#: VARINT_SIZE[n]: size_of_varint(n).
VARINT_SIZE = [size_of_varint(n) for n in range(TABLE_SIZE)]
#: SIZED[n]: bytes taken by an n-byte field behind its varint length (n + VARINT_SIZE[n]).
SIZED = [n + VARINT_SIZE[n] for n in range(TABLE_SIZE)]
#: VARINT[n]: encode_varint(n).
VARINT = [encode_varint(n) for n in range(TABLE_SIZE)]
#: SIGNED_VARINT_SIZE[n] and SIGNED_VARINT[n] for -SIGNED_TABLE_SIZE < n < SIGNED_TABLE_SIZE
#: (dicts, so a number outside is a KeyError rather than a list index from the end).
SIGNED_VARINT_SIZE = {n: size_of_varint(n)
                      for n in range(-SIGNED_TABLE_SIZE + 1, SIGNED_TABLE_SIZE)}
SIGNED_VARINT = {n: VARINT[n] if n >= 0 else encode_varint(n)
                 for n in range(-SIGNED_TABLE_SIZE + 1, SIGNED_TABLE_SIZE)}
