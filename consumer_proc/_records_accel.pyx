# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of ``RecordColumns.to_records``' last step: ConsumerRecords made from
parsed columns in one C loop — each key and value cut out of the fetched bytes as ``bytes``
and each record allocated as a ``ConsumerRecord`` (a tuple subclass) and filled in place —
instead of the ``.tolist()`` of five columns, a list per field, a zip and a ``map`` over
``tuple.__new__``. The records are the pure-Python path's: same type, same field values and
types, the same shared objects (topic, partition, epoch, the empty headers tuple).
``record_columns`` calls it when ``accel`` loaded it, else does the same in Python.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from cpython.tuple cimport PyTuple_SET_ITEM
from libc.stdint cimport int64_t


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
