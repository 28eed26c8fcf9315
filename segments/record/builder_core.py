"""The RecordBatchBuilder's per-record state and its hot ``append_value``, in pure Python.

``BuilderCore`` is the base of ``records.RecordBatchBuilder``: the fields an append changes
(record count, room left, base timestamp, the plain flag, the open flag, the timestamp and
value lists) and ``append_value``, the producer's per-record append. Its compiled twin,
``segments/record/_builder_core.pyx`` (``accel``), has the same fields and the same
``append_value`` in C; ``BUILDER_CORE`` is the one ``RecordBatchBuilder`` inherits. Every
other method of the builder (``append``, ``build`` and the rest) is the same Python code on
either base; ``build()`` takes the compiled module's ``encode_plain`` for a plain batch's
records when it is there (``records``), whose bytes are the Python encoders'.

No lock of its own: see ``append_value``.
"""
from __future__ import annotations

from segments.record import accel
from segments.record.varint import SIGNED_VARINT_SIZE, SIZED, VARINT_SIZE


class BuilderCore:
    """Per-record state of a RecordBatchBuilder (module doc)."""

    __slots__ = ("_count", "_room", "_base_timestamp", "_plain", "_open", "_timestamps",
                 "_values")

    def append_value(self, timestamp, value, lock):
        """``append(timestamp, None, value)`` for the common record of a producer's hot
        path — ``timestamp`` an int, ``value`` bytes, no key, no headers — storing it with
        ``lock`` held; returns its offset delta, or None when the batch is full (or
        closed), or when this path does not take the record (the batch's first record, a
        batch that holds keys or headers, a number outside the size tables): then
        ``append()`` decides.

        The builder has no lock of its own: ``lock`` is its owner's (a ``threading.Lock``
        that guards who may append), held only around the check and the store — so a
        thread never waits for another that was switched out in the middle of a call.
        """
        lock.acquire()
        try:
            count = self._count
            if count and self._plain:
                try:
                    body = (3 + SIGNED_VARINT_SIZE[timestamp - self._base_timestamp]
                            + VARINT_SIZE[count] + SIZED[len(value)])
                    room = self._room - body - VARINT_SIZE[body]
                except (KeyError, IndexError):
                    return None
                if room >= 0:
                    self._room = room
                    self._count = count + 1
                    self._timestamps.append(timestamp)
                    self._values.append(value)
                    return count
            return None
        finally:
            lock.release()


#: The compiled module (segments/record/_builder_core.pyx), or None.
COMPILED = accel.load("segments.record._builder_core")
#: The base RecordBatchBuilder inherits: the compiled twin when it is available.
BUILDER_CORE = BuilderCore if COMPILED is None else COMPILED.BuilderCore
