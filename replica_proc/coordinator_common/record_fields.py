"""The field encodings of the coordinators' records (``__consumer_offsets``,
``__transaction_state``): Kafka's generated-message primitives, as ``MessageUtil`` and
``ByteBufferAccessor`` write and read them.

Integers are big-endian two's complement (int8 ... int64). Non-flexible versions: a string
is an int16 length + UTF-8 (-1 = null, where nullable), bytes an int32 length + data, an
array an int32 count + elements (-1 = null, where nullable). Flexible versions (``compact_``
methods): lengths and counts are unsigned varints of the value + 1 (0 = null), and every
structure ends with a tagged-field section: an unsigned varint count, then per field its
tag, its size (unsigned varints) and its bytes, in increasing tag order.

``FieldReader`` raises ValueError naming ``what`` (the record kind and version, set by the
caller), the byte position and what was wrong, for bytes that do not parse: a truncated
field, a negative length, a count larger than the bytes left, bad UTF-8, trailing bytes.

Pure code: any thread.
"""
from __future__ import annotations

import struct

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
#: The longest unsigned varint read (an int32's is at most 5 bytes).
_MAX_UVARINT_SHIFT = 28


class FieldWriter:
    """Appends fields to ``out`` (a bytearray)."""

    def __init__(self):
        self.out = bytearray()

    def i8(self, value):
        self.out += _I8.pack(value)

    def i16(self, value):
        self.out += _I16.pack(value)

    def i32(self, value):
        self.out += _I32.pack(value)

    def i64(self, value):
        self.out += _I64.pack(value)

    def uvarint(self, value):
        if value < 0:
            raise ValueError(f"an unsigned varint cannot hold {value}")
        while value > 0x7F:
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7
        self.out.append(value)

    def string(self, value, nullable=False):
        data = self._utf8(value, nullable)
        if data is None:
            self.i16(-1)
            return
        if len(data) > 0x7FFF:
            raise ValueError(f"string field of {len(data)} bytes; at most 32767")
        self.i16(len(data))
        self.out += data

    def compact_string(self, value, nullable=False):
        data = self._utf8(value, nullable)
        if data is None:
            self.uvarint(0)
            return
        if len(data) > 0x7FFF:
            raise ValueError(f"string field of {len(data)} bytes; at most 32767")
        self.uvarint(len(data) + 1)
        self.out += data

    @staticmethod
    def _utf8(value, nullable):
        if value is None:
            if not nullable:
                raise ValueError("a non-nullable string field is None")
            return None
        return value.encode("utf-8")

    def bytes(self, value):
        self.i32(len(value))
        self.out += value

    def count(self, items):
        """The int32 count of an array (-1 for None)."""
        self.i32(-1 if items is None else len(items))

    def compact_count(self, items):
        """The unsigned varint count + 1 of a compact array (0 for None)."""
        self.uvarint(0 if items is None else len(items) + 1)

    def tagged_fields(self, fields):
        """A tagged-field section of ``fields``, [(tag, encoded bytes)] in tag order."""
        self.uvarint(len(fields))
        for tag, data in fields:
            self.uvarint(tag)
            self.uvarint(len(data))
            self.out += data


class FieldReader:
    """Reads fields from ``data``, from ``pos`` on (see the module doc)."""

    def __init__(self, data, what):
        self.data = memoryview(bytes(data))
        self.pos = 0
        self.what = what

    def _take(self, size):
        if self.pos + size > len(self.data):
            raise ValueError(f"{self.what}: truncated at byte {self.pos} (needs {size} more "
                             f"of {len(self.data)})")
        start = self.pos
        self.pos += size
        return self.data[start:self.pos]

    def i8(self):
        return _I8.unpack(self._take(1))[0]

    def i16(self):
        return _I16.unpack(self._take(2))[0]

    def i32(self):
        return _I32.unpack(self._take(4))[0]

    def i64(self):
        return _I64.unpack(self._take(8))[0]

    def uvarint(self):
        start = self.pos
        value = shift = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > _MAX_UVARINT_SHIFT:
                raise ValueError(f"{self.what}: unsigned varint at byte {start} is longer "
                                 "than 5 bytes")

    def string(self, nullable=False):
        return self._text(self.i16(), 2, nullable)

    def compact_string(self, nullable=False):
        start = self.pos
        return self._text(self.uvarint() - 1, self.pos - start, nullable)

    def _text(self, size, prefix, nullable):
        if size < 0:
            if size == -1 and nullable:
                return None
            raise ValueError(f"{self.what}: string length {size} at byte {self.pos - prefix}")
        try:
            return bytes(self._take(size)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{self.what}: string at byte {self.pos - size} is not UTF-8: "
                             f"{exc.reason}") from None

    def bytes(self):
        size = self.i32()
        if size < 0:
            raise ValueError(f"{self.what}: bytes length {size} at byte {self.pos - 4}")
        return bytes(self._take(size))

    def count(self, nullable=False):
        """An array's int32 count (None for a null array, where nullable)."""
        return self._count(self.i32(), 4, nullable)

    def compact_count(self, nullable=False):
        """A compact array's count (None for a null array, where nullable)."""
        start = self.pos
        return self._count(self.uvarint() - 1, self.pos - start, nullable)

    def _count(self, count, prefix, nullable):
        if count == -1 and nullable:
            return None
        if count < 0 or count > len(self.data) - self.pos:
            raise ValueError(f"{self.what}: array count {count} at byte {self.pos - prefix}")
        return count

    def tagged_fields(self):
        """{tag: FieldReader over the field's bytes} of a tagged-field section."""
        fields = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            field = FieldReader(self._take(size), f"{self.what} tagged field {tag}")
            fields[tag] = field
        return fields

    def end(self):
        if self.pos != len(self.data):
            raise ValueError(f"{self.what}: {len(self.data) - self.pos} trailing byte(s) "
                             f"after byte {self.pos}")
