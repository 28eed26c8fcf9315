# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of ``send()``'s fast path past its API checks (``kafka_producer``'s
module doc, "The fast path"): the bytes value check, the lane's metadata version check,
the record's timestamp (now, when the caller gave none), the append into the lane's batch
(``BuilderCore.append_plain``, a C call) and the ``FutureRecordMetadata`` tuple, in one C
call. The pure-Python path does the same in ``KafkaProducer.send`` with ``_Lane``; this one
answers the same (None where that code falls through to the general path) and hands out
the same future, field for field.

A ``Lane`` is made once per batch by the general path; read per record under the
accumulator's lock held by ``append_plain`` around its check and store, as the Python path.

``compiled_send(python_send)`` gives ``KafkaProducer.send`` itself (the producer's class
takes it when this module is built): the fast path's test and the lane's steps with no
Python frame per record; a record the lane does not take goes to ``self._send`` as in the
Python send, and every call that is not the fast path's (a key, partition or headers, a
producer that is transactional, has serializers or is closed) is the Python send itself.
"""

from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from cpython.tuple cimport PyTuple_SET_ITEM
from libc.time cimport time_t

from segments.record._builder_core cimport BuilderCore


cdef extern from "Python.h":
    ctypedef struct _AllocType "PyTypeObject":
        PyObject* (*tp_alloc)(_AllocType*, Py_ssize_t) except NULL


cdef extern from "<time.h>" nogil:
    cdef struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clock, timespec* now)
    enum: CLOCK_REALTIME


cdef object _NOT_SIZED = -1


cdef class Lane:
    """A topic's lane (``kafka_producer._Lane``'s fields): the open ProducerBatch
    ``batch`` of its sticky partition, the metadata ``version`` it was chosen under, and
    the batch's builder; ``future_type`` is FutureRecordMetadata, ``cluster`` the
    producer's metadata cache (its ``version`` read per record) and ``lock`` the
    accumulator's append lock — held here so ``send()`` passes neither per record."""

    cdef readonly object version
    cdef readonly object batch
    cdef BuilderCore builder
    cdef object future_type
    cdef object cluster
    cdef object lock

    def __init__(self, version, batch, BuilderCore builder not None, future_type, cluster,
                 lock):
        self.version = version
        self.batch = batch
        self.builder = builder
        self.future_type = future_type
        self.cluster = cluster
        self.lock = lock

    def send(self, value, timestamp_ms):
        """The record's FutureRecordMetadata, or None when the fast path does not take it
        (a value that is not bytes, another metadata version, a timestamp that is not an
        int, a batch that refuses it): then ``send()`` goes the general way."""
        return self._send(value, timestamp_ms)

    cdef object _send(self, value, timestamp_ms):
        cdef timespec now
        cdef _AllocType* kind
        cdef PyObject* raw
        if type(value) is not bytes or self.cluster.version != self.version:
            return None
        if timestamp_ms is None:
            clock_gettime(CLOCK_REALTIME, &now)
            # time.time_ns() // 1_000_000: the same clock, floored to milliseconds
            timestamp_ms = <long long>now.tv_sec * 1000 + now.tv_nsec // 1000000
        elif type(timestamp_ms) is not int:
            return None
        index = self.builder.append_plain(timestamp_ms, value, self.lock)
        if index is None:
            return None
        kind = <_AllocType*>self.future_type
        raw = kind.tp_alloc(kind, 6)
        future = <object>raw
        Py_DECREF(future)  # the variable holds the one reference tp_alloc made
        _put(future, 0, self.batch)
        _put(future, 1, index)
        _put(future, 2, timestamp_ms)
        _put(future, 3, _NOT_SIZED)
        _put(future, 4, len(value))
        _put(future, 5, _NOT_SIZED)
        return future


#: KafkaProducer.send as written in Python: what the compiled send() hands every call
#: its fast path does not take (``compiled_send``).
cdef object _python_send = None


def compiled_send(python_send):
    """``KafkaProducer.send``'s compiled twin, given the Python one (``python_send``):
    the fast path's test (a plain producer, no key, partition or headers), the topic's
    lane and its append in C, with no Python frame per record; the general path
    (``self._send``) when the topic has no lane or the lane refuses, exactly where the
    Python send goes; every other call is the Python send itself, unchanged."""
    global _python_send
    _python_send = python_send
    send.__doc__ = python_send.__doc__
    send.__wrapped__ = python_send
    return send


def send(self, topic, value=None, key=None, headers=None, partition=None,
         timestamp_ms=None):
    cdef Lane lane
    if key is None and partition is None and headers is None and self._plain:
        found = self._lanes.get(topic)
        if found is not None:
            lane = found
            future = lane._send(value, timestamp_ms)
            if future is not None:
                return future
        return self._send(topic, value, key, headers, partition, timestamp_ms)
    return _python_send(self, topic, value, key, headers, partition, timestamp_ms)


cdef inline void _put(object record, Py_ssize_t index, object item):
    Py_INCREF(item)
    PyTuple_SET_ITEM(record, index, item)
