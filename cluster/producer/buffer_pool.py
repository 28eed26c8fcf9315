"""The producer's pool of batch buffers, kept under ``buffer_memory`` bytes (Kafka's BufferPool).

A producer appends records into batch buffers and hands full batches to its sender; when the
sender is done with a batch it gives the buffer back. The pool bounds the memory all batches
in flight may hold and recycles buffers of the *poolable size* (``batch_size``) so the common
batch never costs a fresh allocation:

* ``allocate(size, max_block_ms)`` returns a writable ``memoryview`` of exactly ``size`` bytes.
  A ``batch_size`` request is served from the free list when it holds a buffer (the fast
  path: one lock, one pop). Any other size, or a miss, is carved out of the *unpooled*
  memory, turning the coldest free buffers back into unpooled memory when that is short
  (Kafka's ``freeUp``); the new buffer (a ``bytearray``, or an anonymous mapping from
  ``MAPPED_FROM`` bytes) is created outside the lock.
* Unlike Kafka, mappings are recycled too: the last ``SPARE_BUFFERS`` given back wait as
  *spares*, and a request of exactly a spare's size takes it (a bulk send's full batches
  all have one size, ``segments.record.bulk``). A fresh mapping costs a page fault and a
  cleared page per 4 KB as it is written — more than writing the batch into a warm
  buffer (perf/README.md, ``bulk_bench``). Spares count as available memory and are the
  first dropped when memory is short.
* When memory is short the caller queues and blocks up to ``max_block_ms``. Waiters are
  served strictly first-come first-served: only the head of the queue takes memory, and it
  takes whatever becomes free until it holds its whole request, so a large request is not
  starved by a stream of small ones. Unlike Kafka, a newcomer never overtakes a queued
  waiter, even for a buffer on the free list (with a waiter queued, the head takes every
  freed byte, so this costs nothing while memory is short). The deadline is tracked on the
  pool's clock; the waits themselves are ``threading.Condition`` waits.
* ``deallocate(buffer)`` gives a buffer back: one of the poolable size goes on the free list,
  a mapping becomes a spare, any other size returns its bytes to the unpooled memory; the
  head waiter is woken.

Memory accounting, each byte of ``total_memory`` is in exactly one state::

    total_memory = unallocated_memory            (not backed by any buffer)
                 + pooled_count * batch_size      (free buffers waiting to be reused)
                 + spare_memory                   (spare mappings waiting to be reused)
                 + bytes held by callers          (allocated and not yet returned)
                 + bytes gathered by the head waiter for a request not yet complete
    available_memory = unallocated_memory + pooled_count * batch_size + spare_memory

Buffers are not cleared when recycled: a caller must not read bytes it did not write. A
caller must not ``release()`` a buffer it got from the pool, and must give each one back
exactly once; ``deallocate`` raises on a buffer it did not lend.

Kafka's producer reports a timed-out allocation as a ``BufferExhaustedException`` (a
``TimeoutException``); here it is ``BufferExhaustedError``, a ``KafkaTimeoutError``
(retriable) with the errno of REQUEST_TIMED_OUT. The pool's errors are in the one error
tree (``cluster.errors``); its only other import of ours is the wait-time metric's
``SampledStat``.
"""
from __future__ import annotations

import mmap
import threading
import time
from collections import deque

from cluster.client.sampled_stat import SampledStat
from cluster.errors import KafkaError, KafkaTimeoutError

#: Buffers of this many bytes or more are anonymous mappings, not bytearrays: the kernel
#: hands out zeroed pages as they are first written, where ``bytearray(size)`` clears them
#: all at once — a cost wasted on the buffer of a large value, which the batch never writes
#: into (``segments.record.batch_parts``). Figures: perf/README.md, "Large values".
MAPPED_FROM = 256 * 1024
#: Mappings given back that the pool keeps for a request of the same size (module doc):
#: a bulk send of 100-byte values has about 32 MB (buffer_memory's default) of 1 MB
#: batches in flight.
SPARE_BUFFERS = 32


