"""RecordBatch v2 records: the builder a producer appends to, and the reader a consumer iterates.

A batch is the 61-byte header (``batch_descriptor``) followed by its records, back to
back (or by one compressed blob of them, see ``compression``). Each record::

    length          varint   bytes after this field, up to the end of the headers
    attributes      int8     unused, always 0
    timestampDelta  varlong  timestamp - baseTimestamp (may be negative)
    offsetDelta     varint   offset - baseOffset (0, 1, 2 ... in a producer's batch)
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value (a tombstone)
    value           bytes
    headerCount     varint
    headers         headerCount x (keyLength varint, key utf-8, valueLength varint, value)

How the builder keeps ``append()`` cheap in pure Python: it computes the record's exact
size from lookup tables (so its "None when full" answer is exact, the same
as kafka-python's and Kafka's), and keeps references to the record's timestamp and value
(keys and headers only once some record has them); ``build()`` encodes every record of the
batch at once and pays every per-batch cost once: one ``bytes.join``, one compression
call, one CRC-32C. A *plain* batch — null keys, no headers, values of one length, every
timestamp delta one varint byte: what a producer sends most — is its values interleaved
with per-record prefixes looked up whole from a cache keyed by (value length, timestamp
delta); any other batch has each field produced for all records by C-level ``map``/table
look-ups (``encode_records``). ``append_value()`` is the producer's hot path for the plain
record, with its owner's lock held around the check and the store.

Who may call what: a builder belongs to one producer (the accumulator lets appenders in one
at a time, then hands the batch to the sender, which builds it); it has no lock of its own.
A reader is a view over bytes its caller owns and does no I/O.
"""
from __future__ import annotations

import operator
from itertools import groupby, repeat
from operator import add, sub
from time import time_ns

from crc32c import crc32c

from segments.errors import CorruptRecordError
from segments.record import batch_descriptor as d
from segments.record.batch_header import BatchHeader, iter_batches
from segments.record.batch_parts import PARTS_FROM, BatchParts
from segments.record.builder_core import BUILDER_CORE, COMPILED
from segments.record.compression import codec_id, compress, decompress, records_size_limit
from segments.record.varint import (
    SIGNED_VARINT,
    SIGNED_VARINT_SIZE,
    SIZED,
    TABLE_SIZE,
    VARINT,
    VARINT_SIZE,
    decode_varint,
    encode_varint,
    size_of_varint,
)

#: A record's attributes byte (always 0).
RECORD_ATTRIBUTES = b"\x00"
#: The varint -1: the length of a null key or value.
NULL_LENGTH = b"\x01"
#: headerCount 0: the tail of a record without headers.
NO_HEADERS = b"\x00"
#: Upper bound of a record's bytes besides key, value and headers: length (5), attributes
#: (1), timestampDelta (10), offsetDelta (5) — kafka-python's and Kafka's figure.
MAX_RECORD_OVERHEAD = 21

# Tables that fold the constant bytes of a record into a neighbouring variable field, so a
# record with a null key and no headers is five parts in the final join: [(previous
# record's headerCount 0 +) length + attributes, timestampDelta, offsetDelta + null key
# length, valueLength, value].
_LENGTH_ATTRIBUTES = [VARINT[n] + RECORD_ATTRIBUTES for n in range(TABLE_SIZE)]
_NO_HEADERS_LENGTH_ATTRIBUTES = [NO_HEADERS + part for part in _LENGTH_ATTRIBUTES]
_OFFSET_DELTA_NULL_KEY = [VARINT[n] + NULL_LENGTH for n in range(TABLE_SIZE)]
#: Largest timestamp delta (either way) one varint byte holds: zigzag(-64) = 127.
_ONE_BYTE_DELTA = 63


def as_bytes(data, what):
    """A bytes snapshot of a buffer-protocol object (the caller may reuse its buffer)."""
    try:
        with memoryview(data) as view:
            return view.tobytes()
    except TypeError:
        raise TypeError(
            f"{what} must be bytes-like (bytes, bytearray, memoryview) or None, "
            f"found {type(data).__name__}") from None


