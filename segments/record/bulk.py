"""Encode many records at once into RecordBatch v2 batches, vectorised with numpy.

``build_batches`` makes exactly the batches that appending the same records one by one to
``RecordBatchBuilder``s would make — same split by ``batch_size`` (the first record of a
batch always fits, the next one is refused when it would pass the limit), same bytes,
same CRCs — but pays per batch, not per record.

Two paths:

* **Rows** (the bulk-send shape): values are fixed-size rows (a 2-D uint8 array, or bytes
  of one length), keys null or fixed-size rows, no headers, and all timestamps within
  63 ms of each other (so every timestampDelta is one varint byte). Then a record's size
  depends only on its offset delta, every full batch holds the same number of records
  and has the same byte layout, and the output is one uint8 array of ``(batches, batch
  length)``, written about a megabyte of batches at a time (so each pass stays in cache):
  per run of equal-sized records (offset deltas 0-63, 64-8191, ...) one strided
  assignment per field writes that field of every record of every batch of the chunk;
  the 61 header bytes of those batches are columns of a structured numpy view; then one
  CRC-32C call per batch. Given an ``allocate``, batches of half a chunk or more are
  written straight into a buffer of their own from it, one at a time (the producer's
  pool buffers: no copy of the batch after it is built).
* **General** (anything else: nulls, varying lengths, headers, spread timestamps): record
  sizes are computed with numpy, a batch window at a time, to find each split, and each
  batch is encoded by ``records.encode_records`` — the builder's own encoder, which lays
  out all of a batch's records with C-level maps and one ``bytes.join``.

``generate_batches`` yields the same batches one at a time (each made when asked for).

Pure: takes values, returns batches; no I/O, no lock; any thread may call it.
"""
from __future__ import annotations

import functools
from time import time_ns

import numpy as np
from crc32c import crc32c

from segments.record import batch_descriptor as d
from segments.record.compression import codec_id, compress
from segments.record.records import (
    NO_HEADERS,
    NULL_LENGTH,
    RECORD_ATTRIBUTES,
    as_bytes,
    encode_headers,
    encode_records,
    field_size,
    pack_batch,
)
from segments.record.varint import encode_varint, size_of_varint

#: A zigzag varint of n bytes holds values below 2 ** (7 * n); the thresholds as uint64.
_VARINT_LIMITS = np.array([1 << (7 * n) for n in range(1, 10)], dtype=np.uint64)
#: Offset deltas and lengths below these take 1, 2, 3 ... varint bytes (zigzag doubles them).
_OFFSET_DELTA_LIMITS = [1 << (7 * n - 1) for n in range(1, 6)]
_LENGTH_LIMITS = np.array(_OFFSET_DELTA_LIMITS, dtype=np.int64)
#: Largest timestamp spread whose deltas all fit one varint byte: zigzag(±63) <= 127.
_ONE_BYTE_SPREAD = 63
_INT32_SPAN = 1 << 31
#: Bytes of batches the rows path encodes per pass (each field's pass then stays in cache).
_CHUNK_BYTES = 1 << 20
#: Batches of this many bytes or more go into a buffer of their own when the caller gives
#: an ``allocate`` (bigger than half a chunk: a chunk would hold one anyway).
_OWN_BYTES = _CHUNK_BYTES // 2 + 1
_BYTES_OR_NONE = {bytes, type(None)}

