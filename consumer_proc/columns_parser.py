"""Parse fetched RecordBatch v2 batches into ``RecordColumns``, vectorised where it can be.

Decoding records one at a time in Python (``segments.record.records``) is too slow for a consumer
meant to take millions per second (its cost per record: perf/README.md, "Consumer record
parsing"). But most batches are *uniform*: every record has the same key length (or a null
key), the same value length, no headers, offset delta = its index, and a timestamp within
±63 ms of the batch's first (one varint byte). Then a record's size depends only on its
index i — the varint of the offset delta i grows at i = 64, 8192, ... — so where every
record starts follows from the first record alone, with numpy, for a whole run of batches at
once::

    length(i) = C + size(varint(i))        C: from the batch's first record
    record(i) = size(varint(length(i))) + length(i)
    start(i)  = start of the batch's records + sum of record(j) for j < i

A *guess* is checked before it is used, all records at once: the batch's records must end
exactly where the batch ends, and at every predicted start the length varint, the
one-byte timestamp delta, the offset delta varint, the key and value length varints and
the final header count 0 must be the bytes the guess predicts. A batch passing every
check decodes exactly as a record-by-record walk would (by induction over its records:
each one starts where the previous ended and reads as predicted), so the guess is only a
shortcut, never an approximation. A batch failing any check — compacted (gaps in the
offset deltas), headers, keys or values of varying sizes, spread timestamps — goes the
per-record way (``segments.record.records.RecordBatch``), and so does anything corrupt, which
then raises CorruptRecordError there with the record named.

Small runs: the vectorised parse costs about a hundred numpy calls whatever the number of
records, the record-by-record walk a cost per record (figures: perf/README.md, "Consumer
record parsing"). A run of fewer than ``VECTOR_MIN_RECORDS`` records — what a consumer
keeping up with a producer at a few thousand records/s gets, a few records per fetch — is
therefore walked record by record: the same columns, sooner — by the compiled twin
(``_records_accel.walk_batches``, one C pass, keys and values left in place) where it is
built and the records are plain (no headers, nothing corrupt), else in Python.
``parse_small`` takes the commonest case — a few plain batches, what each fetch of a
consumer keeping up brings — straight to that compiled walk, past the run splitting and
the re-validation of ``parse_batches`` (headers from ``iter_batches``, already framed).

Strided batches: when every batch of a run looks uniform and they come in groups of one
shape back to back (a bulk send's), ``strided_batches`` checks and parses each group with
a few comparisons of strided views against the expected bytes, no gather per record; a
group failing a check leaves the run to the parse above.

Runs: consecutive uncompressed batches with the same leader epoch and timestamp type are
parsed together (their keys and values stay where they are in the fetched bytes);
a compressed batch is decompressed (to at most ``compression.MAX_RECORDS_BYTES``: a batch
inflating past it is a zip bomb, CorruptRecordError) and parsed on its own; control
batches (transaction markers) carry no records for the application and are skipped.

Pure: bytes in, columns out; no I/O, no lock; any thread.
"""
from __future__ import annotations

import numpy as np

from consumer_proc.record_columns import RecordColumns
from consumer_proc.strided_batches import parse_groups
from segments.errors import CorruptRecordError
from segments.record import accel, batch_descriptor as d
from segments.record.compression import decompress, records_size_limit
from segments.record.records import RecordBatch
from segments.record.varint import decode_varint