def _as_timestamp(timestamp):
    try:
        return operator.index(timestamp)
    except TypeError:
        raise TypeError(
            f"timestamp must be an int (milliseconds since the epoch) or None, "
            f"found {type(timestamp).__name__} {timestamp!r}") from None


def encode_headers(headers):
    """headerCount and the headers of one record, as bytes.

    ``headers`` is a sequence of ``(key, value)``: key a str (written as UTF-8), value
    bytes-like or None. A key's length and UTF-8 bytes are encoded once and kept
    (``_KEY_PREFIXES``, at most ``KEY_PREFIX_CACHE`` keys): records of one producer carry
    the same few header keys.
    """
    parts = [encode_varint(len(headers))]
    for key, value in headers:
        try:
            prefix = _KEY_PREFIXES.get(key)
        except TypeError:  # unhashable: not a str, refused below
            prefix = None
        parts.append(_key_prefix(key) if prefix is None else prefix)
        if value is None:
            parts.append(NULL_LENGTH)
        else:
            if value.__class__ is not bytes:
                value = as_bytes(value, f"value of header {key!r}")
            size = len(value)
            parts.append(_SMALL_LENGTHS[size] if size < _SMALL else encode_varint(size))
            parts.append(value)
    return b"".join(parts)


#: Header keys kept encoded by ``encode_headers`` (key -> length varint + UTF-8 bytes).
KEY_PREFIX_CACHE = 1024
_KEY_PREFIXES: dict = {}
#: The one-byte zigzag varints of the lengths 0..63.
_SMALL = 64
_SMALL_LENGTHS = [bytes([size << 1]) for size in range(_SMALL)]


def _key_prefix(key):
    if not isinstance(key, str):
        raise TypeError(f"header key must be a str, found {type(key).__name__} {key!r}")
    raw = key.encode("utf-8")
    prefix = encode_varint(len(raw)) + raw
    if len(_KEY_PREFIXES) < KEY_PREFIX_CACHE:
        _KEY_PREFIXES[key] = prefix
    return prefix


def field_size(item):
    """Bytes a nullable bytes field takes: its length varint and its bytes (1 for null)."""
    if item is None:
        return 1
    size = len(item)
    return SIZED[size] if size < TABLE_SIZE else size + size_of_varint(size)


def record_body_size(timestamp_delta, offset_delta, key, value, suffix):
    """A record's length field: its bytes after the length varint.

    ``suffix`` is the encoded headerCount + headers (``NO_HEADERS`` when there are none).
    """
    return (1 + size_of_varint(timestamp_delta) + size_of_varint(offset_delta)
            + field_size(key) + field_size(value) + len(suffix))


def _varints(numbers):
    return [VARINT[n] if 0 <= n < TABLE_SIZE else encode_varint(n) for n in numbers]


