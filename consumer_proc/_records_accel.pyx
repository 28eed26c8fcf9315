# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of ``RecordColumns.to_records``' last step: ConsumerRecords made from
parsed columns in one C loop — each key and value cut out of the fetched bytes as ``bytes``
and each record allocated as a ``ConsumerRecord`` (a tuple subclass) and filled in place —
instead of the ``.tolist()`` of five columns, a list per field, a zip and a ``map`` over
``tuple.__new__``. The records are the pure-Python path's: same type, same field values and
types, the same shared objects (topic, partition, epoch, the empty headers tuple).
``record_columns`` calls it when ``accel`` loaded it, else does the same in Python.

``walk_batches`` is the compiled twin of ``columns_parser``'s record-by-record walk of a
small run (fewer than ``VECTOR_MIN_RECORDS`` records: a consumer keeping up with its
producer, a few records per fetch): one C pass over the records' varints into the run's
columns, keys and values left where they lie (positions), instead of a Python generator
step and a tuple per record. It answers only for records the walk would decode without
error and without headers (else None, and the pure-Python walk runs), so its columns are
always the Python walk's, field for field.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from cpython.tuple cimport PyTuple_SET_ITEM
from libc.stdint cimport int64_t, uint64_t

import numpy as np


cdef extern from "Python.h":
    ctypedef struct _AllocType "PyTypeObject":
        PyObject* (*tp_alloc)(_AllocType*, Py_ssize_t) except NULL


#: Fields of a ConsumerRecord (consumer_record.py).
cdef enum:
    FIELDS = 13


cdef inline object _cut(object buffer, const char* data, Py_ssize_t size, int64_t start,
                        int64_t length):
    """``buffer[start:start + length]`` (``buffer`` bytes of ``size`` bytes), None for a
    length of -1, as ``record_columns._cut``."""
    if length < 0:
        return None
    if start >= 0 and start + length <= size:
        return PyBytes_FromStringAndSize(data + start, <Py_ssize_t>length)
    return buffer[start:start + length]  # past the end: Python's slice semantics


cdef inline void _put(object record, Py_ssize_t index, object item):
    Py_INCREF(item)
    PyTuple_SET_ITEM(record, index, item)


def make_records(record_type, topic, partition, leader_epoch, timestamp_type,
                 const int64_t[:] offsets, const int64_t[:] timestamps,
                 const int64_t[:] key_lengths, const int64_t[:] value_lengths,
                 bytes buffer, key_starts, value_starts, list keys, list values,
                 list headers, list header_sizes, no_headers):
    """A list of ``record_type`` (ConsumerRecord) objects, one per record of the columns.

    Keys come from ``keys`` (a list) when given, else are cut from ``buffer`` at
    ``key_starts`` (an int64 array) with ``key_lengths``; values likewise. ``headers``:
    None (every record gets ``no_headers`` and header size -1) or one entry per record,
    with ``header_sizes``."""
    cdef Py_ssize_t n = offsets.shape[0]
    cdef Py_ssize_t i
    cdef const int64_t[:] key_at
    cdef const int64_t[:] value_at
    cdef const char* data = NULL
    cdef Py_ssize_t size = 0
    cdef _AllocType* kind = <_AllocType*>record_type
    cdef PyObject* raw
    cdef object record
    if (timestamps.shape[0] != n or key_lengths.shape[0] != n or value_lengths.shape[0] != n
            or (headers is not None and (len(headers) != n or len(header_sizes) != n))
            or (keys is not None and len(keys) != n)
            or (values is not None and len(values) != n)):
        raise ValueError("columns of different lengths")
    if keys is None or values is None:
        if buffer is None:
            raise ValueError("no buffer to cut keys or values from")
        data = PyBytes_AS_STRING(buffer)
        size = PyBytes_GET_SIZE(buffer)
    if keys is None:
        key_at = key_starts
        if key_at.shape[0] != n:
            raise ValueError("columns of different lengths")
    if values is None:
        value_at = value_starts
        if value_at.shape[0] != n:
            raise ValueError("columns of different lengths")
    none_size = -1
    out = PyList_New(n)
    for i in range(n):
        raw = kind.tp_alloc(kind, FIELDS)
        record = <object>raw
        Py_DECREF(record)  # the variable holds the one reference tp_alloc made
        _put(record, 0, topic)
        _put(record, 1, partition)
        _put(record, 2, leader_epoch)
        _put(record, 3, offsets[i])
        _put(record, 4, timestamps[i])
        _put(record, 5, timestamp_type)
        if keys is None:
            _put(record, 6, _cut(buffer, data, size, key_at[i], key_lengths[i]))
        else:
            _put(record, 6, keys[i])
        if values is None:
            _put(record, 7, _cut(buffer, data, size, value_at[i], value_lengths[i]))
        else:
            _put(record, 7, values[i])
        if headers is None:
            _put(record, 8, no_headers)
            _put(record, 12, none_size)
        else:
            _put(record, 8, headers[i])
            _put(record, 12, header_sizes[i])
        _put(record, 9, None)
        _put(record, 10, key_lengths[i])
        _put(record, 11, value_lengths[i])
        Py_INCREF(record)
        PyList_SET_ITEM(out, i, record)
    return out


