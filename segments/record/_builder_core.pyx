# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of ``segments.record.builder_core``: the RecordBatchBuilder's per-record
state and its hot ``append_value``, in C. Behaviour, answers and stored objects are those
of the pure-Python ``BuilderCore`` (which ``RecordBatchBuilder`` inherits instead when this
module is not built or ``RINGLOG_NO_ACCEL=1``); ``build()`` stays in Python, so the bytes
are the same by construction.

What C saves per record: the Python frame of ``append_value``, its table look-ups (two
dict/list indexings, a ``try``), and the lock's bound-method look-ups (kept per lock).

``encode_plain`` is the compiled twin of ``records._encode_plain`` (and of
``encode_records`` for the same records): the records of a plain batch, written straight
into one bytes object by ``build()`` in the sender thread; the header, the CRC and the
producer state stay in Python's ``pack_batch``.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.string cimport memcpy

#: As segments.record.varint: TABLE_SIZE and SIGNED_TABLE_SIZE. append_value answers None
#: for numbers outside them, as the pure-Python version's table look-ups do.
cdef enum:
    TABLE_SIZE = 4096
    SIGNED_TABLE_SIZE = 1024


cdef inline Py_ssize_t _unsigned_size(unsigned long long value) noexcept nogil:
    cdef Py_ssize_t size = 1
    while value > 0x7F:
        value >>= 7
        size += 1
    return size


cdef class BuilderCore:
    """Per-record state of a RecordBatchBuilder (the field names are the pure-Python
    BuilderCore's slots; declared in _builder_core.pxd, so that other compiled modules
    — the producer's lane — append without a Python call)."""

    def append_value(self, timestamp, value, lock):
        """``append(timestamp, None, value)`` for the producer's common record (the
        pure-Python ``BuilderCore.append_value``'s contract, same answers)."""
        return self.append_plain(timestamp, value, lock)

    cdef object append_plain(self, object timestamp, object value, object lock):
        cdef Py_ssize_t count, length, body, room
        cdef long long delta, stamp, base
        cdef unsigned long long gap
        cdef int overflow = 0
        if lock is not self._lock:
            self._acquire = lock.acquire
            self._release = lock.release
            self._lock = lock
        self._acquire()
        try:
            count = self._count
            if not count or not self._plain:
                return None
            base_object = self._base_timestamp
            if type(timestamp) is int and type(base_object) is int:
                stamp = PyLong_AsLongLongAndOverflow(timestamp, &overflow)
                if not overflow:
                    base = PyLong_AsLongLongAndOverflow(base_object, &overflow)
            else:
                overflow = 1
            if not overflow:
                # the difference modulo 2**64, then its true sign (both fit in int64)
                if stamp >= base:
                    gap = <unsigned long long>stamp - <unsigned long long>base
                    if gap >= SIGNED_TABLE_SIZE:
                        return None
                    delta = <long long>gap
                else:
                    gap = <unsigned long long>base - <unsigned long long>stamp
                    if gap >= SIGNED_TABLE_SIZE:
                        return None
                    delta = -<long long>gap
            else:  # other int types, or numbers past int64: Python's arithmetic
                difference = timestamp - base_object
                if not -SIGNED_TABLE_SIZE < difference < SIGNED_TABLE_SIZE:
                    return None
                delta = difference
            if not -SIGNED_TABLE_SIZE < delta < SIGNED_TABLE_SIZE or count >= TABLE_SIZE:
                return None
            length = len(value)
            if length >= TABLE_SIZE:
                return None
            body = (3 + _unsigned_size(<unsigned long long>((delta << 1) ^ (delta >> 63)))
                    + _unsigned_size(<unsigned long long>count << 1)
                    + length + _unsigned_size(<unsigned long long>length << 1))
            if body >= TABLE_SIZE:
                return None
            room = self._room - body - _unsigned_size(<unsigned long long>body << 1)
            if room < 0:
                return None
            self._room = room
            self._count = count + 1
            self._timestamps.append(timestamp)
            self._values.append(value)
            return count
        finally:
            self._release()


cdef inline unsigned char* _put_varint(unsigned char* out, unsigned long long value) noexcept nogil:
    while value > 0x7F:
        out[0] = <unsigned char>((value & 0x7F) | 0x80)
        out += 1
        value >>= 7
    out[0] = <unsigned char>value
    return out + 1


#: Timestamps whose differences surely fit in int64 (larger ones: the Python encoder): 2**62.
cdef long long TIMESTAMP_LIMIT = 4611686018427387904LL


def encode_plain(list timestamps, list values):
    """``(records as bytes, max timestamp)`` of a plain batch — null keys, no headers,
    ``values`` all bytes, ``timestamps`` ints, one each in offset order — or None when a
    timestamp is not an int within ±2**62 or a value is not bytes (then the Python encoders
    decide). The bytes are the RecordBatch v2 records ``records.encode_records`` and
    ``records._encode_plain`` write (a varint has one encoding): each record written
    straight into one bytes object, no join, no per-record object."""
    cdef Py_ssize_t n = len(values)
    cdef Py_ssize_t i, length, body, total = 0
    cdef long long base = 0, stamp, largest = 0
    cdef unsigned long long zigzag
    cdef int overflow = 0
    cdef unsigned char* out
    cdef unsigned char* start
    cdef object value
    if n == 0 or len(timestamps) != n:
        return None
    for i in range(n):
        if type(timestamps[i]) is not int or type(values[i]) is not bytes:
            return None
        stamp = PyLong_AsLongLongAndOverflow(timestamps[i], &overflow)
        if overflow or not -TIMESTAMP_LIMIT < stamp < TIMESTAMP_LIMIT:
            return None
        if i == 0:
            base = largest = stamp
        elif stamp > largest:
            largest = stamp
        stamp -= base
        length = len(<bytes>values[i])
        body = (3 + _unsigned_size(<unsigned long long>((stamp << 1) ^ (stamp >> 63)))
                + _unsigned_size(<unsigned long long>i << 1) + length
                + _unsigned_size(<unsigned long long>length << 1))
        total += _unsigned_size(<unsigned long long>body << 1) + body
    data = PyBytes_FromStringAndSize(NULL, total)
    out = start = <unsigned char*>PyBytes_AS_STRING(data)
    for i in range(n):
        stamp = <long long>timestamps[i] - base
        value = values[i]
        length = PyBytes_GET_SIZE(value)
        zigzag = <unsigned long long>((stamp << 1) ^ (stamp >> 63))
        body = (3 + _unsigned_size(zigzag) + _unsigned_size(<unsigned long long>i << 1)
                + length + _unsigned_size(<unsigned long long>length << 1))
        out = _put_varint(out, <unsigned long long>body << 1)
        out[0] = 0  # attributes
        out = _put_varint(out + 1, zigzag)
        out = _put_varint(out, <unsigned long long>i << 1)
        out[0] = 1  # keyLength -1: a null key
        out = _put_varint(out + 1, <unsigned long long>length << 1)
        memcpy(out, PyBytes_AS_STRING(value), length)
        out[length] = 0  # headerCount 0
        out += length + 1
    if out - start != total:
        raise SystemError(f"encode_plain wrote {out - start} bytes of {total}")
    return data, largest