def encode_records(timestamps, keys, values, suffixes, bodies):
    """Encode the records of one batch; return ``(bytes, max timestamp)``.

    Five lists, one entry per record in offset order (offset delta = index): timestamps
    (the deltas are taken from the first), keys and values (bytes or None), suffixes (the
    encoded headers, ``encode_headers``, or ``NO_HEADERS``) and bodies (each record's length
    field, ``record_body_size``).

    Every field is produced for all records at once — C-level ``map`` over lookup tables
    when the numbers are in the tables, a comprehension otherwise — then laid out with one
    ``bytes.join``.
    """
    count = len(timestamps)
    base_timestamp = timestamps[0]
    max_timestamp = max(timestamps)
    plain = suffixes.count(NO_HEADERS) == count
    fields = []

    # length (+ attributes); without headers, each record's headerCount 0 rides in front of
    # the next record's length, and the last one is appended after the join.
    try:
        if plain:
            lengths = list(map(_NO_HEADERS_LENGTH_ATTRIBUTES.__getitem__, bodies))
            lengths[0] = _LENGTH_ATTRIBUTES[bodies[0]]
        else:
            lengths = list(map(_LENGTH_ATTRIBUTES.__getitem__, bodies))
    except IndexError:
        lengths = [part + RECORD_ATTRIBUTES for part in _varints(bodies)]
        if plain:
            lengths[1:] = [NO_HEADERS + part for part in lengths[1:]]
    fields.append(lengths)

    if max_timestamp == base_timestamp and min(timestamps) == base_timestamp:
        fields.append([VARINT[0]] * count)
    else:
        try:
            fields.append(list(map(SIGNED_VARINT.__getitem__,
                                   map(sub, timestamps, repeat(base_timestamp, count)))))
        except KeyError:
            fields.append([encode_varint(timestamp - base_timestamp)
                           for timestamp in timestamps])

    if keys[0] is None and keys.count(None) == count:
        fields.append(_OFFSET_DELTA_NULL_KEY[:count] if count <= TABLE_SIZE else
                      [part + NULL_LENGTH for part in _varints(range(count))])
    else:
        fields.append(VARINT[:count] if count <= TABLE_SIZE else _varints(range(count)))
        _append_length_prefixed(fields, keys)
    _append_length_prefixed(fields, values)

    if not plain:
        fields.append(suffixes)

    stride = len(fields)
    parts = [None] * (stride * count)
    for column, field in enumerate(fields):
        parts[column::stride] = field
    if plain:
        parts.append(NO_HEADERS)
    return b"".join(parts), max_timestamp


def _append_length_prefixed(fields, items):
    """Append to ``fields`` the length varints of ``items`` (bytes or None) and the items."""
    try:
        fields.append(list(map(VARINT.__getitem__, map(len, items))))
        fields.append(items)
    except (TypeError, IndexError):  # a None among them, or a length past the table
        fields.append([NULL_LENGTH if item is None else encode_varint(len(item))
                       for item in items])
        fields.append([b"" if item is None else item for item in items])


def pack_batch(payload, record_count, base_timestamp, max_timestamp, attributes, *,
               producer_id, producer_epoch, base_sequence, partition_leader_epoch,
               buffer=None):
    """Put the header in front of ``payload`` (the records or their compressed blob).

    Computes the CRC once, over the header's tail and the payload. Returns bytes, or a
    memoryview of ``buffer`` when the batch fits in it (written in place).
    """
    total, fields = _header_fields(
        (payload,), record_count, base_timestamp, max_timestamp, attributes,
        producer_id, producer_epoch, base_sequence, partition_leader_epoch)
    if buffer is not None and len(buffer) >= total:
        d.HEADER.pack_into(buffer, 0, *fields)
        buffer[d.HEADER_SIZE:total] = payload
        return memoryview(buffer)[:total]
    return d.HEADER.pack(*fields) + payload


def _header_fields(payload_parts, record_count, base_timestamp, max_timestamp, attributes,
                   producer_id, producer_epoch, base_sequence, partition_leader_epoch):
    """``(batch size, the fields of d.HEADER)`` of a batch whose records (or compressed
    blob) are ``payload_parts`` in turn: the CRC-32C is computed over the header's tail,
    then over each part."""
    tail = d.HEADER_AFTER_CRC.pack(
        attributes, record_count - 1, base_timestamp, max_timestamp, producer_id,
        producer_epoch, base_sequence, record_count)
    crc = crc32c(tail)
    total = d.HEADER_SIZE
    for part in payload_parts:
        crc = crc32c(part, crc)
        total += len(part)
    return total, (0, total - d.LOG_OVERHEAD, partition_leader_epoch, d.MAGIC, crc,
                   attributes, record_count - 1, base_timestamp, max_timestamp, producer_id,
                   producer_epoch, base_sequence, record_count)


