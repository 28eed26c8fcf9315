"""The columns of *strided* batches: uniform batches (``columns_parser``'s module doc) of
one shape laid out back to back, which a bulk send makes (every full batch of a
``send_batch`` call has the same records and so the same bytes but for keys, values and
timestamp deltas) and a fetch returns in a row.

Batches of one shape — the same first-record shape and record count — have the same
record layout, so the checks ``columns_parser`` makes per record with gathers (the length
varint, the one-byte timestamp delta, the offset delta varint, the key and value length
varints, the header count 0 at every predicted start) become, for a group of such
batches ``stride`` bytes apart, a few comparisons of strided views against a template of
the expected bytes made once per shape (``_Layout``, cached), and the columns follow
from the layout: value i of batch b starts at ``first + b * stride + layout.value[i]``.
A group passing every check decodes exactly as ``columns_parser``'s vectorised parse
(and so a record-by-record walk) would; a group failing any is left to it.

Pure: bytes in, columns out; any thread.
"""
from __future__ import annotations

import functools

import numpy as np
from numpy.lib.stride_tricks import as_strided

from consumer_proc.record_columns import RecordColumns
from segments.record.varint import encode_varint, size_of_varint

#: Offset deltas below these take 1, 2, 3 ... varint bytes (zigzag doubles them).
_DELTA_LIMITS = (1 << 6, 1 << 13, 1 << 20, 1 << 27)
_ONE_BYTE = 0x80
#: Fewest records per group, on average, for this path: each group costs a few dozen numpy
#: calls, which many small batches of varying sizes (a latency run's) would pay per batch.
MIN_GROUP_RECORDS = 256


def parse_groups(data, headers, starts, ends, shapes):
    """Columns of ``headers`` (a run of uncompressed batches, their records at
    ``data[starts[k]:ends[k]]``, ``shapes[k]`` the first-record shape of each or None) as a
    list of RecordColumns, one per group of strided batches; None unless every batch is in
    a group that passed every check, and the groups hold MIN_GROUP_RECORDS records each on
    average."""
    groups = []
    k = 0
    count = len(headers)
    while k < count:
        shape = shapes[k]
        if shape is None:
            return None
        records = headers[k].record_count
        stop = k + 1
        stride = starts[stop] - starts[k] if stop < count else 0
        while (stop < count and shapes[stop] == shape
               and headers[stop].record_count == records
               and starts[stop] - starts[stop - 1] == stride):
            stop += 1
        groups.append((k, stop, stride))
        k = stop
    if len(groups) * MIN_GROUP_RECORDS > sum(h.record_count for h in headers):
        return None
    out = []
    for first, stop, stride in groups:
        columns = _parse_group(data, headers[first:stop], starts[first:stop],
                               ends[first:stop], shapes[first], stride)
        if columns is None:
            return None
        out.append(columns)
    return out


def _parse_group(data, headers, starts, ends, shape, stride):
    layout = _layout(shape, headers[0].record_count)
    if any(end - start != layout.length for start, end in zip(starts, ends)):
        return None
    u8 = np.frombuffer(data, dtype=np.uint8)
    batches = len(headers)
    if u8[np.array(ends, dtype=np.int64) - 1].any():  # the last record's headerCount 0
        return None
    stamps = []
    for run in layout.runs:
        # per record: the byte before it (the previous record's headerCount, or the batch
        # header's last) up to its value, copied out with one memcpy a record
        view = as_strided(u8[starts[0] + run.position - 1:],
                          shape=(batches, run.count, run.width),
                          strides=(stride, run.size, 1), writeable=False)
        lead = np.empty((batches, run.count, run.width), dtype=np.uint8)
        lead.view(run.void)[..., 0] = view.view(run.void)[..., 0]
        if ((lead ^ run.template) & run.mask).any():
            return None
        stamp = lead[:, :, run.stamp_column]
        if (stamp >= _ONE_BYTE).any():
            return None
        stamps.append(stamp)
    stamp = np.concatenate(stamps, axis=1).astype(np.int64)
    records = layout.records
    total = batches * records
    base_offsets = np.array([h.base_offset for h in headers], dtype=np.int64)
    offsets = (base_offsets[:, None] + layout.deltas).reshape(-1)
    if headers[0].timestamp_type:  # LogAppendTime: every record has the batch's maxTimestamp
        timestamps = np.repeat(np.array([h.max_timestamp for h in headers], dtype=np.int64),
                               records)
    else:
        base = np.array([h.base_timestamp for h in headers], dtype=np.int64)
        timestamps = (base[:, None] + ((stamp >> 1) ^ -(stamp & 1))).reshape(-1)
    batch_starts = starts[0] + stride * np.arange(batches, dtype=np.int64)[:, None]
    _, key_length, _, value_length, _ = shape
    return RecordColumns(
        headers[0].partition_leader_epoch, headers[0].timestamp_type, offsets, timestamps,
        np.full(total, key_length, dtype=np.int64), np.full(total, value_length, dtype=np.int64),
        buffer=data, key_starts=(batch_starts + layout.key_starts).reshape(-1),
        value_starts=(batch_starts + layout.value_starts).reshape(-1))