def _new_buffer(size):
    """A zeroed writable memoryview of ``size`` bytes (MAPPED_FROM); MemoryError if the
    system has not the memory."""
    if size < MAPPED_FROM:
        return memoryview(bytearray(size))
    try:
        return memoryview(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE))
    except (OSError, OverflowError) as exc:
        raise MemoryError(f"cannot map a buffer of {size} bytes: {exc}") from exc


class BufferPoolError(KafkaError):
    """Base class of the pool's errors (Kafka raises a plain KafkaException, without a
    code, for a pool closed under a waiter)."""

    errno = -1
    message = "UNKNOWN_SERVER_ERROR"


class BufferExhaustedError(BufferPoolError, KafkaTimeoutError):
    """No memory for a request within ``max_block_ms`` (Kafka: BufferExhaustedException).

    Attributes name the request and the pool at the time of the failure: ``requested``,
    ``max_block_ms``, ``total``, ``available`` and ``used`` (= total - available), in bytes.
    """

    errno = 7
    message = "REQUEST_TIMED_OUT"

    def __init__(self, requested, max_block_ms, total, available):
        self.requested = requested
        self.max_block_ms = max_block_ms
        self.total = total
        self.available = available
        self.used = total - available
        super().__init__(
            f"failed to allocate {requested} bytes within max_block_ms={max_block_ms}: "
            f"total memory {total} bytes, available {available} bytes, "
            f"used {total - available} bytes")


class BufferPoolClosedError(BufferPoolError):
    """The pool was closed before or while a caller waited for memory."""