class RecordBatchBuilder(BUILDER_CORE):
    """Accumulates records for one batch and encodes them, once, in ``build()``.

    Owned by one producer thread at a time (appends, then the sender's ``build()``); no
    lock. ``append()`` returns the record's offset delta, or None when the record would
    take the batch past ``batch_size`` (its uncompressed size, header included — Kafka's
    and kafka-python's rule); the first record is always accepted, however large. After
    ``build()`` the batch is closed: ``append()`` returns None, as for a full batch.

    ``compression_type`` is a codec id (0-4) or Kafka's name ('none', 'gzip', 'snappy',
    'lz4', 'zstd'). ``buffer``, when given, is a bytearray that ``build()`` encodes the
    batch into if it fits (a BufferPool's ``batch_size`` buffer); ``clock`` returns the
    time in milliseconds for records appended with ``timestamp=None``.

    What an append keeps: the timestamp and the value in two lists; keys and encoded
    headers in two more lists that exist only once a record has a key or headers (a
    *plain* batch — null keys, no headers, bytes values — never makes them).
    """

    # The per-record fields (count, room, base timestamp, plain and open flags, timestamp
    # and value lists) and append_value() are the base's: builder_core (compiled or not).
    __slots__ = (
        "_codec", "_batch_size", "_producer_id", "_producer_epoch", "_base_sequence",
        "_partition_leader_epoch", "_flags", "_buffer", "_clock", "_keys", "_suffixes",
        "_built")

    def __init__(self, compression_type=0, batch_size=16384, *, producer_id=-1,
                 producer_epoch=-1, base_sequence=-1, partition_leader_epoch=-1,
                 is_transactional=False, timestamp_type=0, buffer=None, clock=None):
        if timestamp_type not in (0, 1):
            raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), "
                             f"found {timestamp_type!r}")
        self._codec = codec_id(compression_type)
        self._batch_size = batch_size
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._partition_leader_epoch = partition_leader_epoch
        self._flags = ((d.TRANSACTIONAL_MASK if is_transactional else 0)
                       | (d.TIMESTAMP_TYPE_MASK if timestamp_type else 0))
        self._buffer = buffer
        self._clock = clock
        self._timestamps = []
        self._values = []
        self._keys = None      # one key per record, once some record has a key
        self._suffixes = None  # encoded headers per record, once some record has headers
        self._plain = True     # null keys, no headers and bytes values so far
        self._open = True      # until close_for_appends() (the full check covers the rest)
        self._count = 0
        self._room = batch_size - d.HEADER_SIZE  # bytes left before the batch is full
        self._base_timestamp = 0
        self._built = None

    def append(self, timestamp, key, value, headers=()):
        """Add a record; return its offset delta, or None if the batch is full (or built).

        ``timestamp``: ms since the epoch, or None for the clock's now. ``key``/``value``:
        bytes-like or None (non-bytes are copied). ``headers``: ``(str, bytes|None)`` pairs.
        """
        count = self._count
        if not count:
            return self._append_first(timestamp, key, value, headers)
        if timestamp is None:
            clock = self._clock
            timestamp = time_ns() // 1_000_000 if clock is None else clock()
        elif timestamp.__class__ is not int:
            timestamp = _as_timestamp(timestamp)
        if key is None and value.__class__ is bytes and not headers and self._plain:
            # The common record: attributes, null key and headerCount 0 take a byte each.
            try:
                body = (3 + SIGNED_VARINT_SIZE[timestamp - self._base_timestamp]
                        + VARINT_SIZE[count] + SIZED[len(value)])
                room = self._room - body - VARINT_SIZE[body]
            except (KeyError, IndexError):  # a number outside the tables
                body = record_body_size(timestamp - self._base_timestamp, count, None, value,
                                        NO_HEADERS)
                room = self._room - body - size_of_varint(body)
            if room < 0:
                return None
            self._room = room
            self._count = count + 1
            self._timestamps.append(timestamp)
            self._values.append(value)
            return count
        return self._append_any(count, timestamp, key, value, headers)

    def close_for_appends(self):
        """Refuse every later append (as for a full batch); ``build()`` still works."""
        self._open = False
        if self._room >= 0:
            self._batch_size -= self._room + 1  # size_in_bytes() stays what it is
            self._room = -1

    def _append_any(self, count, timestamp, key, value, headers):
        """append() for a record with a key, headers or a non-bytes value, or into a batch
        that holds such records."""
        if value is not None and value.__class__ is not bytes:
            value = as_bytes(value, "value")
        if key is not None and key.__class__ is not bytes:
            key = as_bytes(key, "key")
        suffix = encode_headers(headers) if headers else NO_HEADERS
        body = record_body_size(timestamp - self._base_timestamp, count, key, value, suffix)
        room = self._room - body - size_of_varint(body)
        if room < 0:
            return None
        self._room = room
        self._keep(count, timestamp, key, value, suffix)
        return count

    def _append_first(self, timestamp, key, value, headers):
        """The first record: it sets baseTimestamp and fits whatever its size (unless the
        builder was closed for appends)."""
        if not self._open:
            return None
        if timestamp is None:
            timestamp = time_ns() // 1_000_000 if self._clock is None else self._clock()
        else:
            timestamp = _as_timestamp(timestamp)
        if key is not None and key.__class__ is not bytes:
            key = as_bytes(key, "key")
        if value is not None and value.__class__ is not bytes:
            value = as_bytes(value, "value")
        suffix = encode_headers(headers) if headers else NO_HEADERS
        body = 3 + field_size(key) + field_size(value) + len(suffix)  # deltas 0: 1 byte each
        self._room -= body + size_of_varint(body)
        self._base_timestamp = timestamp
        self._keep(0, timestamp, key, value, suffix)
        return 0

    def _keep(self, count, timestamp, key, value, suffix):
        """Store record ``count`` (it fits), making the key and header lists when the
        first key or headers arrive."""
        self._count = count + 1
        self._timestamps.append(timestamp)
        self._values.append(value)
        if key is not None and self._keys is None:
            self._keys = [None] * count
        if self._keys is not None:
            self._keys.append(key)
        if suffix is not NO_HEADERS and self._suffixes is None:
            self._suffixes = [NO_HEADERS] * count
        if self._suffixes is not None:
            self._suffixes.append(suffix)
        if value is None or self._keys is not None or self._suffixes is not None:
            self._plain = False

    @staticmethod
    def estimate_size_in_bytes(key, value, headers=()):
        """Upper bound of the size of a batch holding just this record."""
        size = d.HEADER_SIZE + MAX_RECORD_OVERHEAD
        size += 1 if key is None else len(key) + size_of_varint(len(key))
        size += 1 if value is None else len(value) + size_of_varint(len(value))
        return size + (len(encode_headers(headers)) if headers else 1)

    def set_producer_state(self, producer_id, producer_epoch, base_sequence,
                           is_transactional=False):
        """Set the idempotence fields (the sender assigns sequences when it drains)."""
        if self._built is not None:
            raise ValueError("the batch is already built; its producer state is in its CRC")
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._flags = ((self._flags & ~d.TRANSACTIONAL_MASK)
                       | (d.TRANSACTIONAL_MASK if is_transactional else 0))

    @property
    def record_count(self):
        return self._count

    def size_in_bytes(self):
        """Bytes of the batch: uncompressed so far, or as built once ``build()`` ran."""
        if self._built is not None:
            return len(self._built)
        return self._batch_size - self._room

    def build(self):
        """Encode the batch (baseOffset 0) and return it; later calls return the same bytes.

        Returns a memoryview of ``buffer`` when one was given and the batch fits in it,
        bytes otherwise. Raises ValueError if no record was appended.
        """
        if self._built is not None:
            return self._built
        count = self._count
        if not count:
            raise ValueError("cannot build a batch with no records")
        timestamps = self._timestamps
        base_timestamp = self._base_timestamp
        encoded = _ENCODE_PLAIN(timestamps, self._values) if self._plain else None
        if encoded is None:
            keys = self._keys or [None] * count
            suffixes = self._suffixes or [NO_HEADERS] * count
            encoded = encode_records(timestamps, keys, self._values, suffixes,
                                     _record_bodies(timestamps, keys, self._values, suffixes))
        payload, max_timestamp = encoded
        if self._codec:
            payload = compress(self._codec, payload)
        self._built = pack_batch(
            payload, count, base_timestamp, max_timestamp,
            self._flags | self._codec, producer_id=self._producer_id,
            producer_epoch=self._producer_epoch, base_sequence=self._base_sequence,
            partition_leader_epoch=self._partition_leader_epoch, buffer=self._buffer)
        self._timestamps = self._values = self._keys = self._suffixes = None
        self._room = -1  # closed: every append answers "full"
        return self._built

    def build_parts(self):
        """``build()``, except that a batch of one uncompressed record whose value is
        ``PARTS_FROM`` bytes or more comes back as a ``BatchParts`` (the header and the
        record's leading fields, the value itself, the record's headers), the value not
        copied: a producer copies it once, into the request (``batch_parts``). Later calls
        (and ``build()``) return the same object."""
        if self._built is None and self._count == 1 and not self._codec:
            value = self._values[0]
            if value is not None and len(value) >= PARTS_FROM:
                key = self._keys[0] if self._keys is not None else None
                suffix = self._suffixes[0] if self._suffixes is not None else NO_HEADERS
                body = record_body_size(0, 0, key, value, suffix)
                lead = b"".join((
                    encode_varint(body), RECORD_ATTRIBUTES, VARINT[0], VARINT[0],
                    NULL_LENGTH if key is None else encode_varint(len(key)) + key,
                    encode_varint(len(value))))
                timestamp = self._base_timestamp
                _, fields = _header_fields(
                    (lead, value, suffix), 1, timestamp, timestamp, self._flags,
                    self._producer_id, self._producer_epoch, self._base_sequence,
                    self._partition_leader_epoch)
                self._built = BatchParts((d.HEADER.pack(*fields) + lead, value, suffix))
                self._timestamps = self._values = self._keys = self._suffixes = None
                self._room = -1
        return self.build()

    def __repr__(self):
        return (f"RecordBatchBuilder(records={self._count}, size={self.size_in_bytes()}, "
                f"codec={self._codec}, built={self._built is not None})")


