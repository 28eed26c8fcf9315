# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of ``segments.record.builder_core``: the RecordBatchBuilder's per-record
state and its hot ``append_value``, in C. Behaviour, answers and stored objects are those
of the pure-Python ``BuilderCore`` (which ``RecordBatchBuilder`` inherits instead when this
module is not built or ``RINGLOG_NO_ACCEL=1``); ``build()`` stays in Python, so the bytes
are the same by construction.

What C saves per record: the Python frame of ``append_value``, its table look-ups (two
dict/list indexings, a ``try``), and the lock's bound-method look-ups (kept per lock).
"""

from cpython.long cimport PyLong_AsLongLongAndOverflow

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
