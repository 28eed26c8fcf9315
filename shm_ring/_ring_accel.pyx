# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of the ring's per-frame paths and of a wake-up's flag check.

``RingCore`` is ``ring_core.RingCore`` in C: the same fields (the writer's tail, cached head
and limit, the open claim; the reader's head, read position and last header word) and the
same fast paths — ``try_write`` of a data frame that fits, ``claim``, ``commit``, ``read``
of an ordinary frame, ``release``, ``readable`` — storing the same words in the same order.
Whatever is not the fast path (another type, no room, wrap-around, fragments, padding,
errors, a handle whose views were released) calls the pure-Python code: ``Ring``'s general
paths, or the Python twin's own method (``Ring._claim_slow`` and the like), so errors and
rare cases behave as they do there, by construction.

``WakeCore`` is ``wakeup.WakeCore`` in C: ``notify`` (set the pending byte and word, full
fence, load the parked flag, ``post()`` if set).

Memory ordering (ring_descriptor, "Ordering assumption"; wakeup, "Why no wake-up is lost").
The Python code relies on x86-64's store order with plain stores, and on a locked
instruction (a lock acquire and release) as the full fence of the park/notify handshake.
This code says the same with atomics, never weaker:

* every store to a shared word that publishes (the next frame's zeroed header, the frame's
  header word — the commit —, the tail, the head) is ``__atomic_store_n(..., RELEASE)``:
  stores made before it (the payload, the zeroing) are visible before it, as under TSO;
* every load of a shared word (a frame's header word, the head) is
  ``__atomic_load_n(..., ACQUIRE)``: what the writer stored before the commit is seen after it;
* where the Python does ``_lock(); _unlock()`` (wakeup.full_fence), this does
  ``__atomic_thread_fence(SEQ_CST)`` (MFENCE on x86-64): the stores before it (frame,
  release, pending flags) are visible before the parked flag is loaded after it.
  ``WakeCore.notify`` makes its stores (the pending byte, then the pending word) and the
  flag's load through the slot's memoryviews, as the Python does — the same plain aligned
  stores and load of CPython's memoryview code — with the C fence between them; the post
  (``WakeSlot.post``: the flag cleared, the semaphore posted or held) is the Python's own.

Where each order of the Python is mirrored (for whoever changes one of them):
``RingCore.try_write`` / ``ring_core.RingCore.try_write`` and ``commit``: payload, next
header zeroed, header word, tail; ``read`` / ``readable``: the header word loaded before the
payload is handed out; ``release``: the head; ``WakeCore.notify`` / ``wakeup.WakeCore.notify``:
byte, word, fence, flag. The waiter's side (``WakeSlot.wait_until``: flag set, fence,
re-check), the post, the arming of a full response ring (``connection``) and the listener's
clears (``Listener._take_pending``) are Python only, on either core.

On x86-64 a release store and an acquire load are plain MOVs, so the ring's hot path has the
cost of the Python's stores without the interpreter; the fence is one instruction instead of
two calls. ``Ring`` refuses to run on a machine without TSO (ring_descriptor) either way.
"""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_CheckExact, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.long cimport PyLong_CheckExact
from cpython.sequence cimport PySequence_GetSlice
from libc.stdint cimport int64_t, uintptr_t
from libc.string cimport memcpy

from shm_ring import ring_descriptor as rd


cdef extern from *:
    """
    #include <stdint.h>
    /* The three orderings of the Python code (module doc). */
    static inline int64_t ringlog_load_acquire(const char *at) {
        return __atomic_load_n((const int64_t *)at, __ATOMIC_ACQUIRE);
    }
    static inline void ringlog_store_release(char *at, int64_t value) {
        __atomic_store_n((int64_t *)at, value, __ATOMIC_RELEASE);
    }
    static inline void ringlog_full_fence(void) {
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
    }
    """
    int64_t load_acquire "ringlog_load_acquire"(const char *at) nogil
    void store_release "ringlog_store_release"(char *at, int64_t value) nogil
    void full_fence "ringlog_full_fence"() nogil
    long long PyLong_AsLongLongAndOverflow(object value, int *overflow) except? -1


# The layout's numbers, from ring_descriptor (checked against the literals below at import).
cdef int64_t _HEADER_LENGTH = rd.HEADER_LENGTH
cdef int64_t _TAIL_OFFSET = rd.TAIL_POSITION_OFFSET
cdef int64_t _HEAD_OFFSET = rd.HEAD_POSITION_OFFSET
cdef int64_t _MAX_TYPE = rd.MAX_TYPE
cdef int64_t _DATA_HEADER = rd.header_word(rd.FRAME_HEADER_LENGTH, rd.DATA_TYPE)
# "+ 8", "+ 15", "& -8", "+ 7": as in ring_core (its asserts tie them to ring_descriptor).
assert rd.FRAME_HEADER_LENGTH == 8 and rd.FRAME_ALIGNMENT == 8 and rd.DATA_TYPE == 1
assert rd.header_word(0, 1) == 1 << 32 and rd.WORD_LENGTH == 8


cdef inline bint _as_int64(object value, int64_t *out):
    """True and the value in out when value is an exact int that fits an int64 (anything
    else goes to the Python path, which answers or raises as it always did)."""
    cdef int overflow = 0
    if not PyLong_CheckExact(value):
        return False
    out[0] = PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0


cdef class RingCore:
    """ring_core.RingCore in C (module doc). ``Ring`` inherits it and calls ``_bind`` with
    its byte view of the whole ring, ``_unbind`` before it releases its views."""

    cdef public int64_t capacity, max_frame_length, _mask
    cdef public int64_t _tail, _head_cache, _limit, _claim_index, _claim_size, _claim_type
    cdef public int64_t _head, _read_position, _word
    cdef public object _data, _readonly_data, _outgoing
    cdef Py_buffer _view
    cdef bint _bound
    cdef char *_header
    cdef char *_area

    def _bind(self, buffer):
        """Take a pointer to the ring's memory (buffer: its byte view, header first). A
        buffer that is read-only or not 8-byte aligned is left to the Python paths."""
        self._unbind()
        try:
            PyObject_GetBuffer(buffer, &self._view, PyBUF_WRITABLE)
        except BufferError:
            return
        if (<uintptr_t>self._view.buf) & 7:
            PyBuffer_Release(&self._view)
            return
        self._bound = True
        self._header = <char *>self._view.buf
        self._area = self._header + _HEADER_LENGTH

    def _unbind(self):
        """Drop the pointer (before the views are released); the Python paths take over."""
        if self._bound:
            self._bound = False
            self._header = self._area = NULL
            PyBuffer_Release(&self._view)

    def __dealloc__(self):
        if self._bound:
            self._bound = False
            PyBuffer_Release(&self._view)

    cdef inline void _set_limit(self):
        cdef int64_t lap = self._tail & ~self._mask
        self._limit = (self._head_cache if self._head_cache < lap else lap) + self.capacity

    # ------------------------------------------------------------------ writer

    def try_write(self, frame, frame_type=1):
        """ring_core.RingCore.try_write."""
        cdef Py_ssize_t length
        cdef int64_t aligned, tail, index
        cdef const char *source = NULL
        if PyBytes_CheckExact(frame):
            source = PyBytes_AS_STRING(frame)
            length = PyBytes_GET_SIZE(frame)
        elif PyByteArray_CheckExact(frame):
            source = PyByteArray_AS_STRING(frame)
            length = PyByteArray_GET_SIZE(frame)
        else:
            length = len(frame)
        aligned = (length + 15) & -8  # align(header + payload)
        tail = self._tail
        if (not self._bound or tail + aligned + 8 > self._limit
                or length > self.max_frame_length or frame_type != 1):
            return self._write_general(frame, length, frame_type)
        index = tail & self._mask
        if source != NULL:
            memcpy(self._area + index + 8, source, length)
        else:
            self._data[index + 8: index + 8 + length] = frame
        store_release(self._area + index + aligned, 0)  # the next header reads "empty"
        store_release(self._area + index, length + _DATA_HEADER)  # the commit
        tail += aligned
        self._tail = tail
        store_release(self._header + _TAIL_OFFSET, tail)
        return True

    def claim(self, size, frame_type=1):
        """ring_core.RingCore.claim."""
        cdef int64_t length = 0, kind = 0, index
        if (self._bound and self._outgoing is None and self._claim_index < 0
                and _as_int64(size, &length) and _as_int64(frame_type, &kind)
                and 0 <= length <= self.max_frame_length and 0 < kind <= _MAX_TYPE
                and self._tail + ((length + 15) & -8) + 8 <= self._limit):
            # _make_room's answer without its work: the limit says the room is there
            # (ring_core.RingCore._room: the same comparison)
            index = self._tail & self._mask
            self._claim_index = index
            self._claim_size = length
            self._claim_type = kind
            self._limit = 0  # sends try_write to _make_room, which refuses while it is open
            return PySequence_GetSlice(self._data, index + 8, index + 8 + length)
        return self._claim_slow(size, frame_type)

    def commit(self, length=None):
        """ring_core.RingCore.commit."""
        cdef int64_t size = 0, index, aligned, tail
        index = self._claim_index
        if not self._bound or index < 0:
            return self._commit_slow(length)
        if length is None:
            size = self._claim_size
        elif not (_as_int64(length, &size) and 0 <= size <= self._claim_size):
            return self._commit_slow(length)
        aligned = (size + 15) & -8
        store_release(self._area + index + aligned, 0)
        store_release(self._area + index, (size + 8) | (self._claim_type << 32))
        self._claim_index = -1
        tail = self._tail + aligned
        self._tail = tail
        store_release(self._header + _TAIL_OFFSET, tail)
        self._set_limit()

    # ------------------------------------------------------------------ reader

    def read(self):
        """ring_core.RingCore.read."""
        cdef int64_t position, index, word, length
        if not self._bound:
            return self._read_slow()
        position = self._read_position
        index = position & self._mask
        word = load_acquire(self._area + index)
        if word == 0:
            return None
        if word < 0:  # padding or a fragment: the only negative types
            return self._read_special()
        length = word & 0xFFFFFFFF
        self._read_position = position + ((length + 7) & -8)
        self._word = word
        return PySequence_GetSlice(self._readonly_data, index + 8, index + length)

    @property
    def frame_type(self):
        """Type of the frame last returned by read()."""
        return self._word >> 32

    def release(self):
        """ring_core.RingCore.release."""
        cdef int64_t position = self._read_position
        if position != self._head:
            if not self._bound:
                return self._release_slow()
            self._head = position
            store_release(self._header + _HEAD_OFFSET, position)

    def readable(self):
        """ring_core.RingCore.readable."""
        if not self._bound:
            return self._readable_slow()
        return load_acquire(self._area + (self._read_position & self._mask)) != 0


cdef class WakeCore:
    """wakeup.WakeCore in C: a wake slot's flag word and pending flags, and notify()."""

    cdef public object words, pending
    cdef public Py_ssize_t index

    def notify(self):
        """wakeup.WakeCore.notify: set the pending byte, then the pending word (if the slot
        has them); full fence; post() if the waiter's parked flag is set."""
        pending = self.pending
        if pending is not None:
            pending[2][pending[3]] = 1  # the byte before the word (listener_descriptor)
            pending[0][pending[1]] = 1
        full_fence()  # the Python's _lock(); _unlock()
        if self.words[self.index]:
            self.post()