def _record_bodies(timestamps, keys, values, suffixes):
    """Each record's length field (``record_body_size``), for all records at once."""
    count = len(timestamps)
    base = timestamps[0]
    try:
        bodies = list(map(SIGNED_VARINT_SIZE.__getitem__,
                          map(sub, timestamps, repeat(base, count))))
    except KeyError:
        bodies = [size_of_varint(timestamp - base) for timestamp in timestamps]
    offsets = VARINT_SIZE[:count] if count <= TABLE_SIZE else map(size_of_varint, range(count))
    bodies = map(add, bodies, map(add, offsets, repeat(1, count)))  # attributes: 1 byte
    bodies = map(add, bodies, map(field_size, keys))
    bodies = map(add, bodies, map(field_size, values))
    return list(map(add, bodies, map(len, suffixes)))  # headerCount and headers


# -- the plain batch: null keys, no headers, bytes values of one length --------------------------
#
# Such a record is [length, attributes, timestampDelta, offsetDelta, keyLength -1,
# valueLength] then the value, then headerCount 0. Everything but the value depends only on
# (value length, timestampDelta, offsetDelta), so it is looked up: _PLAIN_PREFIXES[(length,
# delta)][offset delta] holds those bytes, each (but the first) led by the previous record's
# headerCount 0. A batch is then its prefixes and values interleaved, one join.