@functools.lru_cache(maxsize=16)
def _layout(shape, records):
    return _Layout(shape, records)


class _Run:
    """Records of one size in a batch (offset deltas ``first`` .. ``first + count - 1``)
    at byte ``position`` of the records area, ``size`` bytes each. What is checked of each
    is its *lead*: the ``width`` bytes from the one before it (the previous record's
    headerCount 0, or for the batch's first record the low byte of the header's
    recordCount) up to its value — length varint, attributes, timestampDelta, offset delta
    varint, key length varint, key, value length varint — against ``template`` where
    ``mask`` is set (not the attributes, which a reader ignores, the timestampDelta at
    ``stamp_column``, or the key). Columns are record-relative (the lead starts at -1)."""

    __slots__ = ("first", "count", "position", "size", "width", "void", "template", "mask",
                 "stamp_column", "key_column", "value_column")

    def __init__(self, first, count, position, records, shape):
        fields, key_length, key_size, value_length, value_size = shape
        delta_size = size_of_varint(first)
        length_prefix = encode_varint(fields + delta_size)
        self.first, self.count, self.position = first, count, position
        self.size = len(length_prefix) + fields + delta_size
        attributes = len(length_prefix)
        self.stamp_column = attributes + 2  # lead columns: 1 + record columns
        delta_column = attributes + 2
        key_length_column = delta_column + delta_size
        self.key_column = key_length_column + key_size  # record-relative
        value_length_column = self.key_column + max(key_length, 0)
        self.value_column = value_length_column + value_size
        self.width = self.value_column + 1
        self.void = np.dtype((np.void, self.width))
        template = np.zeros((count, self.width), dtype=np.uint8)
        template[0, 0] = 0 if first else records & 0xFF
        template[:, 1:1 + attributes] = np.frombuffer(length_prefix, np.uint8)
        deltas = np.arange(first, first + count, dtype=np.int64) << 1
        for k in range(delta_size):
            template[:, 1 + delta_column + k] = ((deltas >> (7 * k)) & 0x7F) | (
                0x80 if k + 1 < delta_size else 0)
        for column, number in ((key_length_column, key_length),
                               (value_length_column, value_length)):
            varint = encode_varint(number)
            template[:, 1 + column:1 + column + len(varint)] = np.frombuffer(varint, np.uint8)
        mask = np.full((count, self.width), 0xFF, dtype=np.uint8)
        mask[:, 1 + attributes] = 0
        mask[:, self.stamp_column] = 0
        mask[:, 1 + self.key_column:1 + value_length_column] = 0
        self.template = template
        self.mask = mask


class _Layout:
    """The records of a uniform batch of ``records`` records of first-record ``shape``
    (``columns_parser._first_record_shape``): its runs, its records area's ``length``,
    each record's offset delta and key and value positions in the area."""

    __slots__ = ("records", "runs", "length", "deltas", "key_starts", "value_starts")

    def __init__(self, shape, records):
        self.records = records
        self.runs = []
        position = first = 0
        for limit in _DELTA_LIMITS:
            stop = min(limit, records)
            if first >= stop:
                continue
            run = _Run(first, stop - first, position, records, shape)
            self.runs.append(run)
            position += run.count * run.size
            first = stop
        self.length = position
        self.deltas = np.arange(records, dtype=np.int64)
        self.key_starts = np.concatenate([
            r.position + r.size * np.arange(r.count, dtype=np.int64) + r.key_column
            for r in self.runs])
        self.value_starts = np.concatenate([
            r.position + r.size * np.arange(r.count, dtype=np.int64) + r.value_column
            for r in self.runs])