cdef inline Py_ssize_t _varint(const unsigned char[:] data, Py_ssize_t pos, Py_ssize_t end,
                               int64_t* out):
    """Read the zigzag varint at ``pos`` (at most 10 bytes, all before ``end``) into
    ``out``; the position after it, or -1 if it runs past ``end`` or past 10 bytes."""
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef unsigned char byte
    while pos < end and shift < 70:
        byte = data[pos]
        pos += 1
        result |= (<uint64_t>(byte & 0x7F)) << shift
        if byte < 0x80:
            out[0] = <int64_t>(result >> 1) ^ -(<int64_t>(result & 1))
            return pos
        shift += 7
    return -1


def walk_batches(const unsigned char[:] data, list starts, list ends, list counts,
                 list base_offsets, list timestamps_of, bint log_append_time):
    """The twin of ``columns_parser``'s record-by-record walk of a small run: the records of
    uncompressed batches (batch k's records in ``data[starts[k]:ends[k]]``, ``counts[k]`` of
    them, offsets from ``base_offsets[k]``; ``timestamps_of[k]`` its base timestamp, or its
    maxTimestamp when ``log_append_time``) as one int64 array of six rows: offsets,
    timestamps, key lengths, value lengths, key starts, value starts (positions in
    ``data``).

    None when any record is not what the common case looks like — headers, a length that
    does not add up, anything running past its batch: the pure-Python walk then decodes
    the run and raises CorruptRecordError for what is corrupt. So an answer is always the
    one the Python walk would give."""
    cdef Py_ssize_t batches = len(starts)
    cdef Py_ssize_t total = 0
    cdef Py_ssize_t k, i, n, pos, end, begin, at = 0
    cdef int64_t length, delta_ts, delta_offset, key_length, value_length, base, stamp
    for k in range(batches):
        total += <Py_ssize_t>counts[k]
    columns = np.empty((6, total), dtype=np.int64)  # one allocation for the six
    cdef int64_t[:, ::1] c = columns
    for k in range(batches):
        pos = starts[k]
        end = ends[k]
        n = counts[k]
        base = base_offsets[k]
        stamp = timestamps_of[k]
        if pos < 0 or end > data.shape[0] or pos > end:
            return None
        for i in range(n):
            pos = _varint(data, pos, end, &length)
            if pos < 0:
                return None
            begin = pos
            pos += 1  # attributes
            pos = _varint(data, pos, end, &delta_ts)
            if pos < 0:
                return None
            pos = _varint(data, pos, end, &delta_offset)
            if pos < 0:
                return None
            pos = _varint(data, pos, end, &key_length)
            if pos < 0 or key_length < -1 or key_length > end - pos:
                return None
            c[4, at] = pos
            if key_length > 0:
                pos += key_length
            pos = _varint(data, pos, end, &value_length)
            if pos < 0 or value_length < -1 or value_length > end - pos:
                return None
            c[5, at] = pos
            if value_length > 0:
                pos += value_length
            if pos >= end or data[pos] != 0:  # headers (or past the batch): the Python walk
                return None
            pos += 1
            if pos - begin != length:
                return None
            c[0, at] = base + delta_offset
            c[1, at] = stamp if log_append_time else stamp + delta_ts
            c[2, at] = key_length
            c[3, at] = value_length
            at += 1
        if pos != end:
            return None
    return columns