#: Most (value length, timestamp delta) prefix lists kept, and longest list (offset deltas).
_PLAIN_CACHE_KEYS = 256
_PLAIN_MAX_RECORDS = TABLE_SIZE
_PLAIN_PREFIXES = {}


def _plain_prefixes(length, delta, count):
    """The prefix bytes of records 0..count-1 of a plain batch with ``length``-byte values
    and timestamp delta ``delta`` (one varint byte); cached, grown on demand."""
    key = (length, delta)
    prefixes = _PLAIN_PREFIXES.get(key)
    if prefixes is None or len(prefixes) < count:
        start = 0 if prefixes is None else len(prefixes)
        tail = NULL_LENGTH + VARINT[length]
        delta_byte = SIGNED_VARINT[delta]
        fresh = [
            (NO_HEADERS if n else b"") + VARINT[4 + VARINT_SIZE[n] + SIZED[length]]
            + RECORD_ATTRIBUTES + delta_byte + VARINT[n] + tail
            for n in range(start, max(count, 2 * start))]
        prefixes = fresh if prefixes is None else prefixes + fresh
        if len(_PLAIN_PREFIXES) >= _PLAIN_CACHE_KEYS:
            _PLAIN_PREFIXES.clear()
        _PLAIN_PREFIXES[key] = prefixes  # a new list: readers of the old one are unaffected
    return prefixes


