# The compiled BuilderCore's fields and C-level append, for other compiled modules
# (cluster/producer/_lane_accel.pyx cimports it). Source: _builder_core.pyx.

cdef class BuilderCore:
    cdef public Py_ssize_t _count
    cdef public Py_ssize_t _room
    cdef public object _base_timestamp
    cdef public bint _plain
    cdef public bint _open
    cdef public list _timestamps
    cdef public list _values
    cdef object _lock
    cdef object _acquire
    cdef object _release

    cdef object append_plain(self, object timestamp, object value, object lock)