#: A zigzag varint takes k + 1 bytes for unsigned values below LIMITS[k]; the offset delta
#: i (zigzag 2i) and a length n (zigzag 2n) cross those at half.
_HALF_LIMITS = (1 << 6, 1 << 13, 1 << 20, 1 << 27)
#: Bytes below which a varint byte is the last of its number (a one-byte timestamp delta).
_ONE_BYTE = 0x80
#: Fewest records in a run for the vectorised parse (module doc: below it the
#: record-by-record walk is cheaper).
VECTOR_MIN_RECORDS = 64
#: Smallest record: length, attributes, timestamp delta, offset delta, key length, value
#: length and header count, one byte each.
_MIN_RECORD = 7
#: The compiled record-by-record walk of a small run (consumer_proc/_records_accel.pyx), or
#: None (``accel``: the Python walk runs).
_compiled = accel.load("consumer_proc._records_accel")
#: Attributes bits that make a batch not plain for ``parse_small``: compressed, control.
_NOT_PLAIN = d.COMPRESSION_CODEC_MASK | d.CONTROL_MASK
#: The attributes bits a run of ``parse_small`` shares: those and the timestamp type.
_KIND_MASK = _NOT_PLAIN | d.TIMESTAMP_TYPE_MASK
#: True when small runs are walked by the compiled twin: then the columns path beats
#: ``PartitionRecords``' straight-to-records decode from 3 records on.
COMPILED_WALK = _compiled is not None


def parse_batches(buf, headers, check_crcs=True):
    """The records of ``headers`` (BatchHeaders of whole batches in ``buf``, in order) as a
    list of RecordColumns, control batches left out. Validates each batch's CRC first when
    ``check_crcs`` (CorruptRecordError naming stored and computed CRC)."""
    out = []
    run = []
    for header in headers:
        if check_crcs:
            header.validate()
        if header.is_control_batch or not header.record_count:
            continue
        if header.compression_type:
            _flush(buf, run, out)
            _parse_compressed(buf, header, out)
            continue
        if run and (run[0].partition_leader_epoch != header.partition_leader_epoch
                    or run[0].timestamp_type != header.timestamp_type):
            _flush(buf, run, out)
        run.append(header)
    _flush(buf, run, out)
    return out


def _flush(buf, run, out):
    """Parse the uncompressed batches in ``run`` into ``out``; empty ``run``."""
    if not run:
        return
    starts = [h.position + d.RECORDS_OFFSET for h in run]
    ends = [h.position + h.size_in_bytes for h in run]
    _parse_run(buf, run, starts, ends, out)
    run.clear()


def _parse_compressed(buf, header, out):
    start = header.position + d.RECORDS_OFFSET
    with memoryview(buf) as view:
        data = decompress(header.compression_type,
                          view[start:header.position + header.size_in_bytes].tobytes(),
                          records_size_limit(header.record_count), header.base_offset)
    _parse_run(data, [header], [0], [len(data)], out, source=buf)


def _parse_run(data, headers, starts, ends, out, source=None):
    """Columns for ``headers`` whose records lie in ``data[starts[k]:ends[k]]``: uniform
    batches vectorised, the others record by record (``source``: the buffer holding the
    batches themselves, when ``data`` is a decompressed payload)."""
    if sum(h.record_count for h in headers) < VECTOR_MIN_RECORDS:
        if _compiled is not None and _walk_compiled(data, headers, starts, ends, out):
            return
        shapes = [None] * len(headers)
    else:
        shapes = [_first_record_shape(data, h, s, e) for h, s, e in zip(headers, starts, ends)]
        if None not in shapes:  # batches of a few shapes back to back: strided_batches
            found = parse_groups(data, headers, starts, ends, shapes)
            if found is not None:
                out.extend(found)
                return
    candidates = [k for k, shape in enumerate(shapes) if shape is not None]
    columns = None
    while candidates:  # at most three rounds: sizes, bytes, then all pass
        columns, ok = _vector_parse(data, [headers[k] for k in candidates],
                                    [starts[k] for k in candidates],
                                    [ends[k] for k in candidates],
                                    [shapes[k] for k in candidates])
        if ok.all():
            break
        candidates = [candidates[k] for k in np.flatnonzero(ok).tolist()]
    passed = set(candidates)
    if len(passed) == len(headers):
        out.append(columns)
        return
    # Mixed: each passing batch's records from the vectorised columns, the others decoded
    # record by record, in batch order.
    first = 0  # index into columns of the next passing batch's first record
    for k, header in enumerate(headers):
        if k in passed:
            count = header.record_count
            out.append(columns.slice(first, first + count))
            first += count
        else:
            batch = RecordBatch(data if source is None else source, header.position)
            out.append(RecordColumns.from_records(
                header.partition_leader_epoch, header.timestamp_type, list(batch)))