def _encode_plain(timestamps, values):
    """``(records as bytes, max timestamp)`` of a plain batch, or None when it is not of the
    shape the prefix tables cover (values of one length under the tables' size, every
    timestamp delta one varint byte, at most _PLAIN_MAX_RECORDS records)."""
    count = len(values)
    length = len(values[0])
    base = timestamps[0]
    if (count > _PLAIN_MAX_RECORDS or length + 8 >= TABLE_SIZE
            or list(map(len, values)).count(length) != count):
        return None
    max_timestamp = max(timestamps)
    if max_timestamp - base > _ONE_BYTE_DELTA or min(timestamps) - base < -_ONE_BYTE_DELTA - 1:
        return None
    if timestamps.count(base) == count:
        prefixes = _plain_prefixes(length, 0, count)[:count]
    else:
        prefixes = []
        start = 0
        for timestamp, run in groupby(timestamps):
            stop = start + len(list(run))
            prefixes += _plain_prefixes(length, timestamp - base, stop)[start:stop]
            start = stop
    parts = [NO_HEADERS] * (2 * count + 1)
    parts[0:-1:2] = prefixes
    parts[1::2] = values
    return b"".join(parts), max_timestamp


#: build()'s encoder of a plain batch's records: the compiled one (every plain batch whose
#: timestamps are within ±2**62; builder_core) when it is built, else _encode_plain. Either
#: answers None for a batch it does not cover, which encode_records then encodes.
_ENCODE_PLAIN = _encode_plain if COMPILED is None else COMPILED.encode_plain


# -- reading ------------------------------------------------------------------------------------

class Record(tuple):
    """One decoded record: offset, timestamp, timestamp_type, key, value, headers.

    A tuple (cheap to make; unpacks like one); headers is a list of ``(str, bytes|None)``.
    """

    __slots__ = ()
    _fields = ("offset", "timestamp", "timestamp_type", "key", "value", "headers")

    offset = property(operator.itemgetter(0))
    timestamp = property(operator.itemgetter(1))
    #: 0 = CreateTime, 1 = LogAppendTime (then ``timestamp`` is the batch's maxTimestamp).
    timestamp_type = property(operator.itemgetter(2))
    key = property(operator.itemgetter(3))
    value = property(operator.itemgetter(4))
    headers = property(operator.itemgetter(5))

    def __repr__(self):
        return "Record(" + ", ".join(f"{name}={value!r}"
                                     for name, value in zip(self._fields, self)) + ")"


class RecordBatch:
    """A reader over the batch at ``position`` in ``buf`` (any buffer-protocol object).

    ``header`` is its BatchHeader; ``validate()`` checks framing and CRC (CorruptRecordError
    naming stored and computed CRC); iterating decodes the records one at a time,
    decompressing the payload first when the batch is compressed — to at most
    ``records_size_limit(recordCount, max_record_bytes)`` bytes (a broker passes
    max.message.bytes). A view: whoever owns ``buf`` owns it; no I/O, no lock.
    """

    __slots__ = ("header", "_buf", "_max_record_bytes")

    def __init__(self, buf, position=0, max_record_bytes=None):
        self.header = BatchHeader(buf, position)
        self._buf = buf
        self._max_record_bytes = max_record_bytes

    def validate(self):
        self.header.validate()

    def __len__(self):
        return self.header.record_count

    def __iter__(self):
        header = self.header
        start = header.position + d.RECORDS_OFFSET
        end = header.position + header.size_in_bytes
        header.validate(check_crc=False)  # magic and lengths, before trusting them
        buf = self._buf
        if (not header.compression_type and buf.__class__ is bytes
                and end - start >= PARTS_FROM):  # a large value: sliced from buf, once
            return _decode_records(buf, header, start, end)
        with memoryview(buf) as view:
            data = view[start:end].tobytes()
        if header.compression_type:
            data = decompress(header.compression_type, data,
                              records_size_limit(header.record_count, self._max_record_bytes),
                              header.base_offset)
        return _decode_records(data, header)

    def __repr__(self):
        return f"RecordBatch({self.header!r})"