#: The header of one batch as a structured numpy record (big-endian, at Kafka's offsets).
_HEADER_FIELDS = [
    ("base_offset", ">i8", d.BASE_OFFSET_OFFSET),
    ("batch_length", ">i4", d.BATCH_LENGTH_OFFSET),
    ("partition_leader_epoch", ">i4", d.PARTITION_LEADER_EPOCH_OFFSET),
    ("magic", "i1", d.MAGIC_OFFSET),
    ("crc", ">u4", d.CRC_OFFSET),
    ("attributes", ">i2", d.ATTRIBUTES_OFFSET),
    ("last_offset_delta", ">i4", d.LAST_OFFSET_DELTA_OFFSET),
    ("base_timestamp", ">i8", d.BASE_TIMESTAMP_OFFSET),
    ("max_timestamp", ">i8", d.MAX_TIMESTAMP_OFFSET),
    ("producer_id", ">i8", d.PRODUCER_ID_OFFSET),
    ("producer_epoch", ">i2", d.PRODUCER_EPOCH_OFFSET),
    ("base_sequence", ">i4", d.BASE_SEQUENCE_OFFSET),
    ("record_count", ">i4", d.RECORD_COUNT_OFFSET),
]


@functools.lru_cache(maxsize=8)
def _header_dtype(batch_length):
    names, formats, offsets = zip(*_HEADER_FIELDS)
    return np.dtype({"names": list(names), "formats": list(formats),
                     "offsets": list(offsets), "itemsize": batch_length})


def varint_sizes(numbers):
    """Vectorised ``size_of_varint`` over an int64 array."""
    numbers = np.asarray(numbers, dtype=np.int64)
    unsigned = ((numbers << 1) ^ (numbers >> 63)).view(np.uint64)
    return np.searchsorted(_VARINT_LIMITS, unsigned, side="right") + 1


def next_sequence(base_sequence, increment):
    """Kafka's sequence arithmetic: int32 sequences wrap from 2**31 - 1 to 0."""
    return (base_sequence + increment) % _INT32_SPAN


def build_batches(values, keys=None, timestamps=None, headers=None, compression_type=0,
                  batch_size=16384, **fields):
    """The batches of ``generate_batches`` (same arguments) as a list."""
    return list(generate_batches(values, keys, timestamps, headers, compression_type,
                                 batch_size, **fields))


def generate_batches(values, keys=None, timestamps=None, headers=None, compression_type=0,
                     batch_size=16384, *, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                     partition_leader_epoch=-1, is_transactional=False, timestamp_type=0,
                     clock=None, allocate=None):
    """Encode ``values`` (with optional keys, timestamps, headers) into batches, yielded
    in order: by the rows path one chunk at a time as they are asked for, by the general
    path all made at the first (the arguments are checked before).

    ``values``: a 2-D uint8 array (one fixed-size value per row) or a sequence of
    bytes-like/None. ``keys``: None (all null), a 2-D uint8 array, or a sequence of
    bytes-like/None. ``timestamps``: None (one reading of ``clock``, ms, for all), an int,
    or one int per record. ``headers``: None or one ``[(str, bytes|None), ...]`` per
    record. Batches are split by ``batch_size`` as ``RecordBatchBuilder.append`` splits
    them; each has baseOffset 0 and, when ``base_sequence`` >= 0, the base sequence that
    follows the previous batch's records. Each batch is bytes-like: bytes, or on the rows
    path without compression a memoryview into one buffer shared by all the batches.

    ``allocate``: None, or a callable taking a byte count and returning a writable buffer
    of exactly that many bytes. The rows path without compression then writes each batch
    of ``_OWN_BYTES`` or more into a buffer of its own, asked for when that batch is made,
    and yields that very buffer (the caller tells it by identity); other batches are as
    without ``allocate``.
    """
    codec = codec_id(compression_type)
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp_type must be 0 or 1, found {timestamp_type!r}")
    count = len(values)
    if not count:
        return iter(())
    if keys is not None and len(keys) != count:
        raise ValueError(f"{len(keys)} keys for {count} values")
    value_rows = _Rows.of(values, "values")
    key_rows = None if keys is None else _Rows.of(keys, "keys")
    if timestamps is None:
        timestamps = time_ns() // 1_000_000 if clock is None else clock()
    if isinstance(timestamps, (int, np.integer)):  # one for all: a read-only view, no array
        stamps = np.broadcast_to(np.int64(timestamps), (count,))
        spread = 0
    else:
        stamps = np.asarray(timestamps, dtype=np.int64)
        if stamps.shape != (count,):
            raise ValueError(f"{len(stamps)} timestamps for {count} values")
        spread = int(stamps.max()) - int(stamps.min())
    suffixes = None  # the encoded headers of each record, when any record has headers
    if headers is not None:
        if len(headers) != count:
            raise ValueError(f"{len(headers)} headers for {count} values")
        suffixes = [encode_headers(h) if h else NO_HEADERS for h in headers]
        if suffixes.count(NO_HEADERS) == count:
            suffixes = None
    batch = _BatchFields(codec, producer_id, producer_epoch, base_sequence,
                         partition_leader_epoch, is_transactional, timestamp_type)
    if (value_rows is not None and (keys is None or key_rows is not None) and suffixes is None
            and spread <= _ONE_BYTE_SPREAD):
        try:
            value_rows.check_blocks()
        except _NotRows:
            pass
        else:
            return _build_rows(value_rows, key_rows, stamps, spread == 0, batch_size, batch,
                               None if codec else allocate)
    return iter(_build_general(values, keys, stamps, suffixes, batch_size, batch))


