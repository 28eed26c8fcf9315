"""Records of one partition (``RecordColumns``) as an Arrow record batch of the source's
schema, built column by column: no Python code runs per record unless the records
themselves came as Python objects (the consumer's per-record decoding path: compressed
batches, headers, keys or values of varying sizes), and even then only ``pa.array`` over
the lists they already are.

**Keys and values without copying twice.** The consumer's vectorised path leaves keys and
values where they lie in the fetched bytes, between record headers: ``starts`` and
``lengths`` (-1 = null) locate them. Arrow's ``binary_view`` layout describes exactly that —
one 16-byte view per value, pointing into a shared buffer:

    bytes 0-3   length (int32)
    bytes 4-15  length <= 12: the value itself, zero-padded ("inline")
    bytes 4-7   length > 12: the value's first 4 bytes (prefix)
    bytes 8-11               index of the data buffer (always 0: the fetched bytes)
    bytes 12-15              offset of the value in that buffer (its start)

The views are made with numpy for all records at once, and Arrow's C++ cast to ``binary``
(the type Spark expects) then gathers the bytes into one contiguous buffer: one copy, in C,
much faster than a numpy fancy-index gather of the same bytes (figures: perf/README.md,
"Arrow rows: views cast to binary").

Pure: columns in, a record batch out; the fetched bytes are only read. Any thread.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

_VIEW_INLINE = 12  # bytes a binary_view keeps inside the view itself
_VIEW_WORDS = 4  # int32 words per view
_PREFIX = 4  # bytes of a long value repeated in its view
_INT32_MAX = 2**31 - 1


def arrow_schema(spark_schema):
    """The Arrow schema Spark checks a Python data source's record batches against."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema, timezone="UTC")


def _validity(lengths):
    """(validity buffer or None, null count) for values whose length is -1 when null."""
    nulls = lengths < 0
    null_count = int(np.count_nonzero(nulls))
    if not null_count:
        return None, 0
    return pa.py_buffer(np.packbits(~nulls, bitorder="little")), null_count


def _prefix(data, starts):
    """The first 4 bytes at each of ``starts`` as little-endian int32 (a view's prefix)."""
    prefix = data[starts].astype(np.int32)
    for k in range(1, _PREFIX):
        prefix |= data[starts + k].astype(np.int32) << (8 * k)
    return prefix


def binary_from_positions(buffer, starts, lengths):
    """A ``binary`` Arrow array of the values ``buffer[start:start + length]`` (None where
    the length is -1), built through binary views (module doc)."""
    n = len(lengths)
    if n == 0:
        return pa.array([], type=pa.binary())
    if len(buffer) > _INT32_MAX:
        raise ValueError(f"fetched buffer of {len(buffer)} bytes: binary views address at "
                         f"most {_INT32_MAX}")
    validity, null_count = _validity(lengths)
    if null_count == n:
        return pa.nulls(n, type=pa.binary())
    data = np.frombuffer(buffer, dtype=np.uint8)
    sizes = np.maximum(lengths, 0)
    views = np.zeros((n, _VIEW_WORDS), dtype=np.int32)
    views[:, 0] = sizes
    long = sizes > _VIEW_INLINE
    if long.all():  # the common case, e.g. 100-byte values: no inline value at all
        views[:, 1] = _prefix(data, starts)
        views[:, 3] = starts  # buffer index (word 2) stays 0
    else:
        if long.any():
            views[long, 1] = _prefix(data, starts[long])
            views[long, 3] = starts[long]
        inline = ~long
        width = max(int(sizes[inline].max()), 1)
        # Read ``width`` bytes at every inline value's start (clipped at the buffer's end),
        # then zero those past each value's own length.
        index = np.minimum(starts[inline, None] + np.arange(width), len(data) - 1)
        head = data[index]
        head[np.arange(width) >= sizes[inline, None]] = 0
        views.view(np.uint8).reshape(n, 4 * _VIEW_WORDS)[inline, 4:4 + width] = head
    array = pa.Array.from_buffers(pa.binary_view(), n,
                                  [validity, pa.py_buffer(views), pa.py_buffer(buffer)],
                                  null_count=null_count)
    return array.cast(pa.binary())


def _binary(columns, which):
    if columns.buffer is None:
        return pa.array(columns.keys() if which == "key" else columns.values(),
                        type=pa.binary())
    if which == "key":
        return binary_from_positions(columns.buffer, columns.key_starts, columns.key_lengths)
    return binary_from_positions(columns.buffer, columns.value_starts, columns.value_lengths)


def repeated_string(text, n):
    """A ``string`` Arrow array of ``n`` times ``text``, built from buffers."""
    encoded = text.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * len(encoded)
    return pa.Array.from_buffers(pa.string(), n,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(encoded * n)])


def _headers(columns, field_type):
    """Spark's ``headers``: null for a record without headers, else a list of (key, value)
    structs in record order."""
    n = len(columns)
    if columns.headers is None:
        return pa.nulls(n, type=field_type)
    rows = [[{"key": k if isinstance(k, str) else bytes(k).decode("utf-8"), "value": v}
             for k, v in h] if h else None
            for h in columns.headers]
    return pa.array(rows, type=field_type)


def record_batch(columns, topic, partition, schema):
    """``columns`` (RecordColumns of ``topic``-``partition``) as a pa.RecordBatch of
    ``schema`` (``arrow_schema``: Spark's Kafka columns, ``headers`` last when present)."""
    n = len(columns)
    arrays = [
        _binary(columns, "key"),
        _binary(columns, "value"),
        repeated_string(topic, n),
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array(np.asarray(columns.offsets, dtype=np.int64)),
        pa.array(np.asarray(columns.timestamps, dtype=np.int64) * 1000,
                 type=schema.field("timestamp").type),
        pa.array(np.full(n, columns.timestamp_type, dtype=np.int32)),
    ]
    if len(schema) > len(arrays):
        arrays.append(_headers(columns, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