def _decode_records(data, header, pos=0, end=None):
    """Yield the Records in ``data`` (bytes: the plain records of the batch ``header``, or
    a buffer holding them from ``pos`` to ``end``)."""
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    timestamp_type = header.timestamp_type
    log_append_time = header.max_timestamp if timestamp_type else None
    make = tuple.__new__
    if end is None:
        end = len(data)
    index = 0
    for index in range(header.record_count):
        try:
            byte = data[pos]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                length, pos = decode_varint(data, pos)
            start = pos
            pos += 1  # attributes
            byte = data[pos]
            if byte < 0x80:
                timestamp_delta = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                timestamp_delta, pos = decode_varint(data, pos)
            byte = data[pos]
            if byte < 0x80:
                offset_delta = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                offset_delta, pos = decode_varint(data, pos)
            byte = data[pos]
            if byte < 0x80:
                size = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                size, pos = decode_varint(data, pos)
            if size >= 0:
                key = data[pos:pos + size]
                pos += size
            elif size == -1:
                key = None
            else:
                raise CorruptRecordError(f"key length {size}")
            byte = data[pos]
            if byte < 0x80:
                size = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                size, pos = decode_varint(data, pos)
            if size >= 0:
                value = data[pos:pos + size]
                pos += size
            elif size == -1:
                value = None
            else:
                raise CorruptRecordError(f"value length {size}")
            if data[pos]:
                headers, pos = _decode_headers(data, pos)
            else:
                headers = []
                pos += 1
        except IndexError:
            raise CorruptRecordError(
                f"batch at offset {base_offset}: record {index} runs past the end of the "
                f"records ({end} bytes)") from None
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"batch at offset {base_offset}: record {index}: {exc}") from None
        if pos - start != length or pos > end:
            raise CorruptRecordError(
                f"batch at offset {base_offset}: record {index} has length {length} but its "
                f"fields take {pos - start} bytes ({end - start} left in the batch)")
        yield make(Record, (
            base_offset + offset_delta,
            base_timestamp + timestamp_delta if log_append_time is None else log_append_time,
            timestamp_type, key, value, headers))
    if pos != end:
        raise CorruptRecordError(
            f"batch at offset {base_offset}: {end - pos} bytes left after its "
            f"{header.record_count} records")


def _decode_headers(data, pos):
    count, pos = decode_varint(data, pos)
    if count < 0:
        raise CorruptRecordError(f"header count {count}")
    headers = []
    end = len(data)
    for _ in range(count):
        size, pos = decode_varint(data, pos)
        if size < 0 or pos + size > end:
            raise CorruptRecordError(f"header key length {size} at position {pos}")
        try:
            key = data[pos:pos + size].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"header key is not UTF-8: {exc}") from None
        pos += size
        size, pos = decode_varint(data, pos)
        if size >= 0:
            if pos + size > end:
                raise CorruptRecordError(f"header value length {size} at position {pos}")
            value = data[pos:pos + size]
            pos += size
        elif size == -1:
            value = None
        else:
            raise CorruptRecordError(f"header value length {size}")
        headers.append((key, value))
    return headers, pos


def iter_records(buf, position=0, end=None, check_crc=True):
    """Yield the Records of every whole batch in ``buf[position:end]`` (a fetch response's
    records), skipping a partial batch at the end; ``check_crc`` validates each batch first.
    """
    for header in iter_batches(buf, position, end):
        batch = RecordBatch(buf, header.position)
        if check_crc:
            batch.validate()
        yield from batch
