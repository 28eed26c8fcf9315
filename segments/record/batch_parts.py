"""A record batch held as its parts, never joined: the header and the record's leading
fields, the caller's value itself, the record's headers.

What a producer builds for a batch of one large record (``RecordBatchBuilder.build_parts``:
one uncompressed record whose value is ``PARTS_FROM`` bytes or more, Kafka's case of a
record larger than ``batch.size``). Joining the batch would copy the value twice in the
producer (into one bytes object, then into the batch buffer) before the copy into the
request ring; held as parts, the value is copied once, by ``write_into``, from the
caller's bytes into the ring slot. The CRC-32C is computed over the parts in turn, the
same checksum as over the joined batch, so the bytes a broker reads are the bytes
``build()`` would have made.

The parts are immutable (bytes; the builder keeps a bytes snapshot of any other value),
so a retry writes the same batch again. ``joined()`` makes the one contiguous copy a
caller that needs it pays (a producer re-stamping an old batch's producer state).

Pure: no state beyond the parts; any thread.
"""
from __future__ import annotations

#: Values at least this long are sent as parts: below, the join costs less than the
#: Python that handles the parts.
PARTS_FROM = 64 * 1024


class BatchParts:
    """A batch as ``parts`` (bytes-like, in order). ``len()`` is the batch's size."""

    __slots__ = ("parts", "size")

    def __init__(self, parts):
        self.parts = tuple(parts)
        self.size = sum(map(len, self.parts))

    def __len__(self):
        return self.size

    def write_into(self, buf, position):
        """Copy the batch into ``buf`` (a writable memoryview of bytes) at ``position``;
        returns the end position."""
        for part in self.parts:
            end = position + len(part)
            buf[position:end] = part
            position = end
        return position

    def joined(self):
        """The batch as one bytearray (a copy)."""
        batch = bytearray(self.size)
        self.write_into(memoryview(batch), 0)
        return batch

    def __repr__(self):
        return f"BatchParts({self.size} bytes in {len(self.parts)} parts)"