def _walk_compiled(data, headers, starts, ends, out):
    """The small run ``headers`` walked by the compiled twin (``_records_accel.walk_batches``)
    into one RecordColumns appended to ``out``; False, with nothing appended, where the
    Python walk must decide (headers, anything corrupt: it raises the error)."""
    try:
        for header in headers:
            header.validate(check_crc=False)  # what RecordBatch checks before its walk
    except CorruptRecordError:
        return False
    columns = _walked(data, headers, starts, ends)
    if columns is None:
        return False
    out.append(columns)
    return True


def _walked(data, headers, starts, ends):
    """The RecordColumns of the compiled walk of ``headers`` (framing validated), or None."""
    first = headers[0]
    log_append_time = bool(first.attributes & d.TIMESTAMP_TYPE_MASK)
    walked = _compiled.walk_batches(
        data, starts, ends, [h.record_count for h in headers],
        [h.base_offset for h in headers],
        [h.max_timestamp if log_append_time else h.base_timestamp for h in headers],
        log_append_time)
    if walked is None:
        return None
    offsets, timestamps, key_lengths, value_lengths, key_starts, value_starts = walked
    return RecordColumns(
        first.partition_leader_epoch, int(log_append_time), offsets, timestamps, key_lengths,
        value_lengths, buffer=data, key_starts=key_starts, value_starts=value_starts)


def parse_small(buf, headers):
    """``parse_batches(buf, headers, check_crcs=False)`` in one step for what a consumer
    keeping up with its producer fetches — a few plain batches: fewer than
    ``VECTOR_MIN_RECORDS`` records, none compressed or a control batch or empty, all of one
    leader epoch and timestamp type, no record with headers — walked by the compiled twin;
    None when the run is anything else or the walk is not built (then ``parse_batches``).
    ``headers`` must be framed by ``iter_batches`` (their framing validated); the same
    columns as ``parse_batches``'."""
    if _compiled is None or not headers:
        return None
    first = headers[0]
    epoch = first.partition_leader_epoch
    kind = first.attributes & _KIND_MASK
    records = 0
    starts = []
    ends = []
    for header in headers:
        if header.attributes & _KIND_MASK != kind or header.partition_leader_epoch != epoch \
                or not header.record_count:
            return None
        records += header.record_count
        position = header.position
        starts.append(position + d.RECORDS_OFFSET)
        ends.append(position + d.LOG_OVERHEAD + header.batch_length)
    if kind & _NOT_PLAIN or records >= VECTOR_MIN_RECORDS:
        return None
    columns = _walked(buf, headers, starts, ends)
    return None if columns is None else [columns]


def _first_record_shape(data, header, start, end):
    """``(C, key length, key varint size, value length, value varint size)`` of a batch whose
    first record fits the uniform guess (module doc), else None. A batch whose offset
    deltas cannot be 0..n-1 (compacted), or claiming more records than its bytes could
    hold (at least ``_MIN_RECORD`` each), is not uniform."""
    count = header.record_count
    if header.last_offset_delta != count - 1 or count * _MIN_RECORD > end - start:
        return None
    try:
        length, pos = decode_varint(data, start)
        body = pos
        if data[pos + 1] >= _ONE_BYTE or data[pos + 2] != 0:  # ts delta 1 byte, delta 0
            return None
        key_length, after = decode_varint(data, pos + 3)
        key_size = after - (pos + 3)
        after += max(key_length, 0)
        value_length, value_pos = decode_varint(data, after)
        value_size = value_pos - after
        fields = 3 + key_size + max(key_length, 0) + value_size + max(value_length, 0)
        if (key_length < -1 or value_length < -1 or length != fields + 1
                or body + length > end or data[body + length - 1] != 0):
            return None
    except (IndexError, CorruptRecordError):
        return None
    return fields, key_length, key_size, value_length, value_size


def _varint_sizes(values):
    """Bytes of the zigzag varint of each non-negative value in ``values``."""
    sizes = np.ones(len(values), dtype=np.int64)
    largest = int(values.max()) if len(values) else 0
    for limit in _HALF_LIMITS:
        if largest < limit:
            break  # no value reaches this size (nor any larger one)
        sizes += values >= limit
    return sizes