class _BatchFields:
    """The header fields every batch of one call shares."""

    __slots__ = ("codec", "attributes", "producer_id", "producer_epoch", "base_sequence",
                 "partition_leader_epoch")

    def __init__(self, codec, producer_id, producer_epoch, base_sequence,
                 partition_leader_epoch, is_transactional, timestamp_type):
        self.codec = codec
        self.attributes = (codec | (d.TRANSACTIONAL_MASK if is_transactional else 0)
                           | (d.TIMESTAMP_TYPE_MASK if timestamp_type else 0))
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.partition_leader_epoch = partition_leader_epoch

    def sequence(self, records_before):
        if self.base_sequence < 0:
            return self.base_sequence
        return next_sequence(self.base_sequence, records_before)

    def pack(self, payload, count, base_timestamp, max_timestamp, records_before):
        return pack_batch(
            payload, count, base_timestamp, max_timestamp, self.attributes,
            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            base_sequence=self.sequence(records_before),
            partition_leader_epoch=self.partition_leader_epoch)


class _NotRows(Exception):
    """A listed item's len() is not its byte count (say a memoryview of int32s)."""


class _Rows:
    """Fixed-size rows: a 2-D uint8 array, or a list of bytes-likes of one length."""

    __slots__ = ("items", "width")

    def __init__(self, items, width):
        self.items = items
        self.width = width

    @classmethod
    def of(cls, items, what):
        """The rows of ``items``, or None if they are not all of one length."""
        if isinstance(items, np.ndarray):
            if items.ndim != 2 or items.dtype != np.uint8:
                raise ValueError(f"{what} as an array must be 2-D uint8 (one row per record), "
                                 f"found {items.ndim}-D {items.dtype}")
            return cls(np.ascontiguousarray(items), items.shape[1])
        try:
            lengths = list(map(len, items))
        except TypeError:  # a None among them
            return None
        if lengths.count(lengths[0]) != len(lengths):
            return None
        return cls(items, lengths[0])

    def check_blocks(self):
        """Raise _NotRows unless each listed item's len() is its byte count (so ``block``
        holds for every range; a TypeError for an item that is not bytes-like)."""
        items = self.items
        if isinstance(items, np.ndarray) or set(map(type, items)) <= {bytes}:
            return
        for item in items:
            with memoryview(item) as view:
                if view.nbytes != self.width:
                    raise _NotRows

    def block(self, start, stop):
        """Rows start..stop-1 as a 2-D uint8 array."""
        if isinstance(self.items, np.ndarray):
            return self.items[start:stop]
        data = b"".join(self.items[start:stop])
        if len(data) != (stop - start) * self.width:
            raise _NotRows
        return np.frombuffer(data, dtype=np.uint8).reshape(stop - start, self.width)