class BufferPool:
    """Batch buffers for one producer, ``buffer_memory`` bytes in all, ``batch_size`` recycled.

    Owner: the producer (its ``RecordAccumulator``). Thread safety: every method may be
    called from any thread — the appending threads allocate, the sender thread deallocates,
    ``close()`` comes from whoever closes the producer. All mutable state (``_free``, ``_spare``,
    ``_waiters``, ``_unpooled``, ``_lent``, ``_closed`` and the metrics) is guarded by
    ``self._lock``; each waiter blocks on its own ``Condition`` over that lock.

    ``clock`` returns seconds on a monotonic scale (``time.monotonic`` by default); it sets
    the deadlines and measures the wait-time metric. A test clock must advance, or a waiter
    past its real wait keeps waiting.
    """

    def __init__(self, buffer_memory, batch_size, clock=time.monotonic, *, metrics_samples=2,
                 metrics_window=30.0):
        if buffer_memory < 0:
            raise ValueError(f"buffer_memory must be >= 0, found {buffer_memory}")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, found {batch_size}")
        self._total = buffer_memory
        self._batch_size = batch_size
        self._clock = clock
        self._lock = threading.Lock()
        # Free buffers of batch_size bytes: appended and popped on the right (the most
        # recently used, still warm in the CPU cache), dropped from the left by _free_up.
        self._free = deque()
        # Spare mappings (MAPPED_FROM bytes or more, not batch_size), oldest first, at most
        # SPARE_BUFFERS; _spare_bytes is their sum. Dropped by _free_up before _free.
        self._spare = deque()
        self._spare_bytes = 0
        # One Condition per blocked allocate(), oldest first; only the head takes memory.
        self._waiters = deque()
        # Bytes of total not backed by any buffer.
        self._unpooled = buffer_memory
        # id(buffer) -> buffer for every buffer lent and not yet returned; holding the
        # buffer keeps its id unique, so a stranger or a second return is caught.
        self._lent = {}
        self._closed = False
        self._wait_time_ns_total = 0
        self._exhausted_total = 0
        # Windowed for metrics() (bufferpool-wait-ratio, buffer-exhausted-rate): recorded
        # under the lock, read by anyone (cluster.client.sampled_stat).
        self.wait_time = SampledStat(metrics_samples, metrics_window, clock)  # ns per wait
        self.exhausted = SampledStat(metrics_samples, metrics_window, clock)

    # -- allocation -----------------------------------------------------------------------

    def allocate(self, size, max_block_ms):
        """Return a writable memoryview of ``size`` bytes, blocking up to ``max_block_ms``.

        Raises ``ValueError`` if ``size`` is negative or above ``total_memory`` (it could
        never be served), ``BufferExhaustedError`` when the deadline passes first,
        ``BufferPoolClosedError`` if the pool is or gets closed. A request that fails
        leaves the pool's memory as it found it.
        """
        lock = self._lock
        with lock:
            if size == self._batch_size and self._free and not self._waiters and not self._closed:
                buffer = self._free.pop()
                self._lent[id(buffer)] = buffer
                return buffer
            if size >= MAPPED_FROM and not self._waiters and not self._closed:
                buffer = self._take_spare(size)
                if buffer is not None:
                    self._lent[id(buffer)] = buffer
                    return buffer
            if size < 0 or size > self._total:
                raise ValueError(
                    f"cannot allocate {size} bytes: the pool holds {self._total} bytes "
                    f"(buffer_memory, a hard limit on one allocation)")
            buffer = self._reserve(size, max_block_ms)
            if buffer is not None:
                self._lent[id(buffer)] = buffer
                return buffer
        # `size` bytes are reserved in the accounting; create the buffer outside the lock.
        try:
            buffer = _new_buffer(size)
        except BaseException:
            with lock:
                self._unpooled += size
                self._signal_head()
            raise
        with lock:
            self._lent[id(buffer)] = buffer
        return buffer

    def _reserve(self, size, max_block_ms):
        """Take ``size`` bytes: return a pooled buffer, or None once the bytes are reserved
        in ``_unpooled`` for a new buffer. Called with the lock held; may wait on it."""
        if self._closed:
            raise BufferPoolClosedError(f"buffer pool closed; cannot allocate {size} bytes")
        if not self._waiters:
            if size == self._batch_size and self._free:
                return self._free.pop()
            if self._available() >= size:
                self._free_up(size)
                self._unpooled -= size
                return None
        return self._wait_for(size, max_block_ms)

    def _wait_for(self, size, max_block_ms):
        """Queue, and as head gather memory until ``size`` bytes are held (lock held)."""
        clock = self._clock
        deadline = clock() + max_block_ms / 1000.0
        more_memory = threading.Condition(self._lock)
        self._waiters.append(more_memory)
        gathered = 0  # bytes taken from _unpooled for this request so far
        buffer = None
        try:
            while True:
                if self._waiters[0] is more_memory:
                    if size == self._batch_size and self._free:
                        buffer = self._free.pop()
                        self._unpooled += gathered
                        gathered = 0
                        break
                    self._free_up(size - gathered)
                    got = min(size - gathered, self._unpooled)
                    self._unpooled -= got
                    gathered += got
                    if gathered == size:
                        break
                now = clock()
                if now >= deadline:
                    self._unpooled += gathered
                    gathered = 0
                    self._exhausted_total += 1
                    self.exhausted.record(now=now)
                    raise BufferExhaustedError(size, max_block_ms, self._total,
                                               self._available())
                more_memory.wait(deadline - now)
                woke = clock()
                waited = max(0, round((woke - now) * 1e9))
                self._wait_time_ns_total += waited
                self.wait_time.record(waited, woke)
                if self._closed:
                    raise BufferPoolClosedError(
                        f"buffer pool closed while waiting to allocate {size} bytes")
            gathered = 0  # the whole request now belongs to the caller
        finally:
            self._unpooled += gathered  # a request that failed gives back what it gathered
            self._waiters.remove(more_memory)
            if self._unpooled or self._free or self._spare:
                self._signal_head()
        return buffer

    def _available(self):
        """Bytes an allocation could take now (lock held): unallocated, the free list and
        the spares."""
        return self._unpooled + len(self._free) * self._batch_size + self._spare_bytes

    def _free_up(self, size):
        """Drop free buffers, coldest first, until ``_unpooled`` >= ``size`` or none are left."""
        while self._spare and self._unpooled < size:
            self._drop_oldest_spare()
        free = self._free
        while free and self._unpooled < size:
            free.popleft()
            self._unpooled += self._batch_size

    def _drop_oldest_spare(self):
        """Give the oldest spare's bytes back to the unallocated memory (lock held)."""
        dropped = len(self._spare.popleft())
        self._spare_bytes -= dropped
        self._unpooled += dropped

    def _take_spare(self, size):
        """The most recently given back spare of exactly ``size`` bytes, taken off the
        spares, or None (lock held)."""
        spare = self._spare
        for index in range(len(spare) - 1, -1, -1):
            if len(spare[index]) == size:
                buffer = spare[index]
                del spare[index]
                self._spare_bytes -= size
                return buffer
        return None

    def _signal_head(self):
        if self._waiters:
            self._waiters[0].notify()

    # -- release --------------------------------------------------------------------------

    def deallocate(self, buffer):
        """Give back a buffer from ``allocate``: a poolable one is kept for reuse, any other
        size returns its bytes to the unpooled memory. Allowed after ``close()``.

        Raises ``ValueError`` for a buffer this pool did not lend or that was already
        given back (a second return would hand one buffer to two batches).
        """
        self.deallocate_many((buffer,))

    def deallocate_many(self, buffers):
        """``deallocate`` for each of ``buffers``, under one lock (the sender gives back a
        turn's acknowledged batches together)."""
        with self._lock:
            lent, batch_size = self._lent, self._batch_size
            for buffer in buffers:
                if lent.pop(id(buffer), None) is None:
                    raise ValueError(
                        f"buffer of {len(buffer)} bytes was not lent by this pool "
                        f"or was already given back")
                size = len(buffer)
                if size == batch_size:
                    self._free.append(buffer)
                elif size >= MAPPED_FROM:
                    self._spare.append(buffer)
                    self._spare_bytes += size
                    if len(self._spare) > SPARE_BUFFERS:
                        self._drop_oldest_spare()
                else:
                    self._unpooled += size
            if self._waiters:
                self._waiters[0].notify()

    def close(self):
        """Refuse further allocations and wake every waiter with ``BufferPoolClosedError``.

        Buffers still lent may be given back afterwards. Safe to call twice.
        """
        with self._lock:
            self._closed = True
            for waiter in self._waiters:
                waiter.notify()

    # -- accounting -----------------------------------------------------------------------

    @property
    def total_memory(self):
        """``buffer_memory``: the bytes this pool may hand out in all."""
        return self._total

    @property
    def batch_size(self):
        """The poolable size: buffers of exactly this many bytes are recycled."""
        return self._batch_size

    @property
    def available_memory(self):
        """Bytes an allocation could take now: unallocated, the free list and the spares."""
        with self._lock:
            return self._available()

    @property
    def spare_memory(self):
        """Bytes of the spare mappings waiting for a request of their size."""
        with self._lock:
            return self._spare_bytes

    @property
    def unallocated_memory(self):
        """Bytes not backed by any buffer (neither lent nor on the free list nor spare)."""
        with self._lock:
            return self._unpooled

    @property
    def pooled_count(self):
        """Buffers of ``batch_size`` bytes on the free list."""
        with self._lock:
            return len(self._free)

    @property
    def queued(self):
        """Threads blocked in ``allocate`` waiting for memory."""
        with self._lock:
            return len(self._waiters)

    @property
    def closed(self):
        """True once ``close()`` was called."""
        with self._lock:
            return self._closed

    @property
    def wait_time_ns_total(self):
        """Nanoseconds all callers spent blocked for memory (Kafka:
        bufferpool-wait-time-ns-total)."""
        with self._lock:
            return self._wait_time_ns_total

    @property
    def exhausted_total(self):
        """Allocations that timed out (Kafka: buffer-exhausted-total)."""
        with self._lock:
            return self._exhausted_total