def _varint_matches(u8, pos, zigzag, sizes):
    """Per record: the bytes at ``pos`` are the ``sizes``-byte varint of ``zigzag``."""
    longest = int(sizes.max())
    if longest == int(sizes.min()):  # one size for all (the usual case): no masks needed
        ok = u8[pos] == ((zigzag & 0x7F) | (0x80 if longest > 1 else 0))
        for k in range(1, longest):
            ok &= u8[pos + k] == (((zigzag >> (7 * k)) & 0x7F)
                                  | (0x80 if k + 1 < longest else 0))
        return ok
    ok = np.ones(len(pos), dtype=bool)
    for k in range(longest):
        present = sizes > k
        at = np.where(present, pos + k, pos)
        expected = ((zigzag >> (7 * k)) & 0x7F) | np.where(sizes > k + 1, 0x80, 0)
        ok &= ~present | (u8[at] == expected)
    return ok


def _vector_parse(data, headers, starts, ends, shapes):
    """Parse uniform-looking batches at once; ``(columns, ok)`` where ``ok[b]`` says batch b
    passed every check (module doc). ``columns`` is valid when all passed."""
    u8 = np.frombuffer(data, dtype=np.uint8)
    counts = np.array([h.record_count for h in headers], dtype=np.int64)
    fields, key_len, key_size, value_len, value_size = (
        np.array(column, dtype=np.int64) for column in zip(*shapes))
    first = np.zeros(len(headers), dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    total = int(counts.sum())
    batch = np.repeat(np.arange(len(headers)), counts)
    delta = np.arange(total, dtype=np.int64) - first[batch]  # offset delta = index in batch
    delta_size = _varint_sizes(delta)
    length = fields[batch] + delta_size
    length_size = _varint_sizes(length)
    size = length_size + length
    end_within = np.cumsum(size)
    before_batch = end_within[first] - size[first]  # bytes of the run's earlier batches
    batch_bytes = np.add.reduceat(size, first)
    span = np.array(ends, dtype=np.int64) - np.array(starts, dtype=np.int64)
    ok = batch_bytes == span
    if not ok.all():
        return None, ok
    start = np.array(starts, dtype=np.int64)[batch] + end_within - size - before_batch[batch]
    record_ok = _varint_matches(u8, start, length << 1, length_size)
    timestamp_at = start + length_size + 1
    stamp = u8[timestamp_at].astype(np.int64)
    record_ok &= stamp < _ONE_BYTE
    delta_at = timestamp_at + 1
    record_ok &= _varint_matches(u8, delta_at, delta << 1, delta_size)
    key_at = delta_at + delta_size
    record_ok &= _varint_matches(u8, key_at, _zigzag(key_len)[batch], key_size[batch])
    value_at = key_at + key_size[batch] + np.maximum(key_len, 0)[batch]
    record_ok &= _varint_matches(u8, value_at, _zigzag(value_len)[batch], value_size[batch])
    record_ok &= u8[start + size - 1] == 0  # headerCount 0
    ok = np.logical_and.reduceat(record_ok, first)
    if not ok.all():
        return None, ok
    base_offsets = np.array([h.base_offset for h in headers], dtype=np.int64)
    if headers[0].timestamp_type:  # LogAppendTime: every record has the batch's maxTimestamp
        timestamps = np.array([h.max_timestamp for h in headers], dtype=np.int64)[batch]
    else:
        timestamps = (np.array([h.base_timestamp for h in headers], dtype=np.int64)[batch]
                      + ((stamp >> 1) ^ -(stamp & 1)))
    columns = RecordColumns(
        headers[0].partition_leader_epoch, headers[0].timestamp_type,
        base_offsets[batch] + delta, timestamps, key_len[batch], value_len[batch],
        buffer=data, key_starts=key_at + key_size[batch],
        value_starts=value_at + value_size[batch])
    return columns, ok


def _zigzag(values):
    return (values << 1) ^ (values >> 63)