# -- rows path ---------------------------------------------------------------------------------

def _build_rows(values, keys, stamps, uniform, batch_size, batch, allocate):
    count = len(stamps)
    value_width = values.width
    key_width = None if keys is None else keys.width
    key_part = 1 if keys is None else key_width + size_of_varint(key_width)
    # attributes, timestampDelta (1 byte), key, value, headerCount; then the offsetDelta
    content = 1 + 1 + key_part + value_width + size_of_varint(value_width) + 1
    limit = batch_size - d.HEADER_SIZE
    window = min(count, max(limit, 0) // (content + 2) + 1)
    offset_deltas = np.arange(window, dtype=np.int64)
    bodies = content + varint_sizes(offset_deltas)
    sizes = bodies + varint_sizes(bodies)
    per_batch = max(1, int(np.searchsorted(np.cumsum(sizes), limit, side="right")))
    full, last = divmod(count, per_batch)
    groups = []   # (batches, records in each)
    if full:
        groups.append((full, per_batch))
    if last:
        groups.append((1, last))
    layouts = [_layout(records, content, key_width, value_width) for _, records in groups]
    # batches of _OWN_BYTES or more go each into its own allocated buffer, the others
    # into one array
    owned = [allocate is not None and layout.length >= _OWN_BYTES for layout in layouts]
    shared = sum(n * layout.length for (n, _), layout, own in zip(groups, layouts, owned)
                 if not own)
    out = np.empty(shared, dtype=np.uint8) if shared else None
    position = 0  # in out
    first = 0     # index of the chunk's first record
    for (batch_count, records), layout, own in zip(groups, layouts, owned):
        length = layout.length
        # a chunk of about _CHUNK_BYTES at a time, so each pass stays in cache
        chunk = 1 if own else max(1, _CHUNK_BYTES // length)
        for done in range(0, batch_count, chunk):
            chunk_batches = min(chunk, batch_count - done)
            stop = first + chunk_batches * records
            if own:
                buffer = allocate(length)
                area = np.frombuffer(buffer, dtype=np.uint8).reshape(1, length)
            else:
                area = out[position:position + chunk_batches * length].reshape(
                    chunk_batches, length)
                position += chunk_batches * length
            shape = (chunk_batches, records)
            key_block = None if keys is None else keys.block(first, stop).reshape(
                *shape, key_width)
            stamp_block = stamps[first:stop].reshape(shape)
            layout.write(area[:, d.HEADER_SIZE:], key_block,
                         values.block(first, stop).reshape(*shape, value_width),
                         None if uniform else stamp_block)
            found = _finish(area, first, stamp_block, uniform, batch)
            yield from (buffer,) if own else found
            first = stop


@functools.lru_cache(maxsize=8)
def _layout(records, content, key_width, value_width):
    """The byte layout of the records of a rows-path batch of ``records`` records (cached:
    a bulk send makes many batches of one shape)."""
    return _Layout(records, content, key_width, value_width)


class _Layout:
    """Where the records of a rows-path batch lie and the bytes they share.

    ``template``: the batch's records area with every byte that is the same in every batch
    of this shape written (length, attributes, timestampDelta 0, offsetDelta, key and
    value lengths, headerCount 0); ``runs``: per run of equal-sized records (offset deltas
    0-63, 64-8191, ...) ``(first, stop, byte position, record size, column of the
    timestampDelta, column of the key)``; the value follows the key and its length."""

    __slots__ = ("length", "template", "runs", "value_lead")

    def __init__(self, records, content, key_width, value_width):
        key_length = NULL_LENGTH if key_width is None else encode_varint(key_width)
        value_length = encode_varint(value_width)
        self.value_lead = len(value_length)
        parts = []
        self.runs = []
        start = position = 0
        for limit in _OFFSET_DELTA_LIMITS:
            stop = min(limit, records)
            if start >= stop:
                continue
            offset_width = size_of_varint(start)
            lead = encode_varint(content + offset_width) + RECORD_ATTRIBUTES
            run = stop - start
            size = len(lead) + 1 + offset_width + len(key_length) + (key_width or 0) + \
                len(value_length) + value_width + 1
            rows = np.zeros((run, size), dtype=np.uint8)
            rows[:, :len(lead)] = np.frombuffer(lead, np.uint8)
            column = len(lead) + 1  # after the timestampDelta
            rows[:, column:column + offset_width] = _offset_delta_bytes(start, stop,
                                                                        offset_width)
            column += offset_width
            rows[:, column:column + len(key_length)] = np.frombuffer(key_length, np.uint8)
            key_column = column + len(key_length)
            value_column = key_column + (key_width or 0)
            rows[:, value_column:value_column + len(value_length)] = np.frombuffer(
                value_length, np.uint8)
            parts.append(rows.reshape(-1))
            self.runs.append((start, stop, position, size, len(lead), key_column))
            position += run * size
            start = stop
        self.template = np.concatenate(parts)
        self.length = d.HEADER_SIZE + len(self.template)

    def write(self, area, keys, values, stamps):
        """Write the records into each row of ``area`` (one batch a row): the template,
        then each run's keys and values (and timestampDeltas unless ``stamps`` is None:
        all records have the batch's first timestamp)."""
        area[:] = self.template
        batch_count = len(area)
        value_width = values.shape[2]
        value_type = np.dtype((np.void, value_width))
        key_type = None if keys is None else np.dtype((np.void, keys.shape[2]))
        if stamps is not None:
            deltas = stamps - stamps[:, :1]
            delta_bytes = ((deltas << 1) ^ (deltas >> 63)).astype(np.uint8)
        for start, stop, position, size, delta_column, key_column in self.runs:
            block = area[:, position:position + (stop - start) * size].reshape(
                batch_count, stop - start, size)
            if stamps is not None:
                block[:, :, delta_column] = delta_bytes[:, start:stop]
            column = key_column
            if keys is not None:
                width = keys.shape[2]
                if width:
                        _void(block[:, :, column:column + width], key_type)[...] = \
                        _void(keys[:, start:stop], key_type)
                column += width
            column += self.value_lead
            if value_width:
                _void(block[:, :, column:column + value_width], value_type)[...] = \
                    _void(values[:, start:stop], value_type)


def _void(array, void_type):
    """A 3-D uint8 array whose last axis is contiguous as a 2-D array of one void item per
    row: numpy copies those with one memcpy each, not byte by byte."""
    return array.view(void_type)[..., 0]


def _offset_delta_bytes(start, stop, width):
    """The varints of offset deltas start..stop-1 (all ``width`` bytes) as a 2-D array."""
    unsigned = np.arange(start, stop, dtype=np.int64) << 1
    shifts = 7 * np.arange(width, dtype=np.int64)
    groups = (unsigned[:, None] >> shifts) & 0x7F
    groups[:, :-1] |= 0x80
    return groups.astype(np.uint8)


def _finish(area, first, stamps, uniform, batch):
    """Fill the headers of the batches in ``area`` (one a row; their first record is record
    ``first`` of the call; ``uniform``: every record has one timestamp); CRC or compress
    each; return them."""
    batch_count, length = area.shape
    records = stamps.shape[1]
    if batch.codec:
        found = []
        for index in range(batch_count):
            payload = compress(batch.codec, area[index, d.HEADER_SIZE:].tobytes())
            found.append(batch.pack(payload, records, int(stamps[index, 0]),
                                    int(stamps[index].max()), first + index * records))
        return found
    flat = area.reshape(-1)
    headers = flat.view(_header_dtype(length))
    headers["base_offset"] = 0
    headers["batch_length"] = length - d.LOG_OVERHEAD
    headers["partition_leader_epoch"] = batch.partition_leader_epoch
    headers["magic"] = d.MAGIC
    headers["attributes"] = batch.attributes
    headers["last_offset_delta"] = records - 1
    headers["base_timestamp"] = stamps[:, 0]
    headers["max_timestamp"] = stamps[:, 0] if uniform else stamps.max(axis=1)
    headers["producer_id"] = batch.producer_id
    headers["producer_epoch"] = batch.producer_epoch
    if batch.base_sequence < 0:
        headers["base_sequence"] = batch.base_sequence
    else:
        headers["base_sequence"] = next_sequence(
            batch.base_sequence, first + records * np.arange(batch_count, dtype=np.int64))
    headers["record_count"] = records
    view = memoryview(flat)
    found = []
    crcs = []
    for start in range(0, batch_count * length, length):
        crcs.append(crc32c(view[start + d.ATTRIBUTES_OFFSET:start + length]))
        found.append(view[start:start + length])
    headers["crc"] = crcs
    return found


# -- general path ------------------------------------------------------------------------------

def _build_general(values, keys, stamps, suffixes, batch_size, batch):
    count = len(values)
    values = _as_list(values, "value")
    # attributes + key + value + headers; the deltas and the length varint come per batch
    content = 1 + _field_sizes(values)
    if keys is None:
        keys = [None] * count
        content += 1
    else:
        keys = _as_list(keys, "key")
        content += _field_sizes(keys)
    if suffixes is None:
        suffixes = [NO_HEADERS] * count
        content += 1
    else:
        content += np.fromiter(map(len, suffixes), dtype=np.int64, count=count)
    spread = int(stamps.max()) - int(stamps.min())
    if spread <= _ONE_BYTE_SPREAD:
        content += 1  # every timestampDelta is one byte, whichever record starts a batch
    limit = batch_size - d.HEADER_SIZE
    window = min(count, max(limit, 0) // (int(content.min()) + 3) + 1)  # records a batch holds
    offset_delta_sizes = varint_sizes(np.arange(window, dtype=np.int64))
    timestamps = stamps.tolist()
    batches = []
    start = 0
    while start < count:
        stop = min(count, start + window)
        bodies = content[start:stop] + offset_delta_sizes[:stop - start]
        if spread > _ONE_BYTE_SPREAD:
            bodies += varint_sizes(stamps[start:stop] - stamps[start])
        sizes = bodies + np.searchsorted(_LENGTH_LIMITS, bodies, side="right") + 1
        taken = max(1, int(np.searchsorted(np.cumsum(sizes), limit, side="right")))
        stop = start + taken
        payload, max_timestamp = encode_records(
            timestamps[start:stop], keys[start:stop], values[start:stop],
            suffixes[start:stop], bodies[:taken].tolist())
        if batch.codec:
            payload = compress(batch.codec, payload)
        batches.append(batch.pack(payload, taken, timestamps[start], max_timestamp, start))
        start = stop
    return batches


def _field_sizes(items):
    """``field_size`` of each of ``items`` (bytes or None) as an int64 array."""
    try:
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    except TypeError:  # a None among them
        return np.fromiter(map(field_size, items), dtype=np.int64, count=len(items))
    return lengths + np.searchsorted(_LENGTH_LIMITS, lengths, side="right") + 1


def _as_list(items, what):
    """``items`` as a list of bytes/None (rows of a 2-D array become bytes)."""
    if isinstance(items, np.ndarray):
        width = items.shape[1]
        data = items.tobytes()
        return [data[i:i + width] for i in range(0, len(data), width)] if width else \
            [b""] * len(items)
    if set(map(type, items)) <= _BYTES_OR_NONE:
        return items if isinstance(items, list) else list(items)
    return [item if item is None or item.__class__ is bytes else as_bytes(item, what)
            for item in items]
